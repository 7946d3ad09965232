"""Tests for tf_mlstm.data.framing: goldens, and the NumPy and graph versions agree."""

import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.data import framing
from tf_mlstm.data.text import DOC_START

LIMIT = 8
TEXTS = [
    "",
    "caf\u00e9 \u2764\ufe0f \U0001f600",  # 2-, 3- and 4-byte characters, cut inside one at LIMIT
    "a" * 20,  # longer than the limit
    "b" * (LIMIT - 1),  # exactly the limit once framed
    "c" * LIMIT,  # one byte over
    "ok",
]


def _graph_version(texts, **options):
    """`frame_ids_tf` inside a traced function with an unknown batch size, as NumPy."""
    run = tf.function(
        lambda t: framing.frame_ids_tf(t, **options),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    return [value.numpy() for value in run(tf.constant(texts, tf.string))]


@pytest.mark.parametrize("padding", framing.PADDINGS)
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"max_length": LIMIT},
        {"pad_to_multiple": 5},
        {"max_length": LIMIT, "pad_to_multiple": 3, "pad_id": DOC_START},
        {"dtype": "uint8"},
    ],
)
def test_numpy_and_graph_versions_agree(padding, options):
    options = dict(options, padding=padding)
    for subset in (TEXTS, TEXTS[:1], TEXTS[1:2], []):
        want = framing.frame_ids(subset, **options)
        got = _graph_version(subset, **options)
        for name, expected, actual in zip(framing.FramedIds._fields, want, got):
            assert expected.dtype == actual.dtype, name
            np.testing.assert_array_equal(expected, actual, err_msg=f"{name} of {subset}")
        # The mask is the one `valid_mask_tf` gives for these lengths.
        mask = framing.valid_mask_tf(want.lengths, want.ids.shape[1], padding)
        np.testing.assert_array_equal(mask.numpy(), want.valid)


def test_frame_bytes_versions_agree():
    want = [framing.frame_bytes(text) for text in TEXTS]
    assert framing.frame_bytes_tf(tf.constant(TEXTS)).numpy().tolist() == want
    assert framing.frame_bytes("") == b"\n" and framing.frame_bytes("\u00e9") == b"\n\xc3\xa9"
    assert framing.frame_bytes_tf(tf.constant("hi")).numpy() == b"\nhi"


def test_right_padding_golden():
    ids, valid, lengths, truncated = framing.frame_ids(["ab", "", "\u00e9"], pad_to_multiple=4)
    assert ids.tolist() == [[10, 97, 98, 0], [10, 0, 0, 0], [10, 0xC3, 0xA9, 0]]
    assert valid.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 0]]
    assert lengths.tolist() == [3, 1, 3] and not truncated.any()


def test_left_padding_keeps_the_first_bytes():
    ids, valid, lengths, truncated = framing.frame_ids(["abcdef", "ab"], "left", max_length=4)
    assert ids.tolist() == [[10, 97, 98, 99], [0, 10, 97, 98]]
    assert valid.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]]
    assert lengths.tolist() == [4, 3] and truncated.tolist() == [True, False]


def test_width_is_the_longest_kept_row():
    # Exactly the limit is not truncated; the width never exceeds the limit
    # unless pad_to_multiple rounds it up.
    framed = framing.frame_ids(["b" * (LIMIT - 1), "a"], max_length=LIMIT)
    assert framed.ids.shape == (2, LIMIT) and not framed.truncated.any()
    assert framing.frame_ids(["a"], max_length=LIMIT).ids.shape == (1, 2)
    assert framing.frame_ids(["a" * 20], max_length=LIMIT, pad_to_multiple=3).ids.shape == (1, 9)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"padding": "middle"}, "padding must be one of right, left"),
        ({"max_length": 0}, "max_length must be >= 1"),
        ({"pad_to_multiple": 0}, "pad_to_multiple must be >= 1"),
        ({"pad_id": -1}, r"pad_id must be a byte value in \[0, 255\]"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        framing.frame_ids(["a"], **options)
    with pytest.raises(ValueError, match=message):
        framing.frame_ids_tf(tf.constant(["a"]), **options)
