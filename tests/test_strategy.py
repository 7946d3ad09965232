"""Tests for the strategy factory, TF_CONFIG checks and multi-worker helpers.

Multi-worker strategies can be built once per process and never torn down,
so every test that builds one runs it in a subprocess with a hard timeout.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import types

import _forkserver
import local_cluster
import numpy as np
import pytest
import tensorflow as tf

from _models import PINNED_FLAGS
from _models import run
from _models import train_command
from tf_mlstm import errors
from tf_mlstm.train import strategy as strategy_lib

REPO = pathlib.Path(__file__).resolve().parent.parent


def _tf_config(addresses, task_type="worker", index=0):
    return json.dumps(
        {"cluster": {"worker": addresses}, "task": {"type": task_type, "index": index}}
    )


def _fake_strategy(cluster, task_type, task_id):
    """Stands in for a multi-worker strategy: the helpers read only its resolver."""
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=task_type, task_id=task_id
    )
    return types.SimpleNamespace(cluster_resolver=resolver)


# === TF_CONFIG validation ===


def test_parse_tf_config_accepts_a_valid_cluster():
    config = strategy_lib.parse_tf_config(
        _tf_config(["127.0.0.1:2222", "[::1]:2223", "host-b.example:80"], index=2)
    )
    assert config["task"] == {"type": "worker", "index": 2}
    assert len(config["cluster"]["worker"]) == 3


@pytest.mark.parametrize(
    "value, match",
    [
        ('{"cluster": {"worker": ["a:1"]', "TF_CONFIG is not valid JSON"),
        ('["a:1"]', "TF_CONFIG must be a JSON object"),
        ('{"task": {"type": "worker", "index": 0}}', 'TF_CONFIG has no "cluster"'),
        ('{"cluster": {"worker": ["a:1"]}}', 'TF_CONFIG has no "task"'),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}}', 'no "task"'),
        (_tf_config(["a:1"], task_type="chief"), "task type 'chief' is not a job of the cluster"),
        (_tf_config(["a:1", "b:2"], index=2), "task index 2 is out of range for job 'worker'"),
        (_tf_config(["a:1"], index=-1), "task index -1 is out of range"),
        (_tf_config(["a:1"], index="0"), "task index must be an integer"),
        (
            _tf_config(["a:1", "localhost"], index=0),
            "address 'localhost' of worker 1 is not host:port",
        ),
        (_tf_config(["a:http"]), "address 'a:http' of worker 0 is not host:port"),
        (_tf_config(["a:70000"]), "is not host:port"),
        (_tf_config([":2222"]), "is not host:port"),
        (_tf_config([]), "job 'worker' must be a non-empty list"),
    ],
)
def test_parse_tf_config_rejects_with_one_clear_line(value, match):
    with pytest.raises(ValueError, match=match) as info:
        strategy_lib.parse_tf_config(value)
    assert "\n" not in str(info.value)


def test_multi_worker_checks_tf_config_before_tensorflow_sees_it(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _tf_config(["127.0.0.1:1", "127.0.0.1"], index=1))
    with pytest.raises(ValueError, match="'127.0.0.1' of worker 1 is not host:port"):
        strategy_lib.get_distribution_strategy("multi_worker")


def test_slurm_outside_a_job_step_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("SLURM_PROCID", raising=False)
    with pytest.raises(ValueError, match="slurm cluster resolver: SLURM_PROCID not found"):
        strategy_lib.get_distribution_strategy("multi_worker", num_gpus=0, cluster_resolver="slurm")


@pytest.mark.parametrize("strategy", ["default", "one_device", "mirrored"])
def test_a_cluster_description_a_one_machine_strategy_would_ignore_is_refused(
    monkeypatch, strategy
):
    # As a Kubernetes operator sets it for each of two workers.
    monkeypatch.setenv("TF_CONFIG", _tf_config(["10.0.0.1:2222", "10.0.0.2:2222"], index=1))
    with pytest.raises(
        ValueError,
        match=rf"TF_CONFIG describes a cluster of 2 tasks \(this is worker 1\), but "
        rf"distribution_strategy={strategy} trains on this machine alone, .*: pass "
        r"distribution_strategy=multi_worker, or unset TF_CONFIG$",
    ):
        strategy_lib.get_distribution_strategy(strategy)
    # A binary's user reads the flags (the binary itself: the test below).
    with errors.naming_flags(), pytest.raises(ValueError, match=r"pass --distribution_strategy="):
        strategy_lib.get_distribution_strategy(strategy)
    # Inconsistent (a task outside its cluster): refused too, not ignored.
    monkeypatch.setenv("TF_CONFIG", _tf_config(["10.0.0.1:2222"], index=3))
    with pytest.raises(ValueError, match="TF_CONFIG task index 3 is out of range"):
        strategy_lib.get_distribution_strategy(strategy)


@pytest.mark.slow
@pytest.mark.parametrize("data", ["converted", "demo corpus"])
def test_tf_mlstm_train_refuses_an_unused_cluster_in_one_line_before_it_writes(
    tmp_path, demo_tfrecords, data
):
    model_dir = tmp_path / "run"
    # Without --train_data the demo corpus would be converted into the run folder first.
    data_flags = [f"--train_data={demo_tfrecords}"] if data == "converted" else []
    done = run(
        train_command(model_dir, *PINNED_FLAGS, *data_flags),
        timeout=120,
        env={"TF_CONFIG": _tf_config(["10.0.0.1:2222", "10.0.0.2:2222"], index=1)},
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("E1")]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1, done.stderr[-3000:]
    assert errors[0].endswith(
        "] TF_CONFIG describes a cluster of 2 tasks (this is worker 1), but "
        "--distribution_strategy=default trains on this machine alone, so every task would "
        "train a model of its own: pass --distribution_strategy=multi_worker, or unset TF_CONFIG"
    ), errors[0]
    assert not model_dir.exists()


def test_several_slurm_tasks_under_a_one_machine_strategy_are_refused(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    with pytest.raises(
        ValueError,
        match=r"task 2 of 4 of a Slurm job step, .* distribution_strategy=multi_worker "
        r"cluster_resolver=slurm, or start one task$",
    ):
        strategy_lib.get_distribution_strategy("default")


def test_a_one_task_description_under_a_one_machine_strategy_is_fine(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _tf_config(["127.0.0.1:2222"]))
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")
    assert strategy_lib.get_distribution_strategy("default") is tf.distribute.get_strategy()


# === Factory ===
# === Factory ===


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"strategy": "tpu"}, "unknown strategy 'tpu'; choose one of default"),
        ({"all_reduce": "tree"}, "unknown all_reduce 'tree'"),
        ({"cluster_resolver": "k8s"}, "unknown cluster_resolver 'k8s'"),
        ({"strategy": "mirrored", "num_gpus": -2}, "num_gpus must be >= 0"),
        ({"strategy": "mirrored", "num_gpus": 64}, "num_gpus=64 but only"),
        (
            {"strategy": "multi_worker", "timeout_s": 0},
            "timeout_s and heartbeat_timeout_s must be > 0",
        ),
    ],
)
def test_factory_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        strategy_lib.get_distribution_strategy(**kwargs)


@pytest.mark.skipif(
    bool(tf.config.list_physical_devices("GPU")), reason="needs a machine without GPUs"
)
@pytest.mark.parametrize("strategy", ["mirrored", "one_device"])
def test_nccl_without_gpus_is_a_clear_error(strategy):
    with pytest.raises(ValueError, match="all_reduce='nccl' needs GPUs"):
        strategy_lib.get_distribution_strategy(strategy, all_reduce="nccl")


@pytest.mark.parametrize(
    "name, kind",
    [
        ("default", type(tf.distribute.get_strategy())),
        ("one_device", tf.distribute.OneDeviceStrategy),
        ("mirrored", tf.distribute.MirroredStrategy),
    ],
)
def test_local_strategies(name, kind):
    strategy = strategy_lib.get_distribution_strategy(name, num_gpus=0, all_reduce="ring")
    assert isinstance(strategy, kind)
    assert strategy_lib.is_chief(strategy)
    assert strategy_lib.worker_info(strategy) == (None, 0, 1)
    assert strategy_lib.write_dirpath("some/dir", strategy) == "some/dir"
    strategy_lib.finalize(strategy)  # a no-op without a cluster


# === Chief, worker ids and temporary folders ===


@pytest.mark.parametrize(
    "cluster, task_type, task_id, chief, info",
    [
        ({"worker": ["a:1", "b:1"]}, "worker", 0, True, ("worker", 0, 2)),
        ({"worker": ["a:1", "b:1"]}, "worker", 1, False, ("worker", 1, 2)),
        ({"chief": ["c:1"], "worker": ["a:1", "b:1"]}, "chief", 0, True, ("chief", 0, 3)),
        ({"chief": ["c:1"], "worker": ["a:1", "b:1"]}, "worker", 0, False, ("worker", 1, 3)),
        ({"chief": ["c:1"], "worker": ["a:1", "b:1"]}, "worker", 1, False, ("worker", 2, 3)),
    ],
)
def test_chief_and_worker_info(cluster, task_type, task_id, chief, info):
    strategy = _fake_strategy(cluster, task_type, task_id)
    assert strategy_lib.is_chief(strategy) is chief
    assert strategy_lib.worker_info(strategy) == info


def test_non_chief_writes_to_a_temporary_folder(tmp_path):
    chief = _fake_strategy({"worker": ["a:1", "b:1"]}, "worker", 0)
    other = _fake_strategy({"worker": ["a:1", "b:1"]}, "worker", 1)
    ckpt, summaries = str(tmp_path / "ckpt"), str(tmp_path / "summaries")

    assert strategy_lib.write_dirpath(ckpt, chief) == ckpt
    temp_ckpt = strategy_lib.write_dirpath(ckpt, other)
    temp_summaries = strategy_lib.write_dirpath(summaries, other)
    assert os.path.isdir(temp_ckpt) and not temp_ckpt.startswith(str(tmp_path))
    assert "worker_1" in temp_ckpt
    assert strategy_lib.write_dirpath(ckpt, other) == temp_ckpt  # stable
    assert temp_summaries != temp_ckpt

    pathlib.Path(temp_ckpt, "ckpt-1.index").write_text("x")
    strategy_lib.remove_temp_dirpath(ckpt, other)  # by the chief's path
    strategy_lib.remove_temp_dirpath(temp_summaries, other)  # by the returned path
    assert not os.path.exists(temp_ckpt) and not os.path.exists(temp_summaries)
    os.makedirs(ckpt)
    strategy_lib.remove_temp_dirpath(ckpt, chief)  # never touches the chief's folder
    assert os.path.isdir(ckpt)


# === Real multi-worker startup, in subprocesses ===

_STARTUP_SCRIPT = """
import sys, time
from tf_mlstm import errors
from tf_mlstm.train import strategy as strategy_lib
start = time.monotonic()
try:
    strategy_lib.get_distribution_strategy("multi_worker", timeout_s=float(sys.argv[1]))
except (TimeoutError, errors.UserError) as e:
    print(f"ERROR {type(e).__name__}: {e}", flush=True)
    print(f"FAILED_AFTER {time.monotonic() - start:.1f}", flush=True)
    sys.exit(2)
print("STARTED", flush=True)
"""


def _start_worker(tf_config, timeout_s):
    env = dict(os.environ, TF_CONFIG=tf_config, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    return _forkserver.Popen(
        [sys.executable, "-c", _STARTUP_SCRIPT, str(timeout_s)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_unreachable_peer_fails_fast_with_a_clear_error():
    timeout_s = 3
    # Nobody ever listens on `dead`.
    alone_leader, alone_follower, busy, dead = local_cluster.pick_ports(4)
    with socket.socket() as occupier:
        occupier.bind(("127.0.0.1", busy))
        occupier.listen()
        cases = {
            # The leader waits for a follower that never registers.
            "leader": _start_worker(
                _tf_config([f"127.0.0.1:{alone_leader}", f"127.0.0.1:{dead}"], index=0), timeout_s
            ),
            # A follower cannot reach the leader.
            "follower": _start_worker(
                _tf_config([f"127.0.0.1:{dead}", f"127.0.0.1:{alone_follower}"], index=1), timeout_s
            ),
            # This worker's own port is taken.
            "port": _start_worker(
                _tf_config([f"127.0.0.1:{busy}", f"127.0.0.1:{dead}"], index=0), timeout_s
            ),
        }
        outputs = {}
        deadline = time.monotonic() + 90
        for name, proc in cases.items():
            try:
                outputs[name] = proc.communicate(timeout=max(1, deadline - time.monotonic()))[0]
            except subprocess.TimeoutExpired:
                for other in cases.values():
                    other.kill()
                pytest.fail(f"multi-worker startup ({name}) hung past the hard timeout")

    for name in ("leader", "follower"):
        assert cases[name].returncode == 2, outputs[name][-3000:]
        assert (
            f"TimeoutError: multi_worker: not every worker registered within {timeout_s}s"
            in outputs[name]
        )
        elapsed = float(outputs[name].split("FAILED_AFTER ")[1].split()[0])
        # TensorFlow adds a fixed few seconds to the registration deadline.
        assert elapsed < timeout_s + 10, outputs[name][-3000:]
    assert cases["port"].returncode == 2, outputs["port"][-3000:]
    # Refused before TensorFlow tries to bind it.
    assert (
        f"UserError: multi_worker: port {busy} of worker 0 at 127.0.0.1:{busy} is in use"
        in outputs["port"]
    )


# === Mirrored strategies in one process ===


def _all_reduce_ones(strategy, shape, dtype):
    """Each replica's SUM all-reduce of ones(shape, dtype), in a tf.function."""

    @tf.function
    def step():
        return strategy.run(
            lambda: tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.ones(shape, dtype)
            )
        )

    return strategy.experimental_local_results(step())


def test_a_later_mirrored_strategy_all_reduces_other_tensors(mirrored_on_cpus):
    # A second strategy in one process (a second run, a check after a run)
    # all-reduces tensors of other dtypes and shapes than the first one did.
    for dtype, shape in ((tf.float32, [3]), (tf.float16, [2, 2])):
        strategy = strategy_lib.mirrored_strategy(mirrored_on_cpus)
        for total in _all_reduce_ones(strategy, shape, dtype):
            assert total.dtype == dtype
            np.testing.assert_array_equal(total.numpy(), np.full(shape, 2.0))


class _RecordingContext:
    """The coordination-service calls `leave_in_order` makes, in order."""

    def __init__(self, lost_answer=None):
        self.calls = []
        self.lost_answer = lost_answer  # what a set raises once its answer is lost

    def set_config_key_value(self, key, value):
        self.calls.append(("set", key, value))
        if self.lost_answer is not None:
            raise self.lost_answer

    def get_config_key_value(self, key, timeout_in_ms=0):
        self.calls.append(("get", key, timeout_in_ms))
        return "1"


def test_the_service_s_host_leaves_the_final_barrier_last():
    """Worker 0 hosts the coordination service: after the final barrier it reads each
    peer's word that it has passed, so no peer loses the service while its answer is on
    its way; a peer only says so."""
    host = _RecordingContext()
    strategy_lib.leave_in_order(host, "tf_mlstm_finalize_0", 0, 3)
    assert [(call, key) for call, key, _ in host.calls] == [
        ("get", "tf_mlstm_finalize_0_passed_1"),
        ("get", "tf_mlstm_finalize_0_passed_2"),
    ]
    assert all(timeout > 0 for _, _, timeout in host.calls)  # bounded: a peer may die
    peer = _RecordingContext()
    strategy_lib.leave_in_order(peer, "tf_mlstm_finalize_0", 2, 3)
    assert peer.calls == [("set", "tf_mlstm_finalize_0_passed_2", "1")]
    # Worker 0 may leave once it has read the word, before its answer reaches the peer
    # (once in a suite run: "Socket closed", and a finished run's worker 1 exited 1).
    lost = _RecordingContext(lost_answer=tf.errors.UnavailableError(None, None, "Socket closed"))
    strategy_lib.leave_in_order(lost, "tf_mlstm_finalize_0", 1, 3)
    assert lost.calls == [("set", "tf_mlstm_finalize_0_passed_1", "1")]
