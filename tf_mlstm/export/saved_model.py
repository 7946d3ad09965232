"""SavedModel export: string-in signatures that serve without tf_mlstm.

Signatures (all take `text`: a [N] tf.string batch of raw UTF-8 text, which
they normalize in-graph as training did):

- `featurize`: `cell`, `hidden` (final states), `mean`, `max` (pooled hidden
  states), each [N, H] float32;
- `score`: `bits_per_char` [N] and `chars` [N], the text's mean bits per
  character under the model.
- `generate`: takes `prompt` [N] tf.string and scalars `length` (int32),
  `temperature` (float32) and `seed` (int64); returns `text` [N], each
  prompt's sampled continuation of up to `length` bytes, ended early where
  the model ends the review (invalid UTF-8 replaced by U+FFFD).
- `classify` (only with a `ClassifierHead`): `probability` [N] (of the
  positive class), `label` [N] int64 and `neuron` [N] (the sentiment
  neuron's feature value), from a logistic regression on standardized
  features computed in-graph.

The exported model runs in float32 whatever precision it trained in. The
text normalization uses the `NormalizeUTF8` op of TensorFlow Text, so a
process that loads the SavedModel must have `tensorflow_text` imported (the
standard TensorFlow Serving binary links it).
"""

import dataclasses
import os

import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import fileio
from tf_mlstm.data.text import DOC_START
from tf_mlstm.data.text import normalize_text_tf
from tf_mlstm.models import featurize
from tf_mlstm.models import sampling

# Documented import path (docs/transfer.md); the run folder's owner defines it.
from tf_mlstm.rundir import load_trained_model  # noqa: F401 pylint: disable=unused-import

SERVING_WINDOW = 256


@dataclasses.dataclass(frozen=True, eq=False)
class ClassifierHead:
    """A binary logistic regression on standardized features, as plain arrays.

    The transfer tools build one from a fitted classifier; it lives here, with
    no scikit-learn in it, so the export never depends on the transfer code.

    Attributes:
      feature_kinds: which of `featurize.FEATURE_KINDS` are concatenated, in order.
      mean: [D] standardizer mean (D = hidden size x number of kinds).
      scale: [D] standardizer scale.
      weights: [D] logistic weights on standardized features.
      bias: logistic intercept.
      classes: (negative label, positive label).
      neuron: index into the D features of the sentiment neuron.
    """

    feature_kinds: tuple
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    classes: tuple = (0, 1)
    neuron: int = 0

    def check(self, hidden_size):
        """Raises ValueError unless the arrays fit a model of `hidden_size` units."""
        unknown = [k for k in self.feature_kinds if k not in featurize.FEATURE_KINDS]
        if unknown or not self.feature_kinds:
            raise ValueError(
                f"classifier feature kinds {list(self.feature_kinds)} are not a non-empty "
                f"subset of {list(featurize.FEATURE_KINDS)}"
            )
        width = hidden_size * len(self.feature_kinds)
        for name in ("mean", "scale", "weights"):
            shape = np.shape(getattr(self, name))
            if shape != (width,):
                raise ValueError(
                    f"classifier {name} has shape {shape}, but a {hidden_size}-unit model with "
                    f"features {list(self.feature_kinds)} gives ({width},): was it fitted on "
                    "another model?"
                )
        if not 0 <= self.neuron < width:
            raise ValueError(f"classifier neuron {self.neuron} is outside [0, {width})")


class ServingModule(tf.Module):
    """Wraps a language model with string-in signatures.

    Args:
      model: an `MLSTMLanguageModel` (float32 for serving).
      window: bytes per model call.
      classifier: optional `ClassifierHead`; adds the `classify` signature.

    Raises:
      ValueError: the classifier does not fit the model.
    """

    def __init__(self, model, window=SERVING_WINDOW, classifier=None):
        super().__init__()
        self.model = model
        self.window = window
        self.classifier = None
        if classifier is not None:
            classifier.check(model.hidden_size)
            self.classifier = classifier
            # Variables rather than constants, so the arrays are stored as
            # checkpoint values instead of inside the graph definition.
            self.classifier_mean = tf.Variable(
                np.asarray(classifier.mean, np.float32), trainable=False, name="classifier_mean"
            )
            self.classifier_scale = tf.Variable(
                np.asarray(classifier.scale, np.float32), trainable=False, name="classifier_scale"
            )
            self.classifier_weights = tf.Variable(
                np.asarray(classifier.weights, np.float32),
                trainable=False,
                name="classifier_weights",
            )
            self.classifier_bias = tf.Variable(
                float(classifier.bias), dtype=tf.float32, trainable=False, name="classifier_bias"
            )
            self.classifier_classes = tf.constant(np.asarray(classifier.classes, np.int64))
            # Only a module with a classifier has this function to save.
            self.classify = tf.function(
                self._classify, input_signature=[tf.TensorSpec([None], tf.string)]
            )

    def _ids(self, text):
        return featurize.texts_to_ids(normalize_text_tf(text), self.window)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def featurize(self, text):
        ids, valid, _ = self._ids(text)
        return featurize.featurize_ids(self.model, ids, valid, self.window)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def score(self, text):
        ids, valid, _ = self._ids(text)
        bits, chars = featurize.score_ids(self.model, ids, valid, self.window)
        return {"bits_per_char": bits / tf.maximum(chars, 1.0), "chars": chars}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([], tf.int32),
            tf.TensorSpec([], tf.float32),
            tf.TensorSpec([], tf.int64),
        ]
    )
    def generate(self, prompt, length, temperature, seed):
        checks = [
            tf.debugging.assert_non_negative(length, message="generate: length must be >= 0"),
            tf.debugging.assert_positive(temperature, message="generate: temperature must be > 0"),
        ]
        with tf.control_dependencies(checks):
            ids = left_aligned_ids(normalize_text_tf(prompt))
        sampler = sampling.make_sampler(self.model)
        generated, _ = sampler(ids, length, temperature, seed, -1, 0.0, True, -1)
        return {"text": generated_text(generated)}

    def _classify(self, text):
        ids, valid, _ = self._ids(text)
        features = featurize.featurize_ids(self.model, ids, valid, self.window)
        x = tf.concat([features[kind] for kind in self.classifier.feature_kinds], axis=1)
        standardized = (x - self.classifier_mean) / self.classifier_scale
        logit = tf.linalg.matvec(standardized, self.classifier_weights) + self.classifier_bias
        probability = tf.sigmoid(logit)
        label = tf.gather(self.classifier_classes, tf.cast(logit > 0, tf.int32))
        return {
            "probability": probability,
            "label": label,
            "neuron": x[:, self.classifier.neuron],
        }

    def signatures(self):
        """The signatures to export, by name."""
        signatures = {
            "featurize": self.featurize,
            "score": self.score,
            "generate": self.generate,
            "serving_default": self.featurize,
        }
        if self.classifier is not None:
            signatures["classify"] = self.classify
        return signatures


def left_aligned_ids(texts):
    """Frames normalized texts as prompts, padded on the left.

    The padding is `DOC_START`, which resets the state, so every row ends in
    the state its text alone gives, and all rows continue from the last
    column together.

    Args:
      texts: [N] tf.string of normalized texts.

    Returns:
      [N, T] int32 byte ids, each row `DOC_START`... `DOC_START` text.
    """
    ids, valid, lengths = featurize.texts_to_ids(texts)
    ids = tf.reverse(tf.reverse_sequence(ids, lengths, seq_axis=1, batch_axis=0), axis=[1])
    real = tf.reverse(valid, axis=[1]) > 0
    return tf.where(real, ids, tf.fill(tf.shape(ids), DOC_START))


def generated_text(ids):
    """Sampled bytes [N, L] -> [N] tf.string, up to the first `DOC_START` or pad.

    Invalid UTF-8 (a multi-byte character cut short) becomes U+FFFD.
    """
    table = tf.constant([bytes([b]) for b in range(256)])
    ended = tf.logical_or(ids < 0, tf.equal(ids, DOC_START))
    keep = tf.equal(tf.cumsum(tf.cast(ended, tf.int32), axis=1), 0)
    pieces = tf.where(keep, tf.gather(table, tf.maximum(ids, 0)), "")
    raw = tf.strings.reduce_join(pieces, axis=-1)
    return tf.strings.unicode_transcode(
        raw, input_encoding="UTF-8", output_encoding="UTF-8", errors="replace"
    )


def export_saved_model(module, export_dir, metadata=None):
    """Writes a SavedModel with the module's signatures.

    Args:
      module: a `ServingModule` (or subclass with more signatures).
      export_dir: destination folder (replaced if present).
      metadata: optional dict written to `export_dir/assets.extra/meta.json`.

    Returns:
      export_dir.
    """
    if tf.io.gfile.exists(export_dir):
        tf.io.gfile.rmtree(export_dir)
    tf.saved_model.save(module, export_dir, signatures=module.signatures())
    if metadata:
        fileio.write_json_atomic(os.path.join(export_dir, "assets.extra", "meta.json"), metadata)
    logging.info("Exported SavedModel to %s", export_dir)
    return export_dir
