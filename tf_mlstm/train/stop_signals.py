"""The signals that stop a training run: SIGTERM (75) and Ctrl-C (130), after a checkpoint.

- While a run trains, `StopSignals.caught()` records the first SIGTERM or
  SIGINT; the runner turns it into a stop every worker agrees on,
  checkpoints that step and exits 75 (`EX_TEMPFAIL`) or 130. The same
  command resumes.
- A second Ctrl-C ends the process at once (130), counted by a thread that
  reads the interpreter's signal wakeup descriptor, since a long TensorFlow
  call delays Python's handlers.
- Before training (`stop_until_training`, the training binaries' first
  line) SIGTERM ends the process at once with one line and status 75:
  nothing of the run is written yet. After training it ends by the signal;
  one that came after the last step's agreement is passed on then
  (`deliver_late`).

No TensorFlow here: tests check it in a bare interpreter.
"""

import contextlib
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
ABORT_LINE = (
    "Ctrl-C again: stopped at once, without a checkpoint of this step (exit status "
    f"{EXIT_INTERRUPTED}); the same command resumes from the last checkpoint."
)


class StopSignals:
    """Catches the stop signals while a run trains (see the module doc).

    Attributes:
      received: the number of the first stop signal caught and not yet acted
        on, or None.

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

        Signals reach only the main thread: elsewhere this does nothing. A
        SIGINT the process was started to ignore (a background job of a
        non-interactive shell, `nohup`) stays ignored.
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
        try:
            if signal.SIGINT in previous:
                with _second_interrupt_aborts():
                    yield
            else:
                yield
        finally:
            for signum, handler in previous.items():
                # Training has begun, so start-up is over: after it, the default.
                signal.signal(signum, signal.SIG_DFL if handler is _stop_now else handler)

    def _handle(self, signum, frame=None):
        del frame
        if self.received is None:
            self.received = signum

    def note(self, signum: int) -> None:
        """Records `signum` as if it had been caught (one that another handler heard)."""
        self._handle(signum)

    def acted_on(self) -> tuple[str, int]:
        """Every worker stopped for the signal: returns (its name, the exit status), clears it.

        A worker that got no signal itself (a peer did) exits with status 75.
        """
        signum, self.received = self.received, None
        if signum is None:
            return PEER_SIGNAL, EXIT_PREEMPTED
        status, name = STOP_SIGNALS[signum]
        return name, status

    def deliver_late(self) -> None:
        """A stop signal no step acted on (it came after the last one) is passed on now.

        Training is over and checkpointed, so what follows (the final
        results, an export) is what a relaunch redoes; the signal goes to the
        handler the run started with (SIGTERM: by default the process ends at
        once; SIGINT: KeyboardInterrupt) instead of being dropped.
        """
        signum, self.received = self.received, None
        if signum is not None:
            signal.raise_signal(signum)


def stop_until_training() -> None:
    """Until a run enters `StopSignals.caught()`, SIGTERM ends the process with status 75.

    For the training binaries, called first thing: a scheduler's SIGTERM in
    the first seconds (TensorFlow's import, the automatic settings) then
    gets the documented status and one line (`START_UP_LINE`), not death by
    the signal (143). The interpreter runs the handler between two bytecodes:
    inside a multi-worker rendezvous (TensorFlow waiting for its peers to
    register, with the interpreter's lock held and a SIGTERM notifier of its
    own) no signal but SIGKILL acts until the wait ends, which the local
    launcher's grace period bounds. Nothing of the run is written before training enters
    `caught()` (the run folder is made inside it), so stopping at once
    loses nothing. Once training has entered it, SIGTERM is the runner's,
    and after training the default again. Only the main thread can set
    handlers: elsewhere this does nothing.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_now)


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
    """While inside, a second SIGINT ends the process at once with `ABORT_LINE` (status 130).

    The interpreter's C-level handler writes each signal's number to the
    wakeup file descriptor as the signal arrives; a thread reads them and
    counts the SIGINTs. A wakeup descriptor set before (an event loop's)
    gets every byte passed on.
    """
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
