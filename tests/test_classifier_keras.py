"""`MLSTMClassifier.from_run` as a Keras model of raw texts: compile, fit, evaluate, predict.

The fine-tuned form (predictions equal the exported `classify` signature's)
is tested with a real fine-tuning run in test_finetune.py.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from _models import write_untrained_model_dir
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTICLASS
from tf_mlstm.models.head import MULTILABEL

# A task the features can learn at once: the class is the first word.
WORDS = ("awful", "fine", "great")
TEXTS = [f"{WORDS[i % 3]}  film <br/>number {i}" for i in range(24)]
CLASSES = np.array([i % 3 for i in range(24)])


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    model_dir, _ = write_untrained_model_dir(tmp_path_factory.mktemp("lm") / "run", 16, 8)
    return str(model_dir)


def _texts(batch=8):
    return tf.data.Dataset.from_tensor_slices(TEXTS).batch(batch)


def test_k_classes_compile_fit_evaluate_predict_on_a_dataset(lm_dir):
    keras.utils.set_random_seed(0)
    model = MLSTMClassifier.from_run(lm_dir, num_classes=3, feature="mean", max_length=32)
    assert model.head_spec.kind == MULTICLASS and model.head_spec.classes == (0, 1, 2)
    lm_head = [w.numpy() for w in model.encoder.head.weights]
    embedding = model.encoder.embedding.embeddings.numpy()
    model.compile(
        optimizer=keras.optimizers.Adam(3e-2),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    data = tf.data.Dataset.from_tensor_slices((TEXTS, CLASSES)).shuffle(24, seed=0).batch(8)
    before = model.evaluate(data, verbose=0, return_dict=True)
    model.fit(data, epochs=6, verbose=0)
    after = model.evaluate(data, verbose=0, return_dict=True)
    assert after["loss"] < 0.7 * before["loss"]
    assert after["accuracy"] > 0.9
    # The encoder learned too; the next-byte head, which call() never uses, did not move.
    assert not np.array_equal(model.encoder.embedding.embeddings.numpy(), embedding)
    for got, want in zip(model.encoder.head.weights, lm_head, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)
    probabilities = model.predict(_texts(), verbose=0)
    assert probabilities.shape == (24, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    # Plain Python lists and arrays of texts, as a notebook has them, work alike.
    np.testing.assert_allclose(model.predict(TEXTS, verbose=0), probabilities, atol=1e-6)
    np.testing.assert_allclose(
        model.predict(np.array(TEXTS), batch_size=8, verbose=0), probabilities, atol=1e-6
    )
    on_lists = model.evaluate(TEXTS, CLASSES, batch_size=8, verbose=0, return_dict=True)
    assert on_lists["accuracy"] == pytest.approx(after["accuracy"], abs=1e-6)
    model.fit(TEXTS, CLASSES, batch_size=8, epochs=1, verbose=0)


def test_raw_texts_in_the_graph_equal_framed_normalized_texts(lm_dir):
    """call() normalizes and frames in the graph exactly as the NumPy form does for forward()."""
    keras.utils.set_random_seed(1)
    model = MLSTMClassifier.from_run(lm_dir, num_classes=2, feature="cell,max", max_length=20)
    assert model.head_spec.kind == BINARY
    served = model.predict(_texts(5), verbose=0)
    framed = model.preprocessor.frame([normalize_text(t) for t in TEXTS])
    assert framed.truncated.any()  # the limit is exercised
    logits, _ = model.forward(framed.ids, framed.lengths)
    np.testing.assert_allclose(served, model.head_spec.probabilities(logits), atol=1e-6)
    assert served.shape == (24, 2)


def test_several_labels_fit_with_binary_crossentropy(lm_dir):
    keras.utils.set_random_seed(2)
    model = MLSTMClassifier.from_run(lm_dir, num_labels=2, classes=("awful", "great"))
    assert model.head_spec.kind == MULTILABEL and model.head_spec.thresholds == (0.5, 0.5)
    labels = np.stack([CLASSES == 0, CLASSES == 2], axis=1).astype(np.float32)
    model.compile(optimizer=keras.optimizers.Adam(3e-2), loss="binary_crossentropy")
    data = tf.data.Dataset.from_tensor_slices((TEXTS, labels)).batch(8)
    history = model.fit(data, epochs=4, verbose=0).history["loss"]
    assert history[-1] < history[0]
    decided = model.head_spec.decide(model.predict(_texts(), verbose=0))
    assert decided.shape == (24, 2) and set(np.unique(decided)) <= {0, 1}


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "is a language model: give num_classes=K .* or num_labels=L"),
        ({"num_classes": 3, "num_labels": 2}, "is a language model: give num_classes=K"),
        ({"num_classes": 1}, "num_classes must be >= 2 and num_labels >= 1, got 1, None"),
        ({"num_labels": 0}, "num_classes must be >= 2 and num_labels >= 1, got None, 0"),
        ({"num_classes": 3, "classes": ("a", "b")}, "classes names 2 outputs, not 3"),
    ],
)
def test_bad_head_requests_are_one_clear_error(lm_dir, options, message):
    with pytest.raises(ValueError, match=message):
        MLSTMClassifier.from_run(lm_dir, **options)


def test_a_folder_without_a_model_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        MLSTMClassifier.from_run(str(tmp_path), num_classes=2)


def test_a_saved_classifier_reloads_without_warnings_with_its_optimizer(lm_dir, tmp_path):
    """`.save` then `keras.models.load_model`, as a Keras user does: no warning, same state."""
    keras.utils.set_random_seed(0)
    model = MLSTMClassifier.from_run(lm_dir, num_classes=3, feature="mean", max_length=32)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    data = tf.data.Dataset.from_tensor_slices((TEXTS, CLASSES)).batch(8)
    path = str(tmp_path / "clf.keras")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras's shuffle, build and optimizer warnings fail
        # Hidden by Python's own default filters (a library's deprecation notice to itself).
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        model.fit(data, epochs=1, verbose=0)
        model.save(path)
        loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(
        loaded.predict(_texts(), verbose=0), model.predict(_texts(), verbose=0)
    )
    assert not loaded.encoder.head.trainable
    assert len(loaded.optimizer.variables) == len(model.optimizer.variables)
    for got, want in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
