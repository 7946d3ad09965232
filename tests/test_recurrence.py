"""The recurrence: hand-written sequence gradient vs autodiff, inference path, XLA."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.data.text import DOC_START
from tf_mlstm.layers import recurrence
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.models.language_model import bits_per_char_from_logits


def _inputs(batch=3, steps=7, units=5, dtype=tf.float64, seed=0):
    rng = np.random.RandomState(seed)
    value = lambda *shape, scale=1.0: tf.constant(rng.randn(*shape) * scale, dtype)
    keep = np.ones((batch, steps, 1))
    keep[0, steps // 3] = 0
    keep[-1, steps // 2] = 0
    return [
        value(batch, steps, 4 * units, scale=0.5),
        value(batch, steps, units),
        value(batch, units, scale=0.3),
        value(batch, units, scale=0.3),
        tf.constant(keep, dtype),
        value(units, units, scale=units**-0.5),
        value(units, 4 * units, scale=units**-0.5),
    ]


def _reference(xz, xm, h0, c0, keep, w_mh, w_h):
    """The documented math, one step at a time, for autodiff."""
    h, c, outputs = h0, c0, []
    for t in range(xz.shape[1]):
        h, c = h * keep[:, t], c * keep[:, t]
        z = xz[:, t] + tf.matmul(xm[:, t] * tf.matmul(h, w_mh), w_h)
        i, f, o, u = tf.split(z, 4, axis=-1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(u)
        h = tf.sigmoid(o) * tf.tanh(c)
        outputs.append(h)
    return tf.stack(outputs, axis=1), h, c


def _reference_states(xz, xm, h0, c0, keep, w_mh, w_h, valid):
    """NumPy: every step's (h, c) [B, T, H]; a step with valid 0 keeps the state."""
    sigmoid = lambda x: 1.0 / (1.0 + np.exp(-x))
    xz, xm, h, c, keep, w_mh, w_h = (
        np.asarray(a, np.float64) for a in (xz, xm, h0, c0, keep, w_mh, w_h)
    )
    hs, cs = [], []
    for t in range(xz.shape[1]):
        h_in, c_in = h * keep[:, t], c * keep[:, t]
        z = xz[:, t] + (xm[:, t] * (h_in @ w_mh)) @ w_h
        i, f, o, u = np.split(z, 4, axis=-1)
        c_new = sigmoid(f) * c_in + sigmoid(i) * np.tanh(u)
        h_new = sigmoid(o) * np.tanh(c_new)
        step_valid = np.reshape(valid[:, t], (-1, 1)) > 0
        h, c = np.where(step_valid, h_new, h), np.where(step_valid, c_new, c)
        hs.append(h)
        cs.append(c)
    return np.stack(hs, axis=1), np.stack(cs, axis=1)


def _gradients(fn, args, use_outputs=True):
    with tf.GradientTape() as tape:
        tape.watch(args)
        outputs, h, c = fn(*args)
        loss = tf.reduce_sum(h * c) + tf.reduce_sum(tf.cos(c))
        if use_outputs:
            loss += tf.reduce_sum(tf.sin(outputs))
    return [outputs, h, c], tape.gradient(loss, args)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("use_outputs", [True, False])
def test_sequence_gradient_matches_autodiff(fused, use_outputs):
    args = _inputs()
    want_values, want_grads = _gradients(_reference, args, use_outputs)
    fn = lambda *a: recurrence.mlstm_sequence(*a, fused=fused)
    got_values, got_grads = _gradients(fn, args, use_outputs)
    for want, got in zip(want_values, got_values):
        np.testing.assert_allclose(got, want, atol=1e-12)
    names = ["xz", "xm", "h0", "c0", "keep", "w_mh", "w_h"]
    for name, want, got in zip(names, want_grads, got_grads):
        if name != "keep":  # The reset mask is data, not differentiated.
            np.testing.assert_allclose(got, want, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("fused", [False, True])
def test_inference_path_matches_training_path(fused):
    args = _inputs(dtype=tf.float32)
    want = recurrence.mlstm_sequence(*args)
    got = recurrence.mlstm_forward(*args, fused=fused)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, atol=1e-6)
    _, h, c = recurrence.mlstm_forward(*args, return_sequences=False, fused=fused)
    np.testing.assert_allclose(h, want[1], atol=1e-6)
    np.testing.assert_allclose(c, want[2], atol=1e-6)


def test_invalid_steps_leave_the_state_unchanged():
    xz, xm, h0, c0, keep, w_mh, w_h = _inputs(dtype=tf.float32)
    valid = np.ones(keep.shape, "float32")
    valid[1, 4:] = 0
    for fused in (False, True):
        outputs, h, c = recurrence.mlstm_forward(
            xz, xm, h0, c0, keep, w_mh, w_h, valid=tf.constant(valid), fused=fused
        )
        short, h_short, c_short = recurrence.mlstm_forward(
            xz[1:2, :4], xm[1:2, :4], h0[1:2], c0[1:2], keep[1:2, :4], w_mh, w_h
        )
        np.testing.assert_allclose(h[1], h_short[0], atol=1e-6)
        np.testing.assert_allclose(c[1], c_short[0], atol=1e-6)
        np.testing.assert_allclose(outputs[1, 4:], np.repeat(h_short, 3, axis=0), atol=1e-6)


@pytest.mark.parametrize("masked", [False, True])
def test_pooling_in_the_loop_equals_pooling_the_sequence(masked):
    xz, xm, h0, c0, keep, w_mh, w_h = _inputs(dtype=tf.float32)
    valid = np.ones(keep.shape, "float32")
    if masked:
        valid[1, 4:] = 0
        valid[2, 1:] = 0
    args = (xz, xm, h0, c0, keep, w_mh, w_h)
    outputs, h, c = recurrence.mlstm_forward(*args, valid=tf.constant(valid))
    pooled, h_pool, c_pool = recurrence.mlstm_forward(*args, valid=tf.constant(valid), pool=True)
    hiddens, cells = _reference_states(xz, xm, h0, c0, keep, w_mh, w_h, valid)
    np.testing.assert_allclose(outputs, hiddens, atol=1e-5)
    mask = valid > 0
    want = {
        "h_sum": np.sum(np.where(mask, outputs, 0.0), axis=1),
        "h_square_sum": np.sum(np.where(mask, np.square(outputs), 0.0), axis=1),
        "h_max": np.max(np.where(mask, outputs, -np.inf), axis=1),
        "h_min": np.min(np.where(mask, outputs, np.inf), axis=1),
        "c_sum": np.sum(np.where(mask, cells, 0.0), axis=1),
        "c_max": np.max(np.where(mask, cells, -np.inf), axis=1),
        "c_min": np.min(np.where(mask, cells, np.inf), axis=1),
    }
    assert sorted(pooled) == sorted(recurrence.POOLED)
    for key in recurrence.POOLED:
        np.testing.assert_allclose(pooled[key], want[key], atol=1e-5, err_msg=key)
    np.testing.assert_allclose(h_pool, h, atol=1e-6)
    np.testing.assert_allclose(c_pool, c, atol=1e-6)


def _train_gradients(model, ids, targets, state, jit_compile):
    @tf.function(jit_compile=jit_compile)
    def step(ids, targets, h, c):
        with tf.GradientTape() as tape:
            logits, (h, c) = model(ids, initial_state=[h, c], training=True)
            bits, chars = bits_per_char_from_logits(logits, targets)
            loss = bits / chars
        return loss, tape.gradient(loss, model.trainable_variables), h, c

    return step(ids, targets, *state)


@pytest.mark.slow
def test_xla_training_step_gradient_equals_the_graph_one():
    keras.utils.set_random_seed(1)
    model = MLSTMLanguageModel(hidden_size=16, embedding_size=8)
    model.build()
    rng = np.random.RandomState(2)
    ids = rng.randint(32, 127, size=(4, 12)).astype("int32")
    ids[1, 5] = DOC_START
    targets = rng.randint(32, 127, size=(4, 12)).astype("int32")
    state = [tf.constant(rng.randn(4, 16).astype("float32") * 0.3) for _ in range(2)]
    want = _train_gradients(model, ids, targets, state, jit_compile=False)
    got = _train_gradients(model, ids, targets, state, jit_compile=True)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for var, w, g in zip(model.trainable_variables, want[1], got[1]):
        np.testing.assert_allclose(
            tf.convert_to_tensor(g), tf.convert_to_tensor(w), atol=1e-6, rtol=1e-5, err_msg=var.name
        )
    np.testing.assert_allclose(got[2], want[2], atol=1e-6)
    np.testing.assert_allclose(got[3], want[3], atol=1e-6)


def test_xla_training_step_stores_no_per_step_weight_gradients():
    """With XLA, memory stays O(T x B x H): no T copies of the recurrent matrices."""
    hidden, batch, steps = 256, 2, 64
    keras.utils.set_random_seed(3)
    model = MLSTMLanguageModel(hidden_size=hidden, embedding_size=8)
    model.build()
    ids = tf.constant(np.random.RandomState(4).randint(32, 127, size=(batch, steps)), tf.int32)

    @tf.function(jit_compile=True)
    def step(ids):
        with tf.GradientTape() as tape:
            logits, _ = model(ids, training=True)
            loss = tf.reduce_mean(logits)
        return tape.gradient(loss, model.trainable_variables)

    hlo = step.experimental_get_compiler_ir(ids)(stage="optimized_hlo")
    sizes = [
        int(np.prod([int(d) for d in dims.split(",") if d]))
        for dims in re.findall(r"f32\[([\d,]*)\]", hlo)
    ]
    # Naive autodiff keeps [steps, H, H] and [steps, H, 4H] per-step weight gradients.
    assert max(sizes) < steps * hidden * hidden // 4, max(sizes)


@pytest.mark.parametrize("fused", [False, True])
def test_table_rows_equal_gathered_inputs(fused):
    """The `ids` path (rows of [V, F] tables) equals gathering first, values and gradients."""
    xz, xm, h0, c0, keep, w_mh, w_h = _inputs()
    rng = np.random.RandomState(5)
    xz_table = tf.constant(rng.randn(11, xz.shape[-1]) * 0.5)
    xm_table = tf.constant(rng.randn(11, xm.shape[-1]))
    ids = tf.constant(rng.randint(0, 11, size=xz.shape[:2]), tf.int32)

    def gathered(xz_table, xm_table, h0, c0, keep, w_mh, w_h):
        xz, xm = tf.gather(xz_table, ids), tf.gather(xm_table, ids)
        return recurrence.mlstm_sequence(xz, xm, h0, c0, keep, w_mh, w_h, fused=fused)

    def tables(xz_table, xm_table, h0, c0, keep, w_mh, w_h):
        return recurrence.mlstm_sequence(
            xz_table, xm_table, h0, c0, keep, w_mh, w_h, fused=fused, ids=ids
        )

    args = [xz_table, xm_table, h0, c0, keep, w_mh, w_h]
    want_values, want_grads = _gradients(gathered, args)
    got_values, got_grads = _gradients(tables, args)
    for want, got in zip(want_values, got_values):
        np.testing.assert_allclose(got, want, atol=1e-12)
    for index, (want, got) in enumerate(zip(want_grads, got_grads)):
        if index != 4:
            np.testing.assert_allclose(
                tf.convert_to_tensor(got), tf.convert_to_tensor(want), atol=1e-12
            )
    inference = recurrence.mlstm_forward(*args, fused=fused, ids=ids)
    for want, got in zip(want_values, inference):
        np.testing.assert_allclose(got, want, atol=1e-12)
