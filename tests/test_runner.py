"""Fault handling of the distributed runner: non-finite steps and bad float flags.

The runner serves language-model training and fine-tuning alike, so these
run it through `tf-mlstm-train` (the fine-tuning side is in
test_finetune.py).
"""

import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from tf_mlstm.train.config import TrainConfig

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
    from tf_mlstm.data import demo  # pylint: disable=g-import-not-at-top

    return demo.build_demo_tfrecords(str(tmp_path_factory.mktemp("data")))


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


@pytest.mark.parametrize(
    "name, value",
    [("lr", float("nan")), ("max_minutes", float("inf")), ("clip_norm", float("-inf"))],
)
def test_non_finite_float_flags_are_refused(name, value):
    from tf_mlstm.transfer.finetune import FinetuneConfig  # pylint: disable=g-import-not-at-top

    with pytest.raises(ValueError, match=rf"^--{name} must be a finite number, got {value}\.$"):
        TrainConfig(**{name: value}).validate()
    base = dict(init_model_dir="m", train_data="t", model_dir="o")
    with pytest.raises(ValueError, match=rf"^--{name} must be a finite number, got {value}\.$"):
        FinetuneConfig(**base, **{name: value}).validate()


def test_non_finite_flag_is_one_clear_line(tmp_path):
    command = [sys.executable, "-m", "tf_mlstm.cli.train", f"--model_dir={tmp_path}", "--lr=nan"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode != 0
    assert "--lr must be a finite number, got nan." in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_float32_nan_gradients_are_skipped_then_the_run_stops_with_a_clear_error(
    tmp_path, data_dir
):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import loop  # pylint: disable=g-import-not-at-top

    config = TrainConfig(
        **TINY, model_dir=str(tmp_path / "run"), train_data=data_dir, max_steps=4,
        max_nonfinite_steps=3,
    ).validate()
    files = tfrecord.split_files(data_dir, "train")
    trainer = loop.Trainer(config, files, [])
    assert trainer.train()["step"] == 4
    # A corrupted weight: every later gradient is NaN.
    kernel = trainer.model.mlstm.cell.weights[0]
    kernel.assign(np.where(np.arange(kernel.shape[-1]) == 0, np.nan, kernel.numpy()))
    trainer.manager.save(checkpoint_number=4)

    config = dataclasses.replace(config, max_steps=20)
    resumed = loop.Trainer(config, files, [])
    assert resumed.restore()
    weights, slots = _snapshot(resumed.model.weights), _snapshot(resumed.optimizer.variables)
    assert int(resumed.optimizer.iterations.numpy()) == 4
    stats, stop, norm, finite = resumed.train_step()
    assert not finite and not np.isfinite(norm) and not stop
    # A true skip: weights, Adam moments and iterations as they were.
    _assert_unchanged(weights, resumed.model.weights)
    _assert_unchanged(slots, resumed.optimizer.variables)
    assert int(resumed.optimizer.iterations.numpy()) == 4
    assert int(resumed.step.numpy()) == 5 and int(resumed.skipped.numpy()) == 1

    # The binary: three skipped steps in a row, then one clear line and exit 1;
    # the checkpoints due at steps 6 are not written (they would rotate good ones out).
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-m", "tf_mlstm.cli.train", *_flags(config)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert re.search(
        r"training diverged: 3 non-finite steps in a row \(steps 5 to 7, "
        r"--max_nonfinite_steps=3\); no update was applied and the last checkpoint \(ckpt-4\)",
        proc.stderr,
    ), proc.stderr[-3000:]
    assert "step 5: non-finite gradients" in proc.stderr
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.index"))
    assert checkpoints == ["ckpt-2.index", "ckpt-4.index"]
    assert not (tmp_path / "run" / "export").exists()
