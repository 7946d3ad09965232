"""`MLSTMClassifier`: a dense head on pooled features of the mLSTM, trained together.

The classifier task on the language model: the encoder (an
`MLSTMLanguageModel`) reads left-padded rows, `[pad ... pad, DOC_START,
text bytes]`, so its state resets at `DOC_START` and the padding cannot
reach the features or the language-model loss; features are the final
states and statistics of the hidden state over the text, defined once in
`pooling`; the head is linear or one ReLU layer, with optional dropout, in
float32 under every precision policy. `tf-mlstm-finetune` trains it through
the distributed runner (`transfer.finetune`); the prediction helpers here
run it over lists of texts.
"""

import keras
import numpy as np
import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm.data.fields import split_keys
from tf_mlstm.models import pooling
from tf_mlstm.models.kinds import SEQUENCE_KINDS
from tf_mlstm.models.preprocessor import BytePreprocessor
from tf_mlstm.progress import Progress

# === Data ===


def frame_left_padded(texts, max_length):
    """The fine-tuning rows (`BytePreprocessor.for_classifier`), as uint8.

    Args:
      texts: normalized texts.
      max_length: bytes per row at most (DOC_START included); longer texts
        keep their first `max_length - 1` bytes.

    Returns:
      A `framing.FramedIds` of NumPy arrays.
    """
    return BytePreprocessor.for_classifier(max_length).frame(texts, np.uint8)


def _valid_mask(ids, lengths):
    """[B, T] 1 on the framed text (the last `lengths` positions), 0 on padding."""
    return BytePreprocessor.for_classifier(None).valid_mask(lengths, tf.shape(ids)[1])


# === Model ===


@keras.saving.register_keras_serializable(package="tf_mlstm")
class MLSTMClassifier(keras.Model):
    """A dense head on features of an `MLSTMLanguageModel`, trained together.

    Call: `model(ids, lengths, training=None, dropout_seed=None)` ->
    `(logits [B, K] float32, hidden [B, T, H])` for left-padded ids (see the
    module doc). `dropout_seed` ([2] int) seeds the head's dropout in
    training (stateless, so a resumed run repeats it); without it the dropout
    draws from TensorFlow's global generator.

    Args:
      encoder: the language model.
      num_labels: outputs: sigmoid labels, or the classes of a softmax.
      feature: one of `kinds.SEQUENCE_KINDS`, or several (a tuple or a
        comma-separated string), concatenated in that order.
      softmax: whether the outputs are one softmax (K classes) rather than a
        sigmoid each.
      head_hidden: 0 for a linear head, else the units of one ReLU layer
        before the output layer.
      head_dropout: dropout rate before the output layer, in training.
      head_init: None (random), or (kernel [D, K], bias [K]): the output
        layer's starting values (not part of the config: a saved model
        carries its trained weights).
      **kwargs: base model arguments.
    """

    def __init__(
        self,
        encoder,
        num_labels,
        feature="cell",
        softmax=False,
        head_hidden=0,
        head_dropout=0.0,
        head_init=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.feature_kinds = split_keys(feature)
        unknown = [kind for kind in self.feature_kinds if kind not in SEQUENCE_KINDS]
        if not self.feature_kinds or unknown:
            raise errors.InvalidValueError(
                f"feature must name kinds of {SEQUENCE_KINDS}, got {feature!r}."
            )
        self.encoder = encoder
        self.num_labels = int(num_labels)
        self.feature = ",".join(self.feature_kinds)
        self.softmax = bool(softmax)
        self.head_hidden = int(head_hidden)
        self.head_dropout = float(head_dropout)
        # float32 under every policy: the head, logits and loss stay in float32.
        width = encoder.hidden_size * len(self.feature_kinds)
        self.hidden_layer = None
        if self.head_hidden:
            self.hidden_layer = keras.layers.Dense(
                self.head_hidden, activation="relu", dtype="float32", name="head_hidden"
            )
            self.hidden_layer.build((None, width))
            width = self.head_hidden
        initializers = {}
        if head_init is not None:
            kernel, bias = (np.asarray(value, np.float32) for value in head_init)
            if kernel.shape != (width, self.num_labels) or bias.shape != (self.num_labels,):
                raise errors.InvalidValueError(
                    f"head_init shapes {kernel.shape}, {bias.shape} do not fit a head of "
                    f"{width} features and {self.num_labels} outputs"
                )
            # Initial values: under a multi-worker strategy every worker
            # starts from the chief's.
            initializers = {
                "kernel_initializer": keras.initializers.Constant(kernel),
                "bias_initializer": keras.initializers.Constant(bias),
            }
        self.classifier = keras.layers.Dense(
            self.num_labels, dtype="float32", name="classifier", **initializers
        )
        self.classifier.build((None, width))

    def head_layers(self):
        """{checkpoint name: layer} of the head (`classifier`, maybe `head_hidden`)."""
        layers = {"classifier": self.classifier}
        if self.hidden_layer is not None:
            layers["head_hidden"] = self.hidden_layer
        return layers

    def probabilities(self, logits):
        """Softmax or sigmoid of `logits`, as the head was trained."""
        return tf.nn.softmax(logits) if self.softmax else tf.sigmoid(logits)

    def head(self, features, training=None, dropout_seed=None):
        """Logits [B, K] float32 from [B, H] features."""
        x = features
        if self.hidden_layer is not None:
            x = self.hidden_layer(x)
        if training and self.head_dropout > 0:
            keep = 1.0 - self.head_dropout
            if dropout_seed is None:
                draws = tf.random.uniform(tf.shape(x))
            else:
                draws = tf.random.stateless_uniform(tf.shape(x), seed=dropout_seed)
            x = x * tf.cast(draws < keep, x.dtype) / keep
        return self.classifier(x)

    def text_features(self, ids, lengths, training=None):
        """([B, D] float32 features, [B, T, H] hidden states) of left-padded rows."""
        ids = tf.cast(ids, tf.int32)
        valid = _valid_mask(ids, lengths)
        hidden, final = self.encoder.encode(ids, training=training)
        kinds = self.feature_kinds
        statistics = pooling.sequence_statistics(hidden, valid, kinds)
        count = tf.reduce_sum(valid, axis=1)
        features = pooling.pooled_features(statistics, final, count, kinds)
        return tf.concat([features[kind] for kind in kinds], axis=1), hidden

    def call(self, ids, lengths, training=None, dropout_seed=None):
        features, hidden = self.text_features(ids, lengths, training=training)
        return self.head(features, training=training, dropout_seed=dropout_seed), hidden

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_labels": self.num_labels,
                "feature": self.feature,
                "softmax": self.softmax,
                "head_hidden": self.head_hidden,
                "head_dropout": self.head_dropout,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def lm_loss_per_text(model, hidden, ids, lengths):
    """Mean next-byte cross-entropy (nats) over each text's own bytes: [B]."""
    ids = tf.cast(ids, tf.int32)
    valid = _valid_mask(ids, lengths)
    logits = tf.cast(model.encoder.head(hidden[:, :-1]), tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids[:, 1:], logits=logits)
    # Both the input and the predicted byte must be text (not padding).
    weights = valid[:, 1:] * valid[:, :-1]
    return tf.reduce_sum(ce * weights, axis=1) / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)


# === Prediction ===


def predict_probabilities(model, split, max_length, batch_size=64, progress=False):
    """Probabilities of `model` for every text of `split`: [N, K] float32.

    Sigmoid outputs (one per label), or one softmax over K classes. `split` is
    a `labeled.LabeledData` or a list of normalized texts.

    With `progress`, the texts done are reported (see `tf_mlstm.progress`).
    """
    return _batched(
        lambda i, n: model.probabilities(model(i, n, training=False)[0]),
        getattr(split, "texts", split),
        max_length,
        batch_size,
        progress,
        "Predicting",
    )


def predict_features(model, texts, max_length, batch_size=64, progress=False):
    """The head's input features of `model` for normalized `texts`: [N, D] float32."""
    return _batched(
        lambda i, n: model.text_features(i, n, training=False)[0],
        texts,
        max_length,
        batch_size,
        progress,
        "Featurizing",
    )


def _batched(fn, texts, max_length, batch_size, progress, title):
    """`fn(ids, lengths)` over left-padded batches of `texts`, concatenated."""
    framed = frame_left_padded(texts, max_length)
    ids, lengths = framed.ids, framed.lengths
    call = tf.function(fn, reduce_retracing=True)
    outputs = []
    with Progress(title, len(ids), "texts", enabled=progress) as report:
        for start in range(0, len(ids), batch_size):
            rows = slice(start, start + batch_size)
            outputs.append(call(tf.constant(ids[rows]), lengths[rows]).numpy())
            report.advance(len(outputs[-1]))
    return np.concatenate(outputs, axis=0)
