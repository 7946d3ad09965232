"""Learning-rate schedules for large-batch training, and their end planned by a time budget."""

import math
import time

import keras
import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm.config import DECAYS
from tf_mlstm.config import SCALINGS

# `BudgetPlanner.plan` while it has no measurement of this launch's rate yet;
# `SchedulePlan.advance` then keeps the planned end it has (restored on resume).
NO_PREDICTION = 0


def peak_learning_rate(lr, global_batch, base_batch=128, scaling="none", max_lr=None) -> float:
    """The rate after batch scaling and the cap.

    Args:
      lr, base_batch: the base rate, and the batch it was tuned at.
      global_batch: the global batch size.
      scaling: none | linear | sqrt.
      max_lr: optional upper bound.

    Returns:
      The peak learning rate (float).

    Raises:
      ValueError: unknown scaling or non-positive sizes.
    """
    if scaling not in SCALINGS:
        raise errors.InvalidValueError(f"lr scaling must be one of {SCALINGS}, got {scaling!r}.")
    if global_batch <= 0 or base_batch <= 0:
        raise errors.InvalidValueError(
            f"global_batch and base_batch must be positive, got {global_batch} and {base_batch}."
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
      plan: an optional `SchedulePlan` whose progress the decay follows instead.

    Example:
    >>> from tf_mlstm.train.schedules import LargeBatchSchedule
    >>> schedule = LargeBatchSchedule(peak_lr=1e-3, total_steps=100, warmup_steps=10)
    >>> [round(float(schedule(step)), 6) for step in (0, 5, 10, 55, 100)]
    [0.0001, 0.0006, 0.001, 0.0005, 0.0]
    """

    def __init__(
        self, peak_lr, total_steps, warmup_steps=0, decay="linear", final_fraction=0.01, plan=None
    ):
        if decay not in DECAYS:
            raise errors.InvalidValueError(f"lr decay must be one of {DECAYS}, got {decay!r}.")
        if total_steps <= 0:
            raise errors.InvalidValueError(f"total_steps must be positive, got {total_steps}.")
        if not 0 <= warmup_steps <= total_steps:
            raise errors.InvalidValueError(
                f"warmup_steps must be in [0, total_steps={total_steps}], got {warmup_steps}."
            )
        if decay == "exponential" and not 0 < final_fraction <= 1:
            raise errors.InvalidValueError(
                f"final_fraction must be in (0, 1], got {final_fraction}."
            )
        self.peak_lr = float(peak_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay = decay
        self.final_fraction = float(final_fraction)
        self.plan = plan

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak = tf.constant(self.peak_lr, tf.float32)
        warm = float(max(self.warmup_steps, 1))
        warmup = peak * tf.minimum(step + 1.0, warm) / warm
        if self.plan is not None:
            p = tf.cast(self.plan.progress, tf.float32)
        else:
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

    def get_config(self) -> dict:
        return {
            "peak_lr": self.peak_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay": self.decay,
            "final_fraction": self.final_fraction,
        }


class SchedulePlan:
    """The decay's planned end and its progress, as checkpointable variables.

    Each update moves p(t + 1) = p(t) + (1 - p(t)) / (aim - t): without a jump when the aim moves.

    Args:
      total_steps: the recipe's schedule length (`--total_steps` or `--max_steps`).
      warmup_steps: the decay starts after these many updates.
      cooldown_fraction: the share of the predicted budget the rate cools down over.

    Example:
    >>> from tf_mlstm.train.schedules import SchedulePlan
    >>> plan = SchedulePlan(total_steps=100)
    >>> sorted(plan.variables())
    ['decay_advanced', 'decay_progress', 'planned_steps']
    >>> for iterations in range(1, 51):  # once per training step
    ...     progress = plan.advance(iterations)
    >>> round(float(progress), 6)  # half the way to step 100
    0.5
    """

    def __init__(self, total_steps, warmup_steps=0, cooldown_fraction=0.2):
        if total_steps <= 0 or not 0 <= warmup_steps <= total_steps:
            raise errors.InvalidValueError(
                f"a schedule plan needs 0 <= warmup_steps <= total_steps and total_steps > 0, "
                f"got warmup_steps={warmup_steps}, total_steps={total_steps}."
            )
        if not 0 < cooldown_fraction <= 1:
            raise errors.InvalidValueError(
                f"cooldown_fraction must be in (0, 1], got {cooldown_fraction}."
            )
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.cooldown_fraction = float(cooldown_fraction)
        self.planned_steps = tf.Variable(
            int(total_steps), dtype=tf.int64, trainable=False, name="planned_steps"
        )
        self.progress = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="decay_progress")
        self.advanced = tf.Variable(0, dtype=tf.int64, trainable=False, name="decay_advanced")

    def variables(self) -> dict[str, tf.Variable]:
        """The variables to checkpoint, by name."""
        return {
            "planned_steps": self.planned_steps,
            "decay_progress": self.progress,
            "decay_advanced": self.advanced,
        }

    def advance(self, iterations, planned_steps=None) -> tf.Variable:
        """Moves the decay on by the updates since the last call (once a step, on every worker).

        Args:
          iterations: the optimizer's update count after this step.
          planned_steps: the agreed predicted end of the budget; `NO_PREDICTION` keeps the plan.

        Returns:
          The new progress (a float64 tensor).
        """
        iterations = tf.cast(iterations, tf.int64)
        if planned_steps is not None:
            predicted = tf.cast(planned_steps, tf.int64)
            planned = tf.where(
                predicted > NO_PREDICTION, tf.maximum(predicted, iterations), self.planned_steps
            )
            self.planned_steps.assign(planned)
        # The update just applied used the rate at iteration t = iterations - 1.
        t = iterations - 1
        applied = tf.greater(iterations, self.advanced)
        end = self.planned_steps
        cooling = tf.cast(end - t, tf.float64) <= self.cooldown_fraction * tf.cast(
            end - self.warmup_steps, tf.float64
        )
        # The planner never predicts past the recipe's total, so the aim only moves earlier.
        aim = tf.where(cooling, end, tf.constant(self.total_steps, tf.int64))
        remaining = tf.cast(tf.maximum(aim - t, 1), tf.float64)
        moved = self.progress + (1.0 - self.progress) / remaining
        decaying = tf.logical_and(applied, t >= self.warmup_steps)
        self.progress.assign(tf.clip_by_value(tf.where(decaying, moved, self.progress), 0.0, 1.0))
        self.advanced.assign(tf.maximum(self.advanced, iterations))
        return self.progress


class BudgetPlanner:
    """Predicts the step at which a time budget will end the run, from this launch's rate.

    Args:
      max_steps: the plan never goes past this.
      deadline, clock: the budget's end in `clock` seconds, and the time source.
      settle_steps: steps of this launch not measured (tracing).
      margin: share of the remaining time not planned for (kept for the last checkpoint).

    Example:
    >>> from tf_mlstm.train.schedules import BudgetPlanner, NO_PREDICTION
    >>> planner = BudgetPlanner(max_steps=10_000, deadline=100.0, settle_steps=2, margin=0.0)
    >>> [planner.plan(step, now=t) for step, t in [(0, 0.0), (2, 10.0)]] == [NO_PREDICTION] * 2
    True
    >>> planner.plan(12, now=20.0)  # 10 steps in 10 s, 80 s left
    92
    """

    def __init__(self, max_steps, deadline, settle_steps=20, margin=0.02, clock=time.monotonic):
        if max_steps <= 0 or settle_steps < 0 or not 0 <= margin < 1:
            raise errors.InvalidValueError(
                f"bad budget planner settings: max_steps={max_steps}, "
                f"settle_steps={settle_steps}, margin={margin}."
            )
        self.max_steps = int(max_steps)
        self.deadline = float(deadline)
        self.settle_steps = int(settle_steps)
        self.margin = float(margin)
        self.clock = clock
        self._first_step = None
        self._mark = None  # (step, time) where measuring started

    def plan(self, step, now=None) -> int:
        """The predicted final step after `step` (done), or `NO_PREDICTION` while still settling.

        Args:
          step, now: steps done so far (global), and the time (`clock()` by default).

        Returns:
          An int in [step, max_steps], or `NO_PREDICTION` until this launch's rate is measured.
        """
        now = self.clock() if now is None else now
        if self._first_step is None:
            self._first_step = step
        if self._mark is None:
            if step - self._first_step >= self.settle_steps:
                self._mark = (step, now)
            return NO_PREDICTION
        steps, seconds = step - self._mark[0], now - self._mark[1]
        if steps <= 0 or seconds <= 0:
            return NO_PREDICTION
        left = max(self.deadline - now, 0.0) * (1.0 - self.margin)
        return int(min(self.max_steps, step + math.floor(steps / seconds * left)))
