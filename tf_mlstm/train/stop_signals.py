"""The signals that stop a training run: SIGTERM (75) and Ctrl-C (130), after a checkpoint.

No TensorFlow here: tests check it in a bare interpreter.
"""

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator

from tf_mlstm import _quiet as quiet

# Exit status of a run stopped by SIGTERM after its checkpoint (sysexits.h
# EX_TEMPFAIL: a temporary condition, relaunching resumes).
EXIT_PREEMPTED = 75
# Exit status of a run stopped by Ctrl-C (after its checkpoint, or at once on
# a second Ctrl-C): 128 + SIGINT, as a shell reports an interrupted command.
EXIT_INTERRUPTED = 128 + signal.SIGINT
# The signals that stop a run, each with the exit status and the name it is reported with.
STOP_SIGNALS = {
    signal.SIGTERM: (EXIT_PREEMPTED, "SIGTERM"),
    signal.SIGINT: (EXIT_INTERRUPTED, "Ctrl-C (SIGINT)"),
}
# What a worker reports when it stopped because another worker got the signal.
PEER_SIGNAL = "a stop signal to another worker"
START_UP_LINE = (
    "SIGTERM before training began: stopped at once, nothing of the run written yet "
    f"(exit status {EXIT_PREEMPTED}); the same command starts or resumes the run."
)
HOLD_LINE = (
    "SIGTERM during a cluster's start-up: this worker stops once every worker has joined, "
    f"before training (exit status {EXIT_PREEMPTED}); the same command starts or resumes the run."
)
ABORT_LINE = (
    "Ctrl-C again: stopped at once, without a checkpoint of this step (exit status "
    f"{EXIT_INTERRUPTED}); the same command resumes from the last checkpoint."
)


class StopSignals:
    """Catches the stop signals while a run trains.

    Attributes:
      received: the number of the first stop signal caught and not yet acted on, or None.

    Example:
    >>> import signal
    >>> from tf_mlstm.train.stop_signals import StopSignals
    >>> signals = StopSignals()
    >>> with signals.caught():
    ...     signal.raise_signal(signal.SIGTERM)  # the process goes on
    ...     signals.requested
    True
    >>> signals.acted_on()  # the name, and the exit status after the checkpoint
    ('SIGTERM', 75)
    """

    def __init__(self):
        self.received = None

    @property
    def requested(self) -> bool:
        """Whether a stop signal came that no step has acted on yet."""
        return self.received is not None

    @contextlib.contextmanager
    def caught(self) -> Iterator[None]:
        """While inside, a stop signal sets `received` instead of ending the process.

        Only on the main thread; a SIGINT the process was started to ignore stays ignored.
        """
        self.received = None
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {}
        for signum in STOP_SIGNALS:
            if signum == signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
                continue
            previous[signum] = signal.signal(signum, self._handle)
        if previous.get(signal.SIGTERM) is _hold and _HELD:
            self._handle(_HELD.pop())
        try:
            if signal.SIGINT in previous:
                with _second_interrupt_aborts():
                    yield
            else:
                yield
        finally:
            for signum, handler in previous.items():
                # Training has begun, so start-up is over: after it, the default.
                signal.signal(signum, signal.SIG_DFL if handler in (_stop_now, _hold) else handler)

    def _handle(self, signum, frame=None):
        del frame
        if self.received is None:
            self.received = signum

    def note(self, signum: int) -> None:
        """Records `signum` as if it had been caught (one that another handler heard)."""
        self._handle(signum)

    def acted_on(self) -> tuple[str, int]:
        """Every worker stopped for the signal: returns (its name, the exit status), clears it.

        Returns:
          (name, exit status); a worker that got no signal itself (a peer did) exits with 75.
        """
        signum, self.received = self.received, None
        if signum is None:
            return PEER_SIGNAL, EXIT_PREEMPTED
        status, name = STOP_SIGNALS[signum]
        return name, status

    def deliver_late(self) -> None:
        """A stop signal no step acted on (it came after the last one) is passed on now.

        It goes to the handler the run started with, instead of being dropped.
        """
        signum, self.received = self.received, None
        if signum is not None:
            signal.raise_signal(signum)


def stop_until_training(environ=os.environ) -> None:
    """Until a run enters `StopSignals.caught()`, SIGTERM ends the process with status 75.

    A worker of a cluster holds the signal instead (`HOLD_LINE`), since a peer may wait in the
    rendezvous; every worker stops once the cluster has formed. Only on the main thread.

    Args:
      environ: the environment that tells whether this is a cluster's worker.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _hold if in_a_cluster(environ) else _stop_now)


def in_a_cluster(environ) -> bool:
    """Whether `environ` starts this process as one of several tasks of a cluster.

    Example:
    >>> from tf_mlstm.train.stop_signals import in_a_cluster
    >>> in_a_cluster({"SLURM_PROCID": "1", "SLURM_NTASKS": "4"})
    True
    >>> in_a_cluster({"TF_CONFIG": '{"cluster": {"worker": ["h0:2222"]}}'})
    False
    """
    try:
        cluster = json.loads(environ.get("TF_CONFIG") or "{}").get("cluster") or {}
        tasks = sum(len(addresses) for addresses in cluster.values())
    except (ValueError, AttributeError, TypeError):
        tasks = 0  # A malformed TF_CONFIG: the strategy refuses it in one line.
    slurm_tasks = environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS") or ""
    if environ.get("SLURM_PROCID") is not None and slurm_tasks.isdigit():
        tasks = max(tasks, int(slurm_tasks))
    return tasks > 1


# The SIGTERM a cluster's worker held during start-up (at most one), until training reads it.
_HELD = []


def _hold(signum, frame):
    del frame
    if not _HELD:
        _HELD.append(signum)
        os.write(quiet.stderr_fd(), (HOLD_LINE + "\n").encode())


def _stop_now(signum, frame):
    del signum, frame
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # Also while TensorFlow's import runs with fd 2 on /dev/null (`_quiet`).
    os.write(quiet.stderr_fd(), (START_UP_LINE + "\n").encode())
    # At once, without unwinding: the signal may land inside any import or
    # library call, where an exception could leave a half-built state behind.
    os._exit(EXIT_PREEMPTED)


@contextlib.contextmanager
def _second_interrupt_aborts():
    """While inside, a second SIGINT ends the process (130); counted from the wakeup fd."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    watcher = threading.Thread(
        target=_count_interrupts, args=(read_fd, previous_fd), name="stop-signals", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_fd)
        os.close(write_fd)  # The watcher reads the end of the pipe and returns.
        watcher.join(timeout=5)
        if not watcher.is_alive():
            os.close(read_fd)


def _count_interrupts(read_fd, previous_fd):
    interrupts = 0
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        if previous_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(previous_fd, data)
        interrupts += data.count(signal.SIGINT)
        if interrupts >= 2:
            os.write(2, (ABORT_LINE + "\n").encode())
            os._exit(EXIT_INTERRUPTED)
