"""Framing: normalized text -> the byte ids the model reads, `DOC_START` + UTF-8 bytes.

NumPy functions for lists of `str`, and `_tf` twins for `tf.string` tensors that agree exactly.
"""

from typing import Any
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tf_mlstm.data.text import DOC_START_BYTE

PAD_ID = 0
"""The default pad id: a byte normalized text never contains."""

PADDINGS = ("right", "left")


class FramedIds(NamedTuple):
    """A batch of framed, padded texts (NumPy arrays or tensors).

    Attributes:
      ids: [N, T] framed bytes, padded on the right or left.
      valid: [N, T] float32, 1 on the framed bytes and 0 on the padding.
      lengths: [N] int32 framed bytes kept per row, `DOC_START` included.
      truncated: [N] bool, whether the framed text was longer than `max_length`.

    Example:

    >>> from tf_mlstm.data import framing
    >>> framed = framing.frame_ids(["hi", "hello"], padding="left")
    >>> framed.ids.tolist()
    [[0, 0, 0, 10, 104, 105], [10, 104, 101, 108, 108, 111]]
    >>> framed.lengths.tolist(), framed.truncated.tolist()
    ([3, 6], [False, False])
    """

    ids: Any
    valid: Any
    lengths: Any
    truncated: Any


def _check(padding, max_length, pad_to_multiple, pad_id):
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {', '.join(PADDINGS)}, got {padding!r}")
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be >= 1 (DOC_START is always kept), got {max_length}")
    if pad_to_multiple < 1:
        raise ValueError(f"pad_to_multiple must be >= 1, got {pad_to_multiple}")
    if not 0 <= pad_id <= 255:
        raise ValueError(f"pad_id must be a byte value in [0, 255], got {pad_id}")


# === NumPy ===


def frame_bytes(text) -> bytes:
    """The framed bytes of one normalized text.

    Args:
      text: a normalized text (`normalize_text` output), str.

    Returns:
      `DOC_START` followed by the UTF-8 bytes of `text`.
    """
    return DOC_START_BYTE + text.encode("utf-8")


def frame_ids(
    texts, padding="right", max_length=None, pad_to_multiple=1, pad_id=PAD_ID, dtype=np.int32
) -> FramedIds:
    """Frames normalized texts into one padded array of byte ids.

    Args:
      texts: a sequence of normalized texts (str).
      padding: "right" or "left": the side the padding goes on.
      max_length: framed bytes per row at most (`DOC_START` included); None: no limit.
      pad_to_multiple: pad the width to a multiple of this.
      pad_id: the byte value of the padding.
      dtype: the NumPy dtype of `ids`.

    Returns:
      A `FramedIds` of NumPy arrays.

    Raises:
      ValueError: an unknown padding side or an out-of-range option.
    """
    _check(padding, max_length, pad_to_multiple, pad_id)
    framed = [frame_bytes(text) for text in texts]
    full = np.array([len(row) for row in framed], np.int32)
    lengths = full if max_length is None else np.minimum(full, max_length)
    width = -(-int(lengths.max(initial=0)) // pad_to_multiple) * pad_to_multiple
    ids = np.full((len(framed), width), pad_id, dtype)
    for row, (data, length) in enumerate(zip(framed, lengths)):
        start = 0 if padding == "right" else width - length
        ids[row, start : start + length] = np.frombuffer(data, np.uint8, count=length)
    positions = np.arange(width)[None, :]
    if padding == "right":
        valid = positions < lengths[:, None]
    else:
        valid = positions >= width - lengths[:, None]
    return FramedIds(ids, valid.astype(np.float32), lengths, full > lengths)


# === TensorFlow ===


def frame_bytes_tf(texts) -> tf.Tensor:
    """The framed bytes of normalized texts, in the graph (`frame_bytes`'s twin).

    Args:
      texts: a `tf.string` tensor of normalized texts, any shape.

    Returns:
      A `tf.string` tensor of the same shape: `DOC_START` + each text.
    """
    return tf.strings.join([DOC_START_BYTE, texts])


def valid_mask_tf(lengths, width, padding="right", dtype=tf.float32) -> tf.Tensor:
    """[N, width] mask of the framed bytes of rows of `lengths` bytes.

    Args:
      lengths: [N] int32 framed bytes per row.
      width: the row width T (a scalar).
      padding: "right" or "left", as the rows were padded.
      dtype: the mask's dtype.

    Returns:
      [N, width] `dtype`, 1 on the framed bytes and 0 on the padding.
    """
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {', '.join(PADDINGS)}, got {padding!r}")
    positions = tf.range(width)[None, :]
    if padding == "right":
        return tf.cast(positions < lengths[:, None], dtype)
    return tf.cast(positions >= width - lengths[:, None], dtype)


def frame_ids_tf(
    texts, padding="right", max_length=None, pad_to_multiple=1, pad_id=PAD_ID, dtype=tf.int32
) -> FramedIds:
    """Frames a batch of normalized texts in the graph (`frame_ids`'s twin).

    Args:
      texts: [N] `tf.string` of normalized texts.
      padding, max_length, pad_to_multiple, pad_id: as for `frame_ids`.
      dtype: the dtype of `ids`.

    Returns:
      A `FramedIds` of tensors.

    Raises:
      ValueError: an unknown padding side or an out-of-range option.
    """
    _check(padding, max_length, pad_to_multiple, pad_id)
    framed = frame_bytes_tf(texts)
    full = tf.strings.length(framed)
    if max_length is None:
        truncated = tf.zeros_like(full, tf.bool)
    else:
        truncated = full > max_length
        framed = tf.strings.substr(framed, 0, max_length)
    chars = tf.strings.bytes_split(framed)
    codes = tf.reshape(tf.io.decode_raw(chars.flat_values, tf.uint8), [-1])
    ragged = chars.with_flat_values(tf.cast(codes, dtype))
    lengths = tf.cast(ragged.row_lengths(), tf.int32)
    # At least 0: the max of an empty batch is the lowest int32.
    longest = tf.maximum(tf.reduce_max(lengths), 0)
    width = (longest + pad_to_multiple - 1) // pad_to_multiple * pad_to_multiple
    ids = ragged.to_tensor(default_value=tf.cast(pad_id, dtype))
    ids = tf.pad(ids, [[0, 0], [0, width - tf.shape(ids)[1]]], constant_values=pad_id)
    if padding == "left":
        # Reversing each row's bytes, then the whole row, moves the padding
        # to the front and leaves the bytes in order.
        ids = tf.reverse(tf.reverse_sequence(ids, lengths, seq_axis=1, batch_axis=0), axis=[1])
    return FramedIds(ids, valid_mask_tf(lengths, width, padding), lengths, truncated)
