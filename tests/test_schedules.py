"""Learning-rate schedules and the training config."""

import math

import keras
import numpy as np
import pytest

from tf_mlstm.train import schedules
from tf_mlstm.train.config import TrainConfig


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
    with pytest.raises(ValueError, match="--precision must be one of"):
        TrainConfig(precision="float64").validate()
    with pytest.raises(ValueError, match="--batch_size must be positive"):
        TrainConfig(batch_size=0).validate()
    with pytest.raises(ValueError, match="--allreduce_dtype=float16 needs"):
        TrainConfig(precision="float32", allreduce_dtype="float16").validate()
