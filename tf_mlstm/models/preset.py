"""Presets: a trained model in one folder, in keras-hub's layout, that loads without its run.

```
PRESET/
  config.json        the Keras model: its class and config (keras.saving.serialize_keras_object)
  preprocessor.json  the BytePreprocessor its texts go through (normalization, framing)
  model.weights.h5   its weights, one file (keras.Model.save_weights)
  metadata.json      kind; tf_mlstm, TensorFlow and Keras versions; the run, the data it was
                     trained on, held-out bits/char; the weights' rundir.weights_checksum
  classifier.json    a linear probe's only: the tf-mlstm-transfer classifier, as written
```

A language model's preset holds its `MLSTMLanguageModel`, a fine-tuned classifier's its
`MLSTMClassifier` (the encoder inside), a linear probe's its language model and the probe's
classifier.json. A preset is written whole in a staged folder renamed in; loading checks the
weights against metadata.json. `read_metadata` needs no TensorFlow.
"""

import copy
import datetime
import importlib
import json
import os

from tf_mlstm import errors
from tf_mlstm import preflight
from tf_mlstm._version import __version__
from tf_mlstm.config.binaries import holds_path

CONFIG_FILE = "config.json"
PREPROCESSOR_FILE = "preprocessor.json"
WEIGHTS_FILE = "model.weights.h5"
METADATA_FILE = preflight.PRESET_METADATA_FILE
CLASSIFIER_FILE = "classifier.json"

FORMAT = "tf_mlstm.preset"
FORMAT_VERSION = 1
READ_VERSIONS = (1,)

LANGUAGE_MODEL = "language model"
LINEAR_PROBE = "linear probe"
FINE_TUNED = "fine-tuned classifier"
KINDS = (LANGUAGE_MODEL, LINEAR_PROBE, FINE_TUNED)

# The Keras classes a preset's config.json may name (nothing else is deserialized), by module.
_CLASSES = {
    "tf_mlstm>MLSTMLanguageModel": "tf_mlstm.models.language_model",
    "tf_mlstm>MLSTMClassifier": "tf_mlstm.models.classifier",
}
# A run's config fields that hold paths of the machine it ran on: kept as names only.
DEMO_CORPUS = "the embedded demo corpus"
"""The training data's name in metadata.json for a run without `train_data`."""


# === Reading (no TensorFlow for a local folder) ===


def _where(name, path):
    shown = errors.setting_name(name)
    return f"{shown}={path}" if shown.startswith("--") else f"{shown}={path!r}"


def _read_json(path):
    try:
        if "://" in path:
            import tensorflow as tf  # pylint: disable=g-import-not-at-top

            with tf.io.gfile.GFile(path) as f:
                return json.loads(f.read())
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:
        raise errors.InvalidValueError(f"{path}: not valid JSON ({e}).") from None


def check_preset(preset, name="preset") -> None:
    """Refuses a path that is no preset folder, in one line saying what it is instead.

    Args:
      preset: the folder.
      name: the argument or flag that named it (for the message).

    Raises:
      MissingFileError: it does not exist, or holds nothing that tells its kind.
      InvalidValueError: a file, or a folder of another kind (a run, a SavedModel, ...).
    """
    where = _where(name, preset)
    if not preflight.exists(preset):
        raise errors.MissingFileError(f"{where} does not exist")
    if not preflight.isdir(preset):
        raise errors.InvalidValueError(f"{where} is a file, not a preset folder")
    if preflight.is_preset(preset):
        return
    kind, evidence = preflight.folder_kind(preset)
    if kind is None:
        raise errors.MissingFileError(
            f"{where} holds no {METADATA_FILE}: not a tf_mlstm preset (tf-mlstm-preset or "
            "save_to_preset writes one)"
        )
    use = preflight.use_of(kind, preset)
    if kind in preflight.MODEL_RUNS:
        use = (
            f"tf_mlstm.load({preset!r}) and from_run load it; tf-mlstm-preset "
            f"--model_dir={preset} --preset_dir=PRESET_DIR writes its preset"
        )
    raise errors.InvalidValueError(
        f"{where} is {preflight.with_article(kind)} (it holds {evidence}), not a preset: {use}"
    )


def read_metadata(preset, name="preset") -> dict:
    """The metadata.json of a preset, checked to be one this version reads.

    Args:
      preset: the preset folder.
      name: the argument or flag that named it (for the messages).

    Returns:
      The metadata (see the module docstring).

    Raises:
      MissingFileError, InvalidValueError: as `check_preset`; metadata.json of another
        format, of a newer version, or without a kind or the weights' fingerprint.

    Example:
    >>> import json, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> record = {"format": FORMAT, "format_version": 1, "kind": LANGUAGE_MODEL,
    ...           "weights_sha256": "3e223e9432276a2c"}
    >>> with open(os.path.join(folder, METADATA_FILE), "w") as f:
    ...     json.dump(record, f)
    >>> read_metadata(folder)["kind"]
    'language model'
    """
    check_preset(preset, name)
    path = os.path.join(preset, METADATA_FILE)
    record = _read_json(path)
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        got = record.get("format") if isinstance(record, dict) else type(record).__name__
        raise errors.InvalidValueError(
            f"{path}: not the metadata of a tf_mlstm preset (format {got!r}, not {FORMAT!r})"
        )
    version = record.get("format_version")
    if version not in READ_VERSIONS:
        raise errors.InvalidValueError(
            f"{path}: format_version {version!r}, and this tf_mlstm ({__version__}) reads "
            f"{', '.join(map(str, READ_VERSIONS))}: upgrade tf_mlstm to load it"
        )
    if record.get("kind") not in KINDS or not record.get("weights_sha256"):
        raise errors.InvalidValueError(
            f"{path}: no kind of {KINDS} or no weights_sha256: the preset is damaged; "
            "write it again with tf-mlstm-preset"
        )
    return record


def _part(preset, name):
    path = os.path.join(preset, name)
    if not preflight.exists(path):
        raise errors.MissingFileError(
            f"{preset}: no {name}: the preset is incomplete; write it again with tf-mlstm-preset"
        )
    return path


def classifier_file(preset) -> str:
    """The classifier.json of a linear probe's preset, or "" for the other kinds.

    Args:
      preset: a preset folder.

    Returns:
      The file's path, or "".
    """
    if read_metadata(preset)["kind"] != LINEAR_PROBE:
        return ""
    return _part(preset, CLASSIFIER_FILE)


# === Loading ===


def _with_policy(config, precision):
    """The serialized model `config` with its language model in the dtype policy `precision`."""
    config = copy.deepcopy(config)
    inner = config["config"]
    target = inner["encoder"]["config"] if "encoder" in inner else inner
    target["dtype"] = precision
    return config


def load_model(preset, precision="float32", name="preset") -> object:
    """The Keras model of a preset (its config.json's class), with its weights.

    Args:
      preset: a preset folder.
      precision: the language model's dtype policy (a classifier's head stays float32).
      name: the argument that named the folder (for the messages).

    Returns:
      An `MLSTMLanguageModel` or `MLSTMClassifier`; the language model (or the
      classifier's encoder) has the preset's `preset_metadata`.

    Raises:
      MissingFileError: no such folder, or a part of the preset is missing.
      InvalidValueError: not a preset; a model class not of tf_mlstm; a weights file that
        cannot be read or holds other weights than metadata.json records.
    """
    import keras  # pylint: disable=g-import-not-at-top

    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top

    metadata = read_metadata(preset, name)
    config_path = _part(preset, CONFIG_FILE)
    config = _read_json(config_path)
    registered = config.get("registered_name") if isinstance(config, dict) else None
    module = _CLASSES.get(registered)
    if module is None or config.get("module") != module:
        raise errors.InvalidValueError(
            f"{config_path}: a {registered!r} model, not one of tf_mlstm's ({', '.join(_CLASSES)})"
        )
    importlib.import_module(module)  # registers the class with Keras
    model = keras.saving.deserialize_keras_object(_with_policy(config, precision))
    weights = _part(preset, WEIGHTS_FILE)
    try:
        model.load_weights(weights)
    except (OSError, ValueError, KeyError) as e:
        raise errors.InvalidValueError(
            f"{weights}: cannot be read ({errors.one_line(e)}): the preset is damaged; write "
            "it again with tf-mlstm-preset"
        ) from None
    found = rundir.weights_checksum(model.weights)
    if found != metadata["weights_sha256"]:
        raise errors.InvalidValueError(
            f"{weights} holds other weights (sha256 {found}) than {METADATA_FILE} records "
            f"({metadata['weights_sha256']}): the preset is damaged or mixed; write it again "
            "with tf-mlstm-preset"
        )
    encoder = getattr(model, "encoder", model)
    encoder.preset_metadata = metadata
    encoder.run_checkpoint = weights
    return model


def load_preprocessor(preset) -> object:
    """The `BytePreprocessor` a preset's texts go through before its model.

    Args:
      preset: a preset folder.

    Returns:
      A `BytePreprocessor` (`frame(texts)` gives the byte ids the model reads).
    """
    import keras  # pylint: disable=g-import-not-at-top

    from tf_mlstm.models.preprocessor import BytePreprocessor  # pylint: disable=g-import-not-at-top

    read_metadata(preset)
    path = _part(preset, PREPROCESSOR_FILE)
    config = _read_json(path)
    if not isinstance(config, dict) or config.get("registered_name") != "tf_mlstm>BytePreprocessor":
        raise errors.InvalidValueError(f"{path}: not a BytePreprocessor's config")
    return keras.saving.deserialize_keras_object(config, {"BytePreprocessor": BytePreprocessor})


# === Writing ===


def _serialized(layer):
    """`serialize_keras_object` without what a preset does not keep (how it was compiled)."""
    import keras  # pylint: disable=g-import-not-at-top

    def without_compile(value):
        if isinstance(value, dict):
            return {k: without_compile(v) for k, v in value.items() if k != "compile_config"}
        return value

    return without_compile(keras.saving.serialize_keras_object(layer))


def _data_name(spec):
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top

    return rundir.names_of(spec) if spec else DEMO_CORPUS


def _data_size(data):
    """{"records", "bytes"} of the training split of TFRecords `data`, or {} when unreadable."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    try:
        counts = tfrecord.split_counts(tfrecord.split_files(data, "train"), "train")
    except (OSError, ValueError, tf.errors.OpError):
        return {}
    return {"records": counts["records"], "bytes": counts["bytes"]}


def _training(config, lm_run):
    """What the language model was trained on, as its config and its run folder record it."""
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top

    record = {"data": _data_name(config.train_data)}
    if lm_run:
        record.update(_data_size(config.train_data or rundir.demo_data_dir(lm_run)))
    results = (rundir.read_results(lm_run) if lm_run else None) or {}
    if isinstance(results.get("step"), int):
        record["steps"] = results["step"]
        record["trained_bytes"] = results["step"] * config.batch_size * config.seq_length
    for key in ("validation_bits_per_char", "validation_chars"):
        if key in results:
            record[key] = results[key]
    return record


def _provenance(encoder):
    """The run (or the preset) the weights come from: source, training, fine_tuning."""
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top

    if encoder.run_dir is None:
        kept = encoder.preset_metadata or {}
        return {
            k: kept[k] for k in ("source", "training", "fine_tuning", "train_config") if k in kept
        }
    run = encoder.run_dir
    checkpoint = encoder.run_checkpoint or ""
    record = {
        "source": {
            "run": _data_name(run),
            "checkpoint": os.path.basename(checkpoint),
            "step": rundir.checkpoint_step(checkpoint),
        },
        "train_config": rundir.portable_config(encoder.run_config),
    }
    lm_run = run
    if rundir.is_finetune_run(run):
        config, results = rundir.read_finetune_run(run)
        record["fine_tuning"] = {
            "data": _data_name(config.get("train_data", "")),
            "task": results.get("kind"),
            "examples": results.get("train_examples"),
            "steps": results.get("step"),
            "validation": results.get("validation"),
        }
        # The language model's own run, while it is still where fine-tuning found it.
        init = config.get("init_model_dir") or ""
        lm_run = init if init and preflight.exists(init) else ""
    record["training"] = _training(encoder.run_config, lm_run)
    return record


def _probe_record(classifier, model):
    """metadata.json's summary of a linear probe's classifier.json, checked against `model`."""
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top

    record = _read_json(classifier)
    if not isinstance(record, dict) or "feature_kinds" not in record:
        raise errors.InvalidValueError(f"{classifier}: not a tf-mlstm-transfer classifier.json")
    fitted = record.get("weights_sha256", "")
    actual = rundir.weights_checksum(getattr(model, "encoder", model).weights)
    if fitted and fitted != actual:
        raise rundir.OtherModelError(
            f"{classifier} was fitted on other model weights (sha256 {fitted}) than this "
            f"model's ({actual}): save the model it was fitted on, or refit it with "
            "tf-mlstm-transfer"
        )
    summary = {"file": CLASSIFIER_FILE, "source": _data_name(classifier)}
    for key in ("kind", "feature_kinds", "classes", "labels", "precision"):
        if key in record:
            summary[key] = record[key]
    return summary


def _check_target(preset_dir, overwrite, run):
    preflight.check_folder_kind(
        preset_dir, "preset_dir", "save_to_preset", (None, preflight.PRESET)
    )
    preflight.refuse_existing(errors.setting_name("preset_dir"), preset_dir, overwrite)
    if run and holds_path(preset_dir, run):
        raise errors.InvalidValueError(
            f"{_where('preset_dir', preset_dir)} holds the run {run} it is written from: "
            "write the preset to a folder of its own"
        )


def write_preset(model, preset_dir, kind, overwrite=False, classifier="") -> dict:
    """Writes `model` as a preset: staged beside `preset_dir`, then renamed in whole.

    Args:
      model: an `MLSTMLanguageModel` (with `classifier`: a linear probe's), or an
        `MLSTMClassifier` (FINE_TUNED); its run, or the preset it was loaded from, is the
        metadata's source.
      preset_dir: the folder to write: new or empty, unless `overwrite`.
      kind: one of `KINDS`.
      overwrite: replace what `preset_dir` holds (an earlier preset, or files; never a run,
        data or another tool's folder).
      classifier: the probe's classifier.json, copied in as written (LINEAR_PROBE).

    Returns:
      The metadata written.

    Raises:
      InvalidValueError: `preset_dir` holds something (without `overwrite`), is another
        tool's folder or holds the run; a classifier fitted on other weights.
    """
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tf_mlstm import fileio  # pylint: disable=g-import-not-at-top
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top
    from tf_mlstm.config.transfer import FEATURE_WINDOW  # pylint: disable=g-import-not-at-top
    from tf_mlstm.models.preprocessor import BytePreprocessor  # pylint: disable=g-import-not-at-top

    if kind not in KINDS or (kind == LINEAR_PROBE) != bool(classifier):
        raise errors.InvalidValueError(f"a {kind!r} preset with classifier={classifier!r}")
    encoder = getattr(model, "encoder", model)
    _check_target(preset_dir, overwrite, encoder.run_dir)
    metadata = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "class_name": type(model).__name__,
        "tf_mlstm_version": __version__,
        "tensorflow_version": tf.__version__,
        "keras_version": keras.version(),
        "saved": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "parameter_count": int(model.count_params()),
        "weights_file": WEIGHTS_FILE,
        "weights_sha256": rundir.weights_checksum(model.weights),
        **_provenance(encoder),
    }
    probe = b""
    if classifier:
        metadata["classifier"] = _probe_record(classifier, model)
        with tf.io.gfile.GFile(classifier, "rb") as f:
            probe = f.read()
    # The texts' way in: the classifier's own; the windows of featurize and score otherwise.
    preprocessor = getattr(model, "preprocessor", None) or BytePreprocessor.for_windows(
        FEATURE_WINDOW, normalize=True
    )
    texts = {
        CONFIG_FILE: _serialized_as_float32(model),
        PREPROCESSOR_FILE: _serialized(preprocessor),
    }
    with fileio.write_errors(preset_dir), fileio.replacing(preset_dir) as staged:
        tf.io.gfile.makedirs(staged)
        for name, value in texts.items():
            _write(os.path.join(staged, name), json.dumps(value, indent=2, sort_keys=True) + "\n")
        model.save_weights(os.path.join(staged, WEIGHTS_FILE))
        if probe:
            _write(os.path.join(staged, CLASSIFIER_FILE), probe)
        # Last: a folder with metadata.json holds a whole preset.
        _write(os.path.join(staged, METADATA_FILE), json.dumps(metadata, indent=2) + "\n")
    return metadata


def _serialized_as_float32(model):
    """The model's config with its language model in float32 (a preset loads in any policy)."""
    return _with_policy(_serialized(model), "float32")


def _write(path, content):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    with tf.io.gfile.GFile(path, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
