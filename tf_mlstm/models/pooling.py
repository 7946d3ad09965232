"""The one definition of a text's pooled features (`kinds.FEATURE_KINDS`)."""

import tensorflow as tf

from tf_mlstm.models.kinds import FEATURE_KINDS

# sqrt(max(variance, floor)): the floor keeps the gradient of `std` finite
# where a text's variance is 0 (one position); it moves the value by at most
# 1e-6.
STD_FLOOR = 1e-12

# The statistics (names of `layers.recurrence.POOLED`) each kind needs.
_NEEDS = {
    "mean": ("h_sum",),
    "max": ("h_max",),
    "min": ("h_min",),
    "std": ("h_sum", "h_square_sum"),
    "cell_mean": ("c_sum",),
    "cell_max": ("c_max",),
    "cell_min": ("c_min",),
}


def sequence_statistics(hidden, valid, kinds) -> dict[str, tf.Tensor]:
    """The hidden-state statistics `kinds` need, over each row's valid positions.

    Args:
      hidden: [B, T, H] hidden states.
      valid: [B, T] 1 on the text, 0 on padding (at least one 1 a row).
      kinds: feature kinds of the hidden sequence (`kinds.SEQUENCE_KINDS`).

    Returns:
      {statistic: [B, H] float32}, named as the recurrence names them.
    """
    keys = {key for kind in kinds for key in _NEEDS.get(kind, ())}
    cells = sorted(key for key in keys if key.startswith("c_"))
    if cells:
        raise ValueError(f"a hidden sequence has no cell statistics {cells}")
    h = tf.cast(hidden, tf.float32)
    mask = tf.cast(valid, tf.float32)[..., None]
    inside = mask > 0
    largest = tf.float32.max
    reducers = {
        "h_sum": lambda: tf.reduce_sum(h * mask, axis=1),
        "h_square_sum": lambda: tf.reduce_sum(h * h * mask, axis=1),
        "h_max": lambda: tf.reduce_max(tf.where(inside, h, -largest), axis=1),
        "h_min": lambda: tf.reduce_min(tf.where(inside, h, largest), axis=1),
    }
    return {key: reducers[key]() for key in sorted(keys)}


def pooled_features(statistics, final, count, kinds=FEATURE_KINDS) -> dict[str, tf.Tensor]:
    """The features `kinds` of each row.

    Args:
      statistics: `sequence_statistics`, or the recurrence's accumulators.
      final: the final (h, c) after the text.
      count: [B] positions of each text (at least 1 counts).
      kinds: names of `kinds.FEATURE_KINDS`.

    Returns:
      {kind: [B, H] float32}.
    """
    s = {key: tf.cast(value, tf.float32) for key, value in statistics.items()}
    count = tf.maximum(tf.cast(count, tf.float32), 1.0)[:, None]

    def mean(key):
        return s[key] / count

    def std():
        m = mean("h_sum")
        return tf.sqrt(tf.maximum(s["h_square_sum"] / count - m * m, STD_FLOOR))

    makers = {
        "cell": lambda: tf.cast(final[1], tf.float32),
        "hidden": lambda: tf.cast(final[0], tf.float32),
        "mean": lambda: mean("h_sum"),
        "max": lambda: s["h_max"],
        "min": lambda: s["h_min"],
        "std": std,
        "cell_mean": lambda: mean("c_sum"),
        "cell_max": lambda: s["c_max"],
        "cell_min": lambda: s["c_min"],
    }
    unknown = [kind for kind in kinds if kind not in makers]
    if unknown:
        raise ValueError(f"unknown feature kinds {unknown}; choose from {list(FEATURE_KINDS)}")
    return {kind: makers[kind]() for kind in kinds}
