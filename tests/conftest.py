"""Shared pytest fixtures: the shared corpus, the demo TFRecords, two CPU replicas; quiet TF logs.

The autotune cache (`XDG_CACHE_HOME`) points at a temporary folder of this session.

Markers (`slow`) and the per-test timeout are configured in pyproject.toml.

The CPU is split into two logical devices when this file is imported, before
any test starts the TensorFlow runtime (devices are fixed at start-up), so a
`MirroredStrategy` can run two replicas in this process: the one-machine
multi-GPU path, on a CPU. Ops without a device still run on the first one.
"""

import atexit
import os
import pathlib
import shutil
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402 (after the log level)

REPO = pathlib.Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
CPU_REPLICAS = 2

# Measured `auto` settings are cached per user (tf_mlstm.train.autotune): tests, and the
# binaries they start, read and write a cache of their own, never the developer's.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="tf_mlstm_test_cache_")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * CPU_REPLICAS,
)


@pytest.fixture
def shared_data():
    """The shared review corpora folder; skips the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(
            f"shared review corpora not found at {SHARED_DATA} (only "
            "present beside a development checkout)"
        )
    return SHARED_DATA


@pytest.fixture(scope="session")
def demo_tfrecords(tmp_path_factory):
    """The embedded demo corpus as TFRecord shards (4 train shards), built once."""
    from tf_mlstm.data import demo  # pylint: disable=g-import-not-at-top

    return demo.build_demo_tfrecords(str(tmp_path_factory.mktemp("demo_tfrecords")))


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


@pytest.fixture(autouse=True)
def _logging_state_restored():
    """Puts Python's and absl's logging back as it was after every test.

    Code that sets absl's verbosity (absl's flag parsing does, when a binary's
    code runs in-process) leaves the absl logger at WARNING; a later test that
    reads INFO lines through `caplog` would then see none.
    """
    import logging as std_logging  # pylint: disable=g-import-not-at-top

    names = ("absl", "tensorflow", "keras")
    loggers = [std_logging.getLogger(name) for name in names] + [std_logging.getLogger()]
    saved = [(lg.level, lg.disabled, lg.propagate) for lg in loggers]
    disabled_below = std_logging.root.manager.disable
    yield
    for lg, (level, disabled, propagate) in zip(loggers, saved):
        lg.setLevel(level)
        lg.disabled = disabled
        lg.propagate = propagate
    std_logging.disable(disabled_below)
