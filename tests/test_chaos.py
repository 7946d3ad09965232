"""A short seeded schedule of faults through tools/chaos.py, on every CI run.

Two training workers through the local launcher, each launch meeting one
fault at a random or named moment, relaunched until the run finishes; the
tool's checker must find the weights, every step's loss, the run folder and
every exit as an uninterrupted run's. docs/reliability.md reports a long run.
"""

import io
import os
import pathlib
import random
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import chaos  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

_TINY = [
    "--distribution_strategy=multi_worker",
    "--hidden_size=16",
    "--embedding_size=8",
    "--seq_length=16",
    "--batch_size=4",
    "--precision=float32",
    "--jit_compile=false",
    "--eval_every_steps=0",
    "--sample_every_steps=0",
    "--checkpoint_every_steps=3",
    "--max_steps=45",
]


def test_the_seeded_schedule_is_the_same_for_the_same_seed_and_mixes_every_kind():
    kinds = ("signal", "failpoint", "damage")
    first = chaos.schedule(random.Random(0), 4, 2, kinds, 16.0)
    assert first == chaos.schedule(random.Random(0), 4, 2, kinds, 16.0)
    # What the suite's run below meets: faults inside checkpoints, on the launcher and a
    # worker, a damaged checkpoint, a signal at a random moment.
    assert [f.describe() for f in first[:3]] == [
        "SIGKILL to the launcher at checkpoint-commit #3",
        "SIGKILL to the worker 0 at checkpoint-saved #2",
        "the newest checkpoint cut short before the launch",
    ]
    assert first[3].kind == "signal" and 1.6 <= first[3].delay_s <= 16.0
    many = chaos.schedule(random.Random(1), 200, 2, chaos.KINDS, 10.0)
    assert {f.kind for f in many} == set(chaos.KINDS)
    assert {f.moment for f in many if f.kind == "failpoint"} == set(chaos.failpoints.MOMENTS)
    signals = [f for f in many if f.kind in ("signal", "failpoint")]
    assert {f.target for f in signals} == {"launcher", "worker 0", "worker 1"}
    assert {f.action for f in signals} == {"kill", "term", "int"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kinds": ("signal", "flood")}, "kinds must be among"),
        ({"kinds": ("disk",)}, "give disk_mb"),
        ({"command": ["tf-mlstm-train", "--model_dir=x"]}, "leave it out"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path, kwargs, message):
    arguments = {"command": ["tf-mlstm-train"], "output_dir": str(tmp_path), **kwargs}
    with pytest.raises(chaos.errors.InvalidValueError, match=message):
        chaos.run_chaos(**arguments)


@pytest.mark.slow
def test_a_short_schedule_of_faults_ends_with_the_weights_of_a_run_never_stopped(
    tmp_path, demo_tfrecords
):
    command = [sys.executable, "-m", "tf_mlstm.cli.train", f"--train_data={demo_tfrecords}"]
    out = io.StringIO()
    report = chaos.run_chaos(
        [*command, *_TINY],
        tmp_path / "chaos",
        faults=4,
        seed=0,
        num_workers=2,
        kinds=("signal", "failpoint", "damage"),
        grace_s=30,  # the launcher's default: workers stopping on a busy machine
        launch_timeout_s=240,
        out=out,
    )
    printed = out.getvalue()
    assert report["ok"], printed
    assert all(report["checks"].values()), printed
    # The checkpoint faults come before the run can finish: at least those three land.
    assert report["injected"] >= 3, printed
    assert report["survived"] == report["injected"], printed
    assert printed.count("\nfault ") + printed.startswith("fault ") == 4, printed
    assert "faults injected" in printed.splitlines()[-7]
    assert (tmp_path / "chaos" / "chaos.json").exists()


@pytest.mark.parametrize(
    "fault, status, text, verdict",
    [
        (chaos.Fault("signal", "kill", "launcher"), -9, "", "ok"),
        (chaos.Fault("signal", "kill", "worker 1"), 137, "", "ok"),
        (chaos.Fault("signal", "term", "process"), 75, "", "ok"),
        # Death by SIGTERM only once training ended (the results, the export).
        (chaos.Fault("signal", "term", "process"), 143, "", "status 143, documented [75]"),
        (chaos.Fault("signal", "term", "process"), -15, "I1 runner.py:1] step 9/9  loss 2", "ok"),
        (chaos.Fault("signal", "int", "process"), 130, "", "ok"),
        (chaos.Fault("signal", "int", "process"), 75, "", "status 75, documented [-2, 130]"),
        # Ctrl-C to one worker: the other, which got no signal, may end first with 75.
        (chaos.Fault("failpoint", "int", "worker 1"), 75, "", "ok"),
        (chaos.Fault("disk"), 1, "", "ok"),
        (chaos.Fault("disk"), 1, "Traceback (most recent call last):\n", "a traceback"),
        # A launch that ended before its fault came: a whole run, status 0.
        (chaos.Fault("signal", "kill", "process", reached=False), 0, "", "ok"),
    ],
)
def test_every_exit_is_held_to_the_status_its_fault_documents(fault, status, text, verdict):
    assert chaos._verdict(fault, status, text) == verdict


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounts need root")
def test_the_full_disk_s_run_folder_keeps_its_files_when_the_tmpfs_is_unmounted(tmp_path):
    """The run folder lives on a tmpfs while disk faults are drawn; the finished run
    (and what the checker found in it) must stay where it was once the tmpfs goes."""
    run_dir = tmp_path / "run"
    disk = chaos._Disk(run_dir, 4)  # pylint: disable=protected-access
    assert os.path.ismount(run_dir)
    (run_dir / "checkpoints").mkdir()
    (run_dir / "checkpoints" / "ckpt-3.index").write_bytes(b"weights")
    disk.fill()
    disk.unmount()
    assert not os.path.ismount(run_dir)
    assert (run_dir / "checkpoints" / "ckpt-3.index").read_bytes() == b"weights"
    assert not (run_dir / ".chaos-ballast").exists()
