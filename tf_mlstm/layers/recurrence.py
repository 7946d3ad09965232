"""The mLSTM recurrence over a whole sequence, with a hand-written gradient.

Autodiff through a per-time-step loop keeps one weight gradient per step
(seq_length copies of each recurrent matrix) before summing them; at 4096
units and 256 steps that is tens of GiB and the per-step weight-gradient
products are skinny. Here the backward loop computes only data gradients and
stores the per-step quantities the weight gradients need; the weight
gradients are then one large matrix product each over all batch x time rows:

    dWh  = M^T  dZ      (M: [T*B, H] multiplicative states, dZ: [T*B, 4H])
    dWmh = Hp^T dHm     (Hp: [T*B, H] previous hidden states)

which run near the machine's matrix rate and need O(T*B*H) memory.

Shapes are time-major inside this module: inputs [T, B, ...].

Math per step (gate order i, f, o, u in the 4H axis):
    h, c  = keep_t * h, keep_t * c            (reset at document starts)
    hm    = h Wmh
    m     = xm_t * hm                         (xm_t = x_t Wmx)
    z     = xz_t + m Wh                       (xz_t = x_t Wx + b)
    i, f, o = sigmoid(z_i, z_f, z_o); u = tanh(z_u)
    c'    = f c + i u
    h'    = o tanh(c')
A position with valid_t = 0 leaves the state unchanged (padding after the
end of a text in an inference batch).
"""

import tensorflow as tf


def _step(h, c, xz_t, xm_t, keep_t, w_mh, w_h):
    """One mLSTM step; returns the new state and what backward needs."""
    h = h * keep_t
    c = c * keep_t
    hm = tf.matmul(h, w_mh)
    m = xm_t * hm
    z = xz_t + tf.matmul(m, w_h)
    zi, zf, zo, zu = tf.split(z, 4, axis=-1)
    i = tf.sigmoid(zi)
    f = tf.sigmoid(zf)
    o = tf.sigmoid(zo)
    u = tf.tanh(zu)
    c_new = f * c + i * u
    tc = tf.tanh(c_new)
    h_new = o * tc
    return h_new, c_new, (h, c, hm, m, tf.concat([i, f, o, u], -1), tc)


def mlstm_forward(xz, xm, h0, c0, keep, w_mh, w_h, valid=None, return_sequences=True):
    """Runs the recurrence without keeping anything for a backward pass.

    Args:
      xz: [T, B, 4H] input contribution to the gates (x Wx + b).
      xm: [T, B, H] input side of the multiplicative state (x Wmx).
      h0: [B, H] initial hidden state.
      c0: [B, H] initial cell state.
      keep: [T, B, 1] 0 where the state resets before the step, else 1.
      w_mh: [H, H] recurrent weight of the multiplicative state.
      w_h: [H, 4H] recurrent gate weight.
      valid: optional [T, B, 1]; 0 leaves the state unchanged at that step.
      return_sequences: whether to return the hidden state of every step.

    Returns:
      (outputs [T, B, H] or None, h_T, c_T).
    """
    steps = tf.shape(xz)[0]
    outputs = None
    if return_sequences:
        outputs = tf.TensorArray(xz.dtype, size=steps, element_shape=h0.shape)

    def body(t, h, c, outputs):
        h_new, c_new, _ = _step(h, c, xz[t], xm[t], keep[t], w_mh, w_h)
        if valid is not None:
            h_new = tf.where(valid[t] > 0, h_new, h)
            c_new = tf.where(valid[t] > 0, c_new, c)
        if outputs is not None:
            outputs = outputs.write(t, h_new)
        return t + 1, h_new, c_new, outputs

    if outputs is None:
        _, h, c = tf.while_loop(
            lambda t, *_: t < steps,
            lambda t, h, c: body(t, h, c, None)[:3],
            (tf.constant(0), h0, c0),
        )
        return None, h, c
    _, h, c, outputs = tf.while_loop(
        lambda t, *_: t < steps, body, (tf.constant(0), h0, c0, outputs)
    )
    return outputs.stack(), h, c


@tf.custom_gradient
def mlstm_sequence(xz, xm, h0, c0, keep, w_mh, w_h):
    """The recurrence for training: outputs and final state, custom gradient.

    Args and shapes as in `mlstm_forward` (no `valid`: training streams have
    no padding).

    Returns:
      (outputs [T, B, H], h_T, c_T). The gradient with respect to every input
      but `keep` is exact (checked against autodiff in the tests).
    """
    steps = tf.shape(xz)[0]
    batch, units = h0.shape[0], h0.shape[1]
    dtype = xz.dtype

    def array(width):
        return tf.TensorArray(dtype, size=steps, element_shape=(batch, width))

    def body(t, h, c, hs, hps, cps, hms, ms, gates, tcs):
        h_new, c_new, (hp, cp, hm, m, g, tc) = _step(h, c, xz[t], xm[t], keep[t], w_mh, w_h)
        return (
            t + 1,
            h_new,
            c_new,
            hs.write(t, h_new),
            hps.write(t, hp),
            cps.write(t, cp),
            hms.write(t, hm),
            ms.write(t, m),
            gates.write(t, g),
            tcs.write(t, tc),
        )

    loop_vars = (
        tf.constant(0),
        h0,
        c0,
        array(units),
        array(units),
        array(units),
        array(units),
        array(units),
        array(4 * units),
        array(units),
    )
    _, h_last, c_last, hs, hps, cps, hms, ms, gates, tcs = tf.while_loop(
        lambda t, *_: t < steps, body, loop_vars
    )
    hs, hps, cps = hs.stack(), hps.stack(), cps.stack()
    hms, ms, gates, tcs = hms.stack(), ms.stack(), gates.stack(), tcs.stack()

    def grad(d_outputs, d_h_last, d_c_last):
        d_outputs = _zeros_if_none(d_outputs, hs)
        d_h_last = _zeros_if_none(d_h_last, h_last)
        d_c_last = _zeros_if_none(d_c_last, c_last)
        w_h_t = tf.transpose(w_h)
        w_mh_t = tf.transpose(w_mh)

        def back(s, dh, dc, dzs, dhms, dxms):
            t = steps - 1 - s
            i, f, o, u = tf.split(gates[t], 4, axis=-1)
            tc = tcs[t]
            dh_total = dh + d_outputs[t]
            d_o = dh_total * tc
            dc_total = dc + dh_total * o * (1 - tc * tc)
            dz = tf.concat(
                [
                    dc_total * u * i * (1 - i),
                    dc_total * cps[t] * f * (1 - f),
                    d_o * o * (1 - o),
                    dc_total * i * (1 - u * u),
                ],
                axis=-1,
            )
            dm = tf.matmul(dz, w_h_t)
            dhm = dm * xm[t]
            dh_prev = tf.matmul(dhm, w_mh_t) * keep[t]
            dc_prev = dc_total * f * keep[t]
            return (
                s + 1,
                dh_prev,
                dc_prev,
                dzs.write(t, dz),
                dhms.write(t, dhm),
                dxms.write(t, dm * hms[t]),
            )

        _, dh0, dc0, dzs, dhms, dxms = tf.while_loop(
            lambda s, *_: s < steps,
            back,
            (tf.constant(0), d_h_last, d_c_last, array(4 * units), array(units), array(units)),
        )
        dzs, dhms, dxms = dzs.stack(), dhms.stack(), dxms.stack()
        rows = lambda x: tf.reshape(x, (-1, x.shape[-1]))
        d_w_h = tf.matmul(rows(ms), rows(dzs), transpose_a=True)
        d_w_mh = tf.matmul(rows(hps), rows(dhms), transpose_a=True)
        return dzs, dxms, dh0, dc0, None, d_w_mh, d_w_h

    return (hs, h_last, c_last), grad


def _zeros_if_none(grad, like):
    return tf.zeros_like(like) if grad is None else grad
