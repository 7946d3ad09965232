"""Learning-rate schedules for large-batch training.

The paper's finding: scaling the rate linearly with the batch (Goyal et al.)
diverges for the mLSTM at a 32k batch, while a rate scaled more gently,
capped, warmed up and decayed to zero converges. `LargeBatchSchedule`
expresses that family:

    peak   = min(lr * scale(global_batch / base_batch), max_lr)
             scale = 1 (none), ratio (linear), sqrt(ratio) (sqrt)
    lr(t)  = peak * t / warmup_steps                      for t < warmup
           = peak * decay((t - warmup) / (total - warmup)) afterwards
    decay(p) = 1 (constant), 1 - p (linear), 0.5 (1 + cos(pi p)) (cosine),
               final_fraction ** p (exponential)

with p clipped to [0, 1].
"""

import math

import keras
import tensorflow as tf

SCALINGS = ("none", "linear", "sqrt")
DECAYS = ("constant", "linear", "cosine", "exponential")


def peak_learning_rate(lr, global_batch, base_batch=128, scaling="none", max_lr=None):
    """The rate after batch scaling and the cap.

    Args:
      lr: base rate, tuned at `base_batch`.
      global_batch: the global batch size.
      base_batch: the batch at which `lr` was tuned.
      scaling: none | linear | sqrt.
      max_lr: optional upper bound.

    Returns:
      The peak learning rate (float).

    Raises:
      ValueError: unknown scaling or non-positive sizes.
    """
    if scaling not in SCALINGS:
        raise ValueError(f"lr scaling must be one of {SCALINGS}, got {scaling!r}.")
    if global_batch <= 0 or base_batch <= 0:
        raise ValueError(
            "global_batch and base_batch must be positive, got " f"{global_batch} and {base_batch}."
        )
    ratio = global_batch / base_batch
    factor = {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[scaling]
    peak = lr * factor
    if max_lr:
        peak = min(peak, max_lr)
    return float(peak)


@keras.saving.register_keras_serializable(package="tf_mlstm")
class LargeBatchSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warmup then decay to `total_steps` from a peak rate.

    Args:
      peak_lr: the rate at the end of warmup (see `peak_learning_rate`).
      total_steps: step at which the decay ends.
      warmup_steps: linear warmup steps from 0.
      decay: constant | linear | cosine | exponential.
      final_fraction: for exponential decay, lr(total) / peak.
    """

    def __init__(self, peak_lr, total_steps, warmup_steps=0, decay="linear", final_fraction=0.01):
        if decay not in DECAYS:
            raise ValueError(f"lr decay must be one of {DECAYS}, got {decay!r}.")
        if total_steps <= 0:
            raise ValueError(f"total_steps must be positive, got {total_steps}.")
        if not 0 <= warmup_steps <= total_steps:
            raise ValueError(
                f"warmup_steps must be in [0, total_steps={total_steps}" f"], got {warmup_steps}."
            )
        if decay == "exponential" and not 0 < final_fraction <= 1:
            raise ValueError("final_fraction must be in (0, 1], got " f"{final_fraction}.")
        self.peak_lr = float(peak_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.final_fraction = float(final_fraction)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak = tf.constant(self.peak_lr, tf.float32)
        warm = float(max(self.warmup_steps, 1))
        warmup = peak * tf.minimum(step + 1.0, warm) / warm
        span = float(max(self.total_steps - self.warmup_steps, 1))
        p = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
        if self.decay == "constant":
            factor = tf.ones_like(p)
        elif self.decay == "linear":
            factor = 1.0 - p
        elif self.decay == "cosine":
            factor = 0.5 * (1.0 + tf.cos(math.pi * p))
        else:
            factor = tf.pow(self.final_fraction, p)
        if self.warmup_steps == 0:
            return peak * factor
        return tf.where(step < self.warmup_steps, warmup, peak * factor)

    def get_config(self):
        return {
            "peak_lr": self.peak_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "final_fraction": self.final_fraction,
        }
