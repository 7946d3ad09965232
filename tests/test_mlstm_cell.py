"""MLSTMCell: golden values against NumPy, gradients, config, precisions."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.layers import MLSTM
from tf_mlstm.layers import MLSTMCell


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def numpy_mlstm(x, h, c, weights, weight_norm=True):
    """A float64 reference of the documented math, step by step."""
    w_x, w_mx, w_mh, w_h, b = (np.asarray(w, np.float64) for w in weights[:5])
    if weight_norm:
        gains = [np.asarray(g, np.float64) for g in weights[5:]]
        w_x, w_mx, w_mh, w_h = (
            w * g / np.linalg.norm(w, axis=0) for w, g in zip((w_x, w_mx, w_mh, w_h), gains)
        )
    outputs = []
    for t in range(x.shape[1]):
        m = (x[:, t] @ w_mx) * (h @ w_mh)
        z = x[:, t] @ w_x + m @ w_h + b
        i, f, o, u = np.split(z, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(u)
        h = _sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs, 1), h, c


def _weights(cell):
    names = ["kernel_x", "kernel_mx", "kernel_mh", "kernel_h", "bias"]
    if cell.weight_norm:
        names += ["gain_x", "gain_mx", "gain_mh", "gain_h"]
    return [getattr(cell, n).numpy() for n in names]


def _randomize(layer, seed=0):
    rng = np.random.RandomState(seed)
    for v in layer.weights:
        v.assign(rng.uniform(-0.6, 0.6, v.shape).astype("float32"))


@pytest.mark.parametrize("weight_norm", [True, False])
def test_golden_values_against_numpy(weight_norm):
    batch, steps, dim, units = 3, 9, 5, 7
    rng = np.random.RandomState(1)
    x = rng.randn(batch, steps, dim)
    h0, c0 = rng.randn(2, batch, units) * 0.5
    cell = MLSTMCell(units, weight_norm=weight_norm)
    cell.build((batch, dim))
    _randomize(cell)
    want_seq, want_h, want_c = numpy_mlstm(x, h0, c0, _weights(cell), weight_norm)
    rnn = keras.layers.RNN(cell, return_sequences=True, return_state=True)
    got_seq, got_h, got_c = rnn(
        x.astype("float32"), initial_state=[h0.astype("float32"), c0.astype("float32")]
    )
    # float32 against float64 over 9 steps: 1e-5 absolute is ~100 ulps.
    np.testing.assert_allclose(got_seq, want_seq, atol=1e-5)
    np.testing.assert_allclose(got_h, want_h, atol=1e-5)
    np.testing.assert_allclose(got_c, want_c, atol=1e-5)


def test_sequence_layer_matches_cell_in_rnn():
    batch, steps, dim, units = 2, 11, 4, 6
    x = np.random.RandomState(2).randn(batch, steps, dim).astype("float32")
    layer = MLSTM(units)
    layer.build((batch, steps, dim))
    _randomize(layer, seed=3)
    want_seq, want_h, want_c = numpy_mlstm(
        x.astype(np.float64),
        np.zeros((batch, units)),
        np.zeros((batch, units)),
        _weights(layer.cell),
    )
    for training in (False, True):
        seq, (h, c) = layer(x, training=training)
        np.testing.assert_allclose(seq, want_seq, atol=1e-5)
        np.testing.assert_allclose(h, want_h, atol=1e-5)
        np.testing.assert_allclose(c, want_c, atol=1e-5)


def test_gradients_against_finite_differences():
    batch, steps, dim, units = 2, 4, 3, 3
    rng = np.random.RandomState(4)
    x = tf.constant(rng.randn(batch, steps, dim), tf.float64)
    layer = MLSTM(units, dtype="float64")
    layer.build((batch, steps, dim))
    _randomize(layer, seed=5)

    def loss():
        seq, (h, c) = layer(x, training=True)
        return tf.reduce_sum(tf.sin(seq)) + tf.reduce_sum(h * c)

    with tf.GradientTape() as tape:
        value = loss()
    grads = tape.gradient(value, layer.trainable_variables)
    eps = 1e-6
    for var, grad in zip(layer.trainable_variables, grads):
        flat = var.numpy().ravel()
        for index in rng.choice(flat.size, min(flat.size, 4), replace=False):
            saved = flat[index]
            for sign in (1, -1):
                flat[index] = saved + sign * eps
                var.assign(flat.reshape(var.shape))
                if sign == 1:
                    up = float(loss())
                else:
                    down = float(loss())
            flat[index] = saved
            var.assign(flat.reshape(var.shape))
            numeric = (up - down) / (2 * eps)
            np.testing.assert_allclose(
                grad.numpy().ravel()[index], numeric, rtol=1e-5, atol=1e-8, err_msg=var.name
            )


def test_reset_mask_zeroes_state_before_step():
    units = 4
    layer = MLSTM(units)
    x = np.random.RandomState(6).randn(1, 6, 3).astype("float32")
    layer.build(x.shape)
    keep = np.ones((1, 6), "float32")
    keep[0, 3] = 0
    seq, _ = layer(x, keep=keep)
    fresh, _ = layer(x[:, 3:])
    np.testing.assert_allclose(seq[:, 3:], fresh, atol=1e-6)


def test_config_round_trip():
    cell = MLSTMCell(5, weight_norm=False, recurrent_initializer="identity", name="c")
    clone = MLSTMCell.from_config(cell.get_config())
    assert clone.get_config() == cell.get_config()
    layer = MLSTM(5, weight_norm=False, return_sequences=False)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(clone, MLSTM)
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize("policy", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_precision_policies(policy):
    layer = MLSTM(8, dtype=policy)
    x = np.random.RandomState(7).randn(2, 5, 3).astype("float32")
    layer.build(x.shape)
    reference = MLSTM(8)
    reference.build(x.shape)
    for src, dst in zip(layer.weights, reference.weights):
        dst.assign(src)
    assert all(v.dtype == "float32" for v in layer.weights)
    with tf.GradientTape() as tape:
        seq, (h, c) = layer(x, training=True)
        loss = tf.reduce_sum(tf.cast(seq, tf.float32))
    compute = keras.mixed_precision.Policy(policy).compute_dtype
    assert seq.dtype == compute and h.dtype == compute and c.dtype == compute
    grads = tape.gradient(loss, layer.trainable_variables)
    assert all(g.dtype == tf.float32 for g in grads)
    want, _ = reference(x)
    tolerance = {"float32": 1e-6, "mixed_float16": 1e-2, "mixed_bfloat16": 5e-2}[policy]
    np.testing.assert_allclose(tf.cast(seq, tf.float32), want, atol=tolerance)


def test_bad_units():
    with pytest.raises(ValueError, match="units must be positive"):
        MLSTMCell(0)
