"""Fault handling of the distributed runner: non-finite steps, bad float flags, SIGTERM,
the resume of a budget-planned schedule.

The runner serves language-model training and fine-tuning alike, so these
run it through `tf-mlstm-train` or in-process on either task (fine-tuning's
binary is in test_finetune.py).
"""

import dataclasses
import json
import logging
import os
import pathlib
import re
import signal
import sys
import time

import _forkserver
import numpy as np
import pytest

import tf_mlstm
from _models import signal_when
from _models import sigterm_when
from _models import wait_for
from _models import write_untrained_model_dir
from tf_mlstm.config import TrainConfig

REPO = pathlib.Path(__file__).resolve().parent.parent
TINY = dict(
    hidden_size=16,
    embedding_size=8,
    seq_length=16,
    batch_size=4,
    jit_compile="false",
    eval_every_steps=0,
    sample_every_steps=0,
    log_every_steps=1,
    checkpoint_every_steps=2,
)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """The demo corpus as TFRecord shards."""
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top

    return data_files.build_demo_tfrecords(str(tmp_path_factory.mktemp("data")))


def _flags(config):
    return [f"--{name}={value}" for name, value in TINY.items()] + [
        f"--model_dir={config.model_dir}",
        f"--train_data={config.train_data}",
        f"--max_steps={config.max_steps}",
        f"--max_nonfinite_steps={config.max_nonfinite_steps}",
    ]


def _snapshot(variables):
    return [np.array(v.numpy(), copy=True) for v in variables]


def _assert_unchanged(before, variables):
    for old, new in zip(before, _snapshot(variables)):
        np.testing.assert_array_equal(old, new)  # NaN equals NaN here


def _assert_a_skipped_step(trainer):
    """The next step is non-finite and a true skip: weights, Adam moments and
    iterations as they were, the step and the skipped count one up."""
    weights, slots = _snapshot(trainer.model.weights), _snapshot(trainer.optimizer.variables)
    iterations, step = int(trainer.optimizer.iterations.numpy()), int(trainer.step.numpy())
    skipped = int(trainer.skipped.numpy())
    _, stop, norm, finite = trainer.train_step()
    assert not finite and not np.isfinite(norm) and not stop
    _assert_unchanged(weights, trainer.model.weights)
    _assert_unchanged(slots, trainer.optimizer.variables)
    assert int(trainer.optimizer.iterations.numpy()) == iterations
    assert int(trainer.step.numpy()) == step + 1 and int(trainer.skipped.numpy()) == skipped + 1
    return weights


@pytest.mark.parametrize(
    "name, value",
    [("lr", float("nan")), ("max_minutes", float("inf")), ("clip_norm", float("-inf"))],
)
def test_non_finite_float_flags_are_refused(name, value):
    from tf_mlstm.transfer.finetune import FinetuneConfig  # pylint: disable=g-import-not-at-top

    with pytest.raises(ValueError, match=rf"^{name} must be a finite number, got {value}\.$"):
        TrainConfig(**{name: value}).validate()
    base = dict(init_model_dir="m", train_data="t", model_dir="o")
    with pytest.raises(ValueError, match=rf"^{name} must be a finite number, got {value}\.$"):
        FinetuneConfig(**base, **{name: value}).validate()


@pytest.mark.parametrize("prefix", ["", "--"])
def test_the_runner_s_own_lines_name_the_argument_to_python_and_the_flag_to_a_binary(prefix):
    """Divergence and a peer past its time-out name settings as the caller wrote them:
    `max_nonfinite_steps=2` from Python, `--max_nonfinite_steps=2` in a binary
    (`errors.naming_flags`, which every binary enters)."""
    import contextlib  # pylint: disable=g-import-not-at-top

    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tf_mlstm import errors  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import cadence  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import run_errors  # pylint: disable=g-import-not-at-top

    with errors.naming_flags() if prefix else contextlib.nullcontext():
        with pytest.raises(run_errors.TrainingDivergedError) as diverged:
            cadence.count_nonfinite(
                step=7,
                run=1,
                finite=False,
                norm=float("nan"),
                last_saved=4,
                max_nonfinite_steps=2,
                writers=[],
                strategy=tf.distribute.get_strategy(),
            )
        late = tf.errors.DeadlineExceededError(None, None, "collective timed out")
        peer = str(run_errors.peer_failure(late, 0, 7, 30, None))
    message = str(diverged.value)
    assert f"(steps 6 to 7, {prefix}max_nonfinite_steps=2)" in message
    assert f"Lower {prefix}lr or {prefix}clip_norm (or check the input)" in message
    assert f"did not reach the all-reduce within {prefix}collective_timeout_s=30 " in peer
    if not prefix:
        assert "--" not in message + peer


@pytest.mark.parametrize("prefix", ["", "--"])
def test_a_batch_the_replicas_do_not_divide_names_the_argument_or_the_flag(
    prefix, mirrored_on_cpus, tmp_path
):
    import contextlib  # pylint: disable=g-import-not-at-top

    from tf_mlstm import errors  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks.language_model import SyntheticLanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    config = TrainConfig(
        **{**TINY, "batch_size": 3},
        model_dir=str(tmp_path / "run"),
        precision="float32",
        max_steps=1,
        distribution_strategy="mirrored",
    ).validate()
    replicas = len(mirrored_on_cpus)
    with errors.naming_flags() if prefix else contextlib.nullcontext():
        with pytest.raises(
            errors.InvalidValueError,
            match=rf"^{prefix}batch_size=3 \(global\) must be a multiple of the {replicas} repl",
        ):
            Runner(SyntheticLanguageModelTask(config), config)


def test_a_run_of_non_finite_steps_stops_in_one_line_and_the_last_checkpoint_is_finite(
    tmp_path, data_dir
):
    """Bad batches from step 5 on (NaN gradients on finite weights, as in a real
    divergence): three skipped steps, then one line naming the last checkpoint, which
    holds exactly the weights of step 4, finite; no checkpoint inside the stretch."""
    from tf_mlstm import errors  # pylint: disable=g-import-not-at-top
    from tf_mlstm.models.language_model import MLSTMLanguageModel  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.run_errors import TrainingDivergedError  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    task, config = _language_model_task(tmp_path, data_dir, "float32")
    _poison_loss(task)
    first = Runner(task, config)
    assert first.train()["step"] == 4
    at_step_4 = _snapshot(first.model.weights)

    task, config = _language_model_task(
        tmp_path, data_dir, "float32", max_steps=20, max_nonfinite_steps=3
    )
    poison = _poison_loss(task)
    poison.assign(float("nan"))
    resumed = Runner(task, config)
    with pytest.raises(TrainingDivergedError) as diverged:
        resumed.train()
    message = str(diverged.value)
    assert errors.is_user_error(diverged.value) and "\n" not in message
    assert message == (
        "training diverged: 3 non-finite steps in a row (steps 5 to 7, "
        "max_nonfinite_steps=3); no update was applied and the last checkpoint (ckpt-4) "
        "holds the last finite weights. Lower lr or clip_norm (or check the input) "
        "before resuming."
    )  # a Python caller's words: the config's fields (a binary's user reads the flags)
    # No update applied: the weights in memory are still those of step 4.
    _assert_unchanged(at_step_4, resumed.model.weights)
    run = tmp_path / "run"
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("*.index"))
    assert checkpoints == ["ckpt-2.index", "ckpt-4.index"]  # ckpt-6 was due, not written
    # The checkpoint the line names holds those weights, every one finite.
    reloaded = MLSTMLanguageModel.from_run(str(run), checkpoint=str(run / "checkpoints" / "ckpt-4"))
    for got, want in zip(reloaded.weights, at_step_4, strict=True):
        assert np.isfinite(got.numpy()).all()
        np.testing.assert_array_equal(got.numpy(), want)
    assert not (run / "export").exists()


# === Preemption: SIGTERM or Ctrl-C stops every worker at one step, after a checkpoint ===

# A worker that got no signal itself stops because another one did.
_STOPPED = re.compile(
    r"worker (\d) stopped at step (\d+) on (?:SIGTERM|a stop signal to another worker), "
    r"after checkpointing it \(exit status 75\)"
)
_INTERRUPTED = re.compile(
    r"worker (\d) stopped at step (\d+) on Ctrl-C \(SIGINT\), after checkpointing it "
    r"\(exit status 130\); relaunch the same command to resume\.$",
    re.M,
)
_LOGGED_STEP = re.compile(r"step (\d+)/\d+\s+loss")


# float32 pinned: left on auto, the first run in a session would time each precision
# (seconds of steps) and the choice would follow the machine and its load.
_PREEMPTION = {**TINY, "precision": "float32", "checkpoint_every_steps": 10, "export": False}


def _preemption_flags(model_dir, data_dir, max_steps):
    return [
        sys.executable,
        "-m",
        "tf_mlstm.cli.train",
        *[f"--{name}={value}" for name, value in _PREEMPTION.items()],
        f"--model_dir={model_dir}",
        f"--train_data={data_dir}",
        f"--max_steps={max_steps}",
    ]


def _uninterrupted_run(model_dir, data_dir, max_steps):
    """The results of `_preemption_flags`' run, trained in this process as tf-mlstm-train does."""
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    config = TrainConfig(
        **_PREEMPTION, model_dir=str(model_dir), train_data=str(data_dir), max_steps=max_steps
    ).validate()
    train_files, _ = data_files.resolve_data(config)
    # No validation: it changes no weight, and this run is only the reference.
    return Runner(LanguageModelTask(config, train_files, []), config).train()


def _wait_for(path, procs, timeout=180):
    """Waits until `path` exists (a checkpoint: a deterministic kill point)."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        for proc in procs:
            assert proc.poll() is None, f"a worker ended before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
        time.sleep(0.05)


def _latest_checkpoint_step(model_dir):
    text = (pathlib.Path(model_dir) / "checkpoints" / "checkpoint").read_text()
    return int(re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.M).group(1))


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")


_MAX_STEPS = 120


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data_dir):
    """The results of `_preemption_flags`' run of `_MAX_STEPS` never stopped."""
    reference = _uninterrupted_run(tmp_path_factory.mktemp("whole"), data_dir, _MAX_STEPS)
    assert reference["step"] == _MAX_STEPS
    return reference


def _assert_the_stop_step_is_checkpointed(text, stopped, model_dir, after_step):
    """The one stop line of `text` (`stopped` matches it); returns its step, checkpointed."""
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    ((worker, stop_step),) = {m.groups() for m in stopped.finditer(text)}
    stop_step = int(stop_step)
    assert worker == "0" and after_step <= stop_step < _MAX_STEPS
    assert max(int(s) for s in _LOGGED_STEP.findall(text)) == stop_step
    # The stop step itself is checkpointed, with carried state and input position.
    assert _latest_checkpoint_step(model_dir) == stop_step
    assert (model_dir / "carried_state" / f"worker-0-step-{stop_step}.tensor").exists()
    assert (model_dir / "input_state" / "worker-0" / f"step-{stop_step}.json").exists()
    assert not (model_dir / "results.json").exists()
    return stop_step


def _assert_resumes_to_the_weights_of(reference, command, model_dir, stop_step):
    """The same command resumes right after `stop_step` and ends with `reference`'s weights."""
    resumed = _forkserver.run(
        command, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{stop_step}'}" in resumed.stderr
    assert "restarts from zeros" not in resumed.stderr and "input restarts" not in resumed.stderr
    assert min(int(s) for s in _LOGGED_STEP.findall(resumed.stderr)) == stop_step + 1
    results = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert results["step"] == _MAX_STEPS
    # Nothing lost: the weights of a run never stopped (in this process, the same config).
    assert results["weights_sha256"] == reference["weights_sha256"]


@pytest.mark.slow
def test_sigterm_and_ctrl_c_checkpoint_the_stop_step_and_the_rerun_matches_an_uninterrupted_run(
    tmp_path, data_dir, uninterrupted
):
    """One run stopped three times, each time resumed by the same command: SIGTERM
    during start-up, SIGTERM mid-run, then Ctrl-C (SIGINT) mid-run; it ends with the
    weights of a run never stopped. (A second Ctrl-C: test_stop_signals.py.)"""
    from tf_mlstm.train import run_errors  # pylint: disable=g-import-not-at-top

    model_dir = tmp_path / "run"
    command = _preemption_flags(model_dir, data_dir, _MAX_STEPS)

    # SIGTERM during start-up: config.json is written once the run folder and its lock
    # exist, after the handler is in place and before any step. The run stops at the
    # first step that reads the flag, after checkpointing it: a step reads it as it
    # starts, so that is step 1, or step 2 when the signal lands while step 1 (tracing
    # and compiling the step) already runs.
    code, startup = sigterm_when(command, model_dir / "config.json", tmp_path / "startup.txt", 180)
    assert code == run_errors.EXIT_PREEMPTED == 75, startup[-3000:]
    early = _assert_the_stop_step_is_checkpointed(startup, _STOPPED, model_dir, 1)
    assert early in (1, 2), startup[-3000:]

    # The same command takes the lock over and resumes from there; SIGTERM again once
    # ckpt-10 is written; then Ctrl-C at the next checkpoint, which does the same in
    # one line, with exit status 130.
    resumed_from = early
    for name, signum, status, stopped in (
        ("sigterm", signal.SIGTERM, run_errors.EXIT_PREEMPTED, _STOPPED),
        ("ctrl-c", signal.SIGINT, run_errors.EXIT_INTERRUPTED, _INTERRUPTED),
    ):
        every = _PREEMPTION["checkpoint_every_steps"]
        due = (resumed_from // every + 1) * every
        checkpoint = model_dir / "checkpoints" / f"ckpt-{due}.index"
        code, text = signal_when(command, checkpoint, tmp_path / f"{name}.txt", 180, signum)
        assert code == status, text[-3000:]
        assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{resumed_from}'}" in text
        assert min(int(s) for s in _LOGGED_STEP.findall(text)) == resumed_from + 1
        # The stop is said last, in one line.
        assert stopped.search(text.strip().splitlines()[-1]), text[-3000:]
        resumed_from = _assert_the_stop_step_is_checkpointed(text, stopped, model_dir, due)

    _assert_resumes_to_the_weights_of(uninterrupted, command, model_dir, resumed_from)


@pytest.mark.slow
def test_sigterm_and_ctrl_c_stop_fine_tuning_and_the_rerun_ends_with_the_weights_of_a_whole_run(
    tmp_path,
):
    """Fine-tuning stops on SIGTERM (exit 75), then on Ctrl-C (exit 130), as training does,
    each time at a checkpointed step the same command resumes from."""
    from tf_mlstm.train import run_errors  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import finetune  # pylint: disable=g-import-not-at-top

    settings = _finetune_settings(
        tmp_path, max_steps=40, checkpoint_every_steps=4, log_every_steps=1
    )
    command = [sys.executable, "-m", "tf_mlstm.cli.finetune"]
    command += [f"--{name}={value}" for name, value in settings.items()]
    model_dir = tmp_path / "run"
    stop_step = 0
    for signum, status, stopped in (
        (signal.SIGTERM, run_errors.EXIT_PREEMPTED, _STOPPED),
        (signal.SIGINT, run_errors.EXIT_INTERRUPTED, _INTERRUPTED),
    ):
        due = (stop_step // 4 + 1) * 4
        checkpoint = model_dir / "checkpoints" / f"ckpt-{due}.index"
        log = tmp_path / f"stopped-{signum}.txt"
        code, first = signal_when(command, checkpoint, log, 120, signum)
        assert code == status, first[-3000:]
        assert "Traceback" not in first and "KeyboardInterrupt" not in first
        if stop_step:
            assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{stop_step}'}" in first
            assert min(int(s) for s in _LOGGED_STEP.findall(first)) == stop_step + 1
        ((worker, stop_step),) = {m.groups() for m in stopped.finditer(first)}
        stop_step = int(stop_step)
        assert worker == "0" and due <= stop_step < 40
        assert _latest_checkpoint_step(model_dir) == stop_step
        assert not (model_dir / "results.json").exists()

    resumed = _forkserver.run(
        command, capture_output=True, text=True, cwd=REPO, env=_env(), timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{stop_step}'}" in resumed.stderr
    assert "input restarts" not in resumed.stderr
    assert min(int(s) for s in _LOGGED_STEP.findall(resumed.stderr)) == stop_step + 1
    # Nothing lost: the weights of a run never stopped (in-process: the same settings).
    config = finetune.FinetuneConfig(**settings).validate()
    whole = tf_mlstm.finetune(dataclasses.replace(config, model_dir=str(tmp_path / "whole")))
    results = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert results["step"] == whole["step"] == 40
    assert results["weights_sha256"] == whole["weights_sha256"]


@pytest.mark.slow
def test_sigterm_to_one_of_two_workers_stops_both_at_the_same_step_with_nothing_lost(
    tmp_path, data_dir
):
    import local_cluster  # pylint: disable=g-import-not-at-top

    from tf_mlstm.train import run_errors  # pylint: disable=g-import-not-at-top

    model_dir = tmp_path / "run"
    # Room for the stop: the signal comes as step 10's checkpoint appears (the stop
    # lands a few steps later), and a shorter run costs less CPU for the three launches.
    max_steps = 80

    def launch(name, run_dir=model_dir):
        command = _preemption_flags(run_dir, data_dir, max_steps) + [
            "--distribution_strategy=multi_worker"
        ]
        ports = local_cluster.pick_ports(2)
        procs, logs = [], []
        for index in range(2):
            path = tmp_path / f"{name}-{index}.txt"
            with open(path, "w") as log:
                env = local_cluster.worker_env(ports, index, 1, _env())
                procs.append(_forkserver.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log))
            logs.append(path)
        return procs, logs

    procs, logs = launch("first")
    try:
        _wait_for(model_dir / "checkpoints" / "ckpt-10.index", procs)
        procs[1].send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    texts = [path.read_text(errors="replace") for path in logs]
    assert codes == [run_errors.EXIT_PREEMPTED] * 2, texts[0][-3000:] + texts[1][-3000:]
    stops = [{m.groups() for m in _STOPPED.finditer(text)} for text in texts]
    assert len(stops[0]) == len(stops[1]) == 1, stops
    (_, step_0), (_, step_1) = stops[0].pop(), stops[1].pop()
    stop_step = int(step_0)
    assert step_0 == step_1 and 10 <= stop_step < max_steps
    assert "Traceback" not in texts[0] + texts[1]
    assert "crashed" not in texts[0] + texts[1]
    assert _latest_checkpoint_step(model_dir) == stop_step
    for worker in range(2):
        assert (model_dir / "carried_state" / f"worker-{worker}-step-{stop_step}.tensor").exists()

    codes, texts = wait_for(*launch("second"), timeout=300)
    assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
    chief = texts[0]
    assert f"Resumed from {model_dir / 'checkpoints' / f'ckpt-{stop_step}'}" in chief
    both = texts[0] + texts[1]
    assert "restarts from zeros" not in both and "input restarts" not in both
    # Zero steps lost: the relaunch starts right after the stop step.
    assert min(int(s) for s in _LOGGED_STEP.findall(chief)) == stop_step + 1
    results = json.loads((model_dir / "results.json").read_text())
    assert results["step"] == max_steps
    # Nothing lost means the weights of a run that was never stopped, to the bit.
    codes, texts = wait_for(*launch("whole", tmp_path / "whole"), timeout=300)
    assert codes == [0, 0], texts[0][-3000:] + texts[1][-3000:]
    reference = json.loads((tmp_path / "whole" / "results.json").read_text())
    assert results["weights_sha256"] == reference["weights_sha256"]


# === Non-finite steps in every precision and task: skipped, counted, weights finite ===


def _poison_loss(task):
    """Makes the task's loss NaN while the returned variable holds NaN.

    Its gradients are then NaN while the weights stay finite (a bad batch,
    not a broken model), in whatever precision the step computes.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    poison = tf.Variable(1.0, trainable=False, name="poison")
    loss = task.loss

    def poisoned(batch, state):
        value, stats, state = loss(batch, state)
        return value * poison, stats, state

    task.loss = poisoned
    return poison


def _language_model_task(tmp_path, data_dir, precision, **overrides):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top

    config = TrainConfig(
        **{**TINY, "precision": precision, "max_steps": 4, **overrides},
        model_dir=str(tmp_path / "run"),
        train_data=data_dir,
    ).validate()
    return LanguageModelTask(config, tfrecord.split_files(data_dir, "train"), []), config


def _finetune_settings(tmp_path, **overrides):
    """Fine-tuning settings of a tiny random model on 16 texts, as flag values by name."""
    init, _ = write_untrained_model_dir(tmp_path / "init", hidden_size=8, embedding_size=4)
    texts = tmp_path / "train.jsonl"
    rows = [{"text": f"text {i} was good", "label": i % 2} for i in range(16)]
    texts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    values = dict(
        init_model_dir=str(init),
        train_data=str(texts),
        validation_data=str(texts),
        model_dir=str(tmp_path / "run"),
        batch_size=4,
        max_length=16,
        max_steps=4,
        precision="float32",
        jit_compile="false",
    )
    values.update(overrides)
    return values


def _finetune_task(tmp_path, data_dir, precision):
    del data_dir
    from tf_mlstm.tasks import finetune as finetune_task  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import finetune  # pylint: disable=g-import-not-at-top

    config = finetune.FinetuneConfig(**_finetune_settings(tmp_path, precision=precision))
    config = config.validate()
    return finetune_task.FinetuneTask(config), config


@pytest.mark.parametrize(
    "make_task, precision",
    [
        (_language_model_task, "mixed_bfloat16"),
        (_finetune_task, "float32"),
        (_finetune_task, "mixed_bfloat16"),
    ],
    ids=["language_model-mixed_bfloat16", "finetune-float32", "finetune-mixed_bfloat16"],
)
def test_a_non_finite_step_is_skipped_and_counted_and_the_weights_stay_finite(
    tmp_path, data_dir, make_task, precision
):
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    task, config = make_task(tmp_path, data_dir, precision)
    poison = _poison_loss(task)
    trainer = Runner(task, config)
    assert not trainer.restore()
    assert trainer.train_step()[3]  # a finite step first: the optimizer has moments
    poison.assign(float("nan"))
    weights = _assert_a_skipped_step(trainer)

    # The next good batch is applied as usual, to finite weights.
    poison.assign(1.0)
    assert trainer.train_step()[3]
    assert int(trainer.optimizer.iterations.numpy()) == 2 and int(trainer.skipped.numpy()) == 1
    after = _snapshot(trainer.model.weights)
    assert all(np.isfinite(w.astype(np.float32)).all() for w in after)
    assert any(not np.array_equal(old, new) for old, new in zip(weights, after))


# === A budget-planned schedule resumes with its plan ===


def _planner_of_a_budget_ending_at_step_12(schedules):
    """The real `BudgetPlanner`, on a clock where each step takes one second and the
    budget ends 12 s after step 0, settling for 2 steps at the start of each launch."""

    class Planner(schedules.BudgetPlanner):
        def __init__(self, max_steps, deadline, **kwargs):
            del deadline
            super().__init__(max_steps, 12.0, settle_steps=2, margin=0.0, **kwargs)

        def plan(self, step, now=None):
            del now
            return super().plan(step, now=float(step))

    return Planner


def _train_in_process(model_dir, data_dir, **settings):
    """Trains the tiny model in this process; returns the runner and its results."""
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    config = TrainConfig(
        **TINY, model_dir=str(model_dir), train_data=data_dir, **settings
    ).validate()
    files = tfrecord.split_files(data_dir, "train")
    trainer = Runner(LanguageModelTask(config, files, []), config)
    return trainer, trainer.train()


def test_a_budget_planned_schedule_resumes_with_its_plan(tmp_path, data_dir, monkeypatch):
    """The decay's planned end and progress are checkpointed and hold while the resumed
    launch measures its own rate: stopped at step 10, inside the cool-down, and resumed,
    the run ends with the rate and weights of one never stopped."""
    from tf_mlstm.train import schedules  # pylint: disable=g-import-not-at-top

    monkeypatch.setattr(
        schedules, "BudgetPlanner", _planner_of_a_budget_ending_at_step_12(schedules)
    )

    def train(name, max_steps):
        return _train_in_process(
            tmp_path / name,
            data_dir,
            max_steps=max_steps,
            total_steps=40,
            warmup_steps=2,
            max_minutes=60,
            schedule_length="budget",
        )

    _, whole = train("whole", 12)
    # The plan moved the decay's end from 40 to 12: the rate is down near zero.
    assert whole["schedule_steps"] == 12 and whole["final_learning_rate"] < 0.1 * TrainConfig().lr
    # The last 2 of 10 updates after warmup cool down to the end (cooldown_fraction 0.2):
    # steps 11 and 12, the first two of the resumed launch, which it spends settling.
    stopped, first = train("run", 10)
    assert first["step"] == 10 and first["schedule_steps"] == 12
    assert 0 < float(stopped.plan.progress.numpy()) < 1
    _, resumed = train("run", 12)
    assert resumed["schedule_steps"] == 12
    assert resumed["final_learning_rate"] == whole["final_learning_rate"]
    assert resumed["weights_sha256"] == whole["weights_sha256"]


# === A checkpoint without a worker's state beside it ===


@pytest.mark.slow
def test_a_checkpoint_without_its_workers_state_resumes_from_the_newest_one_with_it(
    tmp_path, data_dir, caplog
):
    """The newest checkpoint lacks this worker's carried state (a folder saved before
    the commit waited for every worker, or a file lost): the run resumes from the newest
    checkpoint with every worker's state and ends with the weights of one never stopped."""

    def train(name, max_steps):
        return _train_in_process(tmp_path / name, data_dir, max_steps=max_steps, total_steps=6)[1]

    whole = train("whole", 6)
    train("run", 4)
    (tmp_path / "run" / "carried_state" / "worker-0-step-4.tensor").unlink()
    with caplog.at_level(logging.WARNING):
        resumed = train("run", 6)
    assert (
        "Checkpoint ckpt-4 lacks the carried state or input position of 1 of the 1 worker(s): "
        "resuming from ckpt-2, the newest with every worker's state." in caplog.text
    )
    assert "restarts" not in caplog.text
    assert resumed["weights_sha256"] == whole["weights_sha256"]


# === The progress line's ETA across evaluation pauses ===


@pytest.mark.slow
def test_the_eta_leaves_evaluation_pauses_out_of_the_rate_and_counts_those_ahead(
    tmp_path, data_dir, monkeypatch, caplog
):
    """A periodic evaluation of 3 s at steps 3 and 6 of 8 (the steps themselves take
    milliseconds): every progress line after the first evaluation predicts the time the
    loop still takes, the second evaluation included. Before, the line after a pause
    counted the pause as step time (an ETA of 4 x 3 s at step 4) and the next forgot
    the evaluation ahead (0 s at step 5), as the ETA jumped from 2:49 to 0:07 in a run."""
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import runner as runner_lib  # pylint: disable=g-import-not-at-top

    pause_s = 3.0
    monkeypatch.setattr(
        LanguageModelTask, "periodic", lambda self: [(3, lambda step: time.sleep(pause_s))]
    )
    ended = []
    run_steps = runner_lib.Runner._run_steps

    def timed_run_steps(self, *args, **kwargs):
        try:
            return run_steps(self, *args, **kwargs)
        finally:
            ended.append(time.time())

    monkeypatch.setattr(runner_lib.Runner, "_run_steps", timed_run_steps)
    # No checkpoint inside the loop: the first save's set-up time would blur the check.
    config = TrainConfig(
        **dict(TINY, checkpoint_every_steps=100),
        model_dir=str(tmp_path / "run"),
        train_data=data_dir,
        max_steps=8,
    ).validate()
    files = tfrecord.split_files(data_dir, "train")
    with caplog.at_level(logging.INFO):
        runner_lib.Runner(LanguageModelTask(config, files, []), config).train()
    lines = {}
    for record in caplog.records:
        found = re.match(r"step (\d+)/8 .* ETA (\d+):(\d\d):(\d\d)$", record.getMessage())
        if found:
            step, hours, minutes, seconds = map(int, found.groups())
            lines[step] = (3600 * hours + 60 * minutes + seconds, ended[0] - record.created)
    assert sorted(lines) == list(range(1, 9))
    for step in range(4, 9):
        eta, left = lines[step]
        # The ETA is shown in whole seconds, cut down.
        assert left - 1.8 <= eta <= left + 0.8, f"step {step}: ETA {eta} s, {left:.2f} s left"
