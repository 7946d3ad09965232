"""Tests for `BytePreprocessor`: the one place text becomes ids (NumPy and graph forms agree)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.data.text import DOC_START
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models.preprocessor import BytePreprocessor

RAW = ["  Great <br/>film!\t", "", "caf\u00e9 \U0001f600 " + "x" * 20, "ok"]

PREPROCESSORS = {
    "windows": BytePreprocessor.for_windows(8),
    "classifier": BytePreprocessor.for_classifier(6),
    "prompts": BytePreprocessor.for_prompts(),
    "raw text": BytePreprocessor("left", max_length=10, normalize=True),
}


@pytest.mark.parametrize("name", PREPROCESSORS)
def test_numpy_and_graph_forms_agree_in_a_traced_function(name):
    preprocessor = PREPROCESSORS[name]
    texts = RAW if preprocessor.normalize else [normalize_text(t) for t in RAW]
    graph = tf.function(
        lambda t: tuple(preprocessor(t)), input_signature=[tf.TensorSpec([None], tf.string)]
    )(tf.constant(texts))
    for got, want in zip(graph, preprocessor.frame(texts), strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


def test_golden_rows_of_each_constructor():
    texts = ["ab", "abcd"]
    windows = BytePreprocessor.for_windows(4).frame(texts)
    np.testing.assert_array_equal(
        windows.ids, [[DOC_START, 97, 98, 0, 0, 0, 0, 0], [DOC_START, 97, 98, 99, 100, 0, 0, 0]]
    )
    classifier = BytePreprocessor.for_classifier(4).frame(texts)
    np.testing.assert_array_equal(classifier.ids, [[0, DOC_START, 97, 98], [DOC_START, 97, 98, 99]])
    assert classifier.truncated.tolist() == [False, True]
    prompts = BytePreprocessor.for_prompts().frame(texts)
    np.testing.assert_array_equal(
        prompts.ids, [[DOC_START, DOC_START, DOC_START, 97, 98], [DOC_START, 97, 98, 99, 100]]
    )
    # Raw text is normalized first: whitespace collapses, break tags become spaces.
    raw = BytePreprocessor(normalize=True).frame(["  a<br>b  "])
    np.testing.assert_array_equal(raw.ids, [[DOC_START, 97, 32, 98]])


def test_valid_mask_matches_the_framed_rows():
    preprocessor = BytePreprocessor.for_classifier(6)
    framed = preprocessor.frame(["abc", "abcdefgh", ""])
    mask = preprocessor.valid_mask(tf.constant(framed.lengths), framed.ids.shape[1])
    np.testing.assert_array_equal(mask.numpy(), framed.valid)


def test_config_round_trip_and_keras_serialization():
    preprocessor = BytePreprocessor("left", max_length=7, pad_to_multiple=2, name="bytes")
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(preprocessor))
    assert isinstance(copy, BytePreprocessor)
    assert copy.get_config() == preprocessor.get_config()
    assert not copy.trainable and not copy.weights


@pytest.mark.parametrize(
    "options, message",
    [
        ({"padding": "middle"}, "padding must be one of right, left"),
        ({"max_length": 0}, "max_length must be >= 1"),
        ({"pad_to_multiple": 0}, "pad_to_multiple must be >= 1"),
        ({"pad_id": 256}, "pad_id must be a byte value"),
    ],
)
def test_bad_options_are_refused_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        BytePreprocessor(**options)
