"""L1- (or L2-) regularized logistic regression on language-model features.

The transfer recipe of Radford et al. (2017): standardize the features (mean
and scale from the training rows), fit an L1-regularized logistic
regression (scikit-learn's `LogisticRegression` objective) for each C of a
log grid, and keep the C with the best validation score (ties go to the
smaller C: fewer units). The L1 penalty makes the weights sparse, so the
units that carry sentiment stand out. The L2 penalty (what
`tf-mlstm-transfer` uses by default) keeps every weight, which classifies
better from the weak pooled features of small models. The fits are the
project's own full-batch solver's (`tf_mlstm.transfer.solver`, solver
"batch", the default) or scikit-learn's by name (`l1_ratio=1` spells
`penalty="l1"` as scikit-learn 1.8+ does not deprecate). The grid is swept
upwards with warm starts and an iteration cap (`MAX_ITER`), each fit's
convergence reported and its progress logged (`FIT_LOG_INTERVAL_S`); features
may include a sparse block of word n-gram TF-IDF (`ngrams`), standardized
apart (`block_standardizer`), and `majority_baseline` tells a classifier
that learned nothing from one that did.

One classifier class serves three kinds of task:

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
arrays, saved as JSON (never pickle) and turned into a
`tf_mlstm.models.head_arrays.ClassifierHead` to run in a SavedModel.
"""

import copy
import dataclasses
import hashlib
import itertools
import json
import warnings

import numpy as np
from absl import logging
from scipy import sparse
from scipy.special import expit
from sklearn import metrics as sk_metrics
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from tf_mlstm import errors
from tf_mlstm.config.choices import CV_FOLDS
from tf_mlstm.config.choices import DEFAULT_C_GRID
from tf_mlstm.config.choices import PENALTIES  # noqa: F401
from tf_mlstm.config.choices import SOLVERS  # noqa: F401
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.models.kinds import CELL_KINDS
from tf_mlstm.models.kinds import HIDDEN_KINDS
from tf_mlstm.progress import Progress
from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer import ngrams as ngrams_lib
from tf_mlstm.transfer import solver as solver_lib

WORDS_C_GRID = DEFAULT_C_GRID + (float(np.sqrt(10.0)), 10.0)
"""The default grid of the word n-grams alone: up to C=10 on the scaled block
(scikit-learn's C of about 10,000 on raw TF-IDF). With every n-gram of a
thousand or two training texts kept, the best C on held-out rows was the
default grid's largest (docs/transfer.md); model features keep the default
grid, where larger C only slows the fit."""
NEURON_CANDIDATES = 10
"""Units by |weight| and by |correlation| considered for a neuron."""
KINDS = ("binary", "multiclass", "multilabel")
FORMAT = "tf_mlstm.logistic_classifier"
FORMAT_VERSION = 2
"""Version 2 adds `kind`, K classes (ints or names), L labels with
thresholds and per-class neurons; version 1 files (binary) still load."""
NGRAM_FORMAT_VERSION = 3
"""Version 3 adds `ngrams` (the TF-IDF vocabulary); only a classifier on word
n-grams is written as version 3, so files without them read as before."""
_READ_VERSIONS = (1, 2, 3)
CV_MAX_VALIDATION = 2000
"""A validation split of this many rows or more chooses alone; a smaller one is
too noisy a judge (a standard error of a point or more on accuracy), so the
choice is made by `CV_FOLDS`-fold cross-validation over train and validation
together (`cross_validate`)."""
NGRAM_BLOCK_MIN = 1024
"""The TF-IDF block is scaled by sqrt(max(width of the model's features, this))
before the fit (see `fit_logistic`)."""


def column(x, index):
    """Column `index` of features `x` (a NumPy array or a scipy sparse matrix) as [N]."""
    if sparse.issparse(x):
        return np.asarray(x[:, [index]].todense(), np.float64).ravel()
    return np.asarray(x)[:, index]


# === Thresholds on one unit ===


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A one-feature classifier: positive where `sign * (x - threshold) > 0`.

    Attributes:
      index: the feature column.
      sign: +1 (large values are positive) or -1.
      threshold: the cut.
    """

    index: int
    sign: int
    threshold: float

    def predict01(self, x):
        """0/1 predictions for the rows of features `x` [N, D]."""
        return (self.sign * (column(x, self.index) - self.threshold) > 0).astype(np.int64)


def fit_threshold(values, labels01, balanced=False):
    """The cut and direction on one feature that classify best.

    Args:
      values: [N] feature values.
      labels01: [N] labels in {0, 1}.
      balanced: maximize balanced accuracy (the mean of the two classes'
        recalls) instead of accuracy: for one class against the rest, where
        plain accuracy would favor calling everything "rest".

    Returns:
      (sign, threshold, accuracy): the best of all cuts between distinct
      values (and below/above all of them), for both directions; ties go to
      sign +1, then the lowest cut. `accuracy` is balanced when asked.
    """
    values = np.asarray(values, np.float64)
    labels01 = np.asarray(labels01, np.int64)
    n = len(values)
    positives = int(labels01.sum())
    negatives = n - positives
    # Integer weights keep the ties exact: balanced weighs a positive row by
    # the negatives' count and a negative row by the positives'.
    weigh = balanced and positives and negatives
    weight_pos, weight_neg = (negatives, positives) if weigh else (1, 1)
    total = weight_pos * positives + weight_neg * negatives
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    weights = np.where(labels01[order] == 1, weight_pos, weight_neg)
    positive_weight = np.concatenate([[0], np.cumsum(weights * labels01[order])])
    negative_weight = np.concatenate([[0], np.cumsum(weights * (1 - labels01[order]))])
    # Cut k: rows [0, k) predicted negative, [k, n) positive (sign +1).
    correct_up = negative_weight + (positive_weight[-1] - positive_weight)
    allowed = np.ones(n + 1, bool)
    allowed[1:n] = sorted_values[1:] > sorted_values[:-1]
    best_up = np.where(allowed, correct_up, -1)
    best_down = np.where(allowed, total - correct_up, -1)
    if best_up.max() >= best_down.max():
        sign, cut, correct = 1, int(np.argmax(best_up)), int(best_up.max())
    else:
        sign, cut, correct = -1, int(np.argmax(best_down)), int(best_down.max())
    if n == 0:
        return sign, 0.0, 0.0
    if cut == 0:
        threshold = sorted_values[0] - 1.0
    elif cut == n:
        threshold = sorted_values[-1] + 1.0
    else:
        threshold = (sorted_values[cut - 1] + sorted_values[cut]) / 2.0
    return sign, float(threshold), correct / total


# === The classifier ===


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
        features): binary, the sentiment neuron; multiclass, each class's
        top unit against the rest; multilabel, each label's.
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
        return tuple(k for k in self.feature_kinds if k != ngrams_lib.NGRAM_KIND)

    @property
    def head(self):
        """The `models.head.HeadSpec`: how the outputs become decisions."""
        return HeadSpec.of(self.classes, self.multilabel, self.thresholds)

    @property
    def kind(self):
        """ "binary", "multiclass" or "multilabel"."""
        return self.head.kind

    @property
    def neuron(self):
        """The sentiment neuron of a binary classifier.

        Raises:
          ValueError: not a binary classifier (see `neurons`).
        """
        if self.kind != "binary":
            raise errors.InvalidValueError(
                f"a {self.kind} classifier of {len(self.classes)} "
                f"{'labels' if self.multilabel else 'classes'} has one neuron per "
                f"{'label' if self.multilabel else 'class'}, not one sentiment neuron"
            )
        return self.neurons[0]

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
        return logits[:, 0] if self.kind == "binary" else logits

    def predict_proba(self, x):
        """Probabilities: [N, K] over the classes (binary [N, 2]), or [N, L] per label."""
        return self.head.probabilities(self.decision_function(x))

    def predict(self, x):
        """Predicted classes [N] (from `classes`), or [N, L] 0/1 labels."""
        logits = self.decision_function(x)
        return self.head.decide(self.head.probabilities(logits), logits)

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
        return self.classes[1:] if self.kind == "binary" else self.classes

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
            if self.kind == "binary":
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
            neuron=self.neurons[0].index if self.kind == "binary" else -1,
            multilabel=self.multilabel,
            thresholds=tuple(self.thresholds),
            weights_sha256=self.weights_sha256,
            precision=self.precision,
            ngram_terms=self.ngrams.terms if self.ngrams is not None else (),
            ngram_idf=self.ngrams.idf if self.ngrams is not None else None,
        )

    # === Serialization ===
    def _neuron_record(self, neuron):
        kind, unit = self.describe(neuron.index)
        return {
            "index": neuron.index,
            "kind": kind,
            "unit": unit,
            "sign": neuron.sign,
            "threshold": neuron.threshold,
        }

    def to_json(self):
        """A JSON document holding everything; floats round-trip exactly.

        A binary classifier keeps version 1's fields (`classes`, `bias` and
        `weights` as one row, `neuron`); multiclass writes `classes` (K),
        `bias` [K], `weights` [K][D] and `neurons` (one per class);
        multilabel writes `labels` (L), `thresholds`, `C`, `bias`, `weights`
        and `neurons` per label.
        """
        record = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "kind": self.kind,
            "feature_kinds": list(self.feature_kinds),
            "hidden_size": self.hidden_size,
        }
        # The model it was fitted on: classify and export check and follow them.
        if self.weights_sha256:
            record["weights_sha256"] = self.weights_sha256
        if self.precision:
            record["precision"] = self.precision
        names = [_json_value(c) for c in self.classes]
        if self.multilabel:
            record.update(labels=names, thresholds=[float(t) for t in self.thresholds])
            record["C"] = [float(c) for c in self.C]
        else:
            record.update(classes=names, C=float(self.C))
        if self.kind == "binary":
            record.update(
                bias=float(self.bias[0]),
                neuron=self._neuron_record(self.neurons[0]),
                weights=self.weights[0].tolist(),
            )
        else:
            record.update(
                bias=self.bias.tolist(),
                neurons=[
                    {("label" if self.multilabel else "class"): name, **self._neuron_record(n)}
                    for name, n in zip(names, self.neurons)
                ],
                weights=self.weights.tolist(),
            )
        record.update(mean=self.mean.tolist(), scale=self.scale.tolist())
        if self.ngrams is not None:
            record.update(version=NGRAM_FORMAT_VERSION, ngrams=self.ngrams.to_record())
        return json.dumps(record)

    @classmethod
    def from_json(cls, text, source="classifier"):
        """Rebuilds a classifier from `to_json` output (either format version).

        Args:
          text: the JSON document.
          source: a name for error messages (the file).

        Returns:
          The `LogisticClassifier`.

        Raises:
          ValueError: not a classifier file, or inconsistent contents.
        """
        try:
            record = json.loads(text)
        except ValueError as e:
            raise errors.InvalidValueError(f"{source}: not JSON ({e})") from e
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise errors.InvalidValueError(f"{source}: not a tf-mlstm-transfer classifier file")
        if record.get("version") not in _READ_VERSIONS:
            raise errors.InvalidValueError(
                f"{source}: classifier format version {record.get('version')}, this code reads "
                f"{', '.join(map(str, _READ_VERSIONS))}"
            )
        try:
            classifier = cls._from_record(record)
            classifier.serving_head().check(classifier.hidden_size)
        except (KeyError, TypeError) as e:
            raise errors.InvalidValueError(
                f"{source}: incomplete classifier file (missing or bad {e})"
            ) from e
        except ValueError as e:
            raise errors.InvalidValueError(f"{source}: {e}") from e
        return classifier

    @classmethod
    def _from_record(cls, record):
        kind = record.get("kind", "binary")
        if kind not in KINDS:
            raise errors.InvalidValueError(
                f"unknown classifier kind {kind!r}; this code reads {list(KINDS)}"
            )
        multilabel = kind == "multilabel"
        names = tuple(_class_value(c) for c in record["labels" if multilabel else "classes"])
        if kind == "binary":
            neurons = (record["neuron"],)
        else:
            neurons = tuple(record["neurons"])
        if (kind == "binary") != (len(names) == 2 and not multilabel) or len(set(names)) < len(
            names
        ):
            raise errors.InvalidValueError(
                f"a {kind} classifier cannot have the classes {list(names)}"
            )
        weights = np.asarray(record["weights"], np.float64)
        return cls(
            feature_kinds=tuple(record["feature_kinds"]),
            hidden_size=int(record["hidden_size"]),
            mean=np.asarray(record["mean"], np.float64),
            scale=np.asarray(record["scale"], np.float64),
            weights=weights.reshape(1, -1) if kind == "binary" else weights,
            bias=np.asarray(record["bias"], np.float64).reshape(-1),
            classes=names,
            C=tuple(float(c) for c in record["C"]) if multilabel else float(record["C"]),
            neurons=tuple(
                Threshold(int(n["index"]), int(n["sign"]), float(n["threshold"])) for n in neurons
            ),
            multilabel=multilabel,
            thresholds=tuple(float(t) for t in record["thresholds"]) if multilabel else (),
            weights_sha256=str(record.get("weights_sha256", "")),
            precision=str(record.get("precision", "")),
            ngrams=(
                ngrams_lib.NgramVocabulary.from_record(record["ngrams"])
                if "ngrams" in record
                else None
            ),
        )

    def save(self, path):
        """Writes `to_json()` to `path` atomically (through `tf.io.gfile`)."""
        from tf_mlstm import fileio  # pylint: disable=import-outside-toplevel

        fileio.write_text_atomic(path, self.to_json())

    @classmethod
    def load(cls, path):
        """Reads a classifier written by `save`.

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
                f"as {errors.setting_name('model_dir')}, without "
                f"{errors.setting_name('classifier')})"
            )
        with tf.io.gfile.GFile(path) as f:
            return cls.from_json(f.read(), source=path)


def _json_value(value):
    """A class as JSON keeps it: a Python int or str (never a NumPy scalar)."""
    return value.item() if isinstance(value, np.generic) else value


def _class_value(value):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise errors.InvalidValueError(f"a class must be an integer or a name, got {value!r}")
    return value


# === Fitting ===


def standardizer(x):
    """Column mean and scale of `x` [N, D]; a constant column gets scale 1."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    return mean, np.where(scale > 1e-12, scale, 1.0)


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


def resolve_solver(penalty, solver, num_classes=2):
    """The solver for `penalty` and `num_classes` ("auto" picks one).

    Raises:
      ValueError: an unknown penalty or solver, lbfgs with l1, or liblinear
        with more than two classes.
    """
    if penalty not in PENALTIES:
        raise errors.InvalidValueError(f"penalty must be one of {PENALTIES}, got {penalty!r}")
    if solver not in SOLVERS:
        raise errors.InvalidValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if solver == "lbfgs" and penalty != "l2":
        raise errors.InvalidValueError(f"the lbfgs solver fits only the l2 penalty, not {penalty}")
    if solver == "liblinear" and num_classes > 2:
        raise errors.InvalidValueError(
            f"the liblinear solver fits two classes, not {num_classes}: the multinomial fit "
            "needs saga (or lbfgs, l2 only)"
        )
    if solver == "auto":
        return "batch"
    return solver


MAX_ITER = {"batch": solver_lib.MAX_ITER, "lbfgs": 300, "saga": 300, "liblinear": 200}
"""Iterations a fit may take (batch: gradient evaluations, line-search
steps included). Along the C grid each fit but liblinear's starts from the
previous C's solution (warm start), so after the first only a few are
needed; a fit that stops at the cap is reported (`converged` false) rather
than left to run for minutes on the separable features of a wide model."""
FIT_LOG_INTERVAL_S = 10.0
"""Seconds between progress log lines of a sweep when stderr is not a terminal."""


def _task(num_outputs, multilabel):
    if multilabel:
        return "multilabel"
    return "binary" if num_outputs <= 2 else "multinomial"


def _sweep(z, y, c_grid, penalty, solver, seed, num_classes=2, report=None):
    """Fits at each C of the (ascending) grid, each from the previous solution.

    Args:
      z: [N, D] standardized features (dense or CSR).
      y: [N] class indices, or [N, L] 0/1 labels (multilabel: L binary fits).
      c_grid: ascending C values.
      penalty, solver, seed: see `fit_logistic` (solver resolved).
      num_classes: K of the class indices.
      report: called as report(c_index, C, iterations) as the fits go.

    Yields:
      (C, weights [R, D], bias [R], converged [G], iterations [G]) per C,
      with G = L problems for multilabel, else 1.
    """
    multilabel = np.ndim(y) == 2
    task = _task(num_classes, multilabel)
    if solver == "batch":
        on_iteration = None
        if report is not None:

            def on_iteration(index, iterations):
                report(index, c_grid[index], iterations)

        for fit in solver_lib.fit_path(
            z,
            y,
            c_grid,
            penalty,
            task,
            num_classes=num_classes,
            max_iter=MAX_ITER["batch"],
            on_iteration=on_iteration,
        ):
            yield fit.C, fit.weights, fit.bias, fit.converged, fit.iterations
        return
    columns = [y[:, k] for k in range(y.shape[1])] if multilabel else [y]
    sweeps = [_sklearn_sweep(z, column, c_grid, penalty, solver, seed) for column in columns]
    for index, c in enumerate(c_grid):
        if report is not None:
            report(index, c, 0)
        fits = [next(sweep) for sweep in sweeps]
        yield (
            c,
            np.concatenate([fit[0] for fit in fits]),
            np.concatenate([fit[1] for fit in fits]),
            np.array([fit[2] for fit in fits]),
            np.array([fit[3] for fit in fits]),
        )


def _sklearn_sweep(z, y, c_grid, penalty, solver, seed):
    """scikit-learn's `LogisticRegression` along the grid.

    Yields:
      (weights [R, D], bias [R], converged, iterations) per C.
    """
    warm = solver != "liblinear"  # liblinear always starts from zero
    model = LogisticRegression(
        l1_ratio=1.0 if penalty == "l1" else 0.0,
        solver=solver,
        max_iter=MAX_ITER[solver],
        random_state=seed,
        warm_start=warm,
    )
    # lbfgs and saga work in the data's precision: float32 halves the cost of
    # the products that dominate, and the standardized features need no more.
    data = z if solver == "liblinear" else _as_float32(z)
    for c in c_grid:
        model.set_params(C=c)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            model.fit(data, y)
        converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        # C order, as a loaded classifier has: the same products to the last bit.
        weights = np.ascontiguousarray(model.coef_, np.float64)
        bias = model.intercept_.astype(np.float64)
        yield weights, bias, converged, int(np.max(model.n_iter_))


class _SweepProgress:
    """Progress of one sweep over the C grid, through `tf_mlstm.progress.Progress`.

    Lines read "Fitting <title> at C=0.001: 3.0/9.0 C (33%), 0.4 C/s, 0:15
    left; 42 iterations" (the C being fitted, the C values done of the grid,
    the rate, the time left, the fit's iterations so far): on a terminal a
    bar, elsewhere a log line every `FIT_LOG_INTERVAL_S` seconds and one when
    the sweep ends.
    """

    def __init__(self, title, c_grid, enabled):
        self.title = title
        # Tenths, so that a rate below one C per second reads 0.4, not 0.
        self.progress = Progress(
            f"Fitting {title}",
            10 * len(c_grid),
            "C",
            scale=10,
            log_interval_s=FIT_LOG_INTERVAL_S,
            enabled=enabled is not False,
        )

    def __call__(self, index, c, iterations):
        self.progress.what = f"Fitting {self.title} at C={c:.3g}"
        self.progress.update(10 * index, iterations=int(iterations))

    def close(self):
        self.progress.update(self.progress.total)
        self.progress.close()


def _as_float32(z):
    return z.astype(np.float32) if z.dtype != np.float32 else z


def _predicted_index(z, weights, bias):
    logits = z @ weights.T + bias
    return (logits[:, 0] > 0).astype(np.int64) if len(bias) == 1 else np.argmax(logits, axis=1)


def fit_logistic(
    train_x,
    train_y,
    val_x,
    val_y,
    kinds,
    hidden_size,
    c_grid=DEFAULT_C_GRID,
    solver="auto",
    seed=0,
    penalty="l1",
    classes=None,
    threshold_metric="accuracy",
    ngrams=None,
    neurons=True,
    progress=None,
    title=None,
):
    """Sweeps C, keeps the best on validation, and finds the neurons.

    Args:
      train_x: [N, D] features (`concat_features` of `kinds`).
      train_y: [N] classes (two or more values), or [N, L] 0/1 labels
        (multilabel: one logistic regression per label).
      val_x: [M, D] validation features.
      val_y: [M] or [M, L] validation labels.
      kinds: the feature kinds concatenated in `train_x`.
      hidden_size: the model's units.
      c_grid: inverse regularization strengths to try.
      solver: one of `SOLVERS`.
      seed: solver seed.
      penalty: one of `PENALTIES`.
      classes: the classes in order (None: the sorted values of `train_y`);
        multilabel: the L label names (None: label_0, label_1, ...).
      threshold_metric: multilabel: what each label's threshold, and its C,
        maximize on validation (`labeled.THRESHOLD_METRICS`).
      ngrams: with the `tfidf` kind (last in `kinds`; `train_x` and `val_x`
        then scipy sparse), its `ngrams.NgramVocabulary`, kept in the
        classifier.
      neurons: False skips the search for the neurons (the classifier then
        has none: it predicts and scores, as feature selection needs, but
        has no `neuron`, report or serving head).
      progress: False reports nothing; otherwise (None too) the sweep's
        progress, C values done of the grid, the rate and the time left: a
        bar on a terminal, else a log line every `FIT_LOG_INTERVAL_S` seconds
        and one at the end (`tf_mlstm.progress.Progress`).
      title: what the progress lines name (None: the kinds).

    The features are standardized (training mean and deviation; the n-gram
    block see `block_standardizer`) and the grid is swept from the smallest
    C up, each fit starting from the previous solution (batch, lbfgs, saga),
    at most `MAX_ITER` iterations each.

    Returns:
      (LogisticClassifier, sweep): sweep is a list of dicts in grid order,
      {C, train_accuracy, val_accuracy, nonzero_weights, converged,
      iterations}; for multilabel one per label and C, {label, C, threshold,
      val_<threshold_metric>, nonzero_weights, converged, iterations}.

    Raises:
      ValueError: a bad penalty, solver or grid, fewer than two classes, a
        validation label the training data does not have, or (multilabel) a
        label with one value on every training row.
    """
    c_grid = sorted(float(c) for c in c_grid)
    if not c_grid or min(c_grid) <= 0:
        raise errors.InvalidValueError(f"the C grid must hold positive values, got {c_grid}")
    with_ngrams = ngrams_lib.NGRAM_KIND in kinds
    if with_ngrams and ngrams is None:
        raise errors.InvalidValueError("the tfidf feature kind needs its n-gram vocabulary")
    dense_width = int(hidden_size) * sum(k != ngrams_lib.NGRAM_KIND for k in kinds)
    mean, scale = block_standardizer(train_x, dense_width)
    train_z, val_z = (standardize(x, mean, scale, dense_width) for x in (train_x, val_x))
    fit = _fit_labels if np.ndim(train_y) == 2 else _fit_classes
    settings = (
        (tuple(kinds), tuple(c_grid), penalty, solver, seed, classes, threshold_metric),
        (sorted(MAX_ITER.items()), sorted(solver_lib.DEFAULT_METHODS.items())),
    )
    key = _fingerprint(train_x, train_y, val_x, val_y, settings)
    if key in _SWEEPS:
        # The same sweep as one feature selection just ran (the final fit of
        # the kinds it chose): its result, not the work again.
        fitted, sweep = copy.deepcopy(_SWEEPS[key])
        logging.info("The sweep of %s is the one feature selection made", ",".join(kinds))
    else:
        report = _SweepProgress(title or ",".join(kinds), c_grid, progress)
        try:
            fitted, sweep = fit(
                train_z,
                np.asarray(train_y),
                val_z,
                np.asarray(val_y),
                c_grid,
                penalty,
                solver,
                seed,
                classes,
                threshold_metric,
                report,
            )
        finally:
            report.close()
        _SWEEPS[key] = copy.deepcopy((fitted, sweep))
        while len(_SWEEPS) > _SWEEPS_KEPT:
            del _SWEEPS[next(iter(_SWEEPS))]
    unconverged = sorted({row["C"] for row in sweep if not row["converged"]})
    if unconverged:
        logging.warning("The solver did not converge for C in %s.", unconverged)
    targets = fitted.pop("neuron_targets")
    columns = neuron_columns(kinds, hidden_size)
    found = tuple(
        find_neuron(train_x, y01, weights, balanced=balanced, columns=columns)
        for y01, weights, balanced in (targets if neurons else ())
    )
    classifier = LogisticClassifier(
        feature_kinds=tuple(kinds),
        hidden_size=int(hidden_size),
        mean=mean,
        scale=scale,
        neurons=found,
        ngrams=ngrams if with_ngrams else None,
        **fitted,
    )
    return classifier, sweep


_SWEEPS = {}
"""The last `_SWEEPS_KEPT` sweeps by `_fingerprint` of their inputs: the
chosen weights and the sweep's rows (a few MB at most, on 4096 units)."""
_SWEEPS_KEPT = 16
"""More than the sweeps of one `auto,tfidf` selection (at most 10)."""


def _fingerprint(train_x, train_y, val_x, val_y, settings):
    """A digest of a sweep's inputs: the arrays' bytes, shapes and types, and its settings."""
    digest = hashlib.blake2b(repr(settings).encode(), digest_size=16)
    for array in (train_x, train_y, val_x, val_y):
        parts = (array.data, array.indices, array.indptr) if sparse.issparse(array) else (array,)
        for part in parts:
            part = np.ascontiguousarray(part)
            digest.update(f"{part.dtype}{part.shape}".encode())
            if part.dtype == object:
                digest.update(repr(part.tolist()).encode())
            else:
                digest.update(part.view(np.uint8).ravel())
    return digest.hexdigest()


def block_standardizer(x, dense_width):
    """Mean and scale of features `x` whose first `dense_width` columns are the model's.

    The model's columns get their training mean and standard deviation
    (`standardizer`). The rest, the TF-IDF columns of a sparse `x`, keep
    mean 0 (so they stay sparse) and get scale 1 / sqrt(max(dense_width,
    `NGRAM_BLOCK_MIN`)): each TF-IDF row has unit norm, each standardized
    model row a squared norm of about `dense_width`, and scaling the n-grams
    to the same norm lets one C regularize both blocks alike (and puts the
    n-grams' best C, alone, inside the default grid).
    """
    if not sparse.issparse(x):
        return standardizer(x)
    x = sparse.csr_matrix(x)
    mean, scale = standardizer(x[:, :dense_width].toarray()) if dense_width else ((), ())
    ngram_scale = 1.0 / np.sqrt(max(dense_width, NGRAM_BLOCK_MIN))
    width = x.shape[1] - dense_width
    return (
        np.concatenate([mean, np.zeros(width)]),
        np.concatenate([scale, np.full(width, ngram_scale)]),
    )


def standardize(x, mean, scale, dense_width):
    """(x - mean) / scale: float64 [N, D], or CSR when `x` is sparse (its n-grams scaled only)."""
    if not sparse.issparse(x):
        return (np.asarray(x, np.float64) - mean) / scale
    x = sparse.csr_matrix(x, dtype=np.float64)
    ngrams = x[:, dense_width:].multiply(1.0 / scale[dense_width:]).tocsr()
    if not dense_width:
        return ngrams
    dense = (x[:, :dense_width].toarray() - mean[:dense_width]) / scale[:dense_width]
    return sparse.hstack([sparse.csr_matrix(dense), ngrams], format="csr")


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
        prediction = _json_value(values[np.argmax(counts)])
        majority = float(np.mean(val_y == prediction))
    score = classifier.score(val_x, val_y)
    return {
        "metric": classifier.score_name,
        "classifier": score,
        "majority": majority,
        "majority_prediction": prediction,
        "better": bool(score > majority),
    }


def _fit_classes(
    train_z, train_y, val_z, val_y, c_grid, penalty, solver, seed, classes, _, report=None
):
    """One (binary or multinomial) fit per C; the best on validation accuracy."""
    train_index, classes = encode_labels(train_y, classes, what="training labels")
    val_index, _ = encode_labels(val_y, classes, what="validation labels")
    solver = resolve_solver(penalty, solver, len(classes))
    sweep, best = [], None
    fits = _sweep(train_z, train_index, c_grid, penalty, solver, seed, len(classes), report)
    for c, weights, bias, converged, iterations in fits:
        row = {
            "C": c,
            "train_accuracy": float(
                np.mean(_predicted_index(train_z, weights, bias) == train_index)
            ),
            "val_accuracy": float(np.mean(_predicted_index(val_z, weights, bias) == val_index)),
            "nonzero_weights": int(np.count_nonzero(np.any(weights != 0, axis=0))),
            "converged": bool(np.all(converged)),
            "iterations": int(np.max(iterations)),
        }
        sweep.append(row)
        if best is None or row["val_accuracy"] > best[0]["val_accuracy"]:
            best = (row, weights, bias)
    row, weights, bias = best
    if len(classes) == 2:
        targets = [(train_index, weights[0], False)]
    else:
        # Each class against the rest: balanced, or a rare class's best cut
        # would be to call everything "rest".
        targets = [
            ((train_index == k).astype(np.int64), weights[k], True) for k in range(len(classes))
        ]
    fitted = {"weights": weights, "bias": bias, "classes": classes, "C": row["C"]}
    return dict(fitted, neuron_targets=targets), sweep


def _fit_labels(
    train_z, train_y, val_z, val_y, c_grid, penalty, solver, seed, names, metric, report=None
):
    """One binary fit per label and C; per label the C and threshold best on validation."""
    if metric not in labeled.THRESHOLD_METRICS:
        raise errors.InvalidValueError(
            f"threshold metric must be one of {labeled.THRESHOLD_METRICS}"
        )
    count = train_y.shape[1]
    names = tuple(names) if names is not None else tuple(f"label_{k}" for k in range(count))
    if len(names) != count or np.shape(val_y)[1:] != (count,):
        raise errors.InvalidValueError(
            f"{count} training labels, {np.shape(val_y)[1:]} validation, names {names}"
        )
    solver = resolve_solver(penalty, solver, 2)
    for k, name in enumerate(names):
        values = np.unique(train_y[:, k]).tolist()
        if values != [0, 1]:
            raise errors.InvalidValueError(
                f"label {name!r} is {values} on every training row; each label needs both 0 and 1"
            )
    rows, chosen = [[] for _ in names], [None] * count
    # Every label's fit at one C at a time (batch fits them side by side).
    for c, weights, bias, converged, iterations in _sweep(
        train_z, train_y, c_grid, penalty, solver, seed, 2, report
    ):
        probabilities = expit(val_z @ weights.T + bias)
        for k, name in enumerate(names):
            probability = probabilities[:, k]
            threshold = labeled.choose_threshold(probability, val_y[:, k], metric)
            value = _binary_metric(val_y[:, k], probability > threshold, metric)
            rows[k].append(
                {
                    "label": name,
                    "C": c,
                    "threshold": threshold,
                    f"val_{metric}": value,
                    "nonzero_weights": int(np.count_nonzero(weights[k])),
                    "converged": bool(converged[k]),
                    "iterations": int(iterations[k]),
                }
            )
            if chosen[k] is None or value > chosen[k][0]:
                chosen[k] = (value, c, threshold, weights[k].copy(), bias[k])
    sweep = [row for label_rows in rows for row in label_rows]
    _, cs, thresholds, weights, bias = (list(column) for column in zip(*chosen))
    fitted = {
        "weights": np.stack(weights),
        "bias": np.array(bias),
        "classes": names,
        "C": tuple(cs),
        "multilabel": True,
        "thresholds": tuple(thresholds),
    }
    targets = [(train_y[:, k], weights[k], True) for k in range(count)]
    return dict(fitted, neuron_targets=targets), sweep


def _binary_metric(truth, predicted, metric):
    if metric == "accuracy":
        return float(sk_metrics.accuracy_score(truth, predicted))
    return float(sk_metrics.f1_score(truth, predicted, zero_division=0))


def neuron_columns(kinds, hidden_size):
    """The feature columns a neuron is chosen among: units of the model, cell state first.

    The sentiment neuron is a unit of the model that `tf-mlstm-generate`
    holds fixed and `tf-mlstm-visualize` draws. It is chosen among the
    columns of the cell-state kinds (`CELL_KINDS`, Radford et al.'s neuron)
    when the features have one; else among the hidden-state kinds a held
    unit gives (`HIDDEN_KINDS`; `--features=auto` always keeps one of the
    two); else among the model's columns (`std` alone); never among the word
    n-grams while the model has a column (with `tfidf` alone there is no unit
    of the model: its columns).

    Args:
      kinds: the concatenated feature kinds (`tfidf`, if there, last).
      hidden_size: the model's units.

    Returns:
      int64 array of column indices, ascending; None (every column) with
      `tfidf` alone.
    """
    model_kinds = [kind for kind in kinds if kind != ngrams_lib.NGRAM_KIND]
    for wanted in (CELL_KINDS, HIDDEN_KINDS, tuple(model_kinds)):
        blocks = [i for i, kind in enumerate(model_kinds) if kind in wanted]
        if blocks:
            return np.concatenate(
                [np.arange(b * hidden_size, (b + 1) * hidden_size) for b in blocks]
            ).astype(np.int64)
    return None


def find_neuron(
    train_x, train_y01, weights, candidates=NEURON_CANDIDATES, balanced=False, columns=None
):
    """The single feature whose best threshold classifies the training rows best.

    The candidates are the features (among `columns`) with the largest
    |weight| and those with the largest |correlation| with the label; ties go
    to the larger |weight|.

    Args:
      train_x: [N, D] features.
      train_y01: [N] labels in {0, 1}.
      weights: [D] fitted weights.
      candidates: how many of each kind of candidate.
      balanced: judge thresholds by balanced accuracy (see `fit_threshold`).
      columns: the columns to choose among (`neuron_columns`); None: all.

    Returns:
      A `Threshold`.
    """
    train_y01 = np.asarray(train_y01, np.int64)
    y = train_y01 - train_y01.mean()
    if sparse.issparse(train_x):
        # Sums of squares about the mean without densifying the n-gram columns.
        x = sparse.csr_matrix(train_x, dtype=np.float64)
        mean = np.asarray(x.mean(axis=0)).ravel()
        squares = np.asarray(x.multiply(x).sum(axis=0)).ravel() - len(y) * mean**2
        covariance = np.asarray(x.T @ y).ravel()
    else:
        x = np.asarray(train_x, np.float64)
        centered = x - x.mean(axis=0)
        squares = (centered**2).sum(axis=0)
        covariance = centered.T @ y
    norms = np.sqrt(np.maximum(squares, 0.0) * (y**2).sum())
    correlation = np.abs(covariance) / np.where(norms > 0, norms, 1.0)
    columns = np.arange(len(weights)) if columns is None else np.asarray(columns, np.int64)
    by_weight = columns[np.argsort(-np.abs(weights[columns]), kind="stable")[:candidates]]
    by_correlation = columns[np.argsort(-correlation[columns], kind="stable")[:candidates]]
    best = None
    for index in dict.fromkeys(itertools.chain(by_weight, by_correlation)):
        sign, threshold, accuracy = fit_threshold(column(x, index), train_y01, balanced)
        key = (accuracy, abs(weights[index]))
        if best is None or key > best[0]:
            best = (key, Threshold(int(index), int(sign), threshold))
    return best[1]


def cross_validation_folds(labels, folds=CV_FOLDS, seed=0):
    """Stratified folds over rows whose every fit part has every class (or label value).

    Args:
      labels: [N] classes or [N, L] 0/1 labels.
      folds: how many folds wanted; fewer when the rarest class (or label
        combination, `labeled.strata`) has fewer rows.
      seed: the shuffle seed.

    Returns:
      A list of (fit rows, held-out rows) index arrays, each sorted; None
      when no two folds can be made with every class (every label's 0 and
      1) in each fit part.
    """
    labels = np.asarray(labels)
    ids = labeled.strata(labels)
    counts = np.bincount(ids - ids.min())
    folds = min(folds, int(counts[counts > 0].min()))
    if folds < 2:
        return None
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    pairs = [(np.sort(a), np.sort(b)) for a, b in splitter.split(np.zeros(len(ids)), ids)]
    for fit_rows, _ in pairs:
        kept = labels[fit_rows]
        if labels.ndim == 2:
            if any(len(np.unique(column)) < 2 for column in kept.T):
                return None
        elif len(np.unique(kept)) < len(np.unique(labels)):
            return None
    return pairs


def pool_rows(train, val):
    """dict kind -> the training rows, then the validation rows (dense or sparse)."""
    pooled = {}
    for kind, rows in train.items():
        if sparse.issparse(rows):
            pooled[kind] = sparse.vstack([rows, val[kind]], format="csr")
        else:
            pooled[kind] = np.concatenate([np.asarray(rows), np.asarray(val[kind])])
    return pooled


def cross_validate(features, labels, kinds, hidden_size, folds, **fit_kwargs):
    """How well `kinds` classify held-out rows, over `folds`, and the C that does best.

    Args:
      features: dict kind -> [N, H] features (`tfidf`: sparse [N, V]).
      labels: [N] classes or [N, L] 0/1 labels.
      kinds: the kinds to concatenate.
      hidden_size: the model's units.
      folds: (fit rows, held-out rows) pairs (`cross_validation_folds`).
      **fit_kwargs: passed to `fit_logistic` (c_grid, penalty, ngrams, ...);
        a `title` names the progress lines, each with its fold.

    Returns:
      dict {score, C, per_C, not_converged}: single-label, per_C maps each
      C of the grid to its held-out accuracy averaged over the folds, C is
      the best (ties: the smaller) and score its mean; multi-label (each
      label's C and threshold chosen on its fold's held-out rows), score is
      the mean held-out Jaccard, C and per_C None; not_converged, the Cs
      whose fit stopped at the iteration cap in some fold.
    """
    x = features_lib.concat_features(features, kinds)
    labels = np.asarray(labels)
    per_c, scores, unconverged = {}, [], set()
    title = fit_kwargs.pop("title", None) or ",".join(kinds)
    for fold, (fit_rows, held_rows) in enumerate(folds, 1):
        classifier, sweep = fit_logistic(
            x[fit_rows],
            labels[fit_rows],
            x[held_rows],
            labels[held_rows],
            kinds,
            hidden_size,
            neurons=False,
            title=f"{title}, fold {fold} of {len(folds)}",
            **fit_kwargs,
        )
        scores.append(classifier.score(x[held_rows], labels[held_rows]))
        unconverged.update(row["C"] for row in sweep if not row["converged"])
        if labels.ndim == 1:
            for row in sweep:
                per_c.setdefault(row["C"], []).append(row["val_accuracy"])
    not_converged = sorted(unconverged)
    if not per_c:
        return {
            "score": float(np.mean(scores)),
            "C": None,
            "per_C": None,
            "not_converged": not_converged,
        }
    means = {c: float(np.mean(values)) for c, values in sorted(per_c.items())}
    best = max(means, key=means.get)  # the first (smallest) C of the best mean
    return {"score": means[best], "C": best, "per_C": means, "not_converged": not_converged}


def select_feature_kinds(
    train,
    train_y,
    val,
    val_y,
    hidden_size,
    groups=features_lib.FEATURE_GROUPS,
    folds=None,
    c_grid_of=None,
    **fit_kwargs,
):
    """Chooses feature kinds on validation by greedy forward selection of groups.

    Starts from the best single group, then adds the group that raises the
    validation score (`LogisticClassifier.score`: accuracy, or Jaccard for
    multilabel) most, while it rises. With `folds` (over the training rows,
    then the validation rows: `pool_rows`), the score is `cross_validate`'s
    instead: every row of both is held out once, a judge far less noisy than
    a small validation split.

    Args:
      train: dict kind -> [N, H] training features (every kind in `groups`).
      train_y: [N] labels (or [N, L] 0/1 labels).
      val: dict kind -> [M, H] validation features.
      val_y: [M] labels (or [M, L]).
      hidden_size: the model's units.
      groups: tuples of kinds selected together (`features_lib.FEATURE_GROUPS`).
      folds: None (the validation split judges), or (fit rows, held-out
        rows) pairs over the training then the validation rows.
      c_grid_of: None, or a function of the kinds that gives their C grid
        (else `fit_kwargs`' c_grid serves every combination).
      **fit_kwargs: passed to `fit_logistic` (c_grid, solver, seed, penalty,
        classes, threshold_metric, ngrams, progress).

    Returns:
      (kinds, trials): the chosen tuple of kinds in `features.ALL_KINDS`
      order, and a list of {kinds, val_accuracy (or val_jaccard),
      not_converged (the Cs whose fit stopped at the iteration cap)} for
      every combination tried; with `folds`, {kinds, cv_accuracy (or
      cv_jaccard), C and per_C (single-label: the best C over the folds and
      each C's mean held-out accuracy), folds, not_converged}.
    """
    trials = []
    cache = {}
    # Greedy forward selection fits at most g + (g - 1) + ... + 1 combinations.
    most = len(groups) * (len(groups) + 1) // 2
    if folds is not None:
        pooled = pool_rows(train, val)
        pooled_y = np.concatenate([np.asarray(train_y), np.asarray(val_y)])
        cv_metric = "jaccard" if pooled_y.ndim == 2 else "accuracy"

    def score(chosen_groups):
        kinds = tuple(
            kind for kind in features_lib.ALL_KINDS if any(kind in group for group in chosen_groups)
        )
        kwargs = dict(fit_kwargs, c_grid=c_grid_of(kinds)) if c_grid_of else fit_kwargs
        title = f"feature group {len(trials) + 1} of at most {most} ({','.join(kinds)})"
        if folds is not None and kinds not in cache:
            checked = cross_validate(
                pooled, pooled_y, kinds, hidden_size, folds, title=title, **kwargs
            )
            cache[kinds] = checked["score"]
            trials.append(
                {
                    "kinds": list(kinds),
                    f"cv_{cv_metric}": checked["score"],
                    "C": checked["C"],
                    "per_C": checked["per_C"],
                    "folds": len(folds),
                    "not_converged": checked["not_converged"],
                }
            )
            logging.info(
                "Features %s: %d-fold cross-validated %s %.4f",
                ",".join(kinds),
                len(folds),
                cv_metric,
                checked["score"],
            )
        if kinds not in cache:
            val_x = features_lib.concat_features(val, kinds)
            classifier, sweep = fit_logistic(
                features_lib.concat_features(train, kinds),
                train_y,
                val_x,
                val_y,
                kinds,
                hidden_size,
                neurons=False,
                title=title,
                **kwargs,
            )
            cache[kinds] = classifier.score(val_x, val_y)
            metric = classifier.score_name
            trials.append(
                {
                    "kinds": list(kinds),
                    f"val_{metric}": cache[kinds],
                    "not_converged": sorted({r["C"] for r in sweep if not r["converged"]}),
                }
            )
            logging.info("Features %s: validation %s %.4f", ",".join(kinds), metric, cache[kinds])
        return cache[kinds], chosen_groups

    def best_of(options):
        # The first of equals wins: `groups` order, fewer groups first.
        best = None
        for option in options:
            scored = score(option)
            if best is None or scored[0] > best[0]:
                best = scored
        return best

    best_score, chosen = best_of((group,) for group in groups)
    while len(chosen) < len(groups):
        rest = [group for group in groups if group not in chosen]
        score_plus, groups_plus = best_of(chosen + (group,) for group in rest)
        if score_plus <= best_score:
            break
        best_score, chosen = score_plus, groups_plus
    kinds = tuple(kind for kind in features_lib.ALL_KINDS if any(kind in g for g in chosen))
    return kinds, trials
