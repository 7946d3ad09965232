"""Inference over whole texts: windowed featurization and scoring, state carried across windows."""

import tensorflow as tf

from tf_mlstm.layers import recurrence
from tf_mlstm.models import pooling
from tf_mlstm.models.kinds import FEATURE_KINDS


def _windows(model, ids, valid, window, body, initial, pool=False):
    batch = tf.shape(ids)[0]
    steps = tf.shape(ids)[1] // window
    state = model.initial_state(batch)

    def loop(k, h, c, acc):
        start = k * window
        ids_w = ids[:, start : start + window]
        valid_w = valid[:, start : start + window]
        outputs, (h, c) = model.encode(ids_w, [h, c], valid=valid_w, training=False, pool=pool)
        return k + 1, h, c, body(outputs, ids_w, valid_w, acc)

    _, h, c, acc = tf.while_loop(
        lambda k, *_: k < steps, loop, (tf.constant(0), state[0], state[1], initial)
    )
    return h, c, acc


def featurize_ids(model, ids, valid, window=256) -> dict[str, tf.Tensor]:
    """Features of each row: final states and pooled statistics of the states.

    Args:
      model: an `MLSTMLanguageModel`.
      ids: [N, T] byte ids, T a multiple of `window`.
      valid: [N, T] 1/0 mask of real bytes.
      window: bytes per model call.

    Returns:
      dict of float32 [N, H] tensors keyed by `FEATURE_KINDS`.
    """

    def pool(pooled, ids_w, valid_w, acc):
        # The recurrence pools each window's states inside its loop.
        return recurrence.combine_pooled(acc, pooled)

    initial = recurrence.pooled_initial(
        tf.zeros((tf.shape(ids)[0], model.hidden_size), model.compute_dtype)
    )
    h, c, acc = _windows(model, ids, valid, window, pool, initial, pool=True)
    return pooling.pooled_features(acc, (h, c), tf.reduce_sum(valid, axis=1), FEATURE_KINDS)


def score_ids(model, ids, valid, window=256) -> tuple[tf.Tensor, tf.Tensor]:
    """Bits per character of each row under the model (the framing `DOC_START` is given).

    Args:
      model: an `MLSTMLanguageModel`.
      ids: [N, T] byte ids, T a multiple of `window`.
      valid: [N, T] 1/0 mask.
      window: bytes per model call.

    Returns:
      (bits [N] float32 summed, chars [N] float32 scored).
    """
    batch = tf.shape(ids)[0]
    # Targets are the next byte; the last position of each window predicts the
    # first byte of the next window.
    targets = tf.concat([ids[:, 1:], tf.zeros((batch, 1), ids.dtype)], axis=1)
    target_valid = tf.concat([valid[:, 1:], tf.zeros((batch, 1))], axis=1)

    def accumulate(outputs, ids_w, valid_w, acc):
        bits, k = acc
        start = k * window
        logits = tf.cast(model.head(outputs), tf.float32)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=targets[:, start : start + window], logits=logits
        )
        weights = target_valid[:, start : start + window]
        return bits + tf.reduce_sum(ce * weights, axis=1) / tf.math.log(2.0), k + 1

    _, _, (bits, _) = _windows(
        model, ids, valid, window, accumulate, (tf.zeros((batch,)), tf.constant(0))
    )
    return bits, tf.reduce_sum(target_valid, axis=1)
