"""Between the runner's steps: progress windows, pauses and the ETA, profiling, divergence."""

import contextlib
import signal
import time
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm.config import profile_bounds
from tf_mlstm.errors import setting_name as _name
from tf_mlstm.train import stop_signals
from tf_mlstm.train import strategy as strategy_lib
from tf_mlstm.train.run_errors import TrainingDivergedError


class Window:
    """Statistics summed over the steps since the last progress line.

    Args:
      start: the window's start (`time.monotonic()`).

    Attributes:
      total, steps: the statistics summed over its steps (float64; None before the first), steps.
      paused: seconds of checkpoints and evaluations in the window.

    Example:
    >>> import numpy as np
    >>> from tf_mlstm.train.cadence import Window
    >>> window = Window(start=0.0)
    >>> window.add(np.array([2.0, 10.0]))  # one step's (bits, chars)
    >>> window.add(np.array([1.0, 6.0]))
    >>> window.steps, window.total.tolist()
    (2, [3.0, 16.0])
    """

    def __init__(self, start: float) -> None:
        self.start = start
        self.total = None
        self.steps = 0
        self.paused = 0.0  # seconds of checkpoints and evaluations in the window

    def add(self, stats: np.ndarray) -> None:
        """Adds one step's statistics vector (summed over replicas)."""
        self.total = stats.astype(np.float64) if self.total is None else self.total + stats
        self.steps += 1


# The kind of pause a checkpoint is (a periodic callback's kind is its index).
CHECKPOINT = "checkpoint"


class Pauses:
    """Time spent outside steps, by kind: left out of a rate, added to an ETA at mean times.

    Example:
    >>> import time
    >>> from tf_mlstm.train.cadence import CHECKPOINT, Pauses, Window
    >>> pauses, window = Pauses(), Window(start=time.monotonic())
    >>> with pauses.timed(CHECKPOINT, window):
    ...     time.sleep(0.01)  # a checkpoint is written here
    >>> window.paused >= 0.01
    True
    >>> # Logged at step 10 of 30: its own checkpoint, 20's and 30's are still due.
    >>> round(pauses.ahead(10, 30, {CHECKPOINT: 10}) / window.paused)
    3
    """

    def __init__(self) -> None:
        self._seconds = {}  # kind -> (count, total seconds)

    @contextlib.contextmanager
    def timed(self, kind: object, window: Window) -> Iterator[None]:
        """Times the block as a pause of `kind` (`CHECKPOINT`, a callback's index) in `window`."""
        start = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            window.paused += seconds
            count, total = self._seconds.get(kind, (0, 0.0))
            self._seconds[kind] = (count + 1, total + seconds)

    def ahead(self, step: int, max_steps: int, cadences: dict) -> float:
        """Seconds of the pauses still due after `step`'s line up to `max_steps`, at mean times.

        Args:
          step, max_steps: the step just logged, and the last step.
          cadences: {kind: every so many steps (0: never)}.

        Returns:
          The seconds.
        """
        seconds = 0.0
        for kind, every in cadences.items():
            count, total = self._seconds.get(kind, (0, 0.0))
            if every and count:
                due = max_steps // every - (step - 1) // every
                seconds += max(due, 0) * total / count
        return seconds


def format_duration(seconds: float) -> str:
    """H:MM:SS of `seconds` (an ETA), e.g. "0:02:49"."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Profiler:
    """Runs the TensorBoard profiler between the `profile_steps` bounds (the chief only).

    Args:
      profile_steps: the `profile_steps` setting ("START,END", or "" for none).
      chief, logdir: whether this worker is the chief, and where the profile goes.

    Example:
    >>> from tf_mlstm.train.cadence import Profiler
    >>> profiler = Profiler("10,12", chief=False, logdir="run/train")
    >>> for step in range(9, 13):  # the chief would profile steps 11 and 12
    ...     profiler.at(step)  # any other worker never starts the profiler
    """

    def __init__(self, profile_steps: str, chief: bool, logdir: str) -> None:
        self._profile_steps = profile_steps
        self._chief = chief
        self._logdir = logdir
        self._profiling = False

    def at(self, step: int) -> None:
        """Starts or stops the profiler when `step` (the step before the next one) is a bound."""
        bounds = profile_bounds(self._profile_steps)
        if not bounds or not self._chief:
            return
        if step == bounds[0]:
            logging.info(
                "Profiling steps %d to %d into %s.", bounds[0] + 1, bounds[1], self._logdir
            )
            tf.profiler.experimental.start(self._logdir)
            self._profiling = True
        elif step == bounds[1] and self._profiling:
            tf.profiler.experimental.stop()
            self._profiling = False


def count_nonfinite(
    step: int,
    run: int,
    finite: bool,
    norm: float,
    last_saved: int,
    max_nonfinite_steps: int,
    writers: list,
    strategy: object,
) -> int:
    """The length of the current non-finite stretch; raises when it is too long.

    Args:
      step, run: the step just run, and the stretch's length before it.
      finite, norm: whether the step was finite (applied), and its gradient norm (logged).
      last_saved: the last checkpointed step, or -1.
      max_nonfinite_steps: the limit in force.
      writers, strategy: the run's summary writers (flushed before it stops) and strategy.

    Returns:
      The stretch's length after `step` (0 when it was finite).

    Raises:
      TrainingDivergedError: `max_nonfinite_steps` non-finite steps in a row.
    """
    if finite:
        if run:
            logging.info("step %d: finite again after %d skipped step(s).", step, run)
        return 0
    run += 1
    if run == 1:
        logging.warning(
            "step %d: non-finite gradients (|grad| %s): the update is skipped.", step, norm
        )
    if run < max_nonfinite_steps:
        return run
    for writer in writers:
        writer.flush()
    # Every worker reaches this at the same step (the verdict is
    # all-reduced); a last synchronization lets them exit together.
    strategy_lib.finalize(strategy)
    kept = f"ckpt-{last_saved}" if last_saved >= 0 else "none yet"
    raise TrainingDivergedError(
        f"training diverged: {run} non-finite steps in a row (steps {step - run + 1} to "
        f"{step}, {_name('max_nonfinite_steps')}={max_nonfinite_steps}); no update was "
        f"applied and the last checkpoint ({kept}) holds the last finite weights. Lower "
        f"{_name('lr')} or {_name('clip_norm')} (or check the input) before resuming."
    )


def log_signal_stop(step: int, signum: int | None) -> None:
    """Logs that every worker stops at `step` on a stop signal (`signum`: this worker's or None)."""
    name = stop_signals.STOP_SIGNALS[signum][1] if signum else stop_signals.PEER_SIGNAL
    again = " (Ctrl-C again stops at once, without it)" if signum == signal.SIGINT else ""
    logging.warning("%s: every worker stops at step %d and checkpoints it%s.", name, step, again)
