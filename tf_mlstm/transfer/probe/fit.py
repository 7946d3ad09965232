"""L1- (or L2-) regularized logistic regression on language-model features: the fit.

Radford et al.'s recipe: standardize, fit each C of a log grid (upwards, warm-started), keep
the C best on validation, ties the smaller (docs/transfer.md, "tf-mlstm-transfer", step 3).
"""

import copy
import functools
import hashlib
import warnings

import numpy as np
from absl import logging
from scipy import sparse
from scipy.special import expit
from sklearn import metrics as sk_metrics
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from tf_mlstm import errors
from tf_mlstm.config.choices import DEFAULT_C_GRID
from tf_mlstm.config.choices import PENALTIES  # noqa: F401
from tf_mlstm.config.choices import SOLVERS  # noqa: F401
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.progress import Progress
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer import ngrams as ngrams_lib
from tf_mlstm.transfer.probe import solver as solver_lib
from tf_mlstm.transfer.probe.logistic import LogisticClassifier
from tf_mlstm.transfer.probe.logistic import encode_labels
from tf_mlstm.transfer.probe.neuron import find_neuron
from tf_mlstm.transfer.probe.neuron import neuron_columns
from tf_mlstm.transfer.probe.report import FitReport

WORDS_C_GRID = DEFAULT_C_GRID + (float(np.sqrt(10.0)), 10.0)
"""The default grid of the word n-grams alone: up to C=10 on the scaled block
(scikit-learn's C of about 10,000 on raw TF-IDF). With every n-gram of a
thousand or two training texts kept, the best C on held-out rows was the
default grid's largest (docs/transfer.md); model features keep the default
grid, where larger C only slows the fit."""
NGRAM_BLOCK_MIN = 1024
"""The TF-IDF block is scaled by sqrt(max(width of the model's features, this))
before the fit (see `fit_logistic`)."""


def standardizer(x) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and scale of `x` [N, D]; a constant column gets scale 1."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    return mean, np.where(scale > 1e-12, scale, 1.0)


def resolve_solver(penalty, solver, num_classes=2) -> str:
    """The solver for `penalty` and `num_classes` ("auto" picks one).

    Raises:
      ValueError: an unknown penalty or solver, lbfgs with l1, or liblinear past two classes.
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
    """Yields (C, weights [R, D], bias [R], converged [G], iterations [G]) along the grid."""
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
    """scikit-learn's `LogisticRegression` along the grid: (weights, bias, converged, steps)."""
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
    """A sweep's progress: "Fitting <title> at C=0.001: 3.0/9.0 C (33%), 0.4 C/s, 0:15 left"."""

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
    label_c=None,
    label_rate=None,
) -> tuple[LogisticClassifier, list]:
    """Sweeps C, keeps the best on validation, and finds the neurons.

    Args:
      train_x: [N, D] features (`concat_features` of `kinds`).
      train_y: [N] classes (two or more), or [N, L] 0/1 labels (multilabel).
      val_x, val_y: [M, D] validation features, and [M] or [M, L] labels.
      kinds, hidden_size: the feature kinds concatenated in `train_x`, and the model's units.
      c_grid: inverse regularization strengths to try.
      solver, penalty: one of `SOLVERS`, one of `PENALTIES`.
      seed: solver seed.
      classes: the classes in order (None: sorted `train_y`); multilabel: the L label names.
      threshold_metric: multilabel: what each label's threshold and C maximize.
      ngrams: the `ngrams.NgramVocabulary` of a `tfidf` kind (`train_x`, `val_x` sparse).
      neurons: False skips the neuron search (no neuron, report or serving head).
      progress, title: False reports nothing, else the sweep's progress; its name (None: kinds).
      label_c: multilabel: None (best on validation), or each label's C chosen before.
      label_rate: with `label_c`: each label's share to call positive, or None.

    Returns:
      (LogisticClassifier, sweep): sweep is `classifier.report.sweep`, one dict
      per C (multilabel: per label and C) of scores, weights and convergence.

    Raises:
      ValueError: a bad penalty, solver or grid, fewer than two classes, a
        validation label train lacks, or a label constant over train.
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
    if label_c is not None:
        label_c = tuple(float(c) for c in label_c)
        if np.ndim(train_y) != 2 or len(label_c) != np.shape(train_y)[1]:
            raise errors.InvalidValueError(
                f"label_c holds one C per label of a multi-label task, got {label_c}"
            )
        if not set(label_c) <= set(c_grid):
            raise errors.InvalidValueError(f"label_c {label_c} is not within the C grid {c_grid}")
    if label_rate is not None:
        label_rate = tuple(float(r) for r in label_rate)
        if label_c is None or len(label_rate) != len(label_c):
            raise errors.InvalidValueError(
                f"label_rate holds one share per label, with label_c, got {label_rate}"
            )
    if np.ndim(train_y) == 2:
        fit = functools.partial(_fit_labels, label_c=label_c, label_rate=label_rate)
    else:
        fit = _fit_classes
    settings = (
        (tuple(kinds), tuple(c_grid), penalty, solver, seed, classes, threshold_metric),
        (label_c, label_rate),
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
    # Among units of the model only: with the word n-grams alone, no neuron.
    columns = neuron_columns(kinds, hidden_size)
    found = tuple(
        find_neuron(train_x, y01, weights, balanced=balanced, columns=columns)
        for y01, weights, balanced in (targets if neurons and columns is not None else ())
    )
    spec = HeadSpec.of(fitted["classes"], np.ndim(train_y) == 2, fitted["thresholds"])
    head = ClassifierHead(
        feature_kinds=tuple(kinds),
        mean=mean,
        scale=scale,
        weights=fitted["weights"],
        bias=fitted["bias"],
        head_spec=spec,
        neuron=found[0].index if spec.kind == BINARY and found else -1,
        ngram_terms=ngrams.terms if with_ngrams else (),
        ngram_idf=ngrams.idf if with_ngrams else None,
    )
    report = FitReport(hidden_size=hidden_size, C=fitted["C"], neurons=found, sweep=sweep)
    return LogisticClassifier(head, report), sweep


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


def block_standardizer(x, dense_width) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scale of features `x` whose first `dense_width` columns are the model's.

    TF-IDF columns keep mean 0 (sparse) and a scale under which a unit-norm row weighs as a
    standardized model row does, so one C regularizes both.
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


def standardize(x, mean, scale, dense_width) -> np.ndarray | sparse.csr_matrix:
    """(x - mean) / scale: float64 [N, D], or CSR when `x` is sparse (its n-grams scaled only)."""
    if not sparse.issparse(x):
        return (np.asarray(x, np.float64) - mean) / scale
    x = sparse.csr_matrix(x, dtype=np.float64)
    ngrams = x[:, dense_width:].multiply(1.0 / scale[dense_width:]).tocsr()
    if not dense_width:
        return ngrams
    dense = (x[:, :dense_width].toarray() - mean[:dense_width]) / scale[:dense_width]
    return sparse.hstack([sparse.csr_matrix(dense), ngrams], format="csr")


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
    fitted = {"weights": weights, "bias": bias, "classes": classes, "C": row["C"], "thresholds": ()}
    return dict(fitted, neuron_targets=targets), sweep


def _fit_labels(
    train_z,
    train_y,
    val_z,
    val_y,
    c_grid,
    penalty,
    solver,
    seed,
    names,
    metric,
    report=None,
    label_c=None,
    label_rate=None,
):
    """One binary fit per label and C; per label the best C (or `label_c`'s) and threshold."""
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
            if label_rate is not None and c == label_c[k]:
                threshold = labeled.threshold_at_rate(probability, label_rate[k])
            else:
                threshold = labeled.choose_threshold(probability, val_y[:, k], metric)
            value = _binary_metric(val_y[:, k], probability > threshold, metric)
            rows[k].append(
                {
                    "label": name,
                    "C": c,
                    "threshold": threshold,
                    f"val_{metric}": value,
                    "positive_rate": float(np.mean(probability > threshold)),
                    "nonzero_weights": int(np.count_nonzero(weights[k])),
                    "converged": bool(converged[k]),
                    "iterations": int(iterations[k]),
                }
            )
            if label_c is not None:
                better = c == label_c[k]
            else:
                better = chosen[k] is None or value > chosen[k][0]
            if better:
                chosen[k] = (value, c, threshold, weights[k].copy(), bias[k])
    sweep = [row for label_rows in rows for row in label_rows]
    _, cs, thresholds, weights, bias = (list(column) for column in zip(*chosen))
    fitted = {
        "weights": np.stack(weights),
        "bias": np.array(bias),
        "classes": names,
        "C": tuple(cs),
        "thresholds": tuple(thresholds),
    }
    targets = [(train_y[:, k], weights[k], True) for k in range(count)]
    return dict(fitted, neuron_targets=targets), sweep


def _binary_metric(truth, predicted, metric):
    if metric == "accuracy":
        return float(sk_metrics.accuracy_score(truth, predicted))
    return float(sk_metrics.f1_score(truth, predicted, zero_division=0))
