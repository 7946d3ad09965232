"""The mLSTM recurrence over a whole sequence, with a hand-written gradient.

Inputs are batch-major [B, T, ...], or tables [V, F] whose rows `ids` pick; in the loops the
state is feature-major, [H, B]. Each weight gradient is one product over all batch x time rows,
not one per step as autodiff keeps (docs/performance.md). `keep_t` 0 resets the state before a
step; `valid_t` 0 leaves it unchanged.
"""

import tensorflow as tf


def _to_feature_major(x):
    """[B, T, F] -> [T, F, B]."""
    return tf.transpose(x, (1, 2, 0))


def _to_batch_major(x):
    """[T, F, B] -> [B, T, F]."""
    return tf.transpose(x, (2, 0, 1))


# === Per-step elementwise math (feature-major: [rows, B]) ===


def _gates(zmm, xz_t, c, keep_t):
    """z = zmm + xz_t -> (h', c', s = sigmoid(z_ifo), u, keep_t * c, tanh(c'))."""
    units = c.shape[0]
    z_ifo, z_u = tf.split(zmm + xz_t, [3 * units, units], axis=0)
    s = tf.sigmoid(z_ifo)
    u = tf.tanh(z_u)
    i, f, o = tf.split(s, 3, axis=0)
    c_prev = c * keep_t
    c = f * c_prev + i * u
    tc = tf.tanh(c)
    return o * tc, c, s, u, c_prev, tc


def _inference_gates(zmm, xz_t, h, c, keep_t, valid_t):
    """The new (h, c); positions with valid_t = 0 keep the old state."""
    h_new, c_new, _, _, _, _ = _gates(zmm, xz_t, c, keep_t)
    if valid_t is None:
        return h_new, c_new
    valid = valid_t > 0
    return tf.where(valid, h_new, h), tf.where(valid, c_new, c)


def _gates_backward(dh, dc, s, u, c_prev, tc, keep_t):
    """Gradients at z ([4H, B]) and at the previous (unmasked) cell state."""
    i, f, o = tf.split(s, 3, axis=0)
    dc = dc + dh * o * (1 - tc * tc)
    dz = tf.concat(
        [
            dc * u * i * (1 - i),
            dc * c_prev * f * (1 - f),
            dh * tc * o * (1 - o),
            dc * i * (1 - u * u),
        ],
        axis=0,
    )
    return dz, dc * f * keep_t


def _dm_products(dm, xmk_t, hm_t, keep_t):
    """(dhm, dxm) at one step from dm = Wh dz."""
    return dm * xmk_t, dm * hm_t * keep_t


_XLA_BLOCKS = {}


def _block(fn, fused):
    """`fn`, or `fn` compiled by XLA into one fused kernel when `fused`."""
    if not fused:
        return fn
    if fn not in _XLA_BLOCKS:
        _XLA_BLOCKS[fn] = tf.function(fn, jit_compile=True, autograph=False)
    return _XLA_BLOCKS[fn]


# === The recurrence ===


class _StepInputs:
    """Feature-major inputs: `xz(t)` [4H, B], `xmk(t)` = keep_t * xm_t [H, B], `keep` [T, 1, B]."""

    def __init__(self, xz, xm, keep, ids, per_step=False):
        self.keep = _to_feature_major(keep)
        self.ids = None if ids is None else tf.cast(ids, tf.int32)
        self._tables = None
        if ids is None:
            self.steps = xz.shape[1] if xz.shape[1] is not None else tf.shape(xz)[1]
            self._xz = _to_feature_major(xz)
            self._xmk = _to_feature_major(xm * keep)
            return
        self.steps = ids.shape[1] if ids.shape[1] is not None else tf.shape(ids)[1]
        self._ids_tm = tf.transpose(self.ids)
        if per_step:
            self._tables = (xz, xm)
            return
        keep_tm = tf.transpose(keep, (1, 0, 2))
        self._xz = tf.transpose(tf.gather(xz, self._ids_tm), (0, 2, 1))
        self._xmk = tf.transpose(tf.gather(xm, self._ids_tm) * keep_tm, (0, 2, 1))

    def xz(self, t):
        if self._tables is None:
            return self._xz[t]
        return tf.transpose(tf.gather(self._tables[0], self._ids_tm[t]))

    def xmk(self, t):
        if self._tables is None:
            return self._xmk[t]
        return tf.transpose(tf.gather(self._tables[1], self._ids_tm[t])) * self.keep[t]


POOLED = ("h_sum", "h_square_sum", "h_max", "h_min", "c_sum", "c_max", "c_min")
"""The statistics `mlstm_forward(..., pool=True)` accumulates over the steps."""


def pooled_initial(like) -> dict[str, tf.Tensor]:
    """Statistics of no steps like `like`: float32 sums (float16 rounds), extremes at -/+max."""
    largest = like.dtype.max
    zeros = tf.zeros(tf.shape(like), tf.float32)
    low = tf.fill(tf.shape(like), tf.constant(-largest, like.dtype))
    high = tf.fill(tf.shape(like), tf.constant(largest, like.dtype))
    return {
        "h_sum": zeros,
        "h_square_sum": zeros,
        "h_max": low,
        "h_min": high,
        "c_sum": zeros,
        "c_max": low,
        "c_min": high,
    }


def combine_pooled(a, b) -> dict[str, tf.Tensor]:
    """The statistics of the steps of `a` and of `b` together."""
    return {
        key: (
            a[key] + b[key]
            if key.endswith("sum")
            else (tf.maximum if key.endswith("max") else tf.minimum)(a[key], b[key])
        )
        for key in POOLED
    }


def _step_pooled(h, c):
    h32 = tf.cast(h, tf.float32)
    return {
        "h_sum": h32,
        "h_square_sum": h32 * h32,
        "h_max": h,
        "h_min": h,
        "c_sum": tf.cast(c, tf.float32),
        "c_max": c,
        "c_min": c,
    }


def mlstm_forward(
    xz,
    xm,
    h0,
    c0,
    keep,
    w_mh,
    w_h,
    valid=None,
    return_sequences=True,
    fused=False,
    ids=None,
    pool=False,
) -> tuple:
    """Runs the recurrence without keeping anything for a backward pass.

    Args:
      xz: [B, T, 4H] input contribution to the gates (x Wx + b); with `ids`, a [V, 4H] table.
      xm: [B, T, H] input side of the multiplicative state (x Wmx); with `ids`, a [V, H] table.
      h0, c0: [B, H] initial hidden and cell states.
      w_mh, w_h: [H, H] multiplicative-state and [H, 4H] gate recurrent weights.
      keep, valid: [B, T, 1]; keep 0 resets the state before a step, valid (optional) 0 leaves it.
      return_sequences: whether to return the hidden state of every step.
      fused: each step's elementwise math as one XLA kernel (serving would then need XLA).
      ids: optional [B, T] integer rows of the `xz` and `xm` tables.
      pool: return statistics over the valid steps instead (dict keyed by `POOLED`).

    Returns:
      (outputs, h_T [B, H], c_T [B, H]); outputs [B, T, H], None, or the statistics.
    """
    inputs = _StepInputs(xz, xm, keep, ids, per_step=True)
    w_mh_t, w_h_t = tf.transpose(w_mh), tf.transpose(w_h)
    h0, c0 = tf.transpose(h0), tf.transpose(c0)
    gates = _block(_inference_gates, fused)
    cond = lambda t, *_: t < inputs.steps

    def run(valid):
        def step(t, h, c):
            m = inputs.xmk(t) * tf.matmul(w_mh_t, h)
            valid_t = None if valid is None else valid[t]
            return gates(tf.matmul(w_h_t, m), inputs.xz(t), h, c, inputs.keep[t], valid_t)

        if pool:

            def pool_body(t, h, c, pooled):
                h, c = step(t, h, c)
                update = combine_pooled(pooled, _step_pooled(h, c))
                if valid is not None:
                    mask = valid[t] > 0
                    update = {k: tf.where(mask, update[k], pooled[k]) for k in POOLED}
                return t + 1, h, c, update

            _, h, c, pooled = tf.while_loop(
                cond, pool_body, (tf.constant(0), h0, c0, pooled_initial(h0))
            )
            return {k: tf.transpose(v) for k, v in pooled.items()}, tf.transpose(h), tf.transpose(c)
        if not return_sequences:
            _, h, c = tf.while_loop(
                cond, lambda t, h, c: (t + 1,) + step(t, h, c), (tf.constant(0), h0, c0)
            )
            return None, tf.transpose(h), tf.transpose(c)

        def body(t, h, c, outputs):
            h, c = step(t, h, c)
            return t + 1, h, c, outputs.write(t, h)

        outputs = tf.TensorArray(xz.dtype, size=inputs.steps, element_shape=h0.shape)
        _, h, c, outputs = tf.while_loop(cond, body, (tf.constant(0), h0, c0, outputs))
        return _to_batch_major(outputs.stack()), tf.transpose(h), tf.transpose(c)

    if valid is None:
        return run(None)
    # Sorted-by-length batches are mostly windows without padding: skip the
    # per-step masking there.
    valid_f = _to_feature_major(valid)
    return tf.cond(tf.reduce_all(valid_f > 0), lambda: run(None), lambda: run(valid_f))


def mlstm_sequence(xz, xm, h0, c0, keep, w_mh, w_h, fused=False, ids=None) -> tuple:
    """The recurrence for training: outputs and final state, custom gradient.

    Args and shapes as in `mlstm_forward`, without `valid`; `fused` is off by
    default, no faster on CPU. With `ids`, the table gradients are summed.

    Returns:
      (outputs [B, T, H], h_T, c_T); every gradient but `keep`'s and `ids`' is exact.
    """
    if ids is None:
        return _SEQUENCE[bool(fused)](xz, xm, h0, c0, keep, w_mh, w_h)
    return _SEQUENCE_OF_TABLES[bool(fused)](xz, xm, h0, c0, keep, w_mh, w_h, ids)


def _sequence(xz, xm, h0, c0, keep, w_mh, w_h, ids, fused):
    inputs = _StepInputs(xz, xm, keep, ids)
    steps, keep_f = inputs.steps, inputs.keep
    dtype = xz.dtype
    w_mh_t, w_h_t = tf.transpose(w_mh), tf.transpose(w_h)
    h0_f, c0_f = tf.transpose(h0), tf.transpose(c0)
    units, batch = h0_f.shape

    def array(rows):
        # Read in the backward loop as well as stacked: keep elements after a read.
        return tf.TensorArray(
            dtype, size=steps, element_shape=(rows, batch), clear_after_read=False
        )

    gates = _block(_gates, fused)

    def body(t, h, c, hs, ms, hms, ss, us, cps, tcs):
        hm = tf.matmul(w_mh_t, h)
        m = inputs.xmk(t) * hm
        h, c, s, u, c_prev, tc = gates(tf.matmul(w_h_t, m), inputs.xz(t), c, keep_f[t])
        return (
            t + 1,
            h,
            c,
            hs.write(t, h),
            ms.write(t, m),
            hms.write(t, hm),
            ss.write(t, s),
            us.write(t, u),
            cps.write(t, c_prev),
            tcs.write(t, tc),
        )

    rows_per_step = (units, units, units, 3 * units, units, units, units)
    _, h_last, c_last, hs, ms, hms, ss, us, cps, tcs = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(0), h0_f, c0_f) + tuple(array(rows) for rows in rows_per_step),
    )
    outputs = _to_batch_major(hs.stack())

    def grad(d_outputs, d_h_last, d_c_last):
        d_h = tf.zeros_like(h0_f) if d_h_last is None else tf.transpose(d_h_last)
        d_c = tf.zeros_like(c0_f) if d_c_last is None else tf.transpose(d_c_last)
        d_out = None if d_outputs is None else _to_feature_major(d_outputs)
        gates_backward = _block(_gates_backward, fused)
        dm_products = _block(_dm_products, fused)

        def back(k, dh, dc, dzs, dhms, dxms):
            t = steps - 1 - k
            if d_out is not None:
                dh = dh + d_out[t]
            keep_t = keep_f[t]
            dz, dc = gates_backward(
                dh, dc, ss.read(t), us.read(t), cps.read(t), tcs.read(t), keep_t
            )
            dhm, dxm = dm_products(tf.matmul(w_h, dz), inputs.xmk(t), hms.read(t), keep_t)
            return (
                k + 1,
                tf.matmul(w_mh, dhm),
                dc,
                dzs.write(t, dz),
                dhms.write(t, dhm),
                dxms.write(t, dxm),
            )

        _, dh0, dc0, dzs, dhms, dxms = tf.while_loop(
            lambda k, *_: k < steps,
            back,
            (tf.constant(0), d_h, d_c, array(4 * units), array(units), array(units)),
        )
        # Everything batch-major from here: rows in (b, t) order.
        rows = lambda x: tf.reshape(x, (-1, x.shape[-1]))
        d_z = _to_batch_major(dzs.stack())
        d_xm = _to_batch_major(dxms.stack())
        h_prev = tf.concat([h0[:, None], outputs[:, :-1]], axis=1)
        d_w_h = tf.matmul(rows(_to_batch_major(ms.stack())), rows(d_z), transpose_a=True)
        d_w_mh = tf.matmul(rows(h_prev), rows(_to_batch_major(dhms.stack())), transpose_a=True)
        d_h0, d_c0 = tf.transpose(dh0), tf.transpose(dc0)
        if ids is None:
            return d_z, d_xm, d_h0, d_c0, None, d_w_mh, d_w_h
        flat_ids = tf.reshape(inputs.ids, (-1,))
        d_xz = tf.math.unsorted_segment_sum(rows(d_z), flat_ids, tf.shape(xz)[0])
        d_xm = tf.math.unsorted_segment_sum(rows(d_xm), flat_ids, tf.shape(xm)[0])
        return d_xz, d_xm, d_h0, d_c0, None, d_w_mh, d_w_h, None

    return (outputs, tf.transpose(h_last), tf.transpose(c_last)), grad


def _with_gradient(fused, tables):
    if tables:

        @tf.custom_gradient
        def sequence_of_tables(xz, xm, h0, c0, keep, w_mh, w_h, ids):
            return _sequence(xz, xm, h0, c0, keep, w_mh, w_h, ids, fused)

        return sequence_of_tables

    @tf.custom_gradient
    def sequence(xz, xm, h0, c0, keep, w_mh, w_h):
        return _sequence(xz, xm, h0, c0, keep, w_mh, w_h, None, fused)

    return sequence


_SEQUENCE = {fused: _with_gradient(fused, tables=False) for fused in (False, True)}
_SEQUENCE_OF_TABLES = {fused: _with_gradient(fused, tables=True) for fused in (False, True)}
