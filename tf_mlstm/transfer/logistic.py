"""L1- (or L2-) regularized logistic regression on language-model features.

The transfer recipe of Radford et al. (2017): standardize the features (mean
and scale from the training rows), fit scikit-learn's `LogisticRegression`
with an L1 penalty (`l1_ratio=1`, the spelling of `penalty="l1"` that
scikit-learn 1.8+ does not deprecate) for each C of a log grid, and keep the
C with the best validation accuracy (ties go to the smaller C: fewer units).
The L1 penalty makes the weights sparse, so the units that carry sentiment
stand out; the single unit whose threshold alone classifies best is the
"sentiment neuron". The L2 penalty (`l1_ratio=0`) keeps every weight, which
classifies better from the weak pooled features of small models.

The fitted classifier is a `LogisticClassifier`: plain arrays, saved as JSON
(never pickle) and turned into a `tf_mlstm.export.saved_model.ClassifierHead`
to run in a SavedModel.
"""

import dataclasses
import itertools
import json
import warnings

import numpy as np
from absl import logging
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from tf_mlstm.export.saved_model import ClassifierHead
from tf_mlstm.transfer import features as features_lib

PENALTIES = ("l1", "l2")
"""l1: Radford et al.'s sparse weights, which single out the units that carry
sentiment; l2: dense weights, which classify better from the many weak,
correlated pooled features of a small or briefly trained model
(docs/transfer.md)."""
SOLVERS = ("auto", "liblinear", "saga", "lbfgs")
"""auto: liblinear for l1, lbfgs for l2 (on SST's pooled features lbfgs fitted
l2 1.4-6x faster than liblinear); lbfgs fits only l2."""
DEFAULT_C_GRID = tuple(float(c) for c in np.logspace(-4, 0, 9))
"""Half-decade steps from 1e-4 (almost no unit kept) to 1 (Radford et al.'s
largest C). Larger C keeps more units but makes liblinear slow on the
correlated features of a poorly trained model."""
NEURON_CANDIDATES = 10
"""Units by |weight| and by |correlation| considered for the sentiment neuron."""
FORMAT = "tf_mlstm.logistic_classifier"
FORMAT_VERSION = 1


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
        return (self.sign * (np.asarray(x)[:, self.index] - self.threshold) > 0).astype(np.int64)


def fit_threshold(values, labels01):
    """The cut and direction on one feature that classify best.

    Args:
      values: [N] feature values.
      labels01: [N] labels in {0, 1}.

    Returns:
      (sign, threshold, accuracy): the best of all cuts between distinct
      values (and below/above all of them), for both directions; ties go to
      sign +1, then the lowest cut.
    """
    values = np.asarray(values, np.float64)
    labels01 = np.asarray(labels01, np.int64)
    n = len(values)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    positives_below = np.concatenate([[0], np.cumsum(labels01[order])])
    below = np.arange(n + 1)
    # Cut k: rows [0, k) predicted negative, [k, n) positive (sign +1).
    correct_up = (below - positives_below) + (positives_below[-1] - positives_below)
    allowed = np.ones(n + 1, bool)
    allowed[1:n] = sorted_values[1:] > sorted_values[:-1]
    best_up = np.where(allowed, correct_up, -1)
    best_down = np.where(allowed, n - correct_up, -1)
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
    return sign, float(threshold), correct / n


# === The classifier ===


@dataclasses.dataclass(frozen=True, eq=False)
class LogisticClassifier:
    """A fitted binary logistic regression on standardized features.

    Attributes:
      feature_kinds: the concatenated feature kinds, in order.
      hidden_size: units of the model the features came from.
      mean: [D] standardizer mean.
      scale: [D] standardizer scale (1 where a feature is constant).
      weights: [D] weights on the standardized features.
      bias: the intercept.
      classes: (negative label, positive label) as in the data.
      C: the inverse regularization strength chosen.
      neuron: the sentiment neuron's `Threshold` (on unstandardized features).
    """

    feature_kinds: tuple
    hidden_size: int
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    classes: tuple
    C: float
    neuron: Threshold

    def decision_function(self, x):
        """Logits [N] for features `x` [N, D] (float64)."""
        standardized = (np.asarray(x, np.float64) - self.mean) / self.scale
        return standardized @ self.weights + self.bias

    def predict_proba(self, x):
        """Probability [N] of the positive class (`classes[1]`)."""
        return 1.0 / (1.0 + np.exp(-self.decision_function(x)))

    def predict(self, x):
        """Predicted labels [N] (from `classes`)."""
        return np.asarray(self.classes)[(self.decision_function(x) > 0).astype(np.int64)]

    def accuracy(self, x, labels):
        """Fraction of rows of `x` whose predicted label is `labels`."""
        return float(np.mean(self.predict(x) == np.asarray(labels)))

    def neuron_accuracy(self, x, labels):
        """Accuracy of the sentiment neuron's threshold alone."""
        predicted = np.asarray(self.classes)[self.neuron.predict01(x)]
        return float(np.mean(predicted == np.asarray(labels)))

    @property
    def nonzero_weights(self):
        """Number of features with a non-zero weight."""
        return int(np.count_nonzero(self.weights))

    def describe(self, index):
        """(kind, unit) of feature column `index`."""
        return features_lib.describe_feature(index, self.feature_kinds, self.hidden_size)

    def top_units(self, count=10):
        """The `count` features with the largest |weight|, non-zero only.

        Returns:
          list of dicts {index, kind, unit, weight}, largest first.
        """
        order = np.argsort(-np.abs(self.weights), kind="stable")[:count]
        rows = []
        for index in order:
            if self.weights[index] == 0:
                break
            kind, unit = self.describe(int(index))
            rows.append(
                {
                    "index": int(index),
                    "kind": kind,
                    "unit": unit,
                    "weight": float(self.weights[index]),
                }
            )
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
            neuron=self.neuron.index,
        )

    # === Serialization ===
    def to_json(self):
        """A JSON document holding everything; floats round-trip exactly."""
        kind, unit = self.describe(self.neuron.index)
        record = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "feature_kinds": list(self.feature_kinds),
            "hidden_size": self.hidden_size,
            "classes": [int(c) for c in self.classes],
            "C": self.C,
            "bias": float(self.bias),
            "neuron": {
                "index": self.neuron.index,
                "kind": kind,
                "unit": unit,
                "sign": self.neuron.sign,
                "threshold": self.neuron.threshold,
            },
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "weights": self.weights.tolist(),
        }
        return json.dumps(record)

    @classmethod
    def from_json(cls, text, source="classifier"):
        """Rebuilds a classifier from `to_json` output.

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
            raise ValueError(f"{source}: not JSON ({e})") from e
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise ValueError(f"{source}: not a tf-mlstm-transfer classifier file")
        if record.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"{source}: classifier format version {record.get('version')}, this code reads "
                f"{FORMAT_VERSION}"
            )
        try:
            neuron = record["neuron"]
            classifier = cls(
                feature_kinds=tuple(record["feature_kinds"]),
                hidden_size=int(record["hidden_size"]),
                mean=np.asarray(record["mean"], np.float64),
                scale=np.asarray(record["scale"], np.float64),
                weights=np.asarray(record["weights"], np.float64),
                bias=float(record["bias"]),
                classes=tuple(int(c) for c in record["classes"]),
                C=float(record["C"]),
                neuron=Threshold(
                    int(neuron["index"]), int(neuron["sign"]), float(neuron["threshold"])
                ),
            )
            classifier.serving_head().check(classifier.hidden_size)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{source}: incomplete classifier file (missing or bad {e})") from e
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from e
        return classifier

    def save(self, path):
        """Writes `to_json()` to `path` atomically (through `tf.io.gfile`)."""
        from tf_mlstm import fileio  # pylint: disable=import-outside-toplevel

        fileio.write_text_atomic(path, self.to_json())

    @classmethod
    def load(cls, path):
        """Reads a classifier written by `save`.

        Raises:
          FileNotFoundError: no such file.
          ValueError: not a valid classifier file.
        """
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"classifier file not found: {path}")
        with tf.io.gfile.GFile(path) as f:
            return cls.from_json(f.read(), source=path)


# === Fitting ===


def standardizer(x):
    """Column mean and scale of `x` [N, D]; a constant column gets scale 1."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    return mean, np.where(scale > 1e-12, scale, 1.0)


def encode_labels(labels, classes=None, what="labels"):
    """Maps labels to 0/1.

    Args:
      labels: [N] integer labels.
      classes: the (negative, positive) pair; None: the two distinct values
        of `labels`, sorted.
      what: a name for error messages.

    Returns:
      ([N] int64 in {0, 1}, classes).

    Raises:
      ValueError: not exactly two classes, or a label outside `classes`.
    """
    labels = np.asarray(labels, np.int64)
    if classes is None:
        found = np.unique(labels)
        if len(found) != 2:
            raise ValueError(
                f"{what}: binary classification needs exactly two label values, found "
                f"{found.tolist()[:10]}"
            )
        classes = (int(found[0]), int(found[1]))
    unknown = np.setdiff1d(np.unique(labels), classes)
    if len(unknown):
        raise ValueError(
            f"{what}: labels {unknown.tolist()[:10]} are not among the training classes "
            f"{list(classes)}"
        )
    return (labels == classes[1]).astype(np.int64), tuple(classes)


def resolve_solver(penalty, solver):
    """The scikit-learn solver for `penalty` ("auto" picks one).

    Raises:
      ValueError: an unknown penalty or solver, or lbfgs with l1.
    """
    if penalty not in PENALTIES:
        raise ValueError(f"penalty must be one of {PENALTIES}, got {penalty!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if solver == "lbfgs" and penalty != "l2":
        raise ValueError(f"the lbfgs solver fits only the l2 penalty, not {penalty}")
    if solver == "auto":
        return "liblinear" if penalty == "l1" else "lbfgs"
    return solver


def _fit_one(z, y01, c, penalty, solver, seed):
    model = LogisticRegression(
        C=c,
        l1_ratio=1.0 if penalty == "l1" else 0.0,
        solver=solver,
        max_iter=200 if solver == "liblinear" else 1000,
        random_state=seed,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(z, y01)
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return model.coef_[0].astype(np.float64), float(model.intercept_[0]), converged


def _accuracy01(z, y01, weights, bias):
    return float(np.mean(((z @ weights + bias) > 0) == y01))


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
):
    """Sweeps C, keeps the best on validation, and finds the sentiment neuron.

    Args:
      train_x: [N, D] features (`concat_features` of `kinds`).
      train_y: [N] labels (two distinct values).
      val_x: [M, D] validation features.
      val_y: [M] validation labels.
      kinds: the feature kinds concatenated in `train_x`.
      hidden_size: the model's units.
      c_grid: inverse regularization strengths to try.
      solver: one of `SOLVERS`.
      seed: solver seed.
      penalty: one of `PENALTIES`.

    Returns:
      (LogisticClassifier, sweep): sweep is a list of dicts {C, train_accuracy,
      val_accuracy, nonzero_weights, converged} in grid order.

    Raises:
      ValueError: a bad penalty, solver or grid, or labels that are not binary.
    """
    solver = resolve_solver(penalty, solver)
    c_grid = sorted(float(c) for c in c_grid)
    if not c_grid or min(c_grid) <= 0:
        raise ValueError(f"the C grid must hold positive values, got {c_grid}")
    train_y01, classes = encode_labels(train_y, what="training labels")
    val_y01, _ = encode_labels(val_y, classes, what="validation labels")
    mean, scale = standardizer(train_x)
    train_z = (np.asarray(train_x, np.float64) - mean) / scale
    val_z = (np.asarray(val_x, np.float64) - mean) / scale
    sweep = []
    best = None
    for c in c_grid:
        weights, bias, converged = _fit_one(train_z, train_y01, c, penalty, solver, seed)
        row = {
            "C": c,
            "train_accuracy": _accuracy01(train_z, train_y01, weights, bias),
            "val_accuracy": _accuracy01(val_z, val_y01, weights, bias),
            "nonzero_weights": int(np.count_nonzero(weights)),
            "converged": converged,
        }
        sweep.append(row)
        if best is None or row["val_accuracy"] > best[0]["val_accuracy"]:
            best = (row, weights, bias)
    unconverged = [row["C"] for row in sweep if not row["converged"]]
    if unconverged:
        logging.warning("The %s solver did not converge for C in %s.", solver, unconverged)
    row, weights, bias = best
    neuron = find_neuron(np.asarray(train_x), train_y01, weights)
    classifier = LogisticClassifier(
        feature_kinds=tuple(kinds),
        hidden_size=int(hidden_size),
        mean=mean,
        scale=scale,
        weights=weights,
        bias=bias,
        classes=classes,
        C=row["C"],
        neuron=neuron,
    )
    return classifier, sweep


def find_neuron(train_x, train_y01, weights, candidates=NEURON_CANDIDATES):
    """The single feature whose best threshold classifies the training rows best.

    The candidates are the features with the largest |weight| and those with
    the largest |correlation| with the label; ties go to the larger |weight|.

    Args:
      train_x: [N, D] features.
      train_y01: [N] labels in {0, 1}.
      weights: [D] fitted weights.
      candidates: how many of each kind of candidate.

    Returns:
      A `Threshold`.
    """
    x = np.asarray(train_x, np.float64)
    centered = x - x.mean(axis=0)
    y = train_y01 - train_y01.mean()
    norms = np.sqrt((centered**2).sum(axis=0) * (y**2).sum())
    correlation = np.abs(centered.T @ y) / np.where(norms > 0, norms, 1.0)
    by_weight = np.argsort(-np.abs(weights), kind="stable")[:candidates]
    by_correlation = np.argsort(-correlation, kind="stable")[:candidates]
    best = None
    for index in dict.fromkeys(itertools.chain(by_weight, by_correlation)):
        sign, threshold, accuracy = fit_threshold(x[:, index], train_y01)
        key = (accuracy, abs(weights[index]))
        if best is None or key > best[0]:
            best = (key, Threshold(int(index), int(sign), threshold))
    return best[1]


def select_feature_kinds(
    train, train_y, val, val_y, hidden_size, groups=features_lib.FEATURE_GROUPS, **fit_kwargs
):
    """Chooses feature kinds on validation by greedy forward selection of groups.

    Starts from the best single group, then adds the group that raises the
    validation accuracy most, while it rises.

    Args:
      train: dict kind -> [N, H] training features (every kind in `groups`).
      train_y: [N] labels.
      val: dict kind -> [M, H] validation features.
      val_y: [M] labels.
      hidden_size: the model's units.
      groups: tuples of kinds selected together (`features_lib.FEATURE_GROUPS`).
      **fit_kwargs: passed to `fit_logistic` (c_grid, solver, seed, penalty).

    Returns:
      (kinds, trials): the chosen tuple of kinds in `FEATURE_KINDS` order, and
      a list of {kinds, val_accuracy} for every combination tried.
    """
    trials = []
    cache = {}

    def score(chosen_groups):
        kinds = tuple(
            kind
            for kind in features_lib.FEATURE_KINDS
            if any(kind in group for group in chosen_groups)
        )
        if kinds not in cache:
            classifier, sweep = fit_logistic(
                features_lib.concat_features(train, kinds),
                train_y,
                features_lib.concat_features(val, kinds),
                val_y,
                kinds,
                hidden_size,
                **fit_kwargs,
            )
            cache[kinds] = max(row["val_accuracy"] for row in sweep)
            trials.append({"kinds": list(kinds), "val_accuracy": cache[kinds]})
            logging.info("Features %s: validation accuracy %.4f", ",".join(kinds), cache[kinds])
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
    kinds = tuple(kind for kind in features_lib.FEATURE_KINDS if any(kind in g for g in chosen))
    return kinds, trials


# === Data splits ===


def stratified_split(labels, fraction, seed):
    """Splits row indices into (kept, held out), each class split alike.

    Args:
      labels: [N] labels.
      fraction: share of each class held out (0 < fraction < 1); at least one
        row of each class with two or more rows is held out.
      seed: the shuffle seed.

    Returns:
      (kept indices, held-out indices), each sorted.

    Raises:
      ValueError: a fraction outside (0, 1).
    """
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must be in (0, 1), got {fraction}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    held = []
    for value in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == value))
        count = int(round(len(rows) * fraction))
        count = min(max(count, 1), len(rows) - 1) if len(rows) > 1 else 0
        held.extend(rows[:count])
    held = np.sort(np.asarray(held, np.int64))
    kept = np.setdiff1d(np.arange(len(labels)), held)
    return kept, held


def balanced_subsample(labels, count, seed):
    """A seeded subsample of `count` rows, as even across classes as possible.

    Args:
      labels: [N] labels.
      count: rows wanted (>= number of classes).
      seed: the sampling seed.

    Returns:
      Sorted row indices; all rows when `count >= N`.
    """
    labels = np.asarray(labels)
    if count >= len(labels):
        return np.arange(len(labels))
    rng = np.random.default_rng(seed)
    pools = [list(rng.permutation(np.flatnonzero(labels == value))) for value in np.unique(labels)]
    chosen = []
    # Round-robin over the classes, so each gets count / classes rows, and a
    # class that runs out leaves its share to the others.
    while len(chosen) < count:
        for pool in pools:
            if pool and len(chosen) < count:
                chosen.append(pool.pop())
    return np.sort(np.asarray(chosen, np.int64))


def random_subsample(count, limit, seed):
    """Seeded sorted indices of `limit` of `count` rows (all when limit <= 0)."""
    if limit <= 0 or limit >= count:
        return np.arange(count)
    return np.sort(np.random.default_rng(seed).choice(count, limit, replace=False))
