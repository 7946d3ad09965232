"""Multi-worker training for real: worker processes on loopback, as a user runs them.

Most tests start `tf-mlstm-train` through `tools/launch_local_workers.py`
(each worker pinned to one core), so the strategy, the collectives, the
checkpoints and the failure paths are the production ones:

* two workers end with identical weights, losses and validation, and split
  the global batch as logged;
* a worker killed mid-run (as a checkpoint is saved, before its own state
  is written) stops the other by itself, well within the heartbeat timeout,
  with one clear line; no checkpoint is committed without that worker's
  state; the launcher exits non-zero and the same command resumes from the
  newest checkpoint, each worker with its own carried state and input
  position;
* a checkpoint of two workers resumes on one (carried state and input
  position restart with warnings, the global batch stays), with float16
  loss scaling and a float16 all-reduce;
* one worker's time budget stops every worker at the same step (two worker
  processes training the language model on the runner, with different budgets);
* an overflow under mixed_float16 (in this process) skips the step, halves the loss scale and
  training recovers; the scale and the skipped-step count come back from a
  checkpoint.
"""

import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import _forkserver
import numpy as np
import pytest

from _models import tiny_train_config
from _models import wait_for

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCHER = str(REPO / "tools" / "launch_local_workers.py")
# strategy.get_distribution_strategy's default heartbeat timeout.
HEARTBEAT_TIMEOUT_S = 10
TINY = [
    "--hidden_size=32",
    "--embedding_size=16",
    "--seq_length=32",
    "--batch_size=8",
    "--lr=0.01",
    "--eval_every_steps=0",
    "--sample_every_steps=0",
    "--log_every_steps=1",
    "--jit_compile=false",
    # Fixed, so no run measures precisions first: on a CPU with native
    # bfloat16 the chief's timing would outlast a test's short
    # --collective_timeout_s while the other worker waits to agree on it.
    "--precision=float32",
    "--noexport",  # seconds a run; the first test below exports
]
_STEP_LINE = re.compile(r"step (\d+)/\d+\s+loss ([0-9.naif]+)")
_TRAINING_LINE = re.compile(
    r"Training: (\d+) worker\(s\), (\d+) replica\(s\), global batch (\d+) \((\d+) per replica\)"
    r".* from step (\d+) to (\d+)"
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The demo corpus as TFRecord shards (4 train shards: up to 4 workers)."""
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top

    return data_files.build_demo_tfrecords(str(tmp_path_factory.mktemp("data")))


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


def _train_args(model_dir, data_dir, *extra):
    return [
        sys.executable,
        "-m",
        "tf_mlstm.cli.train",
        f"--model_dir={model_dir}",
        f"--train_data={data_dir}",
        *TINY,
        *extra,
    ]


def _launch(num_workers, log_path, train_args, grace_s=5, fresh=False):
    """Starts the launcher; its output goes to a file (a full pipe would stall it).

    `fresh`: the launcher and its workers start as fresh processes, not forked
    (tests/_forkserver.py).
    """
    command = [
        sys.executable,
        LAUNCHER,
        f"--num_workers={num_workers}",
        "--cpus_per_worker=1",
        f"--grace_s={grace_s}",
        "--",
        *train_args,
        "--distribution_strategy=multi_worker",
    ]
    with open(log_path, "w") as log:
        env = dict(_env(), TF_MLSTM_TESTS_NO_FORK="1") if fresh else _env()
        return _forkserver.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def _run_launcher(num_workers, log_path, train_args, timeout=150, fresh=False):
    proc = _launch(num_workers, log_path, train_args, fresh=fresh)
    try:
        code = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, pathlib.Path(log_path).read_text(errors="replace")


def _worker_lines(log, worker):
    prefix = f"[worker {worker}] "
    return [line[len(prefix) :] for line in log.splitlines() if line.startswith(prefix)]


def _worker_text(log, worker):
    return "\n".join(_worker_lines(log, worker))


def _losses(text):
    return {int(m.group(1)): float(m.group(2)) for m in _STEP_LINE.finditer(text)}


def _results(text):
    """The results JSON a worker prints last."""
    for line in reversed(text.splitlines()):
        if line.startswith("{") and '"step"' in line:
            return json.loads(line)
    raise AssertionError(f"no results line in:\n{text[-3000:]}")


def _training_line(text):
    match = _TRAINING_LINE.search(text)
    assert match, text[-3000:]
    return tuple(int(g) for g in match.groups())


def _worker_pids(launcher_pid):
    """{worker index: pid} of the launcher's children.

    The launcher starts worker i as its i-th child, and the kernel lists a
    thread's children in the order they were made (not by pid, which wraps).
    A worker forked from a warm interpreter (tests/_forkserver.py) keeps the
    environment it was forked with in /proc, so its TF_CONFIG is not there.
    """
    with open(f"/proc/{launcher_pid}/task/{launcher_pid}/children") as f:
        return dict(enumerate(int(p) for p in f.read().split()))


def _latest_checkpoint_step(model_dir):
    text = (pathlib.Path(model_dir) / "checkpoints" / "checkpoint").read_text()
    return int(re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M).group(1))


def test_two_workers_split_the_batch_and_end_with_identical_weights(tmp_path, data_dir):
    model_dir = tmp_path / "run"
    code, log = _run_launcher(
        2,
        tmp_path / "log.txt",
        _train_args(model_dir, data_dir, "--max_steps=6", "--checkpoint_every_steps=3", "--export"),
    )
    assert code == 0, log[-4000:]
    chief, other = _worker_text(log, 0), _worker_text(log, 1)
    # Global batch 8 over 2 replicas: 4 rows each, logged by both workers.
    assert _training_line(chief) == _training_line(other) == (2, 2, 8, 4, 0, 6)
    losses = _losses(chief)
    assert sorted(losses) == list(range(1, 7))
    assert _losses(other) == losses  # all-reduced statistics
    assert losses[6] < losses[1]
    results, results_1 = _results(chief), _results(other)
    # Identical reduced gradients, identical updates: bit-identical weights.
    assert results["weights_sha256"] == results_1["weights_sha256"]
    assert results["validation_bits_per_char"] == results_1["validation_bits_per_char"]
    assert results["step"] == results_1["step"] == 6
    # Only the chief keeps outputs; its checkpoint holds those weights.
    saved = json.loads((model_dir / "results.json").read_text())
    assert saved["weights_sha256"] == results["weights_sha256"]
    assert _latest_checkpoint_step(model_dir) == 6
    assert (model_dir / "export" / "6" / "saved_model.pb").exists()
    assert sorted(p.name for p in (model_dir / "carried_state").glob("*step-6.*")) == [
        "worker-0-step-6.tensor",
        "worker-1-step-6.tensor",
    ]
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top
    from tf_mlstm.config import TrainConfig  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks import language_model as lm_task  # pylint: disable=g-import-not-at-top

    config = TrainConfig.from_json((model_dir / "config.json").read_text())
    model = lm_task.build_model(config)
    tf.train.Checkpoint(model=model).restore(
        str(model_dir / "checkpoints" / "ckpt-6")
    ).expect_partial()
    assert rundir.weights_checksum(model.weights) == results["weights_sha256"]


# Loaded at interpreter start-up in worker 1 only (through PYTHONPATH): its loss is
# NaN at two steps, so only its gradients are non-finite there, as with a bad batch.
_POISON_WORKER_1 = """
import json, os
if json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index") == 1:
    import tensorflow as tf
    from tf_mlstm.tasks import language_model as lm_task

    _loss = lm_task.LanguageModelTask.loss

    def _poisoned(self, batch, state):
        value, stats, state = _loss(self, batch, state)
        step = self.context.step
        bad = tf.logical_or(tf.equal(step, 2), tf.equal(step, 3))
        return value * tf.where(bad, float("nan"), 1.0), stats, state

    lm_task.LanguageModelTask.loss = _poisoned
"""

_SKIPPED = re.compile(r"step (\d+): non-finite gradients")


def test_a_non_finite_step_on_one_worker_is_skipped_by_both(tmp_path, data_dir, monkeypatch):
    """One worker's NaN gradients reach the all-reduce: both workers skip the same two
    steps, count them, and end with bit-identical finite weights."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(_POISON_WORKER_1)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(inject), str(REPO)]))
    model_dir = tmp_path / "run"
    code, log = _run_launcher(
        2, tmp_path / "log.txt", _train_args(model_dir, data_dir, "--max_steps=6")
    )
    assert code == 0, log[-4000:]
    chief, other = _worker_text(log, 0), _worker_text(log, 1)
    # Each worker names the skipped steps it logs, the same ones.
    skipped = {int(step) for step in _SKIPPED.findall(chief)}
    assert skipped and skipped <= {2, 3, 4}, chief[-3000:]
    assert {int(step) for step in _SKIPPED.findall(other)} == skipped
    results, results_1 = _results(chief), _results(other)
    assert results["skipped_steps"] == results_1["skipped_steps"] == 2
    assert results["step"] == results_1["step"] == 6
    assert results["weights_sha256"] == results_1["weights_sha256"]
    assert np.isfinite(results["validation_bits_per_char"])


# Loaded at interpreter start-up in worker 1 only (through PYTHONPATH): the worker is
# SIGKILLed as it begins to save step 6, before any of its own state for that step is
# written, while the chief saves the same step: the window between the chief's save
# and this worker's, made certain instead of left to timing.
_KILL_WORKER_1_AS_IT_SAVES = """
import json, os, signal, time
if json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index") == 1:
    from tf_mlstm.train import checkpointing

    _save = checkpointing.save_carried_state

    def _killed_at_6(model_dir, worker, step, *args, **kwargs):
        if step == 6:
            with open(os.environ["KILLED_AT_FILE"], "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        return _save(model_dir, worker, step, *args, **kwargs)

    checkpointing.save_carried_state = _killed_at_6
"""


def test_killed_worker_stops_the_other_and_the_same_command_resumes(
    tmp_path, data_dir, monkeypatch
):
    """Worker 1 is SIGKILLed as step 6 is checkpointed, before its carried state and
    input position are written (the chief's save of that step runs meanwhile). The
    survivor stops by itself with one line; no checkpoint of step 6 is committed
    without worker 1's state, and the same command resumes from the newest checkpoint
    that has every worker's state, continuing the first run's losses exactly."""
    model_dir = tmp_path / "run"
    args = _train_args(model_dir, data_dir, "--max_steps=9", "--checkpoint_every_steps=3")
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(_KILL_WORKER_1_AS_IT_SAVES)
    killed_at = tmp_path / "killed_at"
    with monkeypatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(inject), str(REPO)]))
        patch.setenv("KILLED_AT_FILE", str(killed_at))
        # A long grace period: the survivor must stop by itself, not by SIGKILL.
        proc = _launch(2, tmp_path / "first.txt", args, grace_s=60)
        try:
            code = proc.wait(timeout=150)
            stopped_after = time.time() - float(killed_at.read_text())
        finally:
            if proc.poll() is None:
                proc.kill()
    first = (tmp_path / "first.txt").read_text(errors="replace")
    assert code == 128 + signal.SIGKILL, first[-4000:]
    survivor = _worker_text(first, 0)
    # One clear line, then the survivor exits on its own well within the grace period.
    assert "a peer worker stopped" in survivor and "Relaunch every worker" in survivor, survivor[
        -4000:
    ]
    assert "Traceback" not in survivor
    assert stopped_after < HEARTBEAT_TIMEOUT_S + 20, stopped_after
    assert max(_losses(survivor)) == 6, survivor[-4000:]
    # Step 6 has no checkpoint: worker 1's state of it was never written.
    assert _latest_checkpoint_step(model_dir) == 3
    assert not list((model_dir / "checkpoints").glob("ckpt-6.*"))
    # Exactly one such line, and it names the checkpoint the relaunch resumes from.
    lines = [line for line in survivor.splitlines() if "Relaunch every worker" in line]
    assert len(lines) == 1, lines
    assert re.search(
        r"worker 0 stops at step 6: a peer worker stopped \(.+\)\. Relaunch every worker "
        r"with the same command to resume from the last checkpoint \(ckpt-3\)\.$",
        lines[0],
    ), lines[0]

    code, log = _run_launcher(2, tmp_path / "second.txt", args)
    assert code == 0, log[-4000:]
    chief = _worker_text(log, 0)
    assert f"Resumed from {model_dir / 'checkpoints' / 'ckpt-3'}" in chief, chief[-4000:]
    assert _training_line(chief)[4:] == (3, 9)
    # Both workers get their own carried state and input position back: steps 4 to 6
    # repeat the first run's losses exactly.
    assert "restarts from zeros" not in log and "input restarts" not in log, log[-4000:]
    resumed, before = _losses(chief), _losses(survivor)
    assert sorted(resumed) == list(range(4, 10))
    assert [resumed[s] for s in (4, 5, 6)] == [before[s] for s in (4, 5, 6)]
    assert json.loads((model_dir / "results.json").read_text())["step"] == 9


_SIGNAL_STOP = re.compile(
    r"worker (\d) stopped at step (\d+) on (SIGTERM|Ctrl-C \(SIGINT\)), after checkpointing it "
    r"\(exit status (\d+)\)"
)


def _kill_training_workers(pids):
    """Kills those of `pids` that still run training (a launcher that died leaves them)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"tf_mlstm.cli.train" in f.read():
                    os.kill(pid, signal.SIGKILL)


def test_the_launcher_passes_sigterm_and_ctrl_c_on_and_the_same_command_resumes(tmp_path, data_dir):
    """The launcher sent SIGTERM, then (relaunched) Ctrl-C: each time both real training
    workers stop at one step, checkpoint it with their carried state, and the launcher
    exits with their status (75, then 130); the same command resumes after that step."""
    model_dir = tmp_path / "run"
    max_steps, every = 400, 5
    args = _train_args(
        model_dir,
        data_dir,
        f"--max_steps={max_steps}",
        f"--checkpoint_every_steps={every}",
    )
    resumed_from = 0
    for name, signum, said, status in (
        ("sigterm", signal.SIGTERM, "SIGTERM", 75),
        ("ctrl-c", signal.SIGINT, "Ctrl-C (SIGINT)", 130),
    ):
        log_path = tmp_path / f"{name}.txt"
        # A long grace period: the workers must stop by themselves, not by SIGKILL.
        proc = _launch(2, log_path, args, grace_s=60)
        workers = {}
        try:
            # Both workers are past start-up once a checkpoint of this launch exists.
            _run_until_checkpoint(proc, model_dir, (resumed_from // every + 1) * every, log_path)
            workers = _worker_pids(proc.pid)
            proc.send_signal(signum)
            code = proc.wait(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
            _kill_training_workers(workers.values())
        log = log_path.read_text(errors="replace")
        assert code == status, log[-4000:]
        assert "Traceback" not in log and "crashed" not in log, log[-4000:]
        stops = [_SIGNAL_STOP.findall(_worker_text(log, worker)) for worker in (0, 1)]
        assert [len(found) for found in stops] == [1, 1], log[-4000:]
        (index_0, step, said_0, status_0), (index_1, step_1, said_1, status_1) = (
            stops[0][0],
            stops[1][0],
        )
        assert (index_0, index_1) == ("0", "1") and step == step_1
        assert said_0 == said_1 == said and int(status_0) == int(status_1) == status
        step = int(step)
        assert resumed_from < step < max_steps
        assert _latest_checkpoint_step(model_dir) == step
        for worker in range(2):
            assert (model_dir / "carried_state" / f"worker-{worker}-step-{step}.tensor").exists()
        chief = _worker_text(log, 0)
        if resumed_from:
            assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{resumed_from}'}" in chief
            assert "restarts from zeros" not in log and "input restarts" not in log
            assert min(_losses(chief)) == resumed_from + 1
        resumed_from = step


def test_two_worker_float16_checkpoint_resumes_on_one_worker(tmp_path, data_dir):
    model_dir = tmp_path / "run"
    mixed = ["--precision=mixed_float16", "--allreduce_dtype=float16"]
    code, log = _run_launcher(
        2,
        tmp_path / "two.txt",
        _train_args(model_dir, data_dir, "--max_steps=6", "--checkpoint_every_steps=3", *mixed),
    )
    assert code == 0, log[-4000:]
    two = _results(_worker_text(log, 0))
    assert two["step"] == 6 and np.isfinite(two["validation_bits_per_char"])
    assert all(np.isfinite(list(_losses(_worker_text(log, 0)).values())))

    # The same run continued by one process without a cluster.
    proc = _forkserver.run(
        _train_args(model_dir, data_dir, "--max_steps=10", "--checkpoint_every_steps=3", *mixed),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"Resumed from {model_dir / 'checkpoints' / 'ckpt-6'}" in proc.stderr
    assert "saved for another replica layout: the recurrent state restarts from zeros" in (
        proc.stderr
    )
    assert "saved for another input layout" in proc.stderr
    # Same global batch, now all on one replica.
    assert _training_line(proc.stderr) == (1, 1, 8, 8, 6, 10)
    losses = _losses(proc.stderr)
    assert sorted(losses) == [7, 8, 9, 10] and all(np.isfinite(list(losses.values())))
    results = json.loads((model_dir / "results.json").read_text())
    assert results["step"] == 10 and np.isfinite(results["validation_bits_per_char"])


def test_float16_overflow_skips_the_step_halves_the_scale_and_recovers(tmp_path, data_dir):
    from tf_mlstm.config import TrainConfig  # pylint: disable=g-import-not-at-top
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import optimizer as optimizer_lib  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    config = TrainConfig(
        model_dir=str(tmp_path / "run"),
        hidden_size=32,
        embedding_size=16,
        seq_length=16,
        batch_size=4,
        lr=0.01,
        precision="mixed_float16",
        allreduce_dtype="float16",
        jit_compile="false",
        max_steps=100,
    ).validate()
    files = tfrecord.split_files(data_dir, "train")
    trainer = Runner(LanguageModelTask(config, files, []), config)
    scale = optimizer_lib.loss_scale(trainer.optimizer)

    def step():
        stats, _, norm, finite = trainer.train_step()
        return float(stats[0]), norm, finite

    def weights():
        return [w.numpy().copy() for w in trainer.model.weights]

    assert step()[2] and int(trainer.skipped.numpy()) == 0
    # A loss scale far past float16's range (65504): the gradients overflow.
    scale.assign(2.0**40)
    skipped, before = 0, weights()
    while True:
        old_scale = float(scale.numpy())
        bits, norm, finite = step()
        assert np.isfinite(bits)  # the loss itself is float32
        if finite:
            break
        skipped += 1
        assert not np.isfinite(norm)
        assert float(scale.numpy()) == old_scale / 2
        assert int(trainer.skipped.numpy()) == skipped
        for w0, w1 in zip(before, weights()):
            np.testing.assert_array_equal(w0, w1)  # nothing applied
        assert skipped < 40, "the loss scale never came back into range"
    assert skipped >= 10  # 2**40 is far out of range: many halvings
    assert float(scale.numpy()) == old_scale  # no growth on the first good step
    # The good step applied an update; training goes on with finite losses.
    assert any(not np.array_equal(w0, w1) for w0, w1 in zip(before, weights()))
    # The scale found is the largest this batch fits; a later batch may still
    # overflow at it once, and one more halving brings it back.
    later_skips = 0
    for _ in range(4):
        bits, norm, finite = step()
        assert np.isfinite(bits)
        later_skips += not finite
    assert later_skips <= 1 and finite and np.isfinite(norm)
    assert int(trainer.skipped.numpy()) == skipped + later_skips
    assert int(trainer.step.numpy()) == 1 + skipped + 1 + 4

    # The loss scale, its growth counter and the skipped-step count are in the
    # checkpoint: a fresh runner restored from it goes on with them.
    trainer.save()
    saved_scale = float(scale.numpy())
    assert saved_scale != 2.0**15  # not the initial scale, so the restore shows
    fresh = Runner(LanguageModelTask(config, files, []), config)
    fresh_scale = optimizer_lib.loss_scale(fresh.optimizer)
    assert float(fresh_scale.numpy()) == 2.0**15 and int(fresh.skipped.numpy()) == 0
    assert fresh.restore()
    assert float(fresh_scale.numpy()) == saved_scale
    assert int(fresh.skipped.numpy()) == int(trainer.skipped.numpy())
    assert int(fresh.optimizer.step_counter.numpy()) == int(trainer.optimizer.step_counter.numpy())
    assert int(fresh.step.numpy()) == int(trainer.step.numpy())


_BUDGET_LINE = re.compile(r"Time budget of [0-9.]+ minutes reached at step (\d+)")
# A worker that trains the language model's task on the runner for the TrainConfig JSON
# in argv[1] and prints the results: the binary's run without its final export.
_TRAIN_WORKER = """
import json, sys
from absl import logging
from tf_mlstm.data import tfrecord
from tf_mlstm.config import TrainConfig
from tf_mlstm.tasks.language_model import LanguageModelTask
from tf_mlstm.train.runner import Runner
logging.set_verbosity(logging.INFO)
config = TrainConfig.from_json(sys.argv[1]).validate()
files = tfrecord.split_files(config.train_data, "train")
trainer = Runner(LanguageModelTask(config, files, []), config)
print(json.dumps(trainer.train()))
"""


def test_one_workers_time_budget_stops_both_workers_at_the_same_step(tmp_path, data_dir):
    # Worker 1's budget ends long before worker 0's. Its stop flag rides in
    # the all-reduce, so worker 0 stops after the same step instead of
    # waiting in a collective worker 1 never joins.
    import local_cluster  # pylint: disable=g-import-not-at-top

    model_dir = tmp_path / "run"
    ports = local_cluster.pick_ports(2)
    procs, logs = [], []
    for index, minutes in enumerate((30.0, 0.05)):
        config = tiny_train_config(
            model_dir,
            data_dir,
            distribution_strategy="multi_worker",
            max_steps=100000,
            max_minutes=minutes,
            checkpoint_every_steps=100000,
        )
        logs.append(tmp_path / f"worker-{index}.txt")
        with open(logs[-1], "w") as log:
            command = [sys.executable, "-c", _TRAIN_WORKER, config.to_json()]
            env = local_cluster.worker_env(ports, index, 1, _env())
            procs.append(_forkserver.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log))
    codes, texts = wait_for(procs, logs, timeout=150)
    assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
    results = [_results(text) for text in texts]
    step = results[1]["step"]
    assert [r["step"] for r in results] == [step, step] and step >= 2
    assert [r["stopped_by"] for r in results] == ["time", "time"]
    assert [_BUDGET_LINE.findall(text) for text in texts] == [[str(step)], [str(step)]]
    assert max(_losses(texts[0])) == max(_losses(texts[1])) == step
    # Worker 0 stopped some 30 minutes early, with the weights of worker 1,
    # and the chief checkpointed the stop step.
    assert results[0]["train_minutes"] < 5
    assert results[0]["weights_sha256"] == results[1]["weights_sha256"]
    assert _latest_checkpoint_step(model_dir) == step
    assert "crashed" not in texts[0] + texts[1]


def _run_until_checkpoint(proc, model_dir, step, log_path, within_s=120):
    deadline = time.monotonic() + within_s
    while not (model_dir / "checkpoints" / f"ckpt-{step}.index").exists():
        assert proc.poll() is None, pathlib.Path(log_path).read_text()[-4000:]
        assert time.monotonic() < deadline, f"no checkpoint at step {step} within {within_s} s"
        time.sleep(0.05)


def test_a_frozen_worker_is_caught_by_the_heartbeat(tmp_path, data_dir):
    model_dir = tmp_path / "run"
    args = _train_args(model_dir, data_dir, "--max_steps=100000", "--checkpoint_every_steps=10")
    proc = _launch(2, tmp_path / "log.txt", args, grace_s=60)
    pids = {}
    try:
        _run_until_checkpoint(proc, model_dir, 10, tmp_path / "log.txt")
        pids = _worker_pids(proc.pid)
        # SIGSTOP freezes every thread of the worker, its heartbeats too.
        os.kill(pids[1], signal.SIGSTOP)
        frozen = time.monotonic()
        deadline = frozen + HEARTBEAT_TIMEOUT_S + 30
        while "a peer worker" not in _worker_text((tmp_path / "log.txt").read_text(), 0):
            assert time.monotonic() < deadline, "the survivor did not notice the frozen peer"
            time.sleep(0.1)
        noticed = time.monotonic() - frozen
    finally:
        for pid in pids.values():
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        proc.wait(timeout=90) if proc.poll() is None else None
        if proc.poll() is None:
            proc.kill()
    survivor = _worker_text((tmp_path / "log.txt").read_text(errors="replace"), 0)
    assert "Traceback" not in survivor, survivor[-3000:]
    # Caught by the missed heartbeats: a frozen peer keeps its sockets open, so nothing
    # fails before the heartbeat timeout has run (most of it, at least) ...
    assert noticed >= HEARTBEAT_TIMEOUT_S / 2, noticed
    # ... and the one line names the newest checkpoint, the one a relaunch resumes from.
    lines = [line for line in survivor.splitlines() if "Relaunch every worker" in line]
    assert len(lines) == 1, lines
    latest = _latest_checkpoint_step(model_dir)
    assert lines[0].endswith(f"resume from the last checkpoint (ckpt-{latest})."), lines[0]
    assert proc.returncode != 0


def test_a_live_but_stuck_peer_hits_the_collective_timeout(tmp_path, data_dir):
    # The chief spends far longer than the timeout in a chief-only sample
    # (alive, heartbeating, but not at the all-reduce): the other worker's
    # collective times out with one clear line instead of waiting forever.
    model_dir = tmp_path / "run"
    args = _train_args(
        model_dir,
        data_dir,
        "--max_steps=100",
        "--sample_every_steps=5",
        "--sample_length=300000",
        "--collective_timeout_s=4",
    )
    # Fresh workers: once in a whole-suite run, a worker forked from the launcher aborted
    # inside TensorFlow's collective abort ("Mutex corrupt: both reader and writer lock
    # held"), a lock state a fork of a process with threads can carry.
    code, log = _run_launcher(2, tmp_path / "log.txt", args, timeout=240, fresh=True)
    follower = _worker_text(log, 1)
    assert code != 0, log[-4000:]
    assert "did not reach the all-reduce within --collective_timeout_s=4" in follower, follower[
        -4000:
    ]
    assert "Traceback" not in follower


def test_a_peer_late_at_start_up_is_one_line_naming_the_timeout(tmp_path, data_dir):
    # The chief times XLA on and off first (a shape no other test caches)
    # while the other worker waits to agree on its choice, longer than the
    # collective timeout: the waiting worker stops with the training step's
    # kind of line, not TensorFlow's graph-execution error.
    args = _train_args(
        tmp_path / "run",
        data_dir,
        "--max_steps=100",  # long enough to pay for measuring
        "--seq_length=24",
        "--jit_compile=auto",
        "--collective_timeout_s=1",
    )
    code, log = _run_launcher(2, tmp_path / "log.txt", args)
    follower = _worker_text(log, 1)
    assert code != 0, log[-4000:]
    assert (
        "worker 1 stops during start-up: a peer worker did not reach the all-reduce within "
        "--collective_timeout_s=1 (stuck, or far slower: the chief may first time the auto "
        "settings, up to a minute)" in follower
    ), follower[-4000:]
    assert "Graph execution error" not in follower
    assert "Traceback" not in follower


def _catches_sigterm(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


@pytest.mark.parametrize("signalled", [0, 1], ids=["waiting-worker", "worker-not-yet-registered"])
def test_sigterm_during_the_cluster_s_start_up_stops_every_worker_before_training(
    tmp_path, data_dir, signalled
):
    """Worker 0 waits in TensorFlow's rendezvous for worker 1, deaf to signals (TensorFlow
    holds the interpreter and answers SIGTERM with a notifier of its own). SIGTERM reaches
    worker 0 there, or worker 1 before it registers (what a chaos schedule found: worker 1
    left at once, and worker 0 waited for it until the launcher killed it, status 143).
    Either way every worker stops once the cluster has formed, before training: status 75,
    nothing of the run written."""
    sys.path.insert(0, str(REPO / "tools"))
    import local_cluster  # pylint: disable=g-import-not-at-top

    ports = local_cluster.pick_ports(2)
    args = _train_args(tmp_path / "run", data_dir, "--max_steps=30")
    args.append("--distribution_strategy=multi_worker")
    procs = []
    try:
        for index in (0, 1):
            env = dict(_env(), TF_CONFIG=local_cluster.build_tf_config(ports, index))
            env.pop("TF_CPP_MIN_LOG_LEVEL")
            log = open(tmp_path / f"worker{index}.txt", "w")  # noqa: SIM115
            procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 60
            if index == 0:
                while "to register" not in (tmp_path / "worker0.txt").read_text():
                    assert time.monotonic() < deadline and procs[0].poll() is None
                    time.sleep(0.05)
                time.sleep(1.0)  # inside the wait
            if index == signalled == 1:
                # Its first moments: the handler is in place, TensorFlow not yet imported.
                while not _catches_sigterm(procs[1].pid):
                    assert time.monotonic() < deadline and procs[1].poll() is None
                    time.sleep(0.005)
            if index == signalled:
                procs[index].send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    texts = [(tmp_path / f"worker{i}.txt").read_text() for i in (0, 1)]
    assert codes == [75, 75], texts[0][-3000:] + texts[1][-3000:]
    for worker, text in enumerate(texts):
        # TensorFlow's notifier hears a signal in the rendezvous: which worker's, none knows.
        why = "SIGTERM" if worker == signalled == 1 else "SIGTERM to a worker of the cluster"
        assert (
            f"worker {worker} stopped before training on {why} during start-up, nothing of the "
            "run written (exit status 75)" in text
        ), text[-3000:]
        assert "Traceback" not in text
    assert not _losses(texts[0])
    assert not (tmp_path / "run" / "checkpoints").exists()
    if signalled == 1:
        assert "SIGTERM during a cluster's start-up: this worker stops once" in texts[1]


def _threads(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except FileNotFoundError:
        return 0


def test_a_long_run_does_not_grow_its_threads_with_every_collective(tmp_path, data_dir):
    """With a collective timeout, TensorFlow's own per-collective timeout left a thread
    waiting out its time for every collective: about two a step, until a run of tiny fast
    steps could start no thread ("Resource temporarily unavailable") after some 7,000 steps.
    The deadline is kept by one watcher thread instead."""
    args = _train_args(tmp_path / "run", data_dir, "--max_steps=600", "--log_every_steps=50")
    proc = _launch(2, tmp_path / "log.txt", args)
    counts = {}
    try:
        deadline = time.monotonic() + 240
        for step in (100, 550):
            while f"step {step}/600" not in (tmp_path / "log.txt").read_text(errors="replace"):
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            workers = [
                int(pid)
                for task in pathlib.Path(f"/proc/{proc.pid}/task").iterdir()
                for pid in (task / "children").read_text().split()
            ]
            counts[step] = max(_threads(pid) for pid in workers)
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    # 450 steps in between: about 900 threads more with the leak.
    assert counts[550] - counts[100] < 60, counts
