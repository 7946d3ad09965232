"""TensorBoard output of a real training run: scalar tags by name, HParams, a profile."""

import json
import os
import pathlib
import sys

import _forkserver
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from _models import PINNED_FLAGS

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_training_writes_named_scalars_hparams_and_a_profile(tmp_path):
    model_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "tf_mlstm.cli.train",
        f"--model_dir={model_dir}",
        *PINNED_FLAGS,
        "--hidden_size=16",
        "--embedding_size=8",
        "--seq_length=16",
        "--batch_size=4",
        "--max_steps=6",
        "--log_every_steps=2",
        "--eval_every_steps=3",
        "--eval_batches=2",
        "--sample_every_steps=0",
        "--profile_steps=2,4",
        "--lr=0.0123",
        "--noexport",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = _forkserver.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]

    train = event_accumulator.EventAccumulator(
        str(model_dir / "train"), size_guidance={event_accumulator.TENSORS: 0}
    )
    train.Reload()
    tags = set(train.Tags()["tensors"])
    for tag in (
        "loss",
        "bits_per_char",
        "learning_rate",
        "gradient_norm",
        "chars_per_second",
        "skipped_steps",
    ):
        assert tag in tags, sorted(tags)
    assert [e.step for e in train.Tensors("loss")] == [2, 4, 6]
    validation = event_accumulator.EventAccumulator(
        str(model_dir / "validation"), size_guidance={event_accumulator.TENSORS: 0}
    )
    validation.Reload()
    assert [e.step for e in validation.Tensors("bits_per_char")] == [3, 6, 6]

    # HParams: the run's flags, values as given.
    hparams = None
    for event in tf.compat.v1.train.summary_iterator(
        str(next((model_dir / "train").glob("events.out.tfevents.*")))
    ):
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == "hparams":
                data = plugin_data_pb2.HParamsPluginData.FromString(
                    value.metadata.plugin_data.content
                )
                if data.HasField("session_start_info"):
                    hparams = data.session_start_info.hparams
    assert hparams is not None
    assert hparams["lr"].number_value == pytest.approx(0.0123)
    assert hparams["hidden_size"].number_value == 16
    # The precision the run resolved from the hardware, as config.json records it.
    precision = json.loads((model_dir / "config.json").read_text())["precision"]
    assert precision != "auto" and hparams["precision"].string_value == precision

    # The profiler's trace of steps 3-4.
    traces = list((model_dir / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert traces, sorted(str(p) for p in (model_dir / "train").rglob("*"))


def test_profile_steps_must_be_a_range():
    from tf_mlstm.config import TrainConfig  # pylint: disable=g-import-not-at-top

    assert TrainConfig(profile_steps="2,4").validate().profile_steps == "2,4"
    for bad in ("4,2", "3", "a,b", "-1,2"):
        with pytest.raises(ValueError, match="profile_steps must be START,END"):
            TrainConfig(profile_steps=bad).validate()
