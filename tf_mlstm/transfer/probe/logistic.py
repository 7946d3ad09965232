"""The fitted logistic probe: a classifier on language-model features, and its metrics.

One classifier class serves three kinds of task (`models.head.KINDS`):

- **binary** (two classes): the paper's task. The single unit whose
  threshold alone classifies best is the "sentiment neuron".
- **multiclass** (K > 2 classes, e.g. SST-5): a multinomial (softmax)
  logistic regression, C chosen on validation accuracy; each class has its
  own top unit, found one class against the rest.
- **multilabel** (L labels per text, each 0/1, e.g. SemEval emotions): one
  binary logistic regression per label, each with its own C and its own
  probability threshold chosen on validation (`labeled.choose_threshold`).

`predict_proba` returns [N, K] as scikit-learn does ([N, 2] for binary) and
[N, L] label probabilities for multilabel. The fitted classifier is plain
arrays, saved as JSON (`probe.file_format`, never pickle) and turned into a
`tf_mlstm.models.head_arrays.ClassifierHead` to run in a SavedModel.
`probe.fit.fit_logistic` fits one; `majority_baseline` tells a classifier
that learned nothing from one that did.
"""

import dataclasses

import numpy as np
from scipy import sparse
from sklearn import metrics as sk_metrics

from tf_mlstm import errors
from tf_mlstm.models import head_arrays
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer import ngrams as ngrams_lib
from tf_mlstm.transfer.probe import file_format


@dataclasses.dataclass(frozen=True, eq=False)
class LogisticClassifier:
    """A fitted logistic regression on standardized features.

    Attributes:
      feature_kinds: the concatenated feature kinds, in order.
      hidden_size: units of the model the features came from.
      mean: [D] standardizer mean.
      scale: [D] standardizer scale (1 where a feature is constant).
      weights: [R, D] weights on the standardized features, one row per
        output: binary 1 (the second class), multiclass K, multilabel L.
      bias: [R] intercepts.
      classes: the K classes as in the data (ints, or names from a label
        map), in the order of the probability columns; multilabel: the L
        label names.
      C: the inverse regularization strength chosen (multilabel: a tuple,
        one per label).
      neurons: one `Threshold` per row of `weights` (on unstandardized
        features), each a unit of the model: binary, the sentiment neuron;
        multiclass, each class's top unit against the rest; multilabel, each
        label's. None (`no_neuron` says why) on word n-grams alone.
      multilabel: whether the rows are independent 0/1 labels.
      thresholds: multilabel: the L probability thresholds.
      weights_sha256: the fingerprint (`rundir.weights_checksum`) of the
        model weights the features came from; "" when unknown (files
        written before it was recorded).
      precision: the policy the features were computed in ("" = unknown).
      ngrams: the `ngrams.NgramVocabulary` of the `tfidf` kind (None without it).

    With the `tfidf` kind, features are a scipy sparse matrix (model kinds
    first, the V n-gram columns last; see `features.concat_features`), and
    those columns' `mean` is 0 and `scale` 1 / the block's scale.
    """

    feature_kinds: tuple
    hidden_size: int
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: np.ndarray
    classes: tuple
    C: float | tuple
    neurons: tuple
    multilabel: bool = False
    thresholds: tuple = ()
    weights_sha256: str = ""
    precision: str = ""
    ngrams: object = None

    @property
    def model_kinds(self):
        """The feature kinds the language model computes (all but `tfidf`)."""
        return head_arrays.model_kinds(self.feature_kinds)

    @property
    def head_spec(self):
        """The `models.head.HeadSpec`: how the outputs become decisions."""
        return HeadSpec.of(self.classes, self.multilabel, self.thresholds)

    @property
    def kind(self):
        """The head's kind: one of `models.head.KINDS`."""
        return self.head_spec.kind

    @property
    def neuron(self):
        """The sentiment neuron of a binary classifier.

        Raises:
          ValueError: not a binary classifier (see `neurons`).
        """
        if self.kind != BINARY:
            raise errors.InvalidValueError(
                f"a {self.kind} classifier of {len(self.classes)} "
                f"{'labels' if self.multilabel else 'classes'} has one neuron per "
                f"{'label' if self.multilabel else 'class'}, not one sentiment neuron"
            )
        if not self.neurons:
            raise errors.InvalidValueError(self.no_neuron)
        return self.neurons[0]

    @property
    def no_neuron(self):
        """Why the classifier has no neurons, in a phrase; "" when it has them.

        The neurons are units of the model: a classifier on word n-grams alone
        has none (a classifier fitted with `neurons=False` was not searched).
        """
        if self.neurons:
            return ""
        if not self.model_kinds:
            return (
                f"no sentiment neuron: the features ({','.join(self.feature_kinds)}) hold no unit "
                "of the model, only word n-grams"
            )
        return "no sentiment neuron: the neurons were not searched for"

    @property
    def score_name(self):
        """The metric `score` reports: "accuracy", or "jaccard" for multilabel."""
        return "jaccard" if self.multilabel else "accuracy"

    def decision_function(self, x):
        """Logits (float64): [N] for binary, else [N, K] or [N, L]."""
        if sparse.issparse(x):
            # The centering folded into the bias keeps the n-gram columns sparse.
            folded = self.weights / self.scale
            shift = self.bias - (self.mean / self.scale) @ self.weights.T
            logits = np.asarray(x.astype(np.float64) @ folded.T) + shift
        else:
            standardized = (np.asarray(x, np.float64) - self.mean) / self.scale
            logits = standardized @ self.weights.T + self.bias
        return logits[:, 0] if self.kind == BINARY else logits

    def predict_proba(self, x):
        """Probabilities: [N, K] over the classes (binary [N, 2]), or [N, L] per label."""
        return self.head_spec.probabilities(self.decision_function(x))

    def predict(self, x):
        """Predicted classes [N] (from `classes`), or [N, L] 0/1 labels."""
        logits = self.decision_function(x)
        return self.head_spec.decide(self.head_spec.probabilities(logits), logits)

    def accuracy(self, x, labels):
        """Fraction of predictions equal to `labels` (multilabel: over every label)."""
        return float(np.mean(self.predict(x) == np.asarray(labels)))

    def score(self, x, labels):
        """`score_name` of the predictions: accuracy, or Jaccard (samples)."""
        if not self.multilabel:
            return self.accuracy(x, labels)
        return float(
            sk_metrics.jaccard_score(
                np.asarray(labels), self.predict(x), average="samples", zero_division=1.0
            )
        )

    def metrics(self, x, labels):
        """`labeled.class_metrics` or `labeled.label_metrics` of the predictions."""
        if self.multilabel:
            return labeled.label_metrics(labels, self.predict(x), self.classes, self.thresholds)
        true, _ = encode_labels(labels, self.classes)
        predicted, _ = encode_labels(self.predict(x), self.classes)
        return labeled.class_metrics(true, predicted, self.classes)

    def neuron_accuracy(self, x, labels):
        """Accuracy of the sentiment neuron's threshold alone (binary)."""
        predicted = np.asarray(self.classes)[self.neuron.predict01(x)]
        return float(np.mean(predicted == np.asarray(labels)))

    def neuron_report(self, splits):
        """Each row's neuron and how well it separates its class (or label).

        Args:
          splits: dict name -> (x, labels).

        Returns:
          A list of dicts {class (or label), index, kind, unit, sign, threshold,
          weight, <split>_balanced_accuracy}: the neuron's balanced accuracy,
          its class against the rest.
        """
        rows = []
        name = "label" if self.multilabel else "class"
        targets = {split: self.targets(labels) for split, (_, labels) in splits.items()}
        for row, (neuron, value) in enumerate(zip(self.neurons, self.output_names)):
            kind, unit = self.describe(neuron.index)
            entry = {
                name: value,
                "index": neuron.index,
                "kind": kind,
                "unit": unit,
                "sign": neuron.sign,
                "threshold": neuron.threshold,
                "weight": float(self.weights[row, neuron.index]),
            }
            for split, (x, _) in splits.items():
                entry[f"{split}_balanced_accuracy"] = float(
                    sk_metrics.balanced_accuracy_score(targets[split][:, row], neuron.predict01(x))
                )
            rows.append(entry)
        return rows

    @property
    def output_names(self):
        """What each row of `weights` (and each neuron) stands for: a class or a label.

        Binary: the second (positive) class alone; multiclass: every class;
        multilabel: every label.
        """
        return self.classes[1:] if self.kind == BINARY else self.classes

    def targets(self, labels):
        """[N, R] 0/1 targets of the rows: each label, or each class against the rest."""
        labels = np.asarray(labels)
        if self.multilabel:
            return labels.astype(np.int64)
        return (labels[:, None] == np.asarray(self.output_names)[None, :]).astype(np.int64)

    @property
    def nonzero_weights(self):
        """Number of features with a non-zero weight (in any row)."""
        return int(np.count_nonzero(np.any(self.weights != 0, axis=0)))

    @property
    def num_features(self):
        """D, the width of the features."""
        return int(self.weights.shape[1])

    def describe(self, index):
        """(kind, unit) of feature column `index`."""
        return features_lib.describe_feature(index, self.feature_kinds, self.hidden_size)

    def top_units(self, count=10):
        """The `count` features with the largest |weight| (in any row), non-zero only.

        Returns:
          list of dicts {index, kind, unit, weight} (binary) or {index, kind,
          unit, weights: {class or label: weight}}, largest first.
        """
        largest = np.max(np.abs(self.weights), axis=0)
        order = np.argsort(-largest, kind="stable")[:count]
        rows = []
        for index in order:
            if largest[index] == 0:
                break
            kind, unit = self.describe(int(index))
            row = {"index": int(index), "kind": kind, "unit": unit}
            if kind == ngrams_lib.NGRAM_KIND:
                row["term"] = self.ngrams.terms[unit]
            if self.kind == BINARY:
                row["weight"] = float(self.weights[0, index])
            else:
                row["weights"] = {
                    str(name): float(w) for name, w in zip(self.classes, self.weights[:, index])
                }
            rows.append(row)
        return rows

    def serving_head(self):
        """This classifier as a `ClassifierHead` for `ServingModule`."""
        return ClassifierHead(
            feature_kinds=tuple(self.feature_kinds),
            mean=self.mean,
            scale=self.scale,
            weights=self.weights,
            bias=self.bias,
            classes=tuple(self.classes),
            neuron=self.neurons[0].index if self.kind == BINARY and self.neurons else -1,
            multilabel=self.multilabel,
            thresholds=tuple(self.thresholds),
            weights_sha256=self.weights_sha256,
            precision=self.precision,
            ngram_terms=self.ngrams.terms if self.ngrams is not None else (),
            ngram_idf=self.ngrams.idf if self.ngrams is not None else None,
        )

    # === The file (`file_format`) ===

    def to_json(self):
        """classifier.json's text (`file_format.to_json`)."""
        return file_format.to_json(self)

    @classmethod
    def from_json(cls, text, source="classifier"):
        """Rebuilds a classifier from `to_json` output (every format version).

        Raises:
          ValueError: not a classifier file, or inconsistent contents.
        """
        return file_format.from_json(text, cls._checked, source)

    @classmethod
    def _checked(cls, **fields):
        classifier = cls(**fields)
        classifier.serving_head().check(classifier.hidden_size)
        return classifier

    def save(self, path):
        """Writes `to_json()` to `path` atomically (through `tf.io.gfile`)."""
        file_format.save(self, path)

    @classmethod
    def load(cls, path):
        """Reads a classifier written by `save`.

        Raises:
          FileNotFoundError: no such file.
          ValueError: a folder, or not a valid classifier file.
        """
        return file_format.load(path, cls._checked)


def encode_labels(labels, classes=None, what="labels"):
    """Maps labels to class indices.

    Args:
      labels: [N] classes (ints or names).
      classes: the classes in order; None: the distinct values of `labels`,
        sorted.
      what: a name for error messages.

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


def majority_baseline(classifier, train_y, val_x, val_y):
    """How the classifier compares on validation with always predicting the majority.

    Single-label: the most common training class, scored by accuracy;
    multi-label: each label's more common training value, scored by Jaccard.

    Returns:
      {metric, classifier, majority, majority_prediction, better}: `better`
      is whether the classifier scores strictly above the constant
      prediction.
    """
    train_y, val_y = np.asarray(train_y), np.asarray(val_y)
    if classifier.multilabel:
        constant = (train_y.mean(axis=0) > 0.5).astype(np.int64)
        predicted = np.tile(constant, (len(val_y), 1))
        majority = float(
            sk_metrics.jaccard_score(val_y, predicted, average="samples", zero_division=1.0)
        )
        prediction = dict(zip(classifier.classes, constant.tolist()))
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
