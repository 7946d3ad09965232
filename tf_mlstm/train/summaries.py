"""The run's TensorBoard writers and its hyperparameters record."""

import dataclasses
import os

import tensorflow as tf
from tensorboard.plugins.hparams import api as hparams_api

from tf_mlstm.train import strategy as strategy_lib

# The folder of the training summaries inside --model_dir.
TRAIN_SUMMARY_SUBDIR = "train"


class SummaryWriters:
    """The run's TensorBoard writers by folder name (temporary folders off the chief).

    Args:
      model_dir, strategy: the run folder and the run's strategy.

    Example:
    >>> import tensorflow as tf
    >>> from tf_mlstm.train.summaries import SummaryWriters
    >>> writers = SummaryWriters("run", tf.distribute.get_strategy())
    >>> with writers.get("train").as_default(step=1):
    ...     _ = tf.summary.scalar("loss", 0.5)
    >>> writers.paths(), len(writers.writers())
    (['run/train'], 1)
    """

    def __init__(self, model_dir: str, strategy: object) -> None:
        self._model_dir = model_dir
        self._strategy = strategy
        self._writers = {}

    def get(self, name: str) -> tf.summary.SummaryWriter:
        """The summary writer of `model_dir/name`, created on first use.

        Args:
          name: the folder's name inside the run folder.

        Returns:
          The writer.
        """
        if name not in self._writers:
            path = strategy_lib.write_dirpath(os.path.join(self._model_dir, name), self._strategy)
            self._writers[name] = (path, tf.summary.create_file_writer(path))
        return self._writers[name][1]

    def writers(self) -> list:
        """The writers made so far."""
        return [writer for _, writer in self._writers.values()]

    def paths(self) -> list:
        """The folders they write (temporary ones off the chief)."""
        return [path for path, _ in self._writers.values()]


def record_hparams(writer: tf.summary.SummaryWriter, config: object) -> None:
    """The run's settings as TensorBoard HParams, so runs of a sweep compare side by side.

    Args:
      writer: the training summaries' writer.
      config: the run's config dataclass (its bool, int, float and str fields are recorded).
    """
    values = {
        name: value
        for name, value in dataclasses.asdict(config).items()
        if isinstance(value, (bool, int, float, str))
    }
    with writer.as_default():
        hparams_api.hparams(values, trial_id=os.path.basename(config.model_dir.rstrip("/")))
