"""The fitted logistic probe: a head, a fit report, and the probe's metrics of them.

`LogisticClassifier` pairs a fit's `ClassifierHead` with its `FitReport`, adding metrics,
the neurons' report, the largest weights and classifier.json; `majority_baseline` tells a
classifier that learned nothing.
"""

import dataclasses

import numpy as np
from sklearn import metrics as sk_metrics

from tf_mlstm import errors
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer import ngrams as ngrams_lib
from tf_mlstm.transfer.probe import file_format
from tf_mlstm.transfer.probe.report import FitReport  # noqa: F401  (a classifier's half)
from tf_mlstm.transfer.probe.threshold import Threshold


@dataclasses.dataclass(frozen=True, eq=False)
class LogisticClassifier:
    """A fitted logistic probe: its head (all that classifies and is served) and its fit report.

    Attributes:
      head: the `ClassifierHead`.
      report: the `FitReport`.

    Example:
    >>> import numpy as np
    >>> from tf_mlstm.models.head import HeadSpec
    >>> from tf_mlstm.models.head_arrays import ClassifierHead
    >>> head = ClassifierHead(
    ...     feature_kinds=("cell",), mean=np.zeros(2), scale=np.ones(2),
    ...     weights=np.array([[2.0, 0.0]]), bias=np.array([0.0]), neuron=0,
    ...     head_spec=HeadSpec.of(("neg", "pos")),
    ... )
    >>> classifier = LogisticClassifier(head, FitReport(hidden_size=2, C=1.0))
    >>> x, labels = np.array([[1.0, 0.0], [-1.0, 0.0]]), ["pos", "neg"]
    >>> classifier.predict(x).tolist(), classifier.score(x, labels)
    (['pos', 'neg'], 1.0)
    >>> LogisticClassifier.from_json(classifier.to_json()).report.C
    1.0
    """

    head: ClassifierHead
    report: FitReport

    def fitted_on(self, weights_sha256=None, precision=None) -> "LogisticClassifier":
        """This classifier, its head recording the model its features came from.

        Args:
          weights_sha256: that model's `rundir.weights_checksum` (None: kept).
          precision: the policy the features were computed in (None: kept).
        """
        changes = {"weights_sha256": weights_sha256, "precision": precision}
        changes = {name: value for name, value in changes.items() if value is not None}
        return dataclasses.replace(self, head=dataclasses.replace(self.head, **changes))

    @property
    def ngrams(self) -> ngrams_lib.NgramVocabulary | None:
        """The `ngrams.NgramVocabulary` of the `tfidf` kind (None without it)."""
        if not len(self.head.ngram_terms):
            return None
        return ngrams_lib.NgramVocabulary(tuple(self.head.ngram_terms), self.head.ngram_idf)

    @property
    def neuron(self) -> Threshold:
        """The sentiment neuron of a binary classifier.

        Raises:
          ValueError: not a binary classifier (see `neurons`).
        """
        spec = self.head.head_spec
        if spec.kind != BINARY:
            multilabel = spec.kind == MULTILABEL
            raise errors.InvalidValueError(
                f"a {spec.kind} classifier of {len(spec.classes)} "
                f"{'labels' if multilabel else 'classes'} has one neuron per "
                f"{'label' if multilabel else 'class'}, not one sentiment neuron"
            )
        if not self.report.neurons:
            raise errors.InvalidValueError(self.no_neuron)
        return self.report.neurons[0]

    @property
    def no_neuron(self) -> str:
        """Why the classifier has no neurons ("" if it has): n-grams alone, or `neurons=False`."""
        if self.report.neurons:
            return ""
        if not self.head.model_kinds:
            kinds = ",".join(self.head.feature_kinds)
            return (
                f"no sentiment neuron: the features ({kinds}) hold no unit of the model, "
                "only word n-grams"
            )
        return "no sentiment neuron: the neurons were not searched for"

    @property
    def score_name(self) -> str:
        """The metric `score` reports: "accuracy", or "jaccard" for multilabel."""
        return "jaccard" if self.head.head_spec.kind == MULTILABEL else "accuracy"

    def predict_proba(self, x) -> np.ndarray:
        """Probabilities: [N, K] over the classes (binary [N, 2]), or [N, L] per label."""
        return self.head.probabilities(x)

    def predict(self, x) -> np.ndarray:
        """Predicted classes [N] (from the head's classes), or [N, L] 0/1 labels."""
        return self.head.predict(x)

    def accuracy(self, x, labels) -> float:
        """Fraction of predictions equal to `labels` (multilabel: over every label)."""
        return float(np.mean(self.predict(x) == np.asarray(labels)))

    def score(self, x, labels) -> float:
        """`score_name` of the predictions: accuracy, or Jaccard (samples)."""
        if self.head.head_spec.kind != MULTILABEL:
            return self.accuracy(x, labels)
        return float(
            sk_metrics.jaccard_score(
                np.asarray(labels), self.predict(x), average="samples", zero_division=1.0
            )
        )

    def metrics(self, x, labels) -> dict:
        """`labeled.class_metrics` or `labeled.label_metrics` of the predictions."""
        spec = self.head.head_spec
        if spec.kind == MULTILABEL:
            return labeled.label_metrics(labels, self.predict(x), spec.classes, spec.thresholds)
        true, _ = encode_labels(labels, spec.classes)
        predicted, _ = encode_labels(self.predict(x), spec.classes)
        return labeled.class_metrics(true, predicted, spec.classes)

    def neuron_accuracy(self, x, labels) -> float:
        """Accuracy of the sentiment neuron's threshold alone (binary)."""
        predicted = np.asarray(self.head.head_spec.classes)[self.neuron.predict01(x)]
        return float(np.mean(predicted == np.asarray(labels)))

    def neuron_report(self, splits) -> list[dict]:
        """Each row's neuron and how well it separates its class (or label).

        Args:
          splits: dict name -> (x, labels).

        Returns:
          dicts {class (or label), index, kind, unit, sign, threshold, weight,
          <split>_balanced_accuracy}.
        """
        rows = []
        name = "label" if self.head.head_spec.kind == MULTILABEL else "class"
        targets = {split: self.targets(labels) for split, (_, labels) in splits.items()}
        for row, (neuron, value) in enumerate(zip(self.report.neurons, self.output_names)):
            kind, unit = self.describe(neuron.index)
            entry = {
                name: value,
                "index": neuron.index,
                "kind": kind,
                "unit": unit,
                "sign": neuron.sign,
                "threshold": neuron.threshold,
                "weight": float(self._weights[row, neuron.index]),
            }
            for split, (x, _) in splits.items():
                entry[f"{split}_balanced_accuracy"] = float(
                    sk_metrics.balanced_accuracy_score(targets[split][:, row], neuron.predict01(x))
                )
            rows.append(entry)
        return rows

    @property
    def output_names(self) -> tuple:
        """What each weight row stands for: binary its positive class, else a class or label."""
        spec = self.head.head_spec
        return spec.classes[1:] if spec.kind == BINARY else spec.classes

    def targets(self, labels) -> np.ndarray:
        """[N, R] 0/1 targets of the rows: each label, or each class against the rest."""
        labels = np.asarray(labels)
        if self.head.head_spec.kind == MULTILABEL:
            return labels.astype(np.int64)
        return (labels[:, None] == np.asarray(self.output_names)[None, :]).astype(np.int64)

    @property
    def nonzero_weights(self) -> int:
        """Number of features with a non-zero weight (in any row)."""
        return int(np.count_nonzero(np.any(self._weights != 0, axis=0)))

    @property
    def num_features(self) -> int:
        """D, the width of the features."""
        return int(self._weights.shape[1])

    @property
    def _weights(self):
        """The head's weights as [R, D]."""
        return np.reshape(self.head.weights, (-1, np.shape(self.head.mean)[0]))

    def describe(self, index) -> tuple[str, int]:
        """(kind, unit) of feature column `index`."""
        return features_lib.describe_feature(
            index, self.head.feature_kinds, self.report.hidden_size
        )

    def top_units(self, count=10) -> list[dict]:
        """The `count` features with the largest |weight| (in any row), non-zero only.

        Returns:
          dicts {index, kind, unit, weight (binary) or weights by class}, largest first.
        """
        largest = np.max(np.abs(self._weights), axis=0)
        order = np.argsort(-largest, kind="stable")[:count]
        rows = []
        for index in order:
            if largest[index] == 0:
                break
            kind, unit = self.describe(int(index))
            row = {"index": int(index), "kind": kind, "unit": unit}
            if kind == ngrams_lib.NGRAM_KIND:
                row["term"] = self.head.ngram_terms[unit]
            spec = self.head.head_spec
            if spec.kind == BINARY:
                row["weight"] = float(self._weights[0, index])
            else:
                row["weights"] = {
                    str(name): float(w) for name, w in zip(spec.classes, self._weights[:, index])
                }
            rows.append(row)
        return rows

    # === The file (`file_format`) ===

    def to_json(self) -> str:
        """classifier.json's text (`file_format.to_json`)."""
        return file_format.to_json(self)

    @classmethod
    def from_json(cls, text, source="classifier") -> "LogisticClassifier":
        """Rebuilds a classifier from `to_json` output (every format version).

        Raises:
          ValueError: not a classifier file, or inconsistent contents.
        """
        return file_format.from_json(text, cls._checked, source)

    @classmethod
    def _checked(cls, head, report):
        head.check(report.hidden_size)
        return cls(head, report)

    def save(self, path) -> None:
        """Writes `to_json()` to `path` atomically (through `tf.io.gfile`)."""
        file_format.save(self, path)

    @classmethod
    def load(cls, path) -> "LogisticClassifier":
        """Reads a classifier written by `save`.

        Raises:
          FileNotFoundError: no such file.
          ValueError: a folder, or not a valid classifier file.
        """
        return file_format.load(path, cls._checked)


def encode_labels(labels, classes=None, what="labels") -> tuple[np.ndarray, tuple]:
    """Maps labels to class indices.

    Args:
      labels: [N] classes (ints or names).
      classes, what: the classes in order (None: the sorted distinct labels); a name for errors.

    Returns:
      ([N] int64 indices into classes, classes).

    Raises:
      ValueError: fewer than two classes, or a label outside `classes`.
    """
    labels = np.asarray(labels)
    if classes is None:
        found = np.unique(labels).tolist()
        if len(found) < 2:
            raise errors.InvalidValueError(
                f"{what}: a classifier needs two or more label values, found {found[:10]}"
            )
        classes = tuple(found)
    index = {value: i for i, value in enumerate(classes)}
    unknown = sorted({value for value in labels.tolist() if value not in index}, key=str)
    if unknown:
        raise errors.InvalidValueError(
            f"{what}: labels {unknown[:10]} are not among the training classes {list(classes)}"
        )
    return np.array([index[value] for value in labels.tolist()], np.int64), tuple(classes)


def majority_baseline(classifier, train_y, val_x, val_y) -> dict:
    """How the classifier compares on validation with always predicting the majority.

    Returns:
      {metric, classifier, majority, majority_prediction, better}: accuracy (multilabel: Jaccard).
    """
    train_y, val_y = np.asarray(train_y), np.asarray(val_y)
    if classifier.head.head_spec.kind == MULTILABEL:
        constant = (train_y.mean(axis=0) > 0.5).astype(np.int64)
        predicted = np.tile(constant, (len(val_y), 1))
        majority = float(
            sk_metrics.jaccard_score(val_y, predicted, average="samples", zero_division=1.0)
        )
        prediction = dict(zip(classifier.head.head_spec.classes, constant.tolist()))
    else:
        values, counts = np.unique(train_y, return_counts=True)
        prediction = file_format.json_value(values[np.argmax(counts)])
        majority = float(np.mean(val_y == prediction))
    score = classifier.score(val_x, val_y)
    return {
        "metric": classifier.score_name,
        "classifier": score,
        "majority": majority,
        "majority_prediction": prediction,
        "better": bool(score > majority),
    }
