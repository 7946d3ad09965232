"""Shared pytest fixtures: the shared corpus, the demo TFRecords, two CPU replicas; quiet TF logs.

Markers (`slow`), the per-test timeout and the whole run's deadline
(`suite_deadline_minutes`, enforced here) are configured in pyproject.toml.

With `CI=true` in the environment (as CI services set it, and `.ci/run`), a
test whose inputs are missing fails instead of skipping: a skip there would
quietly drop what the test proves.

The autotune cache (`XDG_CACHE_HOME`) points at a temporary folder of this session.

The CPU is split into two logical devices when this file is imported, before
any test starts the TensorFlow runtime (devices are fixed at start-up), so a
`MirroredStrategy` can run two replicas in this process: the one-machine
multi-GPU path, on a CPU. Ops without a device still run on the first one.
"""

import atexit
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402 (after the log level)

REPO = pathlib.Path(__file__).resolve().parent.parent
# Tools' cores (`import local_cluster`, `import law_fitting`) live in tools/, beside their tools.
sys.path.append(str(REPO / "tools"))
SHARED_DATA = REPO.parent / "shared" / "data"
CPU_REPLICAS = 2

# Matplotlib keeps its font cache under XDG_CACHE_HOME, which the next lines replace per
# session: it stays in the user's own cache folder, built here once, so a binary a test
# runs never prints "Matplotlib is building the font cache" among the lines it checks.
os.environ.setdefault(
    "MPLCONFIGDIR",
    os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "matplotlib"),
)
import matplotlib.font_manager  # noqa: E402,F401 (builds the font cache when it is missing)

# Measured `auto` settings are cached per user (tf_mlstm.auto.measure): tests, and the
# binaries they start, read and write a cache of their own, never the developer's.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tf_mlstm_test_cache_")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

# A run started with Ctrl-C ignored (`cmd &` in a shell without job control, nohup) would
# pass the ignore on to every process a test starts, and the tests of Ctrl-C would see a
# process that rightly keeps ignoring it: they test a terminal's Ctrl-C, so it is restored.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * CPU_REPLICAS,
)


def in_ci():
    """Whether this run is CI's (`CI` set to true, as CI services and `.ci/run` set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def skip_unless_ci(reason):
    """Skips the calling test with `reason`, or fails it in CI, where nothing may be skipped.

    Args:
      reason: what is missing, in one line.

    Raises:
      pytest.skip.Exception: outside CI.
      pytest.fail.Exception: in CI.
    """
    if in_ci():
        pytest.fail(f"{reason}; CI=true, so the test fails instead of skipping", pytrace=False)
    pytest.skip(reason)


def shared_data_folder():
    """The shared review corpora folder (see `shared_data`)."""
    if not SHARED_DATA.is_dir():
        skip_unless_ci(
            f"shared review corpora not found at {SHARED_DATA} (only "
            "present beside a development checkout and in CI)"
        )
    return SHARED_DATA


@pytest.fixture
def shared_data():
    """The shared review corpora folder; skips the test when it is absent (fails in CI)."""
    return shared_data_folder()


@pytest.fixture(scope="session")
def demo_tfrecords(tmp_path_factory):
    """The embedded demo corpus as TFRecord shards (4 train shards), built once."""
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top

    return data_files.build_demo_tfrecords(str(tmp_path_factory.mktemp("demo_tfrecords")))


@pytest.fixture(scope="module")
def mirrored_on_cpus():
    """`--distribution_strategy=mirrored` mirrors over the logical CPUs, as over GPUs.

    The strategy factory mirrors over GPUs only (one CPU device otherwise);
    here it gets the two logical CPU devices and TensorFlow's default
    all-reduce for them (collectives, as on GPUs).

    Returns:
      The CPU device names.
    """
    from tf_mlstm.train import strategy as strategy_lib  # pylint: disable=g-import-not-at-top

    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    assert len(devices) == CPU_REPLICAS, (
        f"expected {CPU_REPLICAS} logical CPU devices, got {devices}: something started the "
        "TensorFlow runtime before tests/conftest.py split the CPU"
    )
    factory = strategy_lib.get_distribution_strategy

    def stand_in(strategy="default", num_gpus=None, **kwargs):
        if strategy == "mirrored":
            return strategy_lib.mirrored_strategy(devices)
        return factory(strategy, num_gpus=num_gpus, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(strategy_lib, "get_distribution_strategy", stand_in)
        yield devices


def _logging_state():
    """(level, disabled, propagate) of the loggers tests read, and logging's `disable` level."""
    import logging as std_logging  # pylint: disable=g-import-not-at-top

    loggers = [std_logging.getLogger(name) for name in ("absl", "tensorflow", "keras")]
    loggers.append(std_logging.getLogger())
    return [(lg, lg.level, lg.disabled, lg.propagate) for lg in loggers], (
        std_logging.root.manager.disable
    )


def _set_logging_state(state):
    import logging as std_logging  # pylint: disable=g-import-not-at-top

    loggers, disabled_below = state
    for lg, level, disabled, propagate in loggers:
        lg.setLevel(level)
        lg.disabled = disabled
        lg.propagate = propagate
    std_logging.disable(disabled_below)


# As it is before any test code runs.
_LOGGING_BASELINE = _logging_state()


@pytest.fixture(autouse=True)
def _logging_state_restored():
    """Puts Python's and absl's logging as it was before any test, around every test.

    Code that sets absl's verbosity (absl's flag parsing does, when a binary's
    code runs in-process, and so may a module-scoped fixture, which runs
    before this one) leaves the absl logger at WARNING; a later test that
    reads INFO lines through `caplog` would then see none. Resetting to the
    state before the whole run, not to the one each test found, keeps that
    from reaching any later test.
    """
    _set_logging_state(_LOGGING_BASELINE)
    yield
    _set_logging_state(_LOGGING_BASELINE)


# === The whole run's deadline ===
#
# pytest-timeout bounds one test and the tests bound their subprocesses, but
# a run in which many tests each take long (a regression that slows every
# training run, or each of many tests waiting out its subprocess time-out)
# could still outlast CI's own limit and end with no summary at all. Past the
# deadline every remaining test fails at once with one line, so `--maxfail`
# ends the run and pytest prints its summary.

_SESSION_START = pytest.StashKey[float]()


def pytest_addoption(parser):
    parser.addini(
        "suite_deadline_minutes",
        "fail every test that starts after the run has lasted this many minutes (0: no deadline)",
        default="0",
    )


# `-n auto` (pytest-xdist): two workers per core this process may run on.
# The tests spend a good part of their time waiting (on the subprocesses they
# start, a peer's heartbeat, a collective's time-out, a checkpoint to appear).
# On a 2-core AMD EPYC with AVX2 only, the whole suite kept the CPU busy 1.72
# cores on average with three workers and 1.97 with four (CPU-seconds of every
# test and its subprocesses over the run's span). Earlier, on an AVX-512 machine,
# three workers took 13.8 minutes against 17.4 with two. `--maxprocesses`
# still caps it, and PYTEST_XDIST_AUTO_NUM_WORKERS still overrides it (xdist's
# own hook).
def pytest_xdist_auto_num_workers(config):
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return 2 * len(os.sched_getaffinity(0))


# The longest tests start at once, each on a worker of its own: the docs' walk-through, in
# two halves of about 2 minutes alone and 3 under the suite's load, and the chaos schedule
# (1-2.5 minutes). Collected in file order, the walk-through started 8.4 minutes into a
# 13-minute run on a 2-core AMX Xeon and ended it alone beside one other worker for its
# last minute. pytest-xdist's worksteal gives each worker a contiguous share of the
# collection at the start (`_share_starts`), so each of these heads a share, and an idle
# worker later takes half of a busy one's queue.
FIRST = (
    *(
        f"tests/test_docs_run.py::test_every_command_in_the_docs_runs_at_tiny_sizes[{half}]"
        for half in ("first", "later")
    ),
    "tests/test_chaos.py::test_a_short_schedule_of_faults_ends_with_the_weights_of_a_run_never_stopped",
)


def _share_starts(count, workers):
    """Where each worker's first share of `count` tests starts, as worksteal deals them."""
    starts, start = [], 0
    for i in range(workers):
        starts.append(start)
        start += (count - start) // (workers - i)
    return starts


def pytest_collection_modifyitems(config, items):
    first = [item for item in items if item.nodeid in FIRST]
    rest = [item for item in items if item.nodeid not in FIRST]
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    starts = _share_starts(len(items), max(workers, 1))
    for i, item in enumerate(first):
        rest.insert(starts[i] if i < len(starts) else i, item)
    items[:] = rest


def pytest_sessionstart(session):
    session.config.stash[_SESSION_START] = time.monotonic()


def suite_deadline_passed(config, now=None):
    """The deadline message when the run has outlasted `suite_deadline_minutes`, else None."""
    limit = float(config.getini("suite_deadline_minutes"))
    start = config.stash.get(_SESSION_START, None)
    if not limit or start is None:
        return None
    elapsed = (time.monotonic() if now is None else now) - start
    if elapsed <= 60 * limit:
        return None
    return (
        f"the test run has lasted {elapsed / 60:.1f} minutes, past its deadline of {limit:g} "
        "(suite_deadline_minutes in pyproject.toml; -o suite_deadline_minutes=0 lifts it): "
        "the remaining tests fail without running; look at --durations for what got slow"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    message = suite_deadline_passed(item.config)
    if message:
        pytest.fail(message, pytrace=False)
