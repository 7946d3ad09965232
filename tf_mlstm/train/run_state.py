"""What a checkpoint restores (`RunState`): the shared checkpoint and each worker's state."""

import tensorflow as tf
from absl import logging

from tf_mlstm import failpoints
from tf_mlstm import fileio
from tf_mlstm import rundir
from tf_mlstm.train import checkpointing
from tf_mlstm.train import strategy as strategy_lib

# How many of the newest checkpoints a resume considers when it looks for the
# newest with every worker's state (each worker keeps one state more than
# there are checkpoints).
_COMPLETE_CANDIDATES = 8


class RunState:
    """What a checkpoint restores: the shared checkpoint and this worker's state beside it.

    Args:
      checkpoint: the shared `tf.train.Checkpoint`.
      step: the global step variable (inside `checkpoint`).
      iterator: this worker's input iterator (its position is saved).
      layout: JSON-able description of what the input position depends on.
      state_shape: (rows, units) of the (h, c) each replica carries, or None.
      state_dtype: the carried state's dtype (the model's compute dtype).
      model_dir: the run folder.
      keep: checkpoints to keep.
      strategy: the run's strategy.
      worker: this worker's index.
      local_replicas: the replicas on this worker.

    Attributes:
      carried: the per-replica [h, c] (distributed values), or [].
      checkpoint_dir: the shared checkpoint folder.

    Example:

    >>> import os
    >>> import tensorflow as tf
    >>> from tf_mlstm.train.run_state import RunState
    >>> step = tf.Variable(0, dtype=tf.int64)
    >>> def run_state(iterator):
    ...     return RunState(
    ...         tf.train.Checkpoint(step=step), step, iterator, {"data": "range(10)"},
    ...         state_shape=None, state_dtype=tf.float32, model_dir="run", keep=2,
    ...         strategy=tf.distribute.get_strategy(), worker=0, local_replicas=1,
    ...     )
    >>> state = run_state(iter(tf.data.Dataset.range(10)))
    >>> int(next(state.iterator))
    0
    >>> _ = step.assign(1)
    >>> state.save()  # step 1, and the input read up to it
    >>> int(next(state.iterator))
    1
    >>> resumed = run_state(iter(tf.data.Dataset.range(10)))  # a relaunch
    >>> os.path.basename(resumed.restore()), int(step.numpy()), int(next(resumed.iterator))
    ('ckpt-1', 1, 1)
    """

    def __init__(
        self,
        checkpoint,
        step,
        iterator,
        layout,
        state_shape,
        state_dtype,
        model_dir,
        keep,
        strategy,
        worker,
        local_replicas,
    ):
        self.checkpoint = checkpoint
        self.iterator = iterator
        self._step = step
        self._layout = layout
        self._state_shape = state_shape
        self._state_dtype = state_dtype
        self._model_dir = model_dir
        self._keep = keep
        self._strategy = strategy
        self._worker = worker
        self._local_replicas = local_replicas
        self.checkpoint_dir = rundir.checkpoint_dir(model_dir)
        self.manager = tf.train.CheckpointManager(
            checkpoint,
            strategy_lib.write_dirpath(self.checkpoint_dir, strategy),
            max_to_keep=keep,
        )
        # A save that failed or was killed left its `ckpt-N_temp` shards; this
        # worker alone writes its folder (the chief under the run lock).
        fileio.clean_checkpoint_temps(self.manager.directory)
        self.carried = self._distribute()
        self._all_saved = None
        if strategy_lib.worker_info(strategy)[2] > 1:
            # Traced once, not at every checkpoint.
            self._all_saved = tf.function(
                lambda: strategy_lib.sum_over_replicas(strategy, lambda _: tf.ones([])),
                autograph=False,
            )

    def _distribute(self, local_states=None):
        if self._state_shape is None:
            return []
        shape, dtype = self._state_shape, self._state_dtype

        def value(context, index):
            local = context.replica_id_in_sync_group % self._local_replicas
            if local_states is None:
                return tf.zeros(shape, dtype)
            return tf.constant(local_states[local][index], dtype)

        return [
            self._strategy.experimental_distribute_values_from_function(
                lambda ctx, i=i: value(ctx, i)
            )
            for i in range(2)
        ]

    def _local_arrays(self):
        local = self._strategy.experimental_local_results
        h, c = self.carried
        return [(hh.numpy(), cc.numpy()) for hh, cc in zip(local(h), local(c))]

    def save(self) -> None:
        """Checkpoints the step: each worker's own state, then (once all wrote) the shared one."""
        step = int(self._step.numpy())
        model_dir, worker, keep = self._model_dir, self._worker, self._keep + 1
        where = f"{model_dir} (checkpoint {step})"
        with fileio.write_errors(where):
            if self.carried:
                checkpointing.save_carried_state(
                    model_dir, worker, step, self._local_arrays(), keep=keep
                )
            checkpointing.save_input_state(
                model_dir, worker, step, self.iterator, self._layout, keep=keep
            )
        failpoints.reach("checkpoint-state")
        if self._all_saved is not None:
            self._all_saved()
        failpoints.reach("checkpoint-commit")
        with fileio.write_errors(where):
            self.manager.save(checkpoint_number=step)
        failpoints.reach("checkpoint-saved")

    def restore(self) -> str | None:
        """Restores the newest complete checkpoint (else the newest) and this worker's state.

        Returns:
          The restored checkpoint's prefix, or None (a fresh start).
        """
        restored = checkpointing.restore_latest(
            self.checkpoint, self.checkpoint_dir, newest_step=self._newest_complete()
        )
        if not restored:
            return None
        step, model_dir = int(self._step.numpy()), self._model_dir
        if self._state_shape is not None:
            self.carried = self._distribute(
                checkpointing.load_carried_state(
                    model_dir,
                    self._worker,
                    step,
                    self._local_replicas,
                    self._state_shape,
                    dtype=self._state_dtype,
                )
            )
        checkpointing.restore_input_state(
            model_dir, self._worker, step, self.iterator, self._layout
        )
        return restored

    def _newest_complete(self):
        """The newest checkpoint step with every worker's state, agreed; or None."""
        prefixes = rundir.list_checkpoints(self.checkpoint_dir)[:_COMPLETE_CANDIDATES]
        workers = strategy_lib.worker_info(self._strategy)[2]
        if not prefixes and workers == 1:
            return None  # a fresh start (every worker of a cluster joins the all-reduce below)
        steps = [rundir.checkpoint_step(prefix) for prefix in prefixes]
        mine = [
            float(
                checkpointing.has_state(
                    self._model_dir, self._worker, step, self._layout, self._state_shape is not None
                )
            )
            for step in steps
        ]
        mine += [0.0] * (_COMPLETE_CANDIDATES - len(mine))
        if workers > 1:
            local_replicas = self._local_replicas

            def count(context):
                first = tf.equal(context.replica_id_in_sync_group % local_replicas, 0)
                return tf.constant(mine, tf.float32) * tf.cast(first, tf.float32)

            mine = strategy_lib.sum_over_replicas(self._strategy, count).numpy().tolist()
        complete = [step for step, have in zip(steps, mine) if round(have) == workers]
        if not complete:  # also a fresh start, or another worker layout
            return None
        if complete[0] != steps[0]:
            logging.warning(
                "Checkpoint ckpt-%d lacks the carried state or input position of %d of the %d "
                "worker(s): resuming from ckpt-%d, the newest with every worker's state.",
                steps[0],
                workers - round(mine[0]),
                workers,
                complete[0],
            )
        return complete[0]
