"""SavedModel export: string-in signatures that serve without tf_mlstm.

`ServingModule` holds the `featurize`, `score`, `generate` and (with a `ClassifierHead`)
`classify` signatures, each normalizing raw text in the graph (loaders import `tensorflow_text`),
under request limits fixed at export. `export_saved_model` writes `BASE/<version>/` as
TensorFlow Serving expects (docs/serving.md).
"""

import os

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow_serving.apis import model_pb2
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_log_pb2

from tf_mlstm import errors
from tf_mlstm import failpoints
from tf_mlstm import fileio
from tf_mlstm import preflight
from tf_mlstm import rundir
from tf_mlstm.data import words
from tf_mlstm.data.text import DOC_START
from tf_mlstm.data.text import normalize_text_tf
from tf_mlstm.models import featurize
from tf_mlstm.models import language_model
from tf_mlstm.models import sampling
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.preprocessor import BytePreprocessor
from tf_mlstm.serving import server_config

SERVING_WINDOW = 256
DEFAULT_MAX_TEXT_BYTES = 65536
"""Longest text or prompt a signature accepts, in UTF-8 bytes before normalization."""
DEFAULT_MAX_GENERATE_LENGTH = 4096
"""Largest `length` the `generate` signature accepts, in bytes."""
# The text inputs' spec: any shape, so a request of another shape reaches the graph's own
# check (`_batch`), which names the input and the shape expected, instead of failing
# deep inside an op; a static [None] would let that check be folded away.
_TEXTS = tf.TensorSpec(None, tf.string)

META_FILE = os.path.join("assets.extra", "meta.json")
"""The export's metadata, relative to its version folder."""
EXPORTER = "tf_mlstm"
"""The `exporter` value in META_FILE that marks a folder as written here."""
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
"""TensorFlow Serving's warm-up records (`PredictionLog`s), relative to the version folder."""
_WARMUP_TEXTS = ("Great.", "Not good at all.")


class ExportDirError(errors.InvalidValueError):
    """The export folder holds something this module did not write.

    Example:
    >>> from tf_mlstm.serving import saved_model
    >>> error = saved_model.ExportDirError("runs/reviews: holds 'notes.txt'")
    >>> isinstance(error, ValueError)
    True
    """


class ServingModule(tf.Module):
    """Wraps a language model with string-in signatures.

    Args:
      model, window: an `MLSTMLanguageModel` (float32 for serving), and bytes per model call.
      classifier: optional `ClassifierHead`; adds the `classify` signature.
      max_text_bytes: the longest text (or prompt) a request may hold, in UTF-8 bytes as sent.
      max_generate_length: the largest `length` `generate` accepts.

    Raises:
      ValueError: the classifier does not fit the model, or a limit is not positive.

    Example:
    >>> from tf_mlstm.models import MLSTMLanguageModel
    >>> module = ServingModule(MLSTMLanguageModel.from_run(model_dir), window=8)
    >>> sorted(module.signatures())
    ['featurize', 'generate', 'score', 'serving_default']
    >>> module.score(tf.constant(["Great phone."]))["chars"].numpy()
    array([12.], dtype=float32)
    """

    def __init__(
        self,
        model,
        window=SERVING_WINDOW,
        classifier=None,
        max_text_bytes=DEFAULT_MAX_TEXT_BYTES,
        max_generate_length=DEFAULT_MAX_GENERATE_LENGTH,
    ):
        super().__init__()
        for name, value in (
            ("max_text_bytes", max_text_bytes),
            ("max_generate_length", max_generate_length),
        ):
            if int(value) <= 0:
                raise errors.InvalidValueError(f"{name} must be positive, got {value}")
        self.model = model
        self.window = window
        self.max_text_bytes = int(max_text_bytes)
        self.max_generate_length = int(max_generate_length)
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
            rows = classifier.head_spec.outputs
            self.classifier_weights = tf.Variable(
                np.asarray(classifier.weights, np.float32).reshape(rows, -1),
                trainable=False,
                name="classifier_weights",
            )
            self.classifier_bias = tf.Variable(
                np.asarray(classifier.bias, np.float32).reshape(rows),
                trainable=False,
                name="classifier_bias",
            )
            if classifier.ngram_terms:
                self.ngram_table = words.vocabulary_table(classifier.ngram_terms)
                self.ngram_idf = tf.Variable(
                    np.asarray(classifier.ngram_idf, np.float32), trainable=False, name="ngram_idf"
                )
            classes = classifier.head_spec.classes
            self.classifier_names = tf.constant([str(c) for c in classes])
            if all(isinstance(c, (int, np.integer)) for c in classes):
                self.classifier_classes = tf.constant(np.asarray(classes, np.int64))
            else:
                self.classifier_classes = self.classifier_names
            self.classifier_hidden = None
            if classifier.hidden_weights is not None:
                self.classifier_hidden = (
                    tf.Variable(
                        np.asarray(classifier.hidden_weights, np.float32),
                        trainable=False,
                        name="classifier_hidden_weights",
                    ),
                    tf.Variable(
                        np.asarray(classifier.hidden_bias, np.float32),
                        trainable=False,
                        name="classifier_hidden_bias",
                    ),
                )
            # Only a module with a classifier has this function to save.
            self.classify = tf.function(
                self._classify,
                input_signature=[_TEXTS],
                autograph=False,
            )

    def limits(self) -> dict[str, int]:
        """The request limits, as recorded in the export metadata."""
        return {
            "max_text_bytes": self.max_text_bytes,
            "max_generate_length": self.max_generate_length,
        }

    def _check_lengths(self, text, what):
        # Checked before normalization and padding, which are what would
        # allocate by the longest text.
        return tf.debugging.assert_less_equal(
            tf.strings.length(text),
            self.max_text_bytes,
            message=f"{what} is longer than max_text_bytes={self.max_text_bytes} "
            "(a limit set at export)",
        )

    @staticmethod
    def _batch(text, signature, name="text"):
        """`text` as a [N] batch, after a check that names the input and the shape expected."""
        checked = tf.debugging.assert_rank(
            text,
            1,
            message=f"{signature}: `{name}` must be a batch of strings of shape [N] "
            '(JSON: a list, ["a text", ...]); got another shape',
        )
        with tf.control_dependencies([checked]):
            text = tf.identity(text)
        text.set_shape([None])  # static only: nothing runs before the check
        return text

    @staticmethod
    def _check_utf8(text, signature, name="text"):
        """An assertion that every text is valid UTF-8, naming the first index that is not."""
        decoded = tf.strings.unicode_transcode(
            text, input_encoding="UTF-8", output_encoding="UTF-8", errors="replace"
        )
        bad = tf.where(tf.not_equal(decoded, text))[:, 0]
        return tf.debugging.Assert(
            tf.equal(tf.size(bad), 0),
            [f"{signature}: `{name}` holds bytes that are not UTF-8 text, at index", bad[:1]],
        )

    def _normalized(self, text, signature, allow_empty=True):
        """The texts normalized, after the shape, length, UTF-8 (and non-empty) checks."""
        text = self._batch(text, signature)
        checks = [
            self._check_lengths(text, f"{signature}: a text"),
            self._check_utf8(text, signature),
        ]
        with tf.control_dependencies(checks):
            normalized = normalize_text_tf(text)
        if allow_empty:
            return normalized
        empty = tf.where(tf.equal(tf.strings.length(normalized), 0))[:, 0]
        nonempty = tf.debugging.Assert(
            tf.equal(tf.size(empty), 0),
            [
                f"{signature}: `text` is empty after normalization, nothing to {signature}, "
                "at index",
                empty[:1],
            ],
        )
        with tf.control_dependencies([nonempty]):
            return tf.identity(normalized)

    def _ids(self, text, signature, max_length=None, normalized=None):
        """(ids, valid) of the texts, normalized, framed and maybe cut, in whole windows."""
        if normalized is None:
            normalized = self._normalized(text, signature)
        framed = BytePreprocessor(
            max_length=max_length, pad_to_multiple=self.window, normalize=False
        )(normalized)
        return framed.ids, framed.valid

    @tf.function(input_signature=[_TEXTS], autograph=False)
    def featurize(self, text) -> dict[str, tf.Tensor]:
        """The `featurize` signature: {kind: [N, H] float32} of [N] raw texts."""
        ids, valid = self._ids(text, "featurize")
        return featurize.featurize_ids(self.model, ids, valid, self.window)

    @tf.function(input_signature=[_TEXTS], autograph=False)
    def score(self, text) -> dict[str, tf.Tensor]:
        """The `score` signature: `bits_per_char` [N] and `chars` [N] of [N] raw texts."""
        normalized = self._normalized(text, "score", allow_empty=False)
        ids, valid = self._ids(text, "score", normalized=normalized)
        bits, chars = featurize.score_ids(self.model, ids, valid, self.window)
        return {"bits_per_char": bits / tf.maximum(chars, 1.0), "chars": chars}

    @tf.function(
        input_signature=[
            _TEXTS,
            tf.TensorSpec([], tf.int32),
            tf.TensorSpec([], tf.float32),
            tf.TensorSpec([], tf.int64),
        ],
        autograph=False,
    )
    def generate(self, prompt, length, temperature, seed) -> dict[str, tf.Tensor]:
        """The `generate` signature: {"text": [N]}, each prompt's sampled continuation."""
        prompt = self._batch(prompt, "generate", "prompt")
        checks = [
            tf.debugging.assert_non_negative(length, message="generate: length must be >= 0"),
            tf.debugging.assert_positive(temperature, message="generate: temperature must be > 0"),
            tf.debugging.assert_less_equal(
                length,
                self.max_generate_length,
                message="generate: length must be <= "
                f"max_generate_length={self.max_generate_length} (a limit set at export)",
            ),
            self._check_lengths(prompt, "generate: a prompt"),
            self._check_utf8(prompt, "generate", "prompt"),
        ]
        with tf.control_dependencies(checks):
            normalized = normalize_text_tf(prompt)
        # Padded on the left with DOC_START, which resets the state: every row
        # ends in the state its prompt alone gives, and all rows continue from
        # the last column together.
        ids = BytePreprocessor.for_prompts()(normalized).ids
        sampler = sampling.make_sampler(self.model)

        def sample():
            generated, _ = sampler(ids, length, temperature, seed, -1, 0.0, True, -1)
            return generated_text(generated)

        # The sampler stops at once when every row has ended, which an empty
        # batch has from the start: answer it without sampling.
        text = tf.cond(tf.shape(ids)[0] > 0, sample, lambda: tf.zeros([0], tf.string))
        return {"text": text}

    def _classify(self, text):
        normalized = self._normalized(text, "classify", allow_empty=False)
        parts = []
        if self.classifier.model_kinds:
            max_length = self.classifier.max_length or None
            ids, valid = self._ids(text, "classify", max_length, normalized)
            features = featurize.featurize_ids(self.model, ids, valid, self.window)
            parts = [features[kind] for kind in self.classifier.model_kinds]
        if self.classifier.ngram_terms:
            parts.append(words.tfidf(normalized, self.ngram_table, self.ngram_idf))
        x = tf.concat(parts, axis=1)
        inputs = (x - self.classifier_mean) / self.classifier_scale
        if self.classifier_hidden is not None:
            weights, bias = self.classifier_hidden
            inputs = tf.nn.relu(tf.linalg.matmul(inputs, weights, transpose_b=True) + bias)
        logits = (
            tf.linalg.matmul(inputs, self.classifier_weights, transpose_b=True)
            + self.classifier_bias
        )
        names = tf.tile(self.classifier_names[None, :], [tf.shape(x)[0], 1])
        head = self.classifier.head_spec
        outputs = {"probabilities": head.probabilities_tf(logits), "classes": names}
        decided = head.decide_tf(logits)
        if head.kind == MULTILABEL:
            outputs["labels"] = decided
            return outputs
        outputs["label"] = tf.gather(self.classifier_classes, decided)
        if head.kind == BINARY:
            outputs["probability"] = outputs["probabilities"][:, 1]
            if self.classifier.neuron >= 0:
                outputs["neuron"] = x[:, self.classifier.neuron]
        return outputs

    def signatures(self) -> dict[str, tf.types.experimental.GenericFunction]:
        """The signatures to export, by name: `serving_default` is `classify` where there is one."""
        signatures = {"featurize": self.featurize, "score": self.score, "generate": self.generate}
        if self.classifier is not None:
            signatures["classify"] = self.classify
        signatures["serving_default"] = signatures[self.default_signature]
        return signatures

    @property
    def default_signature(self) -> str:
        """What the export is for, served to a request that names no signature."""
        return "featurize" if self.classifier is None else "classify"


def generated_text(ids) -> tf.Tensor:
    """Sampled bytes [N, L] -> [N] tf.string to the first `DOC_START` or pad (bad UTF-8: U+FFFD)."""
    table = tf.constant([bytes([b]) for b in range(256)])
    ended = tf.logical_or(ids < 0, tf.equal(ids, DOC_START))
    keep = tf.equal(tf.cumsum(tf.cast(ended, tf.int32), axis=1), 0)
    pieces = tf.where(keep, tf.gather(table, tf.maximum(ids, 0)), "")
    raw = tf.strings.reduce_join(pieces, axis=-1)
    return tf.strings.unicode_transcode(
        raw, input_encoding="UTF-8", output_encoding="UTF-8", errors="replace"
    )


def checkpoint_step(checkpoint: str) -> int:
    """The global step of a checkpoint: the version its export gets.

    Args:
      checkpoint: a checkpoint path prefix (".../ckpt-1200").

    Returns:
      The saved `step` variable, or else the number the name ends in.

    Raises:
      ValueError: neither is there.
    """
    reader = tf.train.load_checkpoint(checkpoint)
    key = "step/.ATTRIBUTES/VARIABLE_VALUE"
    if reader.has_tensor(key):
        return int(reader.get_tensor(key))
    suffix = os.path.basename(checkpoint).rsplit("-", 1)[-1]
    if suffix.isdigit():
        return int(suffix)
    raise errors.InvalidValueError(
        f"{checkpoint}: holds no global step and its name ends in no number, so it gives "
        "no export version"
    )


def is_export(path: str) -> bool:
    """Whether `path` is an `export_saved_model` folder: `saved_model.pb` beside our meta.json."""
    if not (
        tf.io.gfile.isdir(path)
        and tf.io.gfile.exists(os.path.join(path, "saved_model.pb"))
        and tf.io.gfile.exists(os.path.join(path, META_FILE))
    ):
        return False
    try:
        meta = fileio.read_json(os.path.join(path, META_FILE))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and (meta.get("exporter") == EXPORTER or "config" in meta)


def check_export_base(base_dir: str) -> None:
    """Raises unless `base_dir` is absent, empty, or holds only our exports (and their leftovers).

    Args:
      base_dir: the folder that holds (or will hold) the version folders.

    Raises:
      ExportDirError: one line naming the folder and the first entry not ours.
    """
    preflight.check_link_leads_somewhere(base_dir, base_dir)
    if not tf.io.gfile.exists(base_dir):
        return
    if not tf.io.gfile.isdir(base_dir):
        raise ExportDirError(f"{base_dir}: is a file, not a folder for SavedModel versions")
    if is_export(base_dir):
        raise ExportDirError(
            f"{base_dir}: is itself a tf-mlstm-export SavedModel, not the folder of versions "
            "that holds it; give that folder (an unversioned export of an earlier "
            f"tf-mlstm-export: move it into a numbered folder, e.g. {os.path.join(base_dir, '1')})"
        )
    for name in sorted(entry.rstrip("/") for entry in tf.io.gfile.listdir(base_dir)):
        if fileio.is_temp_name(name):
            continue
        if name.isdigit() and is_export(os.path.join(base_dir, name)):
            continue
        raise ExportDirError(
            f"{base_dir}: holds {name!r}, not a tf-mlstm-export SavedModel version; refusing to "
            "write into a folder it did not write (choose a new or empty folder)"
        )


def warmup_requests(module) -> list:
    """TensorFlow Serving's warm-up requests for `module`: one `PredictionLog` a signature.

    A server runs them as it loads the version; their texts fit the module's limits.

    Args:
      module: a `ServingModule`.

    Returns:
      `prediction_log_pb2.PredictionLog`s, in signature-name order.
    """
    texts = [t for t in _WARMUP_TEXTS if len(t.encode()) <= module.max_text_bytes] or [""]
    text_inputs = {"text": np.array(texts, object)}
    generate_inputs = {
        "prompt": np.array(texts, object),
        "length": np.int32(min(8, module.max_generate_length)),
        "temperature": np.float32(1.0),
        "seed": np.int64(0),
    }
    logs = []
    for name, function in sorted(module.signatures().items()):
        inputs = generate_inputs if function is module.generate else text_inputs
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(signature_name=name),
            inputs={key: tf.make_tensor_proto(value) for key, value in inputs.items()},
        )
        logs.append(
            prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
        )
    return logs


def export_saved_model(module, base_dir, version, metadata=None, time_batching=True) -> str:
    """Writes a SavedModel as `base_dir/<version>`, staged and renamed in, replacing that version.

    Args:
      module: a `ServingModule` (or subclass with more signatures).
      base_dir: the folder of versions (created); must pass `check_export_base`.
      version: a non-negative integer, normally the checkpoint's global step.
      metadata: optional dict for `<version>/assets.extra/meta.json`.
      time_batching: time the server's batching here and write its file (seconds on a
        large model); else meta.json's `batching` is None.

    Returns:
      The version folder.

    Raises:
      ExportDirError: `base_dir` holds something not written here.
      ValueError: a negative version.
    """
    version = int(version)
    if version < 0:
        raise errors.InvalidValueError(f"export version must be >= 0, got {version}")
    check_export_base(base_dir)
    batching = measure_batching(module) if time_batching else None
    tf.io.gfile.makedirs(base_dir)
    target = os.path.join(base_dir, str(version))
    name = os.path.basename(os.path.normpath(base_dir))
    with fileio.replacing(target) as tmp:
        tf.saved_model.save(module, tmp, signatures=module.signatures())
        failpoints.reach("export")
        tf.io.gfile.makedirs(os.path.dirname(os.path.join(tmp, WARMUP_FILE)))
        with tf.io.TFRecordWriter(os.path.join(tmp, WARMUP_FILE)) as warmup:
            for log in warmup_requests(module):
                warmup.write(log.SerializeToString())
        if batching is not None:
            with tf.io.gfile.GFile(os.path.join(tmp, server_config.BATCHING_FILE), "w") as f:
                f.write(batching.text())
        with tf.io.gfile.GFile(os.path.join(tmp, server_config.MODEL_CONFIG_FILE), "w") as f:
            f.write(server_config.model_config_text(name, f"/models/{name}"))
        meta = dict(metadata or {})
        meta.update(
            exporter=EXPORTER,
            version=version,
            limits=module.limits(),
            serving_default=module.default_signature,
            requires=requirements(),
            batching=batching.record() if batching is not None else None,
        )
        fileio.write_json_atomic(os.path.join(tmp, META_FILE), meta)
    logging.info("Exported SavedModel version %d to %s", version, target)
    return target


def measure_batching(module) -> server_config.Batching:
    """The server's batching for `module`, timed here on its default signature.

    Its texts are of one model call (`window` bytes, within the export's limit).

    Args:
      module: a `ServingModule`.

    Returns:
      A `server_config.Batching`.
    """
    text_bytes = min(module.window, module.max_text_bytes)
    text = ("A fine film, well worth the evening. " * (text_bytes // 37 + 1))[:text_bytes]
    signature = module.signatures()[module.default_signature]
    return server_config.measure_batching(
        lambda size: signature(tf.constant([text] * size)), text_bytes
    )


def requirements() -> dict[str, str]:
    """{package: version} a server needs to load the export (TensorFlow Text for its op)."""
    import tensorflow_text  # pylint: disable=import-outside-toplevel  (loaded by the export)

    return {"tensorflow": tf.__version__, "tensorflow-text": tensorflow_text.__version__}


def export_trained_model(
    model_dir,
    base_dir,
    classifier=None,
    window=SERVING_WINDOW,
    max_text_bytes=DEFAULT_MAX_TEXT_BYTES,
    max_generate_length=DEFAULT_MAX_GENERATE_LENGTH,
    metadata=None,
    precision="float32",
    allow_other_model=False,
    model=None,
    time_batching=True,
) -> dict:
    """Exports the newest checkpoint of a run as `base_dir/<its global step>`.

    Args:
      model_dir, base_dir: a tf-mlstm-train (or -finetune) model folder; the folder of versions.
      classifier, window: optional `ClassifierHead` (adds `classify`); bytes per model call.
      max_text_bytes, max_generate_length: see `ServingModule`.
      metadata: optional dict for meta.json (the portable config and the precision are added).
      precision: the policy the signatures compute in; outputs are float32.
      allow_other_model: export a classifier fitted on other weights (with a warning).
      model: the run's language model already loaded in `precision` by `from_run`, or None.
      time_batching: see `export_saved_model`.

    Returns:
      dict: `export_dir` (the version folder), `version`, `signatures` (sorted names).

    Raises:
      ExportDirError: `base_dir` holds something not written here (checked first).
      FileNotFoundError: no config or checkpoint in `model_dir`.
      ValueError: a classifier of another size or other weights (`rundir.OtherModelError`), or
        a bad limit.
    """
    check_export_base(base_dir)
    if model is None:
        model = language_model.MLSTMLanguageModel.from_run(model_dir, precision=precision)
    train_config, checkpoint = model.run_config, model.run_checkpoint
    if classifier is not None:
        classifier.check(model.hidden_size)
        rundir.check_fitted_model(
            model, classifier.weights_sha256, "", model_dir, allow_other_model
        )
    version = checkpoint_step(checkpoint)
    module = ServingModule(
        model,
        window=window,
        classifier=classifier,
        max_text_bytes=max_text_bytes,
        max_generate_length=max_generate_length,
    )
    metadata = dict(
        metadata or {}, config=rundir.portable_config(train_config), precision=precision
    )
    export_dir = export_saved_model(
        module, base_dir, version, metadata=metadata, time_batching=time_batching
    )
    return {"export_dir": export_dir, "version": version, "signatures": sorted(module.signatures())}
