"""Shared test helpers: small language models, tiny training configs, worker processes.

`tiny_trained_model_dir` trains one tiny model with the real `tf-mlstm-train`
binary (on the embedded demo corpus) once per test session, however many
test modules ask for it. `write_untrained_model_dir` writes a model folder
with random weights in a fraction of a second, and `random_model` builds one
in memory, for tests that only need the plumbing. `tiny_train_config` is a
training config a test runs in seconds; `run` runs a command with a time-out
that fails the test with the command's output; `wait_for` collects worker
processes; `run_without_tf_mlstm` runs a script the way a server would,
without tf_mlstm on the path.

Tiny runs pin `float32` and XLA off: left on `auto`, the precision and XLA
would follow the CPU, and the same test would walk other code on another
machine. Each precision and the XLA step have their own tests.
"""

import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import _forkserver
import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.config import TrainConfig
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.rundir import CHECKPOINT_SUBDIR
from tf_mlstm.rundir import CONFIG_FILE

REPO = pathlib.Path(__file__).resolve().parent.parent
# Pinned, so that what a tiny run exercises does not depend on the CPU.
PINNED_FLAGS = ("--precision=float32", "--jit_compile=false")
TINY_TRAIN_FLAGS = (
    *PINNED_FLAGS,
    "--max_steps=20",
    "--hidden_size=32",
    "--seq_length=32",
    "--batch_size=8",
    "--eval_every_steps=0",
    "--sample_every_steps=0",
)


def run(command, timeout, env=None, **kwargs):
    """`subprocess.run` with text output captured, from the repository root, TF logs quiet.

    A command that runs past `timeout` fails the test with one line naming it
    and the time-out, then the end of its output, instead of a bare
    `TimeoutExpired`.

    Args:
      command: the argument list.
      timeout: seconds; about five times what the command needs alone on 2 cores.
      env: extra environment variables over this process's.
      **kwargs: more `subprocess.run` arguments (`input`, `cwd`, ...).

    Returns:
      The `subprocess.CompletedProcess`.
    """
    kwargs.setdefault("cwd", REPO)
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    try:
        return _forkserver.run(
            command,
            capture_output=True,
            text=True,
            errors="replace",
            env=environment,
            timeout=timeout,
            **kwargs,
        )
    except subprocess.TimeoutExpired as expired:
        output = expired.stderr or expired.stdout or b""
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
        pytest.fail(
            f"{shlex.join(str(arg) for arg in command)[:300]} ran past its {timeout} s time-out; "
            f"its output ended:\n{output[-3000:]}",
            pytrace=False,
        )


# The shared tiny model: its folder once trained, or why it failed, so that a
# broken run fails each later user at once instead of training (or hanging) again.
_TRAINED = {}
# Seconds: it trains in about 20 s alone on 2 cores (start-up included).
TINY_TRAIN_TIMEOUT_S = 120


def train_command(model_dir, *flags):
    """The `tf-mlstm-train` command line for `model_dir` with `flags`."""
    return [sys.executable, "-m", "tf_mlstm.cli.train", f"--model_dir={model_dir}", *flags]


def sigterm_when(command, path, log, timeout):
    """`signal_when` with SIGTERM."""
    return signal_when(command, path, log, timeout, signal.SIGTERM)


def signal_when(command, path, log, timeout, signum):
    """Runs `command`, sends it `signum` as soon as `path` exists, waits for it to end.

    Args:
      command: the argument list (run from the repository root, TF logs quiet).
      path: a file whose appearance is the moment to send the signal (a
        checkpoint, results.json).
      log: the file the command's output goes to.
      timeout: seconds for `path` to appear, and again for the command to end.
      signum: the signal (SIGTERM, SIGINT).

    Returns:
      (exit status, the command's output).
    """
    path, log = pathlib.Path(path), pathlib.Path(log)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    with open(log, "w") as out:
        proc = _forkserver.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + timeout
            while not path.exists():
                assert proc.poll() is None, f"ended before {path.name}:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"no {path.name} within {timeout} s"
                time.sleep(0.01)
            proc.send_signal(signum)
            code = proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
    return code, log.read_text(errors="replace")


def tiny_trained_model_dir(tmp_path_factory):
    """Trains the tiny model once per session and returns its folder.

    Args:
      tmp_path_factory: pytest's session `tmp_path_factory`.

    Returns:
      A `pathlib.Path` holding config.json and checkpoints.

    Raises:
      pytest.fail.Exception: the training binary failed or ran past its
        time-out, now or at an earlier user in this session (its output is in
        the message).
    """
    if "error" in _TRAINED:
        pytest.fail(f"the shared tiny model failed earlier in this run: {_TRAINED['error']}")
    if "dir" not in _TRAINED:
        model_dir = tmp_path_factory.mktemp("tiny_model") / "run"
        try:
            done = run(train_command(model_dir, *TINY_TRAIN_FLAGS), timeout=TINY_TRAIN_TIMEOUT_S)
            if done.returncode:
                pytest.fail(f"tf-mlstm-train failed:\n{done.stdout}\n{done.stderr[-4000:]}")
        except pytest.fail.Exception as failure:
            _TRAINED["error"] = str(failure)[:4000]
            raise
        _TRAINED["dir"] = model_dir
    return _TRAINED["dir"]


def random_model(hidden_size=16, embedding_size=8, seed=0):
    """A built float32 `MLSTMLanguageModel` with seeded random weights."""
    keras.utils.set_random_seed(seed)
    model = MLSTMLanguageModel(hidden_size=hidden_size, embedding_size=embedding_size)
    model.build()
    return model


def write_untrained_model_dir(model_dir, hidden_size=16, embedding_size=8, seed=0):
    """Writes a model folder (config + checkpoint) with random weights.

    Args:
      model_dir: destination folder (created).
      hidden_size: mLSTM units.
      embedding_size: byte embedding width.
      seed: weight initialization seed.

    Returns:
      (model_dir as a `pathlib.Path`, the built float32 model).
    """
    model_dir = pathlib.Path(model_dir)
    config = TrainConfig(
        model_dir=str(model_dir), hidden_size=hidden_size, embedding_size=embedding_size
    )
    keras.utils.set_random_seed(seed)
    model = MLSTMLanguageModel.from_train_config(config, precision="float32")
    (model_dir / CHECKPOINT_SUBDIR).mkdir(parents=True, exist_ok=True)
    (model_dir / CONFIG_FILE).write_text(config.to_json())
    tf.train.Checkpoint(model=model).save(str(model_dir / CHECKPOINT_SUBDIR / "ckpt"))
    return model_dir, model


def tiny_train_config(model_dir, train_data, **overrides):
    """A validated `TrainConfig` of a tiny float32 model, no XLA, evaluation or samples.

    Args:
      model_dir: the run folder.
      train_data: a TFRecord folder (e.g. the `demo_tfrecords` fixture).
      **overrides: other `TrainConfig` fields.
    """
    values = dict(
        model_dir=str(model_dir),
        train_data=str(train_data),
        hidden_size=16,
        embedding_size=8,
        seq_length=16,
        batch_size=4,
        precision="float32",
        jit_compile="false",
        log_every_steps=1,
        eval_every_steps=0,
        sample_every_steps=0,
    )
    values.update(overrides)
    return TrainConfig(**values).validate()


def wait_for(procs, logs, timeout):
    """Waits up to `timeout` s for each process; kills what still runs after.

    Args:
      procs: `subprocess.Popen` objects.
      logs: the files their output went to.
      timeout: seconds to wait for each.

    Returns:
      (exit statuses, log texts).
    """
    try:
        codes = [proc.wait(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return codes, [pathlib.Path(path).read_text(errors="replace") for path in logs]


def run_without_tf_mlstm(script, args, cwd):
    """Runs `python -c script *args` in `cwd` with no PYTHONPATH; parses its last line.

    Args:
      script: Python source that prints one JSON object last.
      args: its command-line arguments.
      cwd: the folder it runs in (not the repository, so tf_mlstm cannot load).

    Returns:
      The JSON object of its last output line.

    Raises:
      AssertionError: the script failed (its stderr ends the message).
    """
    done = _forkserver.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=""),
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def openai_release_arrays(hidden=16, embedding=8, seed=0):
    """Random arrays in the layout of OpenAI's released byte mLSTM, by name."""
    rng = np.random.default_rng(seed)

    def normal(*shape, std=0.5):
        return (std * rng.normal(size=shape)).astype(np.float32)

    def gains(n):
        return rng.uniform(0.5, 1.5, size=n).astype(np.float32)

    return {
        "embedding": normal(256, embedding, std=1.0),
        "wx": normal(embedding, 4 * hidden),
        # Four different per-gate blocks, so a wrong gate order shows.
        "wh": [normal(hidden, hidden) for _ in range(4)],
        "wmx": normal(embedding, hidden),
        "wmh": normal(hidden, hidden),
        "b": normal(4 * hidden),
        "gx": gains(4 * hidden),
        "gh": gains(4 * hidden),
        "gmx": gains(hidden),
        "gmh": gains(hidden),
        "out_w": normal(hidden, 256),
        "out_b": normal(256),
    }


def write_openai_release(folder, arrays=None, seed=0):
    """Saves `arrays` (default: random ones) as the release's model/ folder, in its load order."""
    arrays = openai_release_arrays(seed=seed) if arrays is None else arrays
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ordered = [arrays["embedding"], arrays["wx"], *arrays["wh"]]
    ordered += [arrays[name] for name in ("wmx", "wmh", "b", "gx", "gh", "gmx", "gmh")]
    ordered += [arrays["out_w"], arrays["out_b"]]
    assert len(ordered) == 15
    for index, array in enumerate(ordered):
        np.save(folder / f"{index}.npy", array)
    return folder
