"""Learning-rate schedules and the training config."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.config import TrainConfig
from tf_mlstm.train import schedules


def test_peak_scaling():
    assert schedules.peak_learning_rate(1e-3, 128, 128, "linear") == pytest.approx(1e-3)
    assert schedules.peak_learning_rate(1e-3, 2048, 128, "linear") == pytest.approx(16e-3)
    assert schedules.peak_learning_rate(1e-3, 2048, 128, "sqrt") == pytest.approx(4e-3)
    assert schedules.peak_learning_rate(1e-3, 2048, 128, "linear", max_lr=5e-3) == 5e-3
    assert schedules.peak_learning_rate(1e-3, 2048, 128, "none") == 1e-3
    with pytest.raises(ValueError, match="lr scaling must be one of"):
        schedules.peak_learning_rate(1e-3, 2048, 128, "cubic")


@pytest.mark.parametrize(
    "decay,step,want",
    [
        ("constant", 60, 1.0),
        ("linear", 60, 0.5),
        ("linear", 110, 0.0),
        ("cosine", 60, 0.5),
        ("cosine", 40, 0.5 * (1 + math.cos(math.pi * 0.25))),
        ("exponential", 60, 0.01**0.5),
        ("exponential", 100, 0.01),
    ],
)
def test_decay_values(decay, step, want):
    schedule = schedules.LargeBatchSchedule(2.0, total_steps=100, warmup_steps=20, decay=decay)
    assert float(schedule(step)) == pytest.approx(2.0 * want, rel=1e-5, abs=1e-7)


def test_warmup_is_linear_to_peak():
    schedule = schedules.LargeBatchSchedule(1.0, total_steps=100, warmup_steps=10)
    values = [float(schedule(s)) for s in range(12)]
    np.testing.assert_allclose(values[:10], np.arange(1, 11) / 10, rtol=1e-6)
    assert values[10] == pytest.approx(1.0)
    assert values[11] < 1.0


def test_schedule_serializes():
    schedule = schedules.LargeBatchSchedule(3e-3, 500, 50, "cosine")
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert clone.get_config() == schedule.get_config()
    assert float(clone(123)) == pytest.approx(float(schedule(123)))


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="lr decay must be one of"):
        schedules.LargeBatchSchedule(1.0, 10, decay="step")
    with pytest.raises(ValueError, match="warmup_steps must be in"):
        schedules.LargeBatchSchedule(1.0, 10, warmup_steps=11)


def test_config_validation_and_json_round_trip():
    config = TrainConfig(hidden_size=64, precision="mixed_float16").validate()
    assert TrainConfig.from_json(config.to_json()) == config
    with pytest.raises(ValueError, match="precision must be one of"):
        TrainConfig(precision="float64").validate()
    with pytest.raises(ValueError, match="batch_size must be positive"):
        TrainConfig(batch_size=0).validate()
    with pytest.raises(ValueError, match="allreduce_dtype=float16 needs"):
        TrainConfig(precision="float32", allreduce_dtype="float16").validate()


@pytest.mark.parametrize("decay", ["linear", "cosine", "exponential"])
def test_planned_schedule_with_a_fixed_plan_equals_the_step_schedule(decay):
    fixed = schedules.LargeBatchSchedule(2.0, total_steps=300, warmup_steps=20, decay=decay)
    plan = schedules.SchedulePlan(300, warmup_steps=20)
    planned = schedules.LargeBatchSchedule(2.0, 300, 20, decay, plan=plan)
    for iteration in range(330):
        assert float(planned(iteration)) == pytest.approx(
            float(fixed(iteration)), rel=1e-5, abs=1e-7
        ), iteration
        plan.advance(iteration + 1)
    assert float(plan.progress) == 1.0


def test_a_shorter_plan_bends_the_decay_to_end_there_without_a_jump():
    plan = schedules.SchedulePlan(1000, warmup_steps=0, cooldown_fraction=1.0)
    schedule = schedules.LargeBatchSchedule(1.0, 1000, 0, "linear", plan=plan)
    rates = []
    for iteration in range(400):
        rates.append(float(schedule(iteration)))
        # At iteration 100 the budget turns out to hold only 400 updates.
        plan.advance(iteration + 1, planned_steps=400 if iteration >= 99 else None)
    assert rates[99] == pytest.approx(0.901, abs=1e-6)
    steps = -np.diff(rates)
    # Before the new plan 1/1000 per update; from it on the rest of the decay
    # (0.901) spreads evenly over the 301 updates left: no jump either way.
    np.testing.assert_allclose(steps[:99], 1e-3, rtol=1e-4)
    np.testing.assert_allclose(steps[99:], 0.901 / 301, rtol=1e-4)
    assert float(plan.progress) == pytest.approx(1.0)
    assert float(schedule(400)) == pytest.approx(0.0, abs=1e-7)


def test_the_rate_follows_the_recipe_then_cools_down_to_the_budgets_end():
    plan = schedules.SchedulePlan(1000, warmup_steps=0, cooldown_fraction=0.2)
    schedule = schedules.LargeBatchSchedule(1.0, 1000, 0, "linear", plan=plan)
    rates = []
    for iteration in range(500):
        rates.append(float(schedule(iteration)))
        plan.advance(iteration + 1, planned_steps=500)
    steps = -np.diff(rates)
    # The recipe's slope (1/1000) until the last 20% of the 500-step budget,
    # then the rest of the rate (0.6) spread over the last 100 updates.
    np.testing.assert_allclose(steps[:399], 1e-3, rtol=1e-4)
    np.testing.assert_allclose(steps[400:], 0.6 / 100, rtol=1e-4)
    assert rates[400] == pytest.approx(0.6, abs=1e-6)
    assert float(plan.progress) == pytest.approx(1.0)


def test_a_budget_beyond_the_recipe_changes_nothing():
    fixed = schedules.LargeBatchSchedule(1.0, total_steps=300, warmup_steps=10)
    plan = schedules.SchedulePlan(300, warmup_steps=10)
    planned = schedules.LargeBatchSchedule(1.0, 300, 10, plan=plan)
    for iteration in range(300):
        assert float(planned(iteration)) == pytest.approx(float(fixed(iteration)), abs=1e-6)
        plan.advance(iteration + 1, planned_steps=300)


def test_a_skipped_update_does_not_advance_the_decay():
    plan = schedules.SchedulePlan(10)
    plan.advance(1)
    plan.advance(1)  # the optimizer skipped: iterations did not move
    assert float(plan.progress) == pytest.approx(0.1)
    plan.advance(2)
    assert float(plan.progress) == pytest.approx(0.2)


def test_plan_round_trips_through_a_checkpoint(tmp_path):
    plan = schedules.SchedulePlan(100, warmup_steps=5)
    for iteration in range(1, 31):
        plan.advance(iteration, planned_steps=60)
    path = tf.train.Checkpoint(**plan.variables()).write(str(tmp_path / "plan"))
    restored = schedules.SchedulePlan(100, warmup_steps=5)
    tf.train.Checkpoint(**restored.variables()).read(path).assert_consumed()
    for name, variable in plan.variables().items():
        assert restored.variables()[name].numpy() == variable.numpy(), name


def test_no_prediction_keeps_the_planned_end():
    # A resumed launch has no rate of its own yet: the restored end holds.
    plan = schedules.SchedulePlan(100, warmup_steps=5)
    plan.advance(30, planned_steps=60)
    plan.advance(31, planned_steps=schedules.NO_PREDICTION)
    assert int(plan.planned_steps.numpy()) == 60
    plan.advance(32, planned_steps=50)
    assert int(plan.planned_steps.numpy()) == 50


def test_budget_planner_predicts_from_the_settled_rate():
    planner = schedules.BudgetPlanner(max_steps=10_000, deadline=1000.0, settle_steps=10, margin=0)
    # Steps 0-10 are slow (compilation): not measured, no prediction (the plan holds).
    assert planner.plan(0, now=0.0) == schedules.NO_PREDICTION
    assert planner.plan(10, now=100.0) == schedules.NO_PREDICTION
    # Then 2 steps a second: 600 s left hold 1200 more steps.
    assert planner.plan(610, now=400.0) == 610 + 1200
    # A faster machine is capped by max_steps; after the deadline, nothing more.
    assert planner.plan(6000, now=500.0) == 10_000
    assert planner.plan(4100, now=1200.0) == 4100
    with pytest.raises(ValueError, match="bad budget planner settings"):
        schedules.BudgetPlanner(max_steps=0, deadline=1.0)
