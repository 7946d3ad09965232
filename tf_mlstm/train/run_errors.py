"""How a run ends short of its last step: its errors, exit statuses and peer-failure line."""

import os

import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm.train import stop_signals
from tf_mlstm.train import strategy as strategy_lib

# How a collective (or the coordination service's barrier) fails once a
# peer task is gone.
PEER_ERRORS = strategy_lib.PEER_ERRORS
# Exit statuses of a run stopped by SIGTERM (75) or Ctrl-C (130) after its
# checkpoint: relaunching resumes.
EXIT_PREEMPTED = stop_signals.EXIT_PREEMPTED
EXIT_INTERRUPTED = stop_signals.EXIT_INTERRUPTED


class PreemptedError(RuntimeError):
    """A SIGTERM or Ctrl-C stopped the run; every worker checkpointed the same step.

    Attributes:
      step: the step of that checkpoint (None: stopped before training, nothing written).
      exit_status: the process's exit status (75 after SIGTERM, 130 after Ctrl-C).

    Example:
    >>> from tf_mlstm.train.run_errors import EXIT_INTERRUPTED, PreemptedError
    >>> error = PreemptedError("stopped by Ctrl-C after step 7", 7, EXIT_INTERRUPTED)
    >>> error.step, error.exit_status
    (7, 130)
    """

    def __init__(self, message: str, step: int | None, exit_status: int = EXIT_PREEMPTED) -> None:
        super().__init__(message)
        self.step = step
        self.exit_status = exit_status


class TrainingDivergedError(errors.UserError, RuntimeError):
    """Too many non-finite steps in a row: the run stops, its checkpoints stay finite.

    Example:
    >>> from tf_mlstm import errors
    >>> from tf_mlstm.train.run_errors import TrainingDivergedError
    >>> error = TrainingDivergedError("training diverged: 3 non-finite steps in a row")
    >>> errors.is_user_error(error)  # one line and exit status 1 in a binary
    True
    """


def peer_failure(
    error: tf.errors.OpError,
    worker: int,
    step: int | None,
    collective_timeout_s: float,
    latest_checkpoint: str | None,
) -> strategy_lib.PeerWorkerError:
    """The one-line `PeerWorkerError` for a collective that failed with a `PEER_ERRORS` kind.

    Args:
      error, worker: the TensorFlow error, and this worker's index.
      step: the step it stops at; None during start-up, before the first step.
      collective_timeout_s: the `collective_timeout_s` in force.
      latest_checkpoint: the newest checkpoint's prefix (the chief), or None.

    Returns:
      The error to raise: what the peer did, the step, how to resume.
    """
    what = "stopped"
    if isinstance(error, tf.errors.DeadlineExceededError):
        slower = (
            "stuck, or far slower: the chief may first time the auto settings, up to a minute"
            if step is None
            else "stuck, or far slower"
        )
        what = (
            f"did not reach the all-reduce within {errors.setting_name('collective_timeout_s')}="
            f"{collective_timeout_s:g} ({slower})"
        )
    where = "during start-up" if step is None else f"at step {step}"
    return strategy_lib.PeerWorkerError(
        f"worker {worker} stops {where}: a peer worker {what} "
        f"({_error_summary(error)}). Relaunch every worker with the same command to resume "
        "from the last checkpoint"
        + (f" ({os.path.basename(latest_checkpoint)})." if latest_checkpoint else ".")
    )


def _error_summary(error):
    """The line of a TensorFlow error that says what happened (not its boilerplate)."""
    boilerplate = ("Graph execution error", "Detected at node", "[[", "The error could be from")
    for line in (getattr(error, "message", "") or str(error)).splitlines():
        if line.strip() and not line[0].isspace() and not line.startswith(boilerplate):
            return line.strip()[:300]
    return type(error).__name__
