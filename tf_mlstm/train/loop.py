"""Language-model training: the `Runner` with the `LanguageModelTask`.

The distributed loop itself (strategy, optimizer, the all-reduced step,
checkpoints with input position and carried state, cadence, time budget,
peer failures, results) lives in `runner.py` and serves fine-tuning too; the
language model's part (model, data, loss, validation, samples) in
`lm_task.py`. This module keeps the entry points callers use.
"""

from tf_mlstm.rundir import weights_checksum  # noqa: F401 (re-exported)
from tf_mlstm.train.lm_task import LanguageModelTask
from tf_mlstm.train.lm_task import build_model  # noqa: F401 (re-exported)
from tf_mlstm.train.lm_task import build_schedule  # noqa: F401 (re-exported)
from tf_mlstm.train.runner import Runner


class Trainer(Runner):
    """Trains the mLSTM language model (see `Runner.train`).

    Args:
      config: a validated `TrainConfig`.
      train_files: training TFRecord shards.
      validation_files: validation shards (may be empty).
    """

    def __init__(self, config, train_files, validation_files):
        # `auto` precision and XLA are measured by the runner (an existing run
        # keeps its precision).
        super().__init__(LanguageModelTask(config, train_files, validation_files), config)
