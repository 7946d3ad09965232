"""classifier.json: the file a logistic probe is saved in (JSON, never pickle).

Every version ever written is read (`READ_VERSIONS`); floats round-trip exactly. Fields:
docs/transfer.md, "The classifier file".
"""

import json
from typing import Any

import numpy as np

from tf_mlstm import errors
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import KINDS
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.transfer import ngrams as ngrams_lib
from tf_mlstm.transfer.probe.report import FitReport
from tf_mlstm.transfer.probe.threshold import Threshold

FORMAT = "tf_mlstm.logistic_classifier"
FORMAT_VERSION = 2
"""Version 2 adds `kind`, K classes (ints or names), L labels with
thresholds and per-class neurons; version 1 files (binary) still load."""
NGRAM_FORMAT_VERSION = 3
"""Version 3 adds `ngrams` (the TF-IDF vocabulary); only a classifier on word
n-grams is written as version 3, so files without them read as before."""
READ_VERSIONS = (1, 2, 3)


def _neuron_record(classifier, neuron):
    kind, unit = classifier.describe(neuron.index)
    return {
        "index": neuron.index,
        "kind": kind,
        "unit": unit,
        "sign": neuron.sign,
        "threshold": neuron.threshold,
    }


def to_json(classifier) -> str:
    """A JSON document of every field of `classifier`; a binary one keeps version 1's fields."""
    head, report = classifier.head, classifier.report
    spec = head.head_spec
    multilabel = spec.kind == MULTILABEL
    record = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "kind": spec.kind,
        "feature_kinds": list(head.feature_kinds),
        "hidden_size": report.hidden_size,
    }
    # The model it was fitted on: classify and export check and follow them.
    if head.weights_sha256:
        record["weights_sha256"] = head.weights_sha256
    if head.precision:
        record["precision"] = head.precision
    names = [json_value(c) for c in spec.classes]
    if multilabel:
        record.update(labels=names, thresholds=[float(t) for t in spec.thresholds])
        record["C"] = [float(c) for c in report.C]
    else:
        record.update(classes=names, C=float(report.C))
    weights = np.reshape(head.weights, (-1, np.shape(head.mean)[0]))
    bias = np.reshape(head.bias, -1)
    if spec.kind == BINARY:
        record.update(
            bias=float(bias[0]),
            neuron=(_neuron_record(classifier, report.neurons[0]) if report.neurons else None),
            weights=weights[0].tolist(),
        )
    else:
        record.update(
            bias=bias.tolist(),
            neurons=[
                {("label" if multilabel else "class"): name, **_neuron_record(classifier, n)}
                for name, n in zip(names, report.neurons)
            ],
            weights=weights.tolist(),
        )
    record.update(mean=np.asarray(head.mean).tolist(), scale=np.asarray(head.scale).tolist())
    if classifier.ngrams is not None:
        record.update(version=NGRAM_FORMAT_VERSION, ngrams=classifier.ngrams.to_record())
    return json.dumps(record)


def from_json(text, build, source="classifier") -> Any:
    """Rebuilds a classifier from `to_json` output (any version of `READ_VERSIONS`).

    Args:
      text, source: the JSON document, and a name for error messages (the file).
      build: `build(head, report)` returns the classifier (ValueError where they disagree).

    Returns:
      What `build` returns.

    Raises:
      ValueError: not a classifier file, or inconsistent contents (naming `source`).
    """
    try:
        record = json.loads(text)
    except ValueError as e:
        raise errors.InvalidValueError(f"{source}: not JSON ({e})") from e
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise errors.InvalidValueError(f"{source}: not a tf-mlstm-transfer classifier file")
    if record.get("version") not in READ_VERSIONS:
        raise errors.InvalidValueError(
            f"{source}: classifier format version {record.get('version')}, this code reads "
            f"{', '.join(map(str, READ_VERSIONS))}"
        )
    try:
        return build(*_head_and_report(record))
    except (KeyError, TypeError) as e:
        raise errors.InvalidValueError(
            f"{source}: incomplete classifier file (missing or bad {e})"
        ) from e
    except ValueError as e:
        raise errors.InvalidValueError(f"{source}: {e}") from e


def _head_and_report(record):
    """(`ClassifierHead`, `FitReport`) of a parsed record."""
    kind = record.get("kind", BINARY)
    if kind not in KINDS:
        raise errors.InvalidValueError(
            f"unknown classifier kind {kind!r}; this code reads {list(KINDS)}"
        )
    multilabel = kind == MULTILABEL
    names = tuple(_class_value(c) for c in record["labels" if multilabel else "classes"])
    if kind == BINARY:
        # null: no unit of the model to be one (word n-grams alone, version 3).
        neurons = (record["neuron"],) if record["neuron"] is not None else ()
    else:
        neurons = tuple(record["neurons"])
    if (kind == BINARY) != (len(names) == 2 and not multilabel) or len(set(names)) < len(names):
        raise errors.InvalidValueError(f"a {kind} classifier cannot have the classes {list(names)}")
    weights = np.asarray(record["weights"], np.float64)
    neurons = tuple(
        Threshold(int(n["index"]), int(n["sign"]), float(n["threshold"])) for n in neurons
    )
    ngrams = (
        ngrams_lib.NgramVocabulary.from_record(record["ngrams"]) if "ngrams" in record else None
    )
    thresholds = tuple(float(t) for t in record["thresholds"]) if multilabel else ()
    head = ClassifierHead(
        feature_kinds=tuple(record["feature_kinds"]),
        mean=np.asarray(record["mean"], np.float64),
        scale=np.asarray(record["scale"], np.float64),
        weights=weights.reshape(1, -1) if kind == BINARY else weights,
        bias=np.asarray(record["bias"], np.float64).reshape(-1),
        head_spec=HeadSpec(kind, names, thresholds),
        neuron=neurons[0].index if kind == BINARY and neurons else -1,
        weights_sha256=str(record.get("weights_sha256", "")),
        precision=str(record.get("precision", "")),
        ngram_terms=ngrams.terms if ngrams is not None else (),
        ngram_idf=ngrams.idf if ngrams is not None else None,
    )
    report = FitReport(
        hidden_size=int(record["hidden_size"]),
        C=tuple(float(c) for c in record["C"]) if multilabel else float(record["C"]),
        neurons=neurons,
    )
    return head, report


def save(classifier, path) -> None:
    """Writes `to_json(classifier)` to `path` atomically (through `tf.io.gfile`)."""
    from tf_mlstm import fileio  # pylint: disable=import-outside-toplevel

    fileio.write_text_atomic(path, to_json(classifier))


def load(path, build) -> Any:
    """Reads a classifier written by `save` (`build` as `from_json`'s).

    Raises:
      FileNotFoundError: no such file.
      ValueError: a folder, or not a valid classifier file.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"classifier file not found: {path}")
    if tf.io.gfile.isdir(path):
        raise errors.InvalidValueError(
            f"{path} is a folder, not a classifier file (a tf-mlstm-finetune run is given "
            "as --model_dir, without --classifier)"
        )
    with tf.io.gfile.GFile(path) as f:
        return from_json(f.read(), build, source=path)


def json_value(value) -> Any:
    """A class as JSON keeps it: a Python int or str (never a NumPy scalar)."""
    return value.item() if isinstance(value, np.generic) else value


def _class_value(value):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise errors.InvalidValueError(f"a class must be an integer or a name, got {value!r}")
    return value
