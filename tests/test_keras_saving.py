"""`.keras` round trips of every registered Keras object: same config, weights and outputs.

Registered under the `tf_mlstm` package: `MLSTMCell`, `MLSTM`,
`MLSTMLanguageModel`, `MLSTMClassifier`, `PreReducedAdam` and
`LargeBatchSchedule` (the last two saved as a compiled model's optimizer).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.data.text import DOC_START
from tf_mlstm.layers import MLSTM
from tf_mlstm.layers import MLSTMCell
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.language_model import MLSTMLanguageModel
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


def test_sequence_classifier(tmp_path):
    keras.utils.set_random_seed(4)
    encoder = MLSTMLanguageModel(hidden_size=8, embedding_size=4)
    encoder.build()
    model = MLSTMClassifier(encoder, num_labels=3, feature="mean")
    lengths = tf.constant([7, 4])
    want = model(IDS, lengths)
    loaded = _round_trip(model, tmp_path / "classifier.keras")
    assert type(loaded) is MLSTMClassifier and type(loaded.encoder) is MLSTMLanguageModel
    assert loaded.get_config() == model.get_config()
    _assert_same_weights(loaded, model)
    _assert_same_values(loaded(IDS, lengths), want)
