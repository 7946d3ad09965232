"""tf-mlstm-train end to end: outputs, exact resume after SIGKILL, budgets."""

import dataclasses
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from tf_mlstm.train.config import TrainConfig

REPO = pathlib.Path(__file__).resolve().parent.parent
TINY = [
    "--hidden_size=32",
    "--embedding_size=16",
    "--seq_length=32",
    "--batch_size=8",
    "--eval_every_steps=0",
    "--sample_every_steps=0",
    "--log_every_steps=1",
    "--checkpoint_every_steps=4",
    "--total_steps=16",
]
_STEP_LINE = re.compile(r"step (\d+)/\d+\s+loss ([0-9.]+)")


def _train_cmd(model_dir, *extra):
    return [sys.executable, "-m", "tf_mlstm.cli.train", f"--model_dir={model_dir}", *TINY, *extra]


def _run(cmd, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=REPO, errors="replace")
    return proc


def _losses(log):
    return {int(m.group(1)): float(m.group(2)) for m in _STEP_LINE.finditer(log)}


def test_demo_flagfile_states_the_defaults():
    defaults = dataclasses.asdict(TrainConfig())
    for line in (REPO / "flags" / "demo.flags").read_text().splitlines():
        if line.startswith("--"):
            name, value = line[2:].split("=", 1)
            want = defaults[name]
            assert str(want) == value or (isinstance(want, float) and float(value) == want), name


def test_bad_flag_is_one_clear_line(tmp_path):
    proc = _run(_train_cmd(tmp_path / "m", "--precision=float64"))
    assert proc.returncode != 0
    assert "--precision" in proc.stderr and "Traceback" not in proc.stderr
    proc = _run(_train_cmd(tmp_path / "m", "--train_data=" + str(tmp_path / "nothing")))
    assert proc.returncode != 0
    assert "no train TFRecord files match" in proc.stderr and "Traceback" not in proc.stderr


def _checkpoint_steps(model_dir):
    return sorted(int(p.name[len("ckpt-") : -len(".index")])
                  for p in (model_dir / "checkpoints").glob("ckpt-*.index"))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_train_writes_everything_and_resumes_exactly_after_sigkill(tmp_path, precision):
    """Killed at a checkpoint with steps left, the same command ends with identical weights.

    The carried recurrent state is saved in the compute dtype, so this holds
    for 16-bit states too.
    """
    whole = _run(_train_cmd(tmp_path / "whole", "--max_steps=16", f"--precision={precision}"))
    assert whole.returncode == 0, whole.stderr[-3000:]
    reference = _losses(whole.stderr)
    assert sorted(reference) == list(range(1, 17))

    model_dir = tmp_path / "whole"
    results = json.loads((model_dir / "results.json").read_text())
    assert results["step"] == 16 and results["validation_bits_per_char"] > 0
    config = json.loads((model_dir / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["precision"] == precision
    assert (model_dir / "export" / "saved_model.pb").exists()
    assert list((model_dir / "train").glob("events.out.tfevents.*"))
    assert '"validation_bits_per_char"' in whole.stdout.splitlines()[-1]
    assert not (model_dir / "run.lock").exists()

    # The same run with a budget it cannot reach (the schedule is fixed by
    # --total_steps), killed as soon as its first checkpoint is written: it
    # always has steps left, and the kill lands at a checkpoint boundary or
    # within the next interval.
    killed_dir = tmp_path / "killed"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(
        _train_cmd(killed_dir, "--max_steps=1000000", f"--precision={precision}"),
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not _checkpoint_steps(killed_dir) and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = _checkpoint_steps(killed_dir)
    assert saved and max(saved) < 16, f"checkpoints at the kill: {saved}"
    assert (killed_dir / "run.lock").exists()  # the killed chief never released it

    resumed = _run(_train_cmd(killed_dir, "--max_steps=16", f"--precision={precision}"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resumed from {killed_dir / 'checkpoints'}/ckpt-{max(saved)}" in resumed.stderr
    assert "Taking over the lock" in resumed.stderr
    assert "--max_steps 1000000 -> 16" in resumed.stderr
    assert "restarts from zeros" not in resumed.stderr
    after = _losses(resumed.stderr)
    assert min(after) == max(saved) + 1 and max(after) == 16
    for step, loss in after.items():
        assert loss == pytest.approx(reference[step], abs=2e-4), step
    # Same data position, same carried state, same weights: bit-identical.
    final = json.loads((killed_dir / "results.json").read_text())
    assert final["step"] == 16 and final["weights_sha256"] == results["weights_sha256"]


@pytest.mark.slow
def test_time_budget_stops_cleanly_then_evaluates_and_exports(tmp_path):
    proc = _run(_train_cmd(tmp_path / "m", "--max_steps=100000", "--max_minutes=0.15"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "m" / "results.json").read_text())
    assert results["stopped_by"] == "time" and 0 < results["step"] < 100000
    assert "validation_bits_per_char" in results
    assert (tmp_path / "m" / "export" / "saved_model.pb").exists()
