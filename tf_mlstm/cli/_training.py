"""How the training binaries end: results, a preemption, or one error line.

`tf-mlstm-train` and `tf-mlstm-finetune` run on the same distributed runner
and so end the same ways: a SIGTERM checkpointed by every worker exits with
the runner's preemption status (a relaunch resumes); a user's error (bad
data, a missing file, a dead peer, a diverged run) is one error line and
exit status 1; anything else is a bug and keeps its traceback.
"""

import sys

from absl import logging


def run_training(train_fn, *args):
    """Calls `train_fn(*args)` and turns the runner's expected endings into exits.

    TensorFlow is imported here, after the flags parsed, not at import time.

    Args:
      train_fn: the training call (returns the results dict).
      *args: its arguments.

    Returns:
      What `train_fn` returns.
    """
    # pylint: disable=g-import-not-at-top
    from tf_mlstm.data import readers
    from tf_mlstm.train import runner
    from tf_mlstm.train import strategy

    # pylint: enable=g-import-not-at-top
    try:
        return train_fn(*args)
    except runner.PreemptedError as e:
        logging.warning("%s", e)
        sys.exit(e.exit_status)
    except (
        FileNotFoundError,
        ValueError,
        readers.InputError,
        strategy.PeerWorkerError,
        runner.TrainingDivergedError,
    ) as e:
        logging.error("%s", e)
        sys.exit(1)
