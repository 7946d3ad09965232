"""Tests for the local multi-worker launcher and a real two-worker run.

The worker programs here are tiny scripts; the launcher runs them as real
processes with TF_CONFIG on loopback ports.
"""

import io
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import _forkserver
import local_cluster
import pytest

from tf_mlstm.train import strategy as strategy_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCHER = str(REPO / "tools" / "launch_local_workers.py")

# Worker 0 records its pid and sleeps; worker 1 fails with status 3 as soon
# as that pid is written (so the test does not race the start of worker 0).
_FAILING_WORKER = """
import json, os, sys, time
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if index == 1:
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(sys.argv[1], "pid0")) and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.exit(3)
path = os.path.join(sys.argv[1], f"pid{index}")
with open(path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(path + ".tmp", path)
print("sleeping", flush=True)
time.sleep(60)
"""

# A small Keras 3 model trained for 3 steps by a custom loop under the
# multi_worker strategy, each worker on different data. Worker 0's part of the
# final synchronization's all-reduce ends 2 s after worker 1's, as when it is
# still fetching worker 1's buffer: `finalize` must hold worker 1 until then
# (a worker that exits there fails its peer's collective).
_TRAINING_WORKER = """
import time

import numpy as np
import keras
import tensorflow as tf

from tf_mlstm.train import strategy as strategy_lib

strategy = strategy_lib.get_distribution_strategy("multi_worker", timeout_s=60)
task_type, worker_id, num_workers = strategy_lib.worker_info(strategy)
GLOBAL_BATCH = 8

def dataset_fn(input_context):
    rng = np.random.default_rng(100 + input_context.input_pipeline_id)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")).astype("float32")
    batch = input_context.get_per_replica_batch_size(GLOBAL_BATCH)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch, drop_remainder=True)

keras.utils.set_random_seed(worker_id)  # initial values must come from the chief
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(model.trainable_variables)
iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

@tf.function
def train_step(iterator):
    def step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss
    x, y = next(iterator)
    return strategy.reduce("SUM", strategy.run(step, args=(x, y)), axis=None)

def weight_sum():
    return sum(float(np.sum(v.numpy())) for v in model.trainable_variables)

initial = weight_sum()
for _ in range(3):
    loss = train_step(iterator)
print(f"worker_info={task_type},{worker_id},{num_workers} chief={strategy_lib.is_chief(strategy)}")
print(f"initial_sum={initial:.6f} weights_sum={weight_sum():.6f} loss={float(loss):.6f}")
real_sum_over_replicas = strategy_lib.sum_over_replicas

def late_on_worker_0(*args):
    total = real_sum_over_replicas(*args)
    if worker_id == 0:
        time.sleep(2)
    print(f"collective_done={time.time():.3f}", flush=True)
    return total

strategy_lib.sum_over_replicas = late_on_worker_0
strategy_lib.finalize(strategy)
print(f"finished={time.time():.3f}")
"""


def _launch(args, timeout, **kwargs):
    """Runs the launcher binary; on a hang asks it to stop its workers first.

    Returns:
      (status, stdout, stderr, seconds from the launcher's start to its end): the time
      after the test's fork server (tests/_forkserver.py) has started it.
    """
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = _forkserver.Popen(
        [sys.executable, LAUNCHER, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )
    started = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # forwarded to the workers, SIGKILL after the grace period
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"launcher did not finish in {timeout}s:\n{out[-3000:]}\n{err[-3000:]}")
    return proc.returncode, out, err, time.monotonic() - started


def _two_script_workers(script, *launcher_flags):
    """The launcher running `python -c script` as two workers, its stdout a pipe."""
    return _forkserver.Popen(
        [sys.executable, LAUNCHER, "--num_workers=2", *launcher_flags, "--"]
        + [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        text=True,
    )


def _assert_gone(pid):
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# === Pieces ===


def test_pick_ports_are_distinct_and_free():
    ports = local_cluster.pick_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as sock:
            sock.bind((local_cluster.HOST, port))


def test_pick_ports_with_a_taken_base_port():
    with socket.socket() as sock:
        sock.bind((local_cluster.HOST, 0))
        taken = sock.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {taken} on 127.0.0.1 is not free"):
            local_cluster.pick_ports(1, base_port=taken)
    with pytest.raises(ValueError, match="num_workers must be >= 1"):
        local_cluster.pick_ports(0)


def test_tf_config_round_trips_through_the_validator():
    value = local_cluster.build_tf_config([2000, 2001, 2002], 2)
    assert strategy_lib.parse_tf_config(value) == {
        "cluster": {"worker": ["127.0.0.1:2000", "127.0.0.1:2001", "127.0.0.1:2002"]},
        "task": {"type": "worker", "index": 2},
    }


def test_worker_env_sets_threads_only_when_pinning():
    env = local_cluster.worker_env([1, 2], 1, cpus_per_worker=3, base_env={"A": "b"})
    assert json.loads(env["TF_CONFIG"])["task"]["index"] == 1
    assert env["A"] == "b"
    assert env["TF_NUM_INTEROP_THREADS"] == env["TF_NUM_INTRAOP_THREADS"] == "3"
    assert "TF_NUM_INTRAOP_THREADS" not in local_cluster.worker_env([1, 2], 0, base_env={})


def test_core_sets_split_the_allowed_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 5}, raising=False)
    assert local_cluster.core_sets(2, 2) == [{0, 1}, {2, 3}]
    assert local_cluster.core_sets(3, 2) is None  # 6 cores wanted, 5 allowed


# === Supervision (plain Python workers, fast) ===


def test_a_failing_worker_stops_the_others_and_sets_the_status(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    status = local_cluster.run_local_workers(
        [sys.executable, "-c", _FAILING_WORKER, str(tmp_path)],
        num_workers=2,
        grace_s=2,
        stdout=out,
        stderr=err,
    )
    assert status == 3
    assert time.monotonic() - start < 15
    _assert_gone(int((tmp_path / "pid0").read_text()))
    assert "[worker 0] sleeping" in out.getvalue().splitlines()


# Worker 1 fails; worker 0 sees it go and takes a moment to say so with the
# default SIGTERM handler in place, as a training survivor does on its way out.
_REPORTING_SURVIVOR = """
import json, os, sys, time
folder = sys.argv[1]
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if index == 1:
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(folder, "ready")) and time.monotonic() < deadline:
        time.sleep(0.01)
    open(os.path.join(folder, "gone"), "w").close()
    sys.exit(3)
open(os.path.join(folder, "ready"), "w").close()
while not os.path.exists(os.path.join(folder, "gone")):
    time.sleep(0.01)
time.sleep(0.5)
print("worker 0 stops: a peer worker stopped", flush=True)
sys.exit(1)
"""


def test_a_survivor_that_saw_its_peer_fail_says_so_before_it_is_stopped(tmp_path):
    out = io.StringIO()
    status = local_cluster.run_local_workers(
        [sys.executable, "-c", _REPORTING_SURVIVOR, str(tmp_path)],
        num_workers=2,
        grace_s=10,
        stdout=out,
        stderr=io.StringIO(),
    )
    assert status == 3
    assert "[worker 0] worker 0 stops: a peer worker stopped" in out.getvalue().splitlines()


def test_launcher_binary_propagates_the_failure(tmp_path):
    status, out, _, seconds = _launch(
        [
            "--num_workers=2",
            "--grace_s=2",
            "--",
            sys.executable,
            "-c",
            _FAILING_WORKER,
            str(tmp_path),
        ],
        timeout=60,
    )
    assert status == 3
    assert seconds < 20
    _assert_gone(int((tmp_path / "pid0").read_text()))


@pytest.mark.parametrize(
    "on_sigterm, status",
    [
        ("", 128 + signal.SIGTERM),  # workers killed by the signal
        # Workers that checkpoint and exit 75, as a training run does: the
        # launcher says what they said.
        ("signal.signal(signal.SIGTERM, lambda *_: sys.exit(75)); ", 75),
    ],
    ids=["killed", "preempted"],
)
def test_launcher_forwards_sigterm_and_exits_with_the_workers_status(on_sigterm, status):
    script = f"import signal, sys, time; {on_sigterm}print('up', flush=True); time.sleep(60)"
    proc = _two_script_workers(script)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert sorted(lines) == ["[worker 0] up\n", "[worker 1] up\n"]
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == status
        assert time.monotonic() - start < 10
    finally:
        proc.kill()


def test_a_worker_that_ignores_sigterm_is_killed_once_the_grace_period_ends():
    script = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', os.getpid(), flush=True); time.sleep(60)"
    )
    grace_s = 4
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = _forkserver.Popen(
        [sys.executable, LAUNCHER, "--num_workers=2", f"--grace_s={grace_s}", "--"]
        + [sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids = [int(proc.stdout.readline().split()[-1]) for _ in range(2)]
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        # One grace period from the signal to SIGKILL, not one per stage of stopping.
        assert grace_s <= time.monotonic() - start < 1.6 * grace_s
        for pid in pids:
            _assert_gone(pid)
    finally:
        proc.kill()


def _dead_or_zombie(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = pathlib.Path(f"/proc/{pid}/stat")
    try:  # Reparented to an init that has not reaped it yet.
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)
def test_workers_end_with_a_launcher_killed_outright():
    """SIGKILL of the launcher (nothing forwarded): its workers end with it, so none goes
    on as an orphan holding the run's lock and the relaunch takes over at once."""
    script = "import os, time; print('up', os.getpid(), flush=True); time.sleep(60)"
    proc = _two_script_workers(script)
    try:
        pids = [int(proc.stdout.readline().split()[-1]) for _ in range(2)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not all(_dead_or_zombie(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_dead_or_zombie(pid) for pid in pids), pids
    finally:
        proc.kill()


# === A real two-worker training run ===


@pytest.mark.slow
def test_two_workers_train_in_sync_through_the_launcher(tmp_path):
    script = tmp_path / "train_worker.py"
    script.write_text(textwrap.dedent(_TRAINING_WORKER))
    status, out, err, _ = _launch(
        ["--num_workers=2", "--cpus_per_worker=1", "--", sys.executable, str(script)], timeout=180
    )
    assert status == 0, err[-5000:]
    results = dict(re.findall(r"^\[worker (\d)\] initial_sum=\S+ (weights_sum=\S+)", out, re.M))
    assert set(results) == {"0", "1"}, out
    assert results["0"] == results["1"]
    initial = re.findall(r"initial_sum=(\S+) weights_sum=(\S+)", out)
    assert all(before != after for before, after in initial)  # it trained
    assert "[worker 0] worker_info=worker,0,2 chief=True" in out
    assert "[worker 1] worker_info=worker,1,2 chief=False" in out
    times = {
        (worker, event): float(value)
        for worker, event, value in re.findall(
            r"^\[worker (\d)\] (collective_done|finished)=(\S+)", out, re.M
        )
    }
    assert len(times) == 4, out
    # No worker leaves the final synchronization before every worker's part
    # of its collective is over.
    assert times["1", "finished"] >= times["0", "collective_done"], times
    assert "have crashed" not in err
