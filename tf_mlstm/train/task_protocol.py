"""The runner's task protocol: `Task` (one kind of training) and the `TaskContext` it sees."""

import dataclasses

import tensorflow as tf

from tf_mlstm import rundir


@dataclasses.dataclass(frozen=True)
class TaskContext:
    """What a `Task` may know of the run it is part of (the runner builds it).

    Attributes:
      strategy: the `tf.distribute` strategy.
      chief, worker, num_workers: whether this worker is the chief (it writes the run folder),
        its index, and the workers of the run.
      local_replicas, per_replica_batch: the replicas on this worker; rows each computes a step.
      step: the global step, an int64 `tf.Variable`.
      summary_writer: `summary_writer(name)` -> the TensorBoard writer of `model_dir/name`.

    Example:
    >>> import tensorflow as tf
    >>> from tf_mlstm.train.summaries import SummaryWriters
    >>> from tf_mlstm.train.task_protocol import TaskContext
    >>> strategy = tf.distribute.get_strategy()
    >>> context = TaskContext(
    ...     strategy=strategy, chief=True, worker=0, num_workers=1, local_replicas=1,
    ...     per_replica_batch=4, step=tf.Variable(0, dtype=tf.int64),
    ...     summary_writer=SummaryWriters("run", strategy).get,
    ... )
    >>> context.per_replica_batch * context.local_replicas * context.num_workers  # global
    4
    """

    strategy: object
    chief: bool
    worker: int
    num_workers: int
    local_replicas: int
    per_replica_batch: int
    step: object
    summary_writer: object


class Task:
    """What one kind of training gives the `Runner`; the defaults are "nothing".

    Example:
    >>> from tf_mlstm.train.task_protocol import Task
    >>> class Constant(Task):  # what a task must give: here only its rate
    ...     def learning_rate(self):
    ...         return 0.1
    >>> task = Constant()
    >>> task.title, task.learning_rate(), task.periodic(), task.carried_state_shape(4)
    ('Training', 0.1, [], None)
    """

    #: What the start line calls this run ("Training", "Fine-tuning").
    title = "Training"
    #: The run folder's file that records the task's config (and the precision).
    config_file = rundir.CONFIG_FILE

    def check_inputs(self) -> None:
        """Raises, with one line, when an input is missing (cheap checks, before `prepare`)."""

    def set_config(self, config: object) -> None:
        """Takes the config with `auto` precision and XLA made concrete (before `prepare`).

        Args:
          config: the task's config, its `precision` and `jit_compile` resolved.
        """
        self.config = config

    def measurement(self, rows: int) -> object:
        """How `auto` times this task's step (None: the table decides).

        Args:
          rows: rows per replica.

        Returns:
          The `measure.StepMeasurement`, or None.
        """
        return None

    def prepare(self, context: TaskContext) -> None:
        """Reads and checks inputs before the model is built.

        Args:
          context: the run's `TaskContext`; a task may keep it.
        """

    def build_model(self, context: TaskContext) -> tuple:
        """Builds the model under the strategy scope.

        Args:
          context: the run's `TaskContext`.

        Returns:
          (model, trainable variables the optimizer updates).
        """
        raise NotImplementedError

    def learning_rate(self) -> object:
        """The learning rate.

        Returns:
          A float or a `keras.optimizers.schedules.LearningRateSchedule`.
        """
        raise NotImplementedError

    def checkpoint_objects(self) -> dict:
        """What each checkpoint saves of the task, besides the optimizer and the steps.

        Returns:
          {name: trackable}.
        """
        raise NotImplementedError

    def dataset(self, input_context: tf.distribute.InputContext, rows: int) -> tf.data.Dataset:
        """This worker's infinite tf.data pipeline of batches of `rows` rows.

        Args:
          input_context: `tf.distribute.InputContext` naming this worker.
          rows: rows per batch (per-replica rows x local replicas).

        Returns:
          A dataset of dicts of tensors whose first axis is the row.
        """
        raise NotImplementedError

    def input_layout(self) -> dict:
        """What the input position depends on (a saved one is used only under the same).

        Returns:
          A JSON-able dict.
        """
        return {}

    def carried_state_shape(self, rows: int) -> tuple | None:
        """(rows, units) of an (h, c) pair each replica carries, or None.

        Args:
          rows: rows per replica.

        Returns:
          The shape, or None when nothing is carried.
        """
        return None

    def loss(self, batch: dict, state: list) -> tuple:
        """Forward pass of one replica (inside the compiled step, under the tape).

        Args:
          batch: this replica's rows.
          state: the carried [h, c] or [] (see `carried_state_shape`).

        Returns:
          (loss whose replica sum is the global mean, float32 statistics to sum, new state).
        """
        raise NotImplementedError

    def progress(self, step: int, window: object, steps: int, seconds: float) -> tuple:
        """The progress text and summaries of a log window.

        Args:
          step, window: the global step; statistics summed over replicas and the window's steps.
          steps, seconds: steps in the window, and its wall time.

        Returns:
          (text for the log line, {summary name: scalar}).
        """
        raise NotImplementedError

    def describe(self) -> str:
        """Extra words for the start line.

        Returns:
          The words after the global batch (e.g. ' x 256 chars').
        """
        return ""

    def periodic(self) -> list:
        """What runs on every worker at its own cadence (evaluations, samples).

        Returns:
          [(every so many steps (0: never), callback(step))].
        """
        return []

    def configs(self) -> dict:
        """The config files of the run, checked on resume and written by the chief at start.

        Returns:
          {file name: config dataclass}.
        """
        return {}

    def results(self, step: int) -> dict:
        """The task's results (after the last checkpoint).

        Args:
          step: the last step.

        Returns:
          The dict merged into the run's results.
        """
        return {}
