"""The optimizer: Adam on gradients the training step has already reduced.

The step all-reduces once itself, so clipping is by the true global norm and every replica
skips a non-finite update alike; `PreReducedAdam` does not reduce a second time.
"""

from typing import Any

import keras
import tensorflow as tf


def all_finite(grads) -> tf.Tensor:
    """A scalar bool tensor: every gradient entry is finite."""
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads if g is not None])


@keras.saving.register_keras_serializable(package="tf_mlstm")
class PreReducedAdam(keras.optimizers.Adam):
    """Adam whose `apply` expects gradients already summed over replicas.

    Args:
      skip_non_finite: leave variables, moments and `iterations` untouched on a non-finite step.
      **kwargs: `keras.optimizers.Adam` arguments.

    Example:
    >>> import numpy as np
    >>> import keras
    >>> from tf_mlstm.train.optimizer import PreReducedAdam
    >>> weight = keras.Variable([1.0, 2.0])
    >>> optimizer = PreReducedAdam(learning_rate=0.1)
    >>> optimizer.build([weight])
    >>> optimizer.apply([np.array([1.0, np.nan], "float32")], [weight])  # skipped: not finite
    >>> weight.numpy().tolist(), int(optimizer.iterations.numpy())
    ([1.0, 2.0], 0)
    >>> optimizer.apply([np.array([1.0, -1.0], "float32")], [weight])
    >>> [round(float(value), 3) for value in weight.numpy()]
    [0.9, 2.1]
    """

    def __init__(self, skip_non_finite=True, **kwargs):
        super().__init__(**kwargs)
        self.skip_non_finite = skip_non_finite

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)

    def apply(self, grads, trainable_variables=None) -> Any:
        if not self.skip_non_finite or not self.built:
            return super().apply(grads, trainable_variables)
        apply = super().apply
        if tf.__internal__.distribute.strategy_supports_no_merge_call():
            keras.ops.cond(all_finite(grads), lambda: apply(grads, trainable_variables), _no_op)
            return

        # As `LossScaleOptimizer` does under tf.distribute: a cond whose
        # branch calls `merge_call` (Keras's update does) is not allowed in a
        # replica context, so decide in the cross-replica context. Every
        # replica holds the same all-reduced gradients: take the first
        # replica's verdict.
        def cross_replica(distribution, grads, variables):
            finite = distribution.experimental_local_results(
                distribution.extended.call_for_each_replica(all_finite, args=(grads,))
            )[0]

            def apply_all():
                distribution.extended.call_for_each_replica(apply, args=(grads, variables))

            keras.ops.cond(finite, apply_all, _no_op)

        tf.distribute.get_replica_context().merge_call(
            cross_replica, args=(grads, trainable_variables)
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config["skip_non_finite"] = self.skip_non_finite
        return config


def _no_op():
    return None


def build_optimizer(
    learning_rate, clip_norm=1.0, precision="float32"
) -> keras.optimizers.Optimizer:
    """Adam with global-norm clipping that skips non-finite steps, loss-scaled under float16.

    Args:
      learning_rate: a float or a `LearningRateSchedule`.
      clip_norm: global gradient norm bound (0 = no clipping).
      precision: the dtype policy name; `mixed_float16` gets dynamic loss scaling.

    Returns:
      A Keras optimizer.
    """
    scaled = precision == "mixed_float16"
    optimizer = PreReducedAdam(
        learning_rate=learning_rate, global_clipnorm=clip_norm or None, skip_non_finite=not scaled
    )
    if scaled:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer


def loss_scale(optimizer) -> tf.Variable | None:
    """The current dynamic loss scale, or None without loss scaling."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer.dynamic_scale
    return None
