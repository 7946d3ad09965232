"""tools/gpu_check.py on a CPU at tiny sizes: one JSON summary whose checks are really evaluated."""

import json
import os
import pathlib
import sys

import _forkserver
import numpy as np
import pytest

from tf_mlstm.auto import hardware

REPO = pathlib.Path(__file__).resolve().parent.parent
GPU_CHECK = REPO / "tools" / "gpu_check.py"
# XLA off: compiling five tiny steps would only add minutes on a small CPU.
TINY = (
    "--hidden=16",
    "--batch=4",
    "--seq=16",
    "--steps=2",
    "--warmup=1",
    "--jit_compile=false",
    "--featurize_batch=8",
    "--featurize_texts=16",
    "--featurize_passes=1",
    "--check_hidden=16",
    "--check_batch=4",
    "--check_seq=16",
    "--check_steps=2",
    "--demo_steps=40",
    "--demo_hidden=32",
    "--demo_batch=8",
    "--demo_seq=32",
)


def _run(tmp_path, *flags):
    command = [sys.executable, str(GPU_CHECK), f"--work_dir={tmp_path}", *flags]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = _forkserver.run(
        command, capture_output=True, text=True, timeout=500, cwd=REPO, env=env, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, (done.stdout[-2000:], done.stderr[-3000:])
    return done, json.loads(lines[0])


@pytest.mark.slow
def test_every_check_runs_and_holds_on_a_cpu(tmp_path):
    done, summary = _run(tmp_path, *TINY, "--cpu_replicas=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert summary["passed"] is True and summary["failures"] == []
    assert summary["hardware"]["cpu_model"] == hardware.read_cpuinfo()[0]
    assert summary["hardware"]["gpus"] == []
    assert summary["memory_source"].startswith("process peak RSS")

    train = summary["train"]
    assert (train["hidden"], train["batch_per_replica"], train["seq"]) == (16, 4, 16)
    for precision in ("mixed_float16", "float32"):
        run = train[precision]
        assert run["chars_per_s"] > 0 and run["peak_memory_mb"] > 0 and run["timed_steps"] == 2
        assert run["step_ms"] == pytest.approx(1e3 * 4 * 16 / run["chars_per_s"])
    assert train["mixed_float16"]["loss_scale"] > 0  # dynamic loss scaling was on
    assert train["float32"]["loss_scale"] is None
    assert train["speedup"] == pytest.approx(
        train["mixed_float16"]["chars_per_s"] / train["float32"]["chars_per_s"]
    )
    featurize = summary["featurize"]
    assert featurize["chars_per_s"] > 0 and featurize["texts"] == 16

    # Two logical CPU devices under MirroredStrategy against one device, same global batch.
    mirrored = summary["mirrored"]
    assert mirrored["replicas"] == 2 and mirrored["global_batch"] == 8
    assert mirrored["max_abs_weight_diff"] <= mirrored["tolerance"] == 1e-5
    assert mirrored["weights_equal"] is True
    # Adam hides a gradient off by a constant factor; the logged norms would not.
    assert len(mirrored["grad_norms"]["mirrored"]) == 2
    np.testing.assert_allclose(
        mirrored["grad_norms"]["mirrored"], mirrored["grad_norms"]["one_device"], rtol=1e-4
    )
    assert mirrored["max_grad_norm_rel_diff"] <= mirrored["grad_norm_rtol"] == 1e-4
    assert mirrored["grad_norms_equal"] is True

    demo = summary["demo"]
    assert demo["steps"] == 40 and demo["precision"] == "mixed_float16"
    assert demo["loss_last_tenth"] < 0.9 * demo["loss_first_tenth"] and demo["loss_falls"]
    assert demo["loss_scaling"] and demo["loss_scale_min"] >= 1.0 and demo["loss_scale_ok"]
    assert demo["skipped_steps"] <= 2 and demo["skipped_ok"]


@pytest.mark.slow
def test_failed_checks_are_reported_and_exit_nonzero(tmp_path):
    # Demands no run can meet: the loss must fall to 1% and the scale stay >= 1e9.
    done, summary = _run(
        tmp_path,
        *TINY,
        "--checks=demo",
        "--demo_steps=10",
        "--loss_drop=0.01",
        "--min_loss_scale=1e9",
    )
    assert done.returncode == 1
    assert summary["passed"] is False
    assert summary["failures"] == [
        "demo loss did not fall",
        "demo loss scale non-finite or collapsing",
    ]
    assert set(summary) >= {"demo", "hardware"} and "train" not in summary
    assert summary["demo"]["loss_scale_min"] < 1e9


def test_bad_flags_are_one_clear_line(tmp_path):
    command = [sys.executable, str(GPU_CHECK), "--checks=train,speed"]
    done = _forkserver.run(
        command, capture_output=True, text=True, timeout=300, cwd=REPO, check=False
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "--checks: unknown ['speed']" in done.stderr
    done = _forkserver.run(
        [sys.executable, str(GPU_CHECK), "--demo_steps=5"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert "--demo_steps must be >= 10" in done.stderr
