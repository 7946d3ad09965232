"""`MLSTMClassifier`: a dense head on pooled features of the mLSTM, trained together.

The encoder reads left-padded rows, so padding reaches neither the features nor the LM loss.
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.data.fields import split_keys
from tf_mlstm.data.text import check_texts
from tf_mlstm.models import pooling
from tf_mlstm.models import preset as preset_lib
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTICLASS
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.kinds import SEQUENCE_KINDS
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.models.preprocessor import BytePreprocessor
from tf_mlstm.progress import Progress

# === Data ===


def frame_left_padded(texts, max_length) -> tuple:
    """The fine-tuning rows (`BytePreprocessor.for_classifier`), as uint8.

    Args:
      texts: normalized texts.
      max_length: bytes per row at most (DOC_START included); longer texts are cut.

    Returns:
      A `framing.FramedIds` of NumPy arrays.
    """
    return BytePreprocessor.for_classifier(max_length).frame(texts, np.uint8)


def _valid_mask(ids, lengths):
    return BytePreprocessor.for_classifier(None).valid_mask(lengths, tf.shape(ids)[1])


# === Model ===


@keras.saving.register_keras_serializable(package="tf_mlstm")
class MLSTMClassifier(keras.Model):
    """A dense head on features of an `MLSTMLanguageModel`; `model(texts)` -> probabilities.

    Args:
      encoder: the language model.
      num_labels: outputs: sigmoid labels, or the classes of a softmax.
      feature: one of `kinds.SEQUENCE_KINDS`, or several (tuple or comma-separated), in order.
      softmax: the outputs are one softmax (K classes) rather than a sigmoid each.
      head_hidden: 0 for a linear head, else the units of one ReLU layer.
      head_dropout: dropout rate before the output layer, in training.
      head_init: None (random), or (kernel [D, K], bias [K]) to start from.
      max_length: framed bytes of a text read by `call` (None: all of it).
      head_spec: the outputs' `HeadSpec`, or None for the one the outputs imply.
      **kwargs: base model arguments.

    Example:

    >>> classifier = MLSTMClassifier.from_run(
    ...     model_dir, num_classes=2, classes=("negative", "positive"), feature="mean"
    ... )
    >>> probabilities = classifier(tf.constant(["Great phone.", "Broke in a day."]))
    >>> probabilities.shape, classifier.head_spec.kind
    (TensorShape([2, 2]), 'binary')
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
        max_length=None,
        head_spec=None,
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
        self.max_length = None if max_length is None else int(max_length)
        self.preprocessor = BytePreprocessor.for_classifier(self.max_length, normalize=True)
        if head_spec is None:
            head_spec = _implied_head(self.num_labels, self.softmax)
        elif isinstance(head_spec, dict):
            head_spec = HeadSpec(**head_spec)
        if head_spec.outputs != self.num_labels or (head_spec.kind == MULTICLASS) != softmax:
            raise errors.InvalidValueError(
                f"a {head_spec.kind} head of {len(head_spec.classes)} classes does not fit "
                f"{self.num_labels} {'softmax' if softmax else 'sigmoid'} outputs"
            )
        self.head_spec = head_spec
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
        # Every variable exists now: saved as built, a `.keras` file reloads
        # without Keras trying to build the model from an input shape (its
        # input is a string batch) and with the optimizer's variables.
        if not encoder.built:
            encoder.build()
        self.built = True

    def head_layers(self) -> dict[str, keras.layers.Dense]:
        """{checkpoint name: layer} of the head (`classifier`, maybe `head_hidden`)."""
        layers = {"classifier": self.classifier}
        if self.hidden_layer is not None:
            layers["head_hidden"] = self.hidden_layer
        return layers

    def checkpoint_objects(self) -> dict[str, keras.Layer]:
        """Checkpointed: the encoder as `model` (so `from_run` reads it), and the head."""
        return {"model": self.encoder, **self.head_layers()}

    def probabilities(self, logits) -> tf.Tensor:
        """Softmax or sigmoid of `logits`, as the head was trained."""
        return tf.nn.softmax(logits) if self.softmax else tf.sigmoid(logits)

    def head_logits(self, features, training=None, dropout_seed=None) -> tf.Tensor:
        """Logits [B, K] float32 of the head layers on [B, H] features."""
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

    def text_features(self, ids, lengths, training=None) -> tuple[tf.Tensor, tf.Tensor]:
        """([B, D] float32 features, [B, T, H] hidden states) of left-padded rows."""
        ids = tf.cast(ids, tf.int32)
        valid = _valid_mask(ids, lengths)
        hidden, final = self.encoder.encode(ids, training=training)
        kinds = self.feature_kinds
        statistics = pooling.sequence_statistics(hidden, valid, kinds)
        count = tf.reduce_sum(valid, axis=1)
        features = pooling.pooled_features(statistics, final, count, kinds)
        return tf.concat([features[kind] for kind in kinds], axis=1), hidden

    def forward(
        self, ids, lengths, training=None, dropout_seed=None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """(logits [B, K] float32, hidden [B, T, H]) of left-padded rows (the runner's step)."""
        features, hidden = self.text_features(ids, lengths, training=training)
        return self.head_logits(features, training=training, dropout_seed=dropout_seed), hidden

    def call(self, texts, training=None) -> tf.Tensor:
        framed = self.preprocessor(texts)
        logits, _ = self.forward(framed.ids, framed.lengths, training=training)
        return self.head_spec.probabilities_tf(logits)

    # Keras's data adapters take tensors, arrays of numbers and datasets; a
    # list of strings (what a notebook user has) becomes a string tensor, each
    # item checked (a None among them would be a data-adapter error), and
    # a list of labels (as scikit-learn takes them) an array. A dataset keeps
    # its own order: Keras's default `shuffle=True` would only warn that it
    # ignores it.
    def fit(self, x=None, y=None, *args, **kwargs) -> keras.callbacks.History:
        if isinstance(x, tf.data.Dataset) and len(args) < 7:  # shuffle not given by position
            kwargs.setdefault("shuffle", False)
        return super().fit(_texts_tensor(x), _labels_array(y), *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs) -> float | list | dict:
        return super().evaluate(_texts_tensor(x), _labels_array(y), *args, **kwargs)

    def predict(self, x, *args, **kwargs) -> np.ndarray:
        return super().predict(_texts_tensor(x), *args, **kwargs)

    # === From a run folder ===
    @classmethod
    def from_run(
        cls,
        model_dir,
        num_classes=None,
        num_labels=None,
        feature="mean,max,min,std",
        head_hidden=0,
        head_dropout=0.0,
        max_length=256,
        classes=None,
    ) -> "MLSTMClassifier":
        """A classifier on a run folder's model: a fine-tuned run's own, else a new head.

        Args:
          model_dir: a run folder of `tf-mlstm-train` or `tf-mlstm-finetune`.
          num_classes: K >= 2 classes of one label (2: one sigmoid; more: a softmax).
          num_labels: L >= 1 independent 0/1 labels (a sigmoid each).
          feature, head_hidden, head_dropout, max_length: the new head's (see the class).
          classes: names of the K classes or L labels (default 0..K-1).

        Returns:
          A built `MLSTMClassifier`.

        Raises:
          FileNotFoundError: no trained model in `model_dir`.
          ValueError: not one of `num_classes` and `num_labels`, or a count the run lacks.
        """
        if rundir.is_finetune_run(model_dir):
            return cls.from_finetune_run(model_dir, num_classes, num_labels)
        _check_new_head(model_dir, num_classes, num_labels)
        encoder = MLSTMLanguageModel.from_run(model_dir)
        return cls._with_new_head(
            encoder,
            num_classes,
            num_labels,
            feature,
            head_hidden,
            head_dropout,
            max_length,
            classes,
        )

    @classmethod
    def _with_new_head(
        cls,
        encoder,
        num_classes,
        num_labels,
        feature,
        head_hidden,
        head_dropout,
        max_length,
        classes,
    ):
        multilabel = num_labels is not None
        count = num_labels if multilabel else num_classes
        names = tuple(range(count)) if classes is None else tuple(classes)
        if len(names) != count:
            raise errors.InvalidValueError(f"classes names {len(names)} outputs, not {count}")
        # Each label on above 0.5, until thresholds are chosen on validation data.
        spec = HeadSpec.of(names, multilabel, (0.5,) * count if multilabel else ())
        model = cls(
            encoder,
            spec.outputs,
            feature,
            softmax=spec.kind == MULTICLASS,
            head_hidden=head_hidden,
            head_dropout=head_dropout,
            max_length=max_length,
            head_spec=spec,
        )
        # Keras's fit trains what call() uses: not the next-byte head.
        model.encoder.head.trainable = False
        return model

    @classmethod
    def from_finetune_run(
        cls, model_dir, num_classes=None, num_labels=None, precision="float32"
    ) -> "MLSTMClassifier":
        """The classifier of a finished `tf-mlstm-finetune` run, from its newest intact checkpoint.

        Args:
          model_dir: a finished `tf-mlstm-finetune` run folder.
          num_classes, num_labels: if given, what the run must have.
          precision: the encoder's policy (the head is float32).

        Returns:
          A built `MLSTMClassifier` with the run's `run_config` and `run_checkpoint`.

        Raises:
          InvalidValueError: no finished fine-tuning run, or not that many classes or labels.
          FileNotFoundError: no checkpoint.
        """
        config, results = rundir.read_finetune_run(model_dir)
        spec = finetuned_head_spec(config, results)
        _check_asked(model_dir, spec, num_classes, num_labels)
        train_config = rundir.read_config(model_dir)
        encoder = MLSTMLanguageModel.from_train_config(train_config, precision=precision)
        model = cls(
            encoder,
            spec.outputs,
            config.get("features", config.get("feature", "cell")),
            softmax=spec.kind == MULTICLASS,
            head_hidden=config.get("head_hidden", 0),
            head_dropout=config.get("head_dropout", 0.0),
            max_length=config["max_length"],
            head_spec=spec,
        )
        # The encoder and the head from one checkpoint, under the names the run saved them.
        restorer = tf.train.Checkpoint(**model.checkpoint_objects())
        encoder.run_config = train_config
        encoder.run_checkpoint = rundir.restore_model(restorer, model_dir)
        encoder.run_dir = model_dir
        model.encoder.head.trainable = False  # as in `from_run` of a language model
        return model

    # === Presets ===
    @classmethod
    def from_preset(
        cls,
        preset,
        num_classes=None,
        num_labels=None,
        feature="mean,max,min,std",
        head_hidden=0,
        head_dropout=0.0,
        max_length=256,
        classes=None,
        precision="float32",
    ) -> "MLSTMClassifier":
        """A classifier of a preset folder: a fine-tuned classifier's own, else a new head.

        The arguments are `from_run`'s: on a language model's (or a linear probe's) preset
        they make the new head; on a fine-tuned classifier's they are what it must have.

        Args:
          preset: a folder `save_to_preset` or `tf-mlstm-preset` wrote.
          num_classes, num_labels, feature, head_hidden, head_dropout, max_length, classes:
            see `from_run`.
          precision: the encoder's policy (the head is float32).

        Returns:
          A built `MLSTMClassifier`.

        Raises:
          MissingFileError: no such folder, or a file of the preset is missing.
          InvalidValueError: not a preset (the message says what it is), damaged weights, or
            counts that do not fit.
        """
        kind = preset_lib.read_metadata(preset)["kind"]
        if kind != preset_lib.FINE_TUNED:
            _check_new_head(preset, num_classes, num_labels)
        model = preset_lib.load_model(preset, precision)
        if isinstance(model, MLSTMClassifier):
            _check_asked(preset, model.head_spec, num_classes, num_labels)
            return model
        return cls._with_new_head(
            model, num_classes, num_labels, feature, head_hidden, head_dropout, max_length, classes
        )

    def save_to_preset(self, preset_dir, overwrite=False) -> dict:
        """Writes this classifier as a preset folder (`tf_mlstm.models.preset`), its encoder inside.

        Args:
          preset_dir: the folder to write: new or empty, unless `overwrite`.
          overwrite: replace what it holds (an earlier preset; never a run or data folder).

        Returns:
          The metadata written (metadata.json).

        Raises:
          InvalidValueError: `preset_dir` holds something (without `overwrite`), or is
            another tool's folder.
        """
        return preset_lib.write_preset(self, preset_dir, preset_lib.FINE_TUNED, overwrite)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_labels": self.num_labels,
                "feature": self.feature,
                "softmax": self.softmax,
                "head_hidden": self.head_hidden,
                "head_dropout": self.head_dropout,
                "max_length": self.max_length,
                "head_spec": dataclasses.asdict(self.head_spec),
                # `from_run` freezes the next-byte head (call() does not use
                # it); a reloaded model trains, and saves optimizer slots for,
                # the same variables.
                "lm_head_trainable": bool(self.encoder.head.trainable),
            }
        )
        return config

    @classmethod
    def from_config(cls, config) -> "MLSTMClassifier":
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        lm_head_trainable = config.pop("lm_head_trainable", True)
        model = cls(**config)
        model.encoder.head.trainable = bool(lm_head_trainable)
        return model


def _check_new_head(source, num_classes, num_labels):
    """Refuses counts that make no new head for the language model of `source`."""
    if (num_classes is None) == (num_labels is None):
        raise errors.InvalidValueError(
            f"{source} is a language model: give num_classes=K (one label of K "
            "classes) or num_labels=L (L 0/1 labels) for its new head"
        )
    if (num_classes is not None and num_classes < 2) or (num_labels is not None and num_labels < 1):
        raise errors.InvalidValueError(
            f"num_classes must be >= 2 and num_labels >= 1, got {num_classes}, {num_labels}"
        )


def _check_asked(source, spec, num_classes, num_labels):
    """Refuses `num_classes` or `num_labels` other than a fine-tuned classifier's `spec`."""
    asked = {"num_classes": num_classes, "num_labels": num_labels}
    has = {"num_labels" if spec.kind == MULTILABEL else "num_classes": len(spec.classes)}
    for name, value in asked.items():
        if value is not None and has.get(name) != value:
            raise errors.InvalidValueError(
                f"{source} is a fine-tuned {spec.kind} classifier of "
                f"{len(spec.classes)} {'labels' if spec.kind == MULTILABEL else 'classes'}, "
                f"not {name}={value}"
            )


def _texts_tensor(x):
    if isinstance(x, (str, bytes, list, tuple)) and len(x):
        return tf.constant(check_texts(x, "x"), tf.string)
    if isinstance(x, np.ndarray) and x.dtype.kind in "USO":
        if x.ndim == 1:
            return tf.constant(check_texts(x.tolist(), "x"), tf.string)
        return tf.constant(x.astype(object).tolist(), tf.string)
    return x


def _labels_array(y):
    return np.asarray(y) if isinstance(y, (list, tuple)) else y


def _implied_head(outputs, softmax):
    if softmax:
        return HeadSpec(MULTICLASS, tuple(range(outputs)))
    if outputs == 1:
        return HeadSpec(BINARY, (0, 1))
    return HeadSpec(MULTILABEL, tuple(range(outputs)), (0.5,) * outputs)


def finetuned_head_spec(config, results) -> HeadSpec:
    """The `HeadSpec` of a finished fine-tuning run (its config and results dicts)."""
    label_keys = split_keys(config["label_key"])
    # Runs from before K-class fine-tuning have no "kind": binary or multi-label.
    kind = results.get("kind", BINARY if len(label_keys) == 1 else MULTILABEL)
    if kind == MULTICLASS:
        return HeadSpec(MULTICLASS, tuple(results["classes"]))
    thresholds = tuple(results["thresholds"][name] for name in label_keys)
    return HeadSpec(kind, (0, 1) if kind == BINARY else label_keys, thresholds)


def lm_loss_per_text(model, hidden, ids, lengths) -> tf.Tensor:
    """Mean next-byte cross-entropy (nats) over each text's own bytes: [B]."""
    ids = tf.cast(ids, tf.int32)
    valid = _valid_mask(ids, lengths)
    logits = tf.cast(model.encoder.head(hidden[:, :-1]), tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids[:, 1:], logits=logits)
    # Both the input and the predicted byte must be text (not padding).
    weights = valid[:, 1:] * valid[:, :-1]
    return tf.reduce_sum(ce * weights, axis=1) / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)


# === Prediction ===


def predict_probabilities(model, split, max_length, batch_size=64, progress=False) -> np.ndarray:
    """Probabilities of `model` for every text of `split` (LabeledData or texts): [N, K] float32."""
    return _batched(
        lambda i, n: model.probabilities(model.forward(i, n, training=False)[0]),
        getattr(split, "texts", split),
        max_length,
        batch_size,
        progress,
        "Predicting",
    )


def predict_served_probabilities(
    model, texts, max_length, batch_size=64, progress=False
) -> np.ndarray:
    """The probabilities `call` and the `classify` signature give normalized `texts`: [N, C]."""
    return _batched(
        lambda i, n: model.head_spec.probabilities_tf(model.forward(i, n, training=False)[0]),
        texts,
        max_length,
        batch_size,
        progress,
        "Predicting",
    )


def predict_features(model, texts, max_length, batch_size=64, progress=False) -> np.ndarray:
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
