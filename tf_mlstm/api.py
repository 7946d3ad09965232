"""The Python API behind `import tf_mlstm` (docs/python.md has the table of binaries).

The functions the `tf-mlstm-*` binaries call, on the same config objects, so a notebook
and a binary compute the same numbers; `load(model_dir)` gives a `TrainedModel`.
"""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm import preflight
from tf_mlstm import rundir
from tf_mlstm.config import TrainConfig
from tf_mlstm.config import bounds
from tf_mlstm.data.text import check_texts
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models import featurize
from tf_mlstm.models import language_model
from tf_mlstm.models import openai_weights
from tf_mlstm.models import preset as preset_lib
from tf_mlstm.models import sampling
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.preprocessor import BytePreprocessor
from tf_mlstm.serving import saved_model
from tf_mlstm.tasks.language_model import LanguageModelTask
from tf_mlstm.train import data_files
from tf_mlstm.train import evaluation
from tf_mlstm.train import strategy as strategy_lib
from tf_mlstm.train.runner import Runner
from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import predict
from tf_mlstm.transfer.probe import logistic

# === Entry points ===


def convert(config) -> dict:
    """Converts a corpus into sharded TFRecords (`tf-mlstm-make-tfrecords`).

    Args:
      config: a `tf_mlstm.ConvertConfig`.

    Returns:
      The stats written to the output's stats.json (records, bytes, splits, skips, ...).
    """
    from tf_mlstm.data import convert as convert_lib  # pylint: disable=g-import-not-at-top

    return convert_lib.convert(config)


def pretrain(config) -> dict:
    """Trains a language model, then (on the chief) exports its SavedModel (`tf-mlstm-train`).

    A rerun resumes; with `config.export` False nothing is exported.

    Args:
      config: a `tf_mlstm.TrainConfig` (validated here).

    Returns:
      The results dict (step, bits/char, ...), with `export_dir` when it exported.

    Raises:
      ValueError: an invalid config, or `model_dir/export` holds something not an export's.
    """
    config = _validated(config)
    # A folder of another kind (a fine-tuning run, a data folder) is refused
    # before anything is read or written there.
    rundir.check_folder_kind(
        config.model_dir, "model_dir", "tf-mlstm-train", (None, rundir.LANGUAGE_MODEL_RUN)
    )
    if config.distribution_strategy != "multi_worker":
        # Before anything is written (the demo corpus is converted into the run folder).
        strategy_lib.check_no_unused_cluster(config.distribution_strategy, os.environ)
    export_base = rundir.export_dir(config.model_dir)
    if config.export:
        saved_model.check_export_base(export_base)
    train_files, validation_files = data_files.resolve_data(config)
    config = data_files.steps_for_epochs(config, train_files)
    trainer = Runner(LanguageModelTask(config, train_files, validation_files), config)
    results = trainer.train(finalize=False)
    version = os.path.join(export_base, str(results["step"]))
    if config.export and results.get("finished_earlier") and tf.io.gfile.exists(version):
        results["export_dir"] = version  # A rerun of a finished run: left as it was.
    elif config.export and strategy_lib.is_chief(trainer.strategy):
        with fileio.write_errors(export_base):
            # The run's own export: a server's export, timed for its batching, is
            # tf-mlstm-export's.
            exported = saved_model.export_trained_model(
                config.model_dir, export_base, metadata={"results": results}, time_batching=False
            )
        results["export_dir"] = exported["export_dir"]
    strategy_lib.finalize(trainer.strategy)
    return results


def evaluate(config) -> dict:
    """Bits per character of a trained model on held-out text (`tf-mlstm-eval`).

    Args:
      config: a `tf_mlstm.EvalConfig`.

    Returns:
      dict with `bits_per_char`, `chars` and `chars_per_s`.
    """
    return evaluation.evaluate_config(_validated(config))


def finetune(config) -> dict:
    """Fine-tunes a trained model end to end as a text classifier (`tf-mlstm-finetune`).

    Args:
      config: a `tf_mlstm.FinetuneConfig` (validated here).

    Returns:
      The results dict (task kind, classes or thresholds, metrics per split).
    """
    from tf_mlstm.tasks.finetune import FinetuneTask  # pylint: disable=g-import-not-at-top

    config = _validated(config)
    return Runner(FinetuneTask(config), config).train()


def probe(config) -> dict:
    """Linear probing: features, logistic regression, sentiment neuron (`tf-mlstm-transfer`).

    Writes results.json, classifier.json and plots to `config.output_dir` (empty, or `overwrite`).

    Args:
      config: a `tf_mlstm.TransferConfig` with a concrete `precision`.

    Returns:
      The results dict.
    """
    from tf_mlstm.transfer import experiment  # pylint: disable=g-import-not-at-top

    preflight.refuse_existing("output_dir", config.output_dir, config.overwrite)
    _validated(config)
    return experiment.run_transfer(config)


def export(config) -> dict:
    """Writes a servable, versioned SavedModel of a run folder (`tf-mlstm-export`).

    It goes to `config.export_dir/<step>/`, with the signatures of docs/serving.md.

    Args:
      config: a `tf_mlstm.ExportConfig` (validated here).

    Returns:
      dict with `export_dir` (the version folder), `version` and `signatures` (sorted).

    Raises:
      FileNotFoundError: no trained model in `model_dir`, or no `classifier`.
      InvalidValueError: `export_dir` holds something an export did not write,
        or the classifier does not fit the model.
    """
    from tf_mlstm.serving import export as export_lib  # pylint: disable=g-import-not-at-top

    config = _validated(config)
    return export_lib.export(config)


def _validated(config):
    try:
        return config.validate()
    except errors.InvalidValueError as e:
        raise errors.InvalidValueError(f"{type(config).__name__}: {e}") from None


def import_openai_weights(weights_dir, model_dir) -> dict:
    """Writes a run folder holding OpenAI's released byte mLSTM (`tf-mlstm-import-openai`).

    Args:
      weights_dir: the release's `model/` folder.
      model_dir: the run folder to create; it must not hold a run already.

    Returns:
      dict with `model_dir`, `hidden_size`, `embedding_size` and `checkpoint`.

    Raises:
      FileNotFoundError, ValueError: as `load_openai_arrays` and `build_model`;
        ValueError also when `model_dir` already holds a config or checkpoints.
    """
    checkpoints = rundir.checkpoint_dir(model_dir)
    # checkpoints/ without openai_import.json is another tool's; with it and
    # without config.json, what an import killed between its renames left.
    for existing, ours in ((rundir.CONFIG_FILE, False), (rundir.CHECKPOINT_SUBDIR, True)):
        if rundir.holds(model_dir, existing) and not (
            ours and rundir.holds(model_dir, rundir.OPENAI_IMPORT_FILE)
        ):
            raise errors.InvalidValueError(
                f"{model_dir}: already holds {existing}; import into a new folder"
            )
    arrays = openai_weights.load_openai_arrays(weights_dir)
    model = openai_weights.build_model(arrays)
    hidden, embed = model.hidden_size, model.embedding_size
    published = (openai_weights.PUBLISHED_HIDDEN_SIZE, openai_weights.PUBLISHED_EMBEDDING_SIZE)
    if (hidden, embed) != published:
        logging.warning(
            "%s holds a %d-unit model with a %d-wide embedding; the release is %d and %d.",
            weights_dir,
            hidden,
            embed,
            *published,
        )
    config = TrainConfig(
        model_dir=model_dir, hidden_size=hidden, embedding_size=embed, weight_norm=True
    )
    # Staged beside their names and renamed in only once all is written and read
    # back: a failure (a full disk) leaves no checkpoint (TensorFlow's
    # `ckpt-1_temp` goes with its staging folder), and a kill leaves hidden
    # siblings the same command removes. config.json last: a folder with one
    # holds a complete model.
    with fileio.write_errors(model_dir), fileio.Staged() as staged:
        staged_checkpoints = staged.path(checkpoints)
        tf.io.gfile.makedirs(staged_checkpoints)
        saved = tf.train.Checkpoint(model=model).save(os.path.join(staged_checkpoints, "ckpt"))
        openai_weights.check_round_trip(saved, model)
        source = {
            "source": "openai/generating-reviews-discovering-sentiment",
            "weights_dir": weights_dir,
            "hidden_size": hidden,
            "embedding_size": embed,
        }
        rundir.write_openai_import(model_dir, source, staged=staged)
        rundir.write_config(model_dir, config, staged=staged)
    checkpoint = os.path.join(checkpoints, os.path.basename(saved))
    logging.info("Imported %s into %s (%s).", weights_dir, model_dir, checkpoint)
    return {
        "model_dir": model_dir,
        "hidden_size": hidden,
        "embedding_size": embed,
        "checkpoint": checkpoint,
    }


# === A trained model ===


@dataclasses.dataclass(frozen=True)
class Classified:
    """What `TrainedModel.classify` gives for N texts.

    Attributes:
      labels: the predicted class of each text [N] (multi-label: [N, L] 0/1).
      probabilities: [N, K] per class (binary: [N, 2]; multi-label: [N, L]).
      classes: the K classes (or L label names) of the probability columns.

    Example:
    >>> import numpy as np
    >>> from tf_mlstm.api import Classified
    >>> result = Classified(
    ...     labels=np.array(["positive"]), probabilities=np.array([[0.25, 0.75]]),
    ...     classes=("negative", "positive"),
    ... )
    >>> dict(zip(result.classes, result.probabilities[0].tolist()))
    {'negative': 0.25, 'positive': 0.75}
    """

    labels: np.ndarray
    probabilities: np.ndarray
    classes: tuple


def load(
    model_dir,
    classifier="",
    precision=None,
    batch_size=features_lib.DEFAULT_BATCH_SIZE,
    window=features_lib.DEFAULT_WINDOW,
) -> "TrainedModel":
    """Loads the newest intact checkpoint of a run folder, or a preset folder.

    Args:
      model_dir: a `tf-mlstm-train` or `tf-mlstm-finetune` `--model_dir`, or a preset
        (`save_to_preset`, `tf-mlstm-preset`).
      classifier: a `tf-mlstm-transfer` classifier.json; "" = a fine-tuned run's own head
        (a preset's: its classifier.json or fine-tuned head).
      precision: float32, mixed_bfloat16, mixed_float16 or auto; None: as the classifier's
        features were fitted (classifier.json records it), else float32.
      batch_size: texts per model call.
      window: bytes per model call; the state carries across windows.

    Returns:
      A `TrainedModel`.

    Raises:
      MissingFileError: no trained model in `model_dir`, or no file `classifier`.
      InvalidValueError: `batch_size` or `window` past its bound, or a `classifier`
        that is no classifier file or was fitted on another model's weights, or a
        preset that is damaged.
    """
    bounds.check_sizes({"batch_size": batch_size, "window": window})
    _check_exists("model_dir", model_dir)
    if preflight.is_preset(model_dir):
        return _load_preset(model_dir, classifier, precision, batch_size, window)
    if not preflight.isdir(model_dir):
        raise errors.InvalidValueError(
            f"model_dir={model_dir!r} is a file, not a run folder or a preset folder"
        )
    if not rundir.holds(model_dir, rundir.CONFIG_FILE):
        kind, evidence = preflight.folder_kind(model_dir)
        what = (
            f"; it is {preflight.with_article(kind)} (it holds {evidence}): "
            f"{preflight.use_of(kind, model_dir)}"
            if kind
            else ""
        )
        raise errors.MissingFileError(
            f"model_dir={model_dir!r} holds no {rundir.CONFIG_FILE}: not a run folder of "
            f"tf_mlstm.pretrain or tf_mlstm.finetune (nor a preset: no "
            f"{preflight.PRESET_METADATA_FILE}){what}"
        )
    fitted = _checked_classifier(classifier) if classifier else None
    precision = features_lib.classifier_precision(precision, fitted)
    precision = features_lib.resolve_precision(precision, model_dir, batch_size, window)
    try:
        model = language_model.MLSTMLanguageModel.from_run(model_dir, precision=precision)
    except FileNotFoundError as e:  # no intact checkpoint
        raise errors.MissingFileError(f"model_dir={model_dir!r}: {errors.one_line(e)}") from e
    if fitted is not None:
        _check_classifier_fits(fitted, classifier, model, model_dir)
    return TrainedModel(
        model_dir,
        model,
        model.run_config,
        model.run_checkpoint,
        classifier,
        precision,
        batch_size,
        window,
    )


def _load_preset(preset, classifier, precision, batch_size, window):
    """`load` of a preset folder: its model, and its classifier.json or fine-tuned head."""
    metadata = preset_lib.read_metadata(preset, "model_dir")
    classifier = classifier or preset_lib.classifier_file(preset)
    fitted = None
    if classifier:  # the preset's own is checked too: it may have been swapped
        fitted = _checked_classifier(classifier)
    # As `load`'s rule; auto is the hardware's choice (a preset holds no run to measure).
    precision = features_lib.resolve_precision(
        features_lib.classifier_precision(precision, fitted), None, batch_size, window
    )
    tuned = None
    if metadata["kind"] == preset_lib.FINE_TUNED:
        tuned = MLSTMClassifier.from_preset(preset, precision=precision)
        model = tuned.encoder
    else:
        model = language_model.MLSTMLanguageModel.from_preset(preset, precision=precision)
    if fitted is not None:
        _check_classifier_fits(fitted, classifier, model, preset)
    recorded = metadata.get("train_config")
    config = TrainConfig.from_json(json.dumps(recorded)) if recorded else None
    return TrainedModel(
        preset,
        model,
        config,
        model.run_checkpoint,
        classifier,
        precision,
        batch_size,
        window,
        metadata=metadata,
        # The fine-tuned head classifies in float32, as a fine-tuned run's does.
        fine_tuned=tuned if precision == "float32" else None,
    )


def _check_exists(name, path):
    if not tf.io.gfile.exists(path):
        raise errors.MissingFileError(f"{name}={path!r} does not exist")


def _checked_classifier(classifier):
    _check_exists("classifier", classifier)
    if tf.io.gfile.isdir(classifier):
        raise errors.InvalidValueError(
            f"classifier={classifier!r} is a folder, not a classifier.json of tf_mlstm.probe "
            "(a fine-tuned run classifies with its own head: tf_mlstm.load(model_dir))"
        )
    return logistic.LogisticClassifier.load(classifier)


def _check_classifier_fits(fitted, classifier, model, model_dir):
    if model.hidden_size != fitted.report.hidden_size:
        raise errors.InvalidValueError(
            f"classifier={classifier!r} was fitted on a {fitted.report.hidden_size}-unit model, "
            f"but model_dir={model_dir!r} has {model.hidden_size} units"
        )
    fitted_sha256 = fitted.head.weights_sha256
    if fitted_sha256 and fitted_sha256 != rundir.weights_checksum(model.weights):
        raise errors.InvalidValueError(
            f"classifier={classifier!r} was fitted on other model weights than those of "
            f"model_dir={model_dir!r}: load the model it was fitted on, or refit it with "
            "tf_mlstm.probe"
        )


class TrainedModel:
    """A trained language model with the inference the binaries run (raw texts, normalized here).

    Attributes:
      model: the `MLSTMLanguageModel` (a `keras.Model`).
      config: the run's `TrainConfig` (a preset's: as its metadata records it, paths as names).
      checkpoint: the checkpoint prefix loaded (a preset's: its weights file).
      model_dir: the run folder, or the preset folder.
      precision: the policy it computes in.
      metadata: a preset's metadata.json (`tf_mlstm.models.preset`); None for a run folder.

    Example:
    >>> import tf_mlstm
    >>> trained = tf_mlstm.load(model_dir, batch_size=2, window=16)
    >>> trained.featurize(["Great phone."], kinds=("mean",))["mean"].shape
    (1, 16)
    >>> trained.score(["Great phone.", "Broke in a day."]).shape
    (2,)
    """

    def __init__(
        self,
        model_dir,
        model,
        config,
        checkpoint,
        classifier,
        precision,
        batch_size,
        window,
        metadata=None,
        fine_tuned=None,
    ):
        if batch_size <= 0 or window <= 0:
            raise errors.InvalidValueError(
                f"batch_size and window must be positive, got {batch_size}, {window}"
            )
        self.model_dir = model_dir
        self.model = model
        self.config = config
        self.checkpoint = checkpoint
        self.classifier = classifier
        self.precision = precision
        self.batch_size = int(batch_size)
        self.window = int(window)
        self.metadata = metadata
        self._fine_tuned = fine_tuned  # a fine-tuned preset's float32 `MLSTMClassifier`
        self._featurizer = None
        self._sampler = None
        self._predictor = None

        preprocessor = BytePreprocessor.for_windows(self.window)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
        def score_of(texts):
            framed = preprocessor(texts)
            return featurize.score_ids(self.model, framed.ids, framed.valid, self.window)

        self._score_of = score_of

    @property
    def hidden_size(self) -> int:
        """The model's mLSTM units."""
        return self.model.hidden_size

    def featurize(self, texts, kinds=features_lib.FEATURE_KINDS) -> dict[str, np.ndarray]:
        """Features of each text, as `tf-mlstm-transfer` and the SavedModel's `featurize` give them.

        Args:
          texts: a sequence of str (bytes are read as UTF-8).
          kinds: the feature kinds to return (`tf_mlstm.models.featurize.FEATURE_KINDS`).

        Returns:
          dict kind -> float32 [len(texts), hidden_size].

        Raises:
          InvalidValueError: a text is not a str, or `texts` is one str.
        """
        kinds = tuple(kinds)
        if self._featurizer is None or self._featurizer.kinds != kinds:
            self._featurizer = features_lib.TextFeaturizer(
                self.model, self.batch_size, self.window, kinds
            )
        return self._featurizer(_normalized(texts), progress=False)

    def score(self, texts) -> np.ndarray:
        """Bits per character of each text alone under the model (the SavedModel's `score`).

        Args:
          texts: a sequence of str (bytes are read as UTF-8).

        Returns:
          float64 [len(texts)] bits/char.

        Raises:
          InvalidValueError: a text is not a str, or is empty after normalization
            (nothing to score); the message names its index.
        """
        texts = _normalized(texts, nothing_to="score")
        bits, chars = np.zeros(len(texts)), np.zeros(len(texts))
        for start in range(0, len(texts), self.batch_size):
            batch = tf.constant(texts[start : start + self.batch_size], tf.string)
            b, c = self._score_of(batch)
            bits[start : start + len(b)], chars[start : start + len(c)] = b.numpy(), c.numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(chars > 0, bits / np.maximum(chars, 1.0), np.nan)

    def generate(
        self,
        prompt="",
        length=200,
        seed=0,
        temperature=1.0,
        neuron=-1,
        neuron_value=0.0,
        stop_at_end=True,
    ) -> str:
        """Samples a continuation of `prompt` (`tf-mlstm-generate`'s first sample).

        Args:
          prompt: the text to continue (normalized first; may be empty).
          length: bytes to generate (at most, with `stop_at_end`).
          seed: the same seed gives the same text.
          temperature: softmax temperature (> 0; small is near argmax).
          neuron, neuron_value: a cell-state unit held at that value after every byte (-1: none).
          stop_at_end: end at the end of the review (the next document start).

        Returns:
          The normalized prompt followed by its continuation, as a str.

        Raises:
          InvalidValueError: `prompt` is not a str, or a setting is out of range.
        """
        if self._sampler is None:
            self._sampler = sampling.make_sampler(self.model)
        texts = sampling.generate_texts(
            self.model,
            prompt,
            length,
            temperature=temperature,
            seed=seed,
            neuron=neuron,
            neuron_value=neuron_value,
            stop_at_end=stop_at_end,
            sampler=self._sampler,
        )
        return texts[0]

    def classify(self, texts) -> Classified:
        """Class probabilities and predictions of each text (`tf-mlstm-classify`).

        By `load`'s classifier, or else a fine-tuned run's head (texts cut to its `max_length`).

        Args:
          texts: a sequence of str (bytes are read as UTF-8).

        Returns:
          A `Classified` (labels, probabilities, classes).

        Raises:
          InvalidValueError: a text is not a str or is empty after normalization
            (nothing to classify; the message names its index), or no classifier
            and no finished fine-tuned run.
        """
        texts = _normalized(texts, nothing_to="classify")  # checked before anything is loaded
        if self._predictor is None:
            if not self.classifier and not self._is_fine_tuned():
                what = "a fine-tuned run" if self.metadata is None else "a classifier's preset"
                raise errors.InvalidValueError(
                    f"{self.model_dir} is not {what}: give "
                    "tf_mlstm.load(model_dir, classifier=CLASSIFIER_JSON) (a tf-mlstm-transfer "
                    "classifier) to classify"
                )
            if self.metadata is not None and not self.classifier:
                self._predictor = predict.classifier_predictor(
                    self._fine_tuned_classifier(), self.batch_size
                )
            else:
                self._predictor = predict.load_predictor(
                    self.model_dir,
                    self.classifier,
                    self.batch_size,
                    self.window,
                    self.precision,
                    model=self.model,
                )
        predictor, classes = self._predictor
        probabilities, labels = predictor(texts)
        return Classified(np.asarray(labels), np.asarray(probabilities), tuple(classes))

    def _is_fine_tuned(self):
        if self.metadata is not None:
            return self.metadata["kind"] == preset_lib.FINE_TUNED
        return rundir.is_finetune_run(self.model_dir)

    def _fine_tuned_classifier(self):
        """The fine-tuned `MLSTMClassifier` in float32, of the preset or run folder."""
        if self._fine_tuned is None:
            if self.metadata is not None:
                self._fine_tuned = MLSTMClassifier.from_preset(self.model_dir)
            else:
                self._fine_tuned = MLSTMClassifier.from_finetune_run(self.model_dir)
        return self._fine_tuned

    def save_to_preset(self, preset_dir, overwrite=False) -> dict:
        """Writes this model as a preset folder, which `tf_mlstm.load(preset_dir)` loads.

        A language model's preset; with a classifier.json, the linear probe's (the model
        and that file); of a fine-tuned run (or preset), the fine-tuned classifier's.

        Args:
          preset_dir: the folder to write: new or empty, unless `overwrite`.
          overwrite: replace what it holds (an earlier preset; never a run or data folder).

        Returns:
          The metadata written (metadata.json: kind, versions, training, weights_sha256).

        Raises:
          InvalidValueError: `preset_dir` holds something (without `overwrite`), is another
            tool's folder, or holds the run.
        """
        if self.classifier:
            return self.model.save_to_preset(preset_dir, overwrite, classifier=self.classifier)
        if self._is_fine_tuned():
            return self._fine_tuned_classifier().save_to_preset(preset_dir, overwrite)
        return self.model.save_to_preset(preset_dir, overwrite)


def _normalized(texts, nothing_to=""):
    """The texts normalized; with `nothing_to` (a verb), an empty one is refused by index."""
    texts = [normalize_text(text) for text in check_texts(texts)]
    if nothing_to and "" in texts:
        raise errors.InvalidValueError(
            f"texts[{texts.index('')}] is empty after normalization: nothing to {nothing_to} "
            "(leave blank texts out)"
        )
    return texts
