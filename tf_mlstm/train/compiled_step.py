"""The runner's compiled step: forward and backward, ONE all-reduce (stop flags too), the update."""

from collections.abc import Callable

import tensorflow as tf

from tf_mlstm.train import optimizer as optimizer_lib

# Positions of the stop flags and the budget's predicted end (summed over
# replicas) at the end of the all-reduced statistics.
TIME_STOP, SIGNAL_STOP, PLANNED_END = -3, -2, -1


def make_train_step(
    *,
    task: object,
    optimizer: object,
    variables: list,
    strategy: tf.distribute.Strategy,
    per_replica_batch: int,
    local_replicas: int,
    jit: bool,
    allreduce_dtype: str,
    plan: object,
    step: tf.Variable,
    skipped: tf.Variable,
) -> Callable:
    """The run's step as a `tf.function(iterator, carried state, stop flags)`.

    Args:
      task: the `Task` (its `loss` runs inside, under the tape).
      optimizer: the run's optimizer.
      variables: the variables it trains.
      strategy: the run's strategy.
      per_replica_batch: rows each replica computes a step.
      local_replicas: the replicas on this worker.
      jit: whether the forward and backward pass is XLA-compiled.
      allreduce_dtype: "float16" all-reduces the gradients in float16.
      plan: the budget's `schedules.SchedulePlan`, or None.
      step: the global step variable (incremented).
      skipped: the skipped-steps variable (counts the non-finite steps).

    Returns:
      The step: (iterator, carried state, per-replica stop flags) -> (statistics summed over
      replicas with the flags at their end, |grad|, finite, new carried state).
    """
    reduce_dtype = tf.float16 if allreduce_dtype == "float16" else None
    use_scale = optimizer_lib.loss_scale(optimizer) is not None

    @tf.function(jit_compile=jit, autograph=False)
    def forward_backward(batch, state):
        with tf.GradientTape() as tape:
            loss, stats, state = task.loss(batch, state)
            scaled = optimizer.scale_loss(loss) if use_scale else loss
        grads = tape.gradient(scaled, variables)
        return tf.cast(stats, tf.float32), grads, state

    def replica_step(batch, state, stop):
        stats, grads, state = forward_backward(batch, state)
        stats = tf.concat([stats, stop], axis=0)
        context = tf.distribute.get_replica_context()
        if reduce_dtype is None:
            grads, stats = context.all_reduce(tf.distribute.ReduceOp.SUM, (grads, stats))
        else:
            # A multi-worker all-reduce packs its tensors into one buffer,
            # so they must share a dtype; the float32 statistics (sums far
            # past float16's range) travel in a second, tiny all-reduce.
            grads = context.all_reduce(
                tf.distribute.ReduceOp.SUM, [tf.cast(g, reduce_dtype) for g in grads]
            )
            stats = context.all_reduce(tf.distribute.ReduceOp.SUM, stats)
        grads = [tf.cast(g, tf.float32) for g in grads]
        scale = tf.cast(optimizer_lib.loss_scale(optimizer), tf.float32) if use_scale else 1.0
        norm = tf.linalg.global_norm(grads) / scale
        finite = tf.math.is_finite(norm)
        optimizer.apply(grads, variables)
        return stats, norm, finite, state

    rows = per_replica_batch

    def replica_rows(batch):
        def block(context):
            r = context.replica_id_in_sync_group % local_replicas
            return tf.nest.map_structure(lambda v: v[r * rows : (r + 1) * rows], batch)

        return strategy.experimental_distribute_values_from_function(block)

    replicas = float(strategy.num_replicas_in_sync)

    @tf.function(autograph=False)
    def train_step(iterator, state, stop):
        batch = replica_rows(next(iterator))
        stats, norm, finite, state = strategy.run(replica_step, args=(batch, state, stop))
        first = lambda v: strategy.experimental_local_results(v)[0]
        finite = first(finite)
        if plan is not None:
            # The mean of the workers' predictions: one value everywhere.
            agreed = tf.cast(tf.round(first(stats)[PLANNED_END] / replicas), tf.int64)
            plan.advance(optimizer.iterations, agreed)
        step.assign_add(1)
        skipped.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
        return first(stats), first(norm), finite, state

    return train_step


def stop_flags(
    strategy: tf.distribute.Strategy, stop: bool, preempted: bool, planned_end: int
) -> object:
    """This worker's stop flags and planned end, per replica, for the step's all-reduce.

    Args:
      strategy: the run's strategy.
      stop: this worker's time budget is spent.
      preempted: this worker got SIGTERM or Ctrl-C.
      planned_end: its prediction of the step at which the budget ends (0: none).

    Returns:
      The distributed [3] float32 values.
    """
    values = [1.0 if stop else 0.0, 1.0 if preempted else 0.0, float(planned_end)]
    return strategy.experimental_distribute_values_from_function(
        lambda _: tf.constant(values, tf.float32)
    )
