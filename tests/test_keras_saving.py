"""`.keras` round trips of every registered Keras object: same config, weights and outputs.

Registered under the `tf_mlstm` package: `MLSTMCell`, `MLSTM`,
`MLSTMBackbone`, `MLSTMLanguageModel`, `MLSTMClassifier`, `BytePreprocessor`
(in test_preprocessor.py), `PreReducedAdam` and
`LargeBatchSchedule` (the last two saved as a compiled model's optimizer).
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.config import FinetuneConfig
from tf_mlstm.config import TrainConfig
from tf_mlstm.data.text import DOC_START
from tf_mlstm.layers import MLSTM
from tf_mlstm.layers import MLSTMCell
from tf_mlstm.models.backbone import MLSTMBackbone
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTICLASS
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.rundir import CHECKPOINT_SUBDIR
from tf_mlstm.rundir import CONFIG_FILE
from tf_mlstm.rundir import FINETUNE_CONFIG_FILE
from tf_mlstm.rundir import RESULTS_FILE
from tf_mlstm.train import optimizer as optimizer_lib
from tf_mlstm.train import schedules

RNG = np.random.RandomState(0)
VECTORS = RNG.randn(2, 5, 3).astype("float32")
IDS = RNG.randint(32, 127, size=(2, 7)).astype("int32")
IDS[0, 3] = DOC_START  # a state reset inside the sequence


def _round_trip(model, path):
    model.save(path)
    return keras.models.load_model(path)


def _assert_same_values(got, want):
    got, want = tf.nest.flatten(got), tf.nest.flatten(want)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def _assert_same_weights(loaded, model):
    assert [w.name for w in loaded.weights] == [w.name for w in model.weights]
    _assert_same_values([w.numpy() for w in loaded.weights], [w.numpy() for w in model.weights])


def test_cell_in_a_keras_rnn(tmp_path):
    keras.utils.set_random_seed(1)
    cell = MLSTMCell(8, recurrent_initializer="identity", name="cell")
    inputs = keras.Input((None, 3))
    rnn = keras.layers.RNN(cell, return_sequences=True, return_state=True, name="rnn")
    model = keras.Model(inputs, rnn(inputs))
    loaded = _round_trip(model, tmp_path / "cell.keras")
    assert loaded.get_layer("rnn").cell.get_config() == cell.get_config()
    _assert_same_weights(loaded, model)
    _assert_same_values(loaded(VECTORS), model(VECTORS))


def test_sequence_layer(tmp_path):
    keras.utils.set_random_seed(2)
    layer = MLSTM(8, weight_norm=False, bias_initializer="ones", name="mlstm")
    inputs = keras.Input((None, 3))
    outputs, (h, c) = layer(inputs)
    model = keras.Model(inputs, [outputs, h, c])
    loaded = _round_trip(model, tmp_path / "mlstm.keras")
    assert loaded.get_layer("mlstm").get_config() == layer.get_config()
    _assert_same_weights(loaded, model)
    _assert_same_values(loaded(VECTORS), model(VECTORS))


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_language_model_with_its_optimizer_and_schedule(tmp_path, precision):
    keras.utils.set_random_seed(3)
    model = MLSTMLanguageModel(hidden_size=8, embedding_size=4, weight_norm=False, dtype=precision)
    model.build()
    schedule = schedules.LargeBatchSchedule(1e-3, 100, 10, "cosine")
    model.compile(
        optimizer=optimizer_lib.PreReducedAdam(
            learning_rate=schedule, global_clipnorm=0.5, skip_non_finite=False
        )
    )
    # One update, so the optimizer's step and moments are not their initial zeros.
    model.optimizer.apply(
        [tf.random.normal(v.shape, seed=i) for i, v in enumerate(model.trainable_variables)],
        model.trainable_variables,
    )
    state = [tf.fill((2, 8), 0.25), tf.fill((2, 8), -0.5)]

    loaded = _round_trip(model, tmp_path / "lm.keras")
    assert type(loaded) is MLSTMLanguageModel
    assert loaded.get_config() == model.get_config()
    assert loaded.dtype_policy.name == precision
    _assert_same_weights(loaded, model)
    _assert_same_values(loaded(IDS, initial_state=state), model(IDS, initial_state=state))

    optimizer = loaded.optimizer
    assert type(optimizer) is optimizer_lib.PreReducedAdam
    assert optimizer.get_config() == model.optimizer.get_config()
    assert optimizer.skip_non_finite is False and optimizer.global_clipnorm == 0.5
    # The schedule is back and at the saved step (mid-warmup: 2e-4).
    assert int(optimizer.iterations.numpy()) == 1
    assert float(optimizer.learning_rate) == pytest.approx(float(schedule(1))) == 2e-4
    _assert_same_values(
        [v.numpy() for v in optimizer.variables], [v.numpy() for v in model.optimizer.variables]
    )


# === The shared harness: every model through `.keras` and through a run folder ===

TEXTS = ["A  fine <br/>film.", "", "caf\u00e9 \U0001f600 " + "x" * 30]


def _assert_round_trips(model, outputs, tmp_path, write_run, load_run):
    """`.keras` and run-folder round trips give the same class, config, weights and outputs.

    Args:
      model: a built model.
      outputs: model -> its outputs on fixed inputs.
      tmp_path: a folder for the files.
      write_run: (model, run folder) -> writes the folder as the binaries do.
      load_run: run folder -> the model the tools load from it.
    """
    want = outputs(model)
    loaded = _round_trip(model, tmp_path / "model.keras")
    assert type(loaded) is type(model)
    assert loaded.get_config() == model.get_config()
    _assert_same_weights(loaded, model)
    _assert_same_values(outputs(loaded), want)

    run = tmp_path / "run"
    write_run(model, run)
    again = load_run(str(run))
    assert type(again) is type(model)
    _assert_same_values(
        [w.numpy() for w in again.weights],
        [w.numpy() for w in model.weights],
    )
    _assert_same_values(outputs(again), want)


def _train_config(run, encoder):
    return TrainConfig(
        model_dir=str(run),
        hidden_size=encoder.hidden_size,
        embedding_size=encoder.embedding_size,
        weight_norm=encoder.weight_norm,
    )


def _write_lm_run(model, run):
    """A `tf-mlstm-train` folder: config.json and a checkpoint of `model`."""
    (run / CHECKPOINT_SUBDIR).mkdir(parents=True)
    (run / CONFIG_FILE).write_text(_train_config(run, model).to_json())
    tf.train.Checkpoint(model=model).save(str(run / CHECKPOINT_SUBDIR / "ckpt"))


def test_backbone_round_trips(tmp_path):
    keras.utils.set_random_seed(6)
    backbone = MLSTMBackbone(hidden_size=8, embedding_size=4, weight_norm=False)
    backbone.build()
    loaded = _round_trip(backbone, tmp_path / "backbone.keras")
    assert type(loaded) is MLSTMBackbone and loaded.get_config() == backbone.get_config()
    _assert_same_weights(loaded, backbone)
    _assert_same_values(loaded(IDS), backbone(IDS))


def test_language_model_round_trips(tmp_path):
    keras.utils.set_random_seed(5)
    model = MLSTMLanguageModel(hidden_size=8, embedding_size=4, weight_norm=True, name="mlstm_lm")
    model.build()
    _assert_round_trips(
        model, lambda m: m(IDS), tmp_path, _write_lm_run, MLSTMLanguageModel.from_run
    )


def _write_finetune_run(model, run):
    """A finished `tf-mlstm-finetune` folder: both configs, results and a checkpoint."""
    spec = model.head_spec
    (run / CHECKPOINT_SUBDIR).mkdir(parents=True)
    (run / CONFIG_FILE).write_text(_train_config(run, model.encoder).to_json())
    label_key = ",".join(spec.classes) if spec.kind == MULTILABEL else "label"
    finetune_config = FinetuneConfig(
        init_model_dir=str(run),
        train_data="train.jsonl",
        model_dir=str(run),
        label_key=label_key,
        features=model.feature,
        head_hidden=model.head_hidden,
        head_dropout=model.head_dropout,
        max_length=model.max_length,
    )
    (run / FINETUNE_CONFIG_FILE).write_text(finetune_config.to_json())
    results = {"kind": spec.kind, "classes": list(spec.classes)}
    if spec.kind != MULTICLASS:
        keys = label_key.split(",")
        results["thresholds"] = dict(zip(keys, spec.thresholds or (0.5,), strict=True))
    (run / RESULTS_FILE).write_text(json.dumps(results))
    tf.train.Checkpoint(**model.checkpoint_objects()).save(str(run / CHECKPOINT_SUBDIR / "ckpt"))


@pytest.mark.parametrize(
    "spec, options",
    [
        (HeadSpec(BINARY, (0, 1), (0.3,)), {"feature": "cell"}),
        (HeadSpec(MULTICLASS, ("neg", "neu", "pos")), {"feature": "mean,max", "head_hidden": 5}),
        (
            HeadSpec(MULTILABEL, ("joy", "fear"), (0.2, 0.7)),
            {"feature": "std", "head_dropout": 0.3},
        ),
    ],
    ids=["binary", "three-classes-mlp", "multi-label"],
)
def test_classifier_round_trips(tmp_path, spec, options):
    keras.utils.set_random_seed(4)
    encoder = MLSTMLanguageModel(hidden_size=8, embedding_size=4, name="mlstm_lm")
    encoder.build()
    model = MLSTMClassifier(
        encoder,
        spec.outputs,
        softmax=spec.kind == MULTICLASS,
        max_length=12,
        head_spec=spec,
        **options,
    )
    texts = tf.constant(TEXTS)
    lengths = tf.constant([7, 4])

    def outputs(m):
        return [m(texts), m.forward(IDS, lengths)[0]]

    _assert_round_trips(model, outputs, tmp_path, _write_finetune_run, MLSTMClassifier.from_run)
    assert MLSTMClassifier.from_run(str(tmp_path / "run")).head_spec == spec
