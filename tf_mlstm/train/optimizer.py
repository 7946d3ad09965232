"""The optimizer: Adam on gradients the training step has already reduced.

Keras 3's TensorFlow optimizer all-reduces gradients inside `apply`, after
clipping them (so under a strategy each replica clips its own share) and
after `LossScaleOptimizer` has checked finiteness on local values (so
replicas can disagree about skipping a step). The training step here instead
all-reduces once, itself (optionally in float16, as the paper did), and then
hands identical gradients to every replica: clipping is by the true global
norm and the skip decision is the same everywhere. `PreReducedAdam` is Adam
that does not reduce a second time.
"""

import keras


@keras.saving.register_keras_serializable(package="tf_mlstm")
class PreReducedAdam(keras.optimizers.Adam):
    """Adam whose `apply` expects gradients already summed over replicas."""

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)


def build_optimizer(learning_rate, clip_norm=1.0, precision="float32"):
    """Adam with global-norm clipping, loss-scaled under float16.

    Args:
      learning_rate: a float or a `LearningRateSchedule`.
      clip_norm: global gradient norm bound (0 = no clipping).
      precision: the dtype policy name; `mixed_float16` gets dynamic loss
        scaling.

    Returns:
      A Keras optimizer.
    """
    optimizer = PreReducedAdam(learning_rate=learning_rate, global_clipnorm=clip_norm or None)
    if precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def loss_scale(optimizer):
    """The current dynamic loss scale, or None without loss scaling."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.dynamic_scale
    return None
