"""The stop signals' handler (tf_mlstm/train/stop_signals.py), in a bare interpreter.

The end-to-end behaviour (a checkpoint of the stop step, exit 75 or 130, an
exact resume) is proven through the binaries in test_runner.py; here the
parts a run cannot time deterministically: a second Ctrl-C while the main
thread is busy, what is restored afterwards, a late signal passed on.
"""

import importlib
import logging
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import _forkserver
import pytest

from tf_mlstm.cli import _main
from tf_mlstm.train import stop_signals

REPO = pathlib.Path(__file__).resolve().parent.parent

# Ctrl-C once (recorded, the process goes on), then again while the main
# thread is inside a long call: the process must end at once.
_TWICE = """
import os, signal, sys, time
from tf_mlstm.train import stop_signals

signals = stop_signals.StopSignals()
with signals.caught():
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 10
    while not signals.requested and time.monotonic() < deadline:
        time.sleep(0.01)
    print("first:", signals.received, flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(20)
print("still running", flush=True)
"""


def test_a_second_ctrl_c_ends_the_process_at_once_with_one_line():
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    start = time.monotonic()
    done = _forkserver.run(
        [sys.executable, "-c", textwrap.dedent(_TWICE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.stdout == f"first: {int(signal.SIGINT)}\n", done.stdout + done.stderr
    assert done.returncode == stop_signals.EXIT_INTERRUPTED == 130, done.stderr
    assert done.stderr == stop_signals.ABORT_LINE + "\n"
    assert time.monotonic() - start < 10


def test_outside_training_the_process_keeps_its_own_handlers():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signals = stop_signals.StopSignals()
    with signals.caught():
        assert signal.getsignal(signal.SIGINT) == signal.getsignal(signal.SIGTERM)
        assert signal.getsignal(signal.SIGINT) not in before.values()
    assert {sig: signal.getsignal(sig) for sig in before} == before
    # The wakeup descriptor is back to none.
    assert signal.set_wakeup_fd(-1) == -1


def test_an_ignored_ctrl_c_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_signals.StopSignals().caught():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    "signum, name, status",
    [(signal.SIGTERM, "SIGTERM", 75), (signal.SIGINT, "Ctrl-C (SIGINT)", 130)],
)
def test_a_signal_is_recorded_once_and_reported_with_its_status(signum, name, status):
    # What the process would do without the handler is recorded instead (not a
    # KeyboardInterrupt in the test process).
    seen = []
    previous = {
        sig: signal.signal(sig, lambda number, frame: seen.append(number))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        signals = stop_signals.StopSignals()
        with signals.caught():
            signal.raise_signal(signum)
            signal.raise_signal(signal.SIGTERM)  # a later one does not replace it
            assert signals.received == signum
            assert signals.acted_on() == (name, status)
            assert not signals.requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert seen == []
    # A worker that stopped because a peer got the signal exits 75.
    assert signals.acted_on() == (stop_signals.PEER_SIGNAL, 75)


def test_a_signal_no_step_acted_on_is_passed_on_when_training_returns():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        signals = stop_signals.StopSignals()
        with signals.caught():
            signal.raise_signal(signal.SIGTERM)
        assert seen == []
        signals.deliver_late()
        assert seen == [signal.SIGTERM]
        signals.deliver_late()  # once
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_ctrl_c_in_any_binary_is_one_line_and_status_130(caplog):
    def interrupted(_):
        raise KeyboardInterrupt

    caplog.set_level(logging.INFO)
    with pytest.raises(SystemExit) as stop:
        _main.run_body(interrupted, None)
    assert stop.value.code == 130
    assert [r.getMessage() for r in caplog.records] == [
        "interrupted (Ctrl-C): stopped (exit status 130)."
    ]


def test_after_training_began_sigterm_is_the_default_again():
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop_signals.stop_until_training()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        with stop_signals.StopSignals().caught():
            pass
        # The final results and the export end by the signal, as documented.
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_cluster_s_worker_holds_sigterm_during_start_up_until_training_reads_it(capfd):
    """A worker of a cluster does not leave on SIGTERM before training (a peer may wait in
    TensorFlow's rendezvous for it): one line says it is held, and training reads it."""
    cluster = {"TF_CONFIG": '{"cluster": {"worker": ["h0:1", "h1:1"]}, "task": {}}'}
    previous = signal.getsignal(signal.SIGTERM)
    try:
        stop_signals.stop_until_training(cluster)
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # one line, however many come
        assert capfd.readouterr().err.splitlines() == [stop_signals.HOLD_LINE]
        signals = stop_signals.StopSignals()
        with signals.caught():
            assert signals.requested
            assert signals.acted_on() == ("SIGTERM", 75)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        stop_signals.stop_until_training(cluster)  # a second run in the same process
        later = stop_signals.StopSignals()
        with later.caught():
            assert not later.requested  # the held signal was read once
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize(
    "environ, cluster",
    [
        ({}, False),
        ({"TF_CONFIG": '{"cluster": {"chief": ["h0:1"], "worker": ["h1:1"]}}'}, True),
        ({"TF_CONFIG": '{"cluster": {"worker": ["h0:1"]}}'}, False),
        ({"TF_CONFIG": "not json"}, False),
        ({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}, True),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, False),
    ],
)
def test_a_cluster_is_told_from_the_environment(environ, cluster):
    assert stop_signals.in_a_cluster(environ) is cluster


@pytest.mark.parametrize("binary", ["train", "finetune"])
def test_the_training_binaries_stop_on_sigterm_from_their_first_moment(monkeypatch, binary):
    module = importlib.import_module(f"tf_mlstm.cli.{binary}")
    seen = []
    monkeypatch.setattr(
        _main, "run_binary", lambda *args, **kwargs: seen.append(signal.getsignal(signal.SIGTERM))
    )
    previous = signal.getsignal(signal.SIGTERM)
    try:
        module.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == [stop_signals._stop_now]


def _catches_sigterm(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def _loads_tensorflow(pid):
    return "tensorflow" in pathlib.Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize(
    "moment", [_catches_sigterm, _loads_tensorflow], ids=["first", "tf-import"]
)
def test_sigterm_in_a_training_binarys_first_moments_is_one_line_and_status_75(tmp_path, moment):
    """A scheduler's SIGTERM while `tf-mlstm-train` still starts (TensorFlow's import,
    the config): status 75 and one line, not death by the signal. A fresh interpreter, as
    a scheduler starts it: a fork of a warm one would have TensorFlow imported already.
    Linux: the handler's presence is read from /proc."""
    flags = [f"--model_dir={tmp_path / 'run'}", "--max_steps=2", "--hidden_size=8"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tf_mlstm.cli.train", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    # As soon as it catches SIGTERM (its first line), or once TensorFlow's import runs
    # (with stderr on /dev/null: the line must still be seen).
    deadline = time.monotonic() + 60
    while not (_catches_sigterm(proc.pid) and moment(proc.pid)):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == stop_signals.EXIT_PREEMPTED == 75, err[-3000:]
    assert err.strip().splitlines() == [stop_signals.START_UP_LINE], err[-3000:]
    assert not (tmp_path / "run").exists()
