"""The transfer fit's own solver (tf_mlstm.transfer.probe.solver) and the sweep's progress lines.

Golden values: scikit-learn's `LogisticRegression`, fitted to a tight
tolerance, on the same objective (C * sum of losses + penalty); the solver's
objective must not be above it by more than its tolerance allows, and its
weights must match where the optimum is unique. Small shapes, no TensorFlow.
"""

import re
import warnings

import numpy as np
import pytest
from scipy import sparse
from scipy.special import logsumexp
from sklearn.linear_model import LogisticRegression

from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer.probe import fit as fit_lib
from tf_mlstm.transfer.probe import selection as selection_lib
from tf_mlstm.transfer.probe import solver

GRID = (1e-2, 1e-1, 1.0)


@pytest.fixture(autouse=True)
def _no_remembered_sweeps():
    # fit_logistic reuses a sweep of the same inputs: each test fits its own.
    fit_lib._SWEEPS.clear()


def _data(task, rows=300, width=40, seed=0):
    """Standardized correlated features and labels for `task`."""
    rng = np.random.default_rng(seed)
    latent = rng.normal(size=(rows, 4))
    x = latent @ rng.normal(size=(4, width)) + 0.7 * rng.normal(size=(rows, width))
    x = (x - x.mean(axis=0)) / x.std(axis=0)
    scores = latent + 0.8 * rng.normal(size=(rows, 4))
    if task == "binary":
        y = (scores[:, 0] > 0.2).astype(np.int64)
    elif task == "multinomial":
        y = np.argmax(scores[:, :3], axis=1)
    else:
        y = (scores[:, :3] > np.array([0.0, 0.6, 1.2])).astype(np.int64)
    return x, y


def _objective(x, y, weights, bias, c, penalty, multinomial):
    """scikit-learn's objective: C * sum of losses + penalty (intercepts free)."""
    logits = x @ weights.T + bias
    if multinomial:
        losses = logsumexp(logits, axis=1) - logits[np.arange(len(y)), y]
    else:
        losses = np.logaddexp(0.0, logits[:, 0]) - y * logits[:, 0]
    reg = np.abs(weights).sum() if penalty == "l1" else 0.5 * (weights**2).sum()
    return c * losses.sum() + reg


def _sklearn(x, y, c, penalty):
    model = LogisticRegression(
        C=c,
        l1_ratio=1.0 if penalty == "l1" else 0.0,
        solver="saga" if penalty == "l1" else "lbfgs",
        tol=1e-9,
        max_iter=20_000,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y)
    return model.coef_, model.intercept_


@pytest.mark.parametrize("penalty,method", [("l2", "lbfgs"), ("l1", "fista"), ("l2", "fista")])
@pytest.mark.parametrize("task", ["binary", "multinomial", "multilabel"])
def test_the_solver_reaches_scikit_learns_optimum(task, penalty, method):
    x, y = _data(task, rows=200, width=20)
    fits = list(solver.fit_path(x, y, GRID, penalty, task, tol=1e-7, method=method))
    assert [fit.C for fit in fits] == list(GRID)
    for fit in fits:
        assert fit.converged.all() and (fit.residual <= 1e-7).all()
        columns = [y] if task != "multilabel" else list(y.T)
        for k, labels in enumerate(columns):
            want_w, want_b = _sklearn(x, labels, fit.C, penalty)
            rows = slice(k, k + 1) if task == "multilabel" else slice(None)
            got_w, got_b = fit.weights[rows], fit.bias[rows]
            multinomial = task == "multinomial"
            got = _objective(x, labels, got_w, got_b, fit.C, penalty, multinomial)
            want = _objective(x, labels, want_w, want_b, fit.C, penalty, multinomial)
            # Never worse than scikit-learn's (its saga may stop a little short).
            assert got <= want + 1e-6 * abs(want), (fit.C, k, got, want)
            if penalty == "l2":  # strictly convex: one optimum
                np.testing.assert_allclose(got_w, want_w, atol=1e-4 * max(1, np.abs(want_w).max()))
                centered = want_b - want_b.mean() if multinomial else want_b
                np.testing.assert_allclose(got_b, centered, atol=1e-4)
            elif not multinomial:
                np.testing.assert_allclose(got_w, want_w, atol=2e-3 * max(1, np.abs(want_w).max()))
                assert set(np.flatnonzero(np.abs(want_w) > 1e-3)) <= set(np.flatnonzero(got_w))


def test_sparse_features_fit_as_dense_ones():
    x, y = _data("binary")
    x[np.abs(x) < 0.8] = 0.0
    dense = list(solver.fit_path(x, y, GRID, "l2", "binary", tol=1e-7))
    csr = list(solver.fit_path(sparse.csr_matrix(x), y, GRID, "l2", "binary", tol=1e-7))
    for a, b in zip(dense, csr):
        np.testing.assert_allclose(a.weights, b.weights, atol=1e-5)


@pytest.mark.parametrize("task", ["multinomial", "multilabel"])
def test_warm_starts_along_the_path_reach_the_cold_fits_in_fewer_iterations(task):
    x, y = _data(task, seed=1)
    grid = np.logspace(-4, 0, 9)
    warm = list(solver.fit_path(x, y, grid, "l2", task, tol=1e-7))
    cold = list(solver.fit_path(x, y, grid, "l2", task, tol=1e-7, warm_start=False))
    for a, b in zip(warm, cold):
        assert a.converged.all() and b.converged.all()
        np.testing.assert_allclose(a.weights, b.weights, atol=1e-4)
        np.testing.assert_allclose(a.bias, b.bias, atol=1e-4)
    assert sum(f.iterations.sum() for f in warm) < sum(f.iterations.sum() for f in cold)


def test_multilabel_labels_converge_and_count_iterations_each_on_its_own():
    x, y = _data("multilabel", seed=2)
    alone = [list(solver.fit_path(x, y[:, k], GRID, "l1", "binary")) for k in range(3)]
    together = list(solver.fit_path(x, y, GRID, "l1", "multilabel"))
    for index, fit in enumerate(together):
        assert fit.converged.all()
        for k in range(3):
            single = alone[k][index]
            # The same steps, up to the rounding of a product of 1 or 3 columns.
            assert abs(fit.iterations[k] - single.iterations[0]) <= 2 + single.iterations[0] // 10
            scale = max(1.0, np.abs(single.weights).max())
            np.testing.assert_allclose(fit.weights[k], single.weights[0], atol=1e-3 * scale)


def test_a_fit_stopped_at_the_cap_is_reported_unconverged():
    x, y = _data("multinomial")
    fits = list(solver.fit_path(x, y, (1.0,), "l2", "multinomial", max_iter=3))
    assert not fits[0].converged.any() and fits[0].iterations.tolist() == [3]
    assert fits[0].residual[0] > solver.TOL
    (fit,) = solver.fit_path(x, y, (1.0,), "l2", "multinomial")
    assert fit.converged.all() and fit.residual[0] <= solver.TOL < np.inf
    # The residual is the KKT test of scikit-learn's lbfgs (max |gradient| of
    # the mean-scaled objective): recomputed here from the returned weights.
    targets = solver.targets_of(y, "multinomial")
    logits = x @ fit.weights.T + fit.bias
    p = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    grad_w = x.T @ (p - targets) / len(y) + fit.weights.T / (1.0 * len(y))
    grad_b = (p - targets).mean(axis=0)
    assert max(np.abs(grad_w).max(), np.abs(grad_b).max()) <= solver.TOL * 1.01


def test_fit_logistic_defaults_to_the_solver_and_reports_a_capped_fit(monkeypatch, caplog):
    x, y = _data("multinomial")
    assert fit_lib.resolve_solver("l2", "auto") == fit_lib.resolve_solver("l1", "auto")
    assert fit_lib.resolve_solver("l1", "auto", 5) == "batch"
    classifier, sweep = fit_lib.fit_logistic(
        x[:240], y[:240], x[240:], y[240:], ("cell",), 40, penalty="l2", progress=False
    )
    assert all(row["converged"] for row in sweep)
    ours = classifier.head.weights
    lbfgs, _ = fit_lib.fit_logistic(
        x[:240], y[:240], x[240:], y[240:], ("cell",), 40, penalty="l2", solver="lbfgs"
    )
    assert lbfgs.report.C == classifier.report.C
    np.testing.assert_allclose(ours, lbfgs.head.weights, atol=2e-3 * np.abs(ours).max())
    monkeypatch.setitem(fit_lib.MAX_ITER, "batch", 2)
    with caplog.at_level("WARNING"):
        _, capped = fit_lib.fit_logistic(
            x[:240], y[:240], x[240:], y[240:], ("cell",), 40, penalty="l2", progress=False
        )
    assert not any(row["converged"] for row in capped[2:])
    assert all(row["iterations"] == 2 for row in capped[2:])
    assert "The solver did not converge for C in" in caplog.text


def test_multilabel_fits_every_label_and_reports_each(monkeypatch):
    x, y = _data("multilabel")
    classifier, sweep = fit_lib.fit_logistic(
        x[:240], y[:240], x[240:], y[240:], ("cell",), 40, penalty="l1", progress=False
    )
    assert (classifier.head.head_spec.kind == "multilabel") and classifier.head.weights.shape == (
        3,
        40,
    )
    assert [row["label"] for row in sweep] == [f"label_{k}" for k in range(3) for _ in range(9)]
    assert all(row["converged"] for row in sweep)
    liblinear, _ = fit_lib.fit_logistic(
        x[:240], y[:240], x[240:], y[240:], ("cell",), 40, penalty="l1", solver="liblinear"
    )
    assert liblinear.report.C == classifier.report.C


def _progress_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Fitting ")]


def test_a_sweep_reports_its_progress(monkeypatch, caplog):
    # Every update is a log line when the interval is tiny (10 s by default).
    monkeypatch.setattr(fit_lib, "FIT_LOG_INTERVAL_S", 1e-9)
    x, y = _data("binary")
    with caplog.at_level("INFO"):
        fit_lib.fit_logistic(x[:240], y[:240], x[240:], y[240:], ("cell",), 40, penalty="l2")
    lines = _progress_lines(caplog)
    assert lines[0] == "Fitting cell at C=0.0001: 0.0/9.0 C (0%), 0.0 C/s; 0 iterations"
    middle = r"at C=0\.001: 2\.0/9\.0 C \(22%\), [\d.]+ C/s, 0:\d\d left; \d+ iterations$"
    assert any(re.search(middle, line) for line in lines)
    assert lines[-1].startswith("Fitting cell at C=1: 9.0/9.0 C (100%), in ")
    with caplog.at_level("INFO"):
        caplog.clear()
        fit_lib.fit_logistic(
            x[:240], y[:240], x[240:], y[240:], ("cell",), 40, penalty="l2", progress=False
        )
    assert _progress_lines(caplog) == []


def test_feature_selection_names_each_group_it_fits(monkeypatch, caplog):
    monkeypatch.setattr(fit_lib, "FIT_LOG_INTERVAL_S", 1e-9)
    rng = np.random.default_rng(9)
    data = {kind: rng.normal(size=(200, 4)) for kind in features_lib.FEATURE_KINDS}
    labels = (data["cell"][:, 0] > 0).astype(np.int64)
    train = {kind: values[:150] for kind, values in data.items()}
    val = {kind: values[150:] for kind, values in data.items()}
    with caplog.at_level("INFO"):
        _, trials = selection_lib.select_feature_kinds(
            train, labels[:150], val, labels[150:], 4, penalty="l2"
        )
    finals = [line for line in _progress_lines(caplog) if "(100%), in " in line]
    assert len(finals) == len(trials) >= 3
    assert finals[0].startswith("Fitting feature group 1 of at most 6 (cell,hidden) at C=1: 9")
    assert finals[1].startswith("Fitting feature group 2 of at most 6 (mean,max,min,std) at C=1")


def test_the_final_fit_of_the_chosen_kinds_reuses_the_selection_s_sweep(caplog):
    rng = np.random.default_rng(5)
    data = {kind: rng.normal(size=(200, 4)) for kind in features_lib.FEATURE_KINDS}
    labels = np.array(["neg", "pos"], object)[(data["cell"][:, 0] > 0).astype(int)]
    train = {kind: values[:150] for kind, values in data.items()}
    val = {kind: values[150:] for kind, values in data.items()}
    kinds, _ = selection_lib.select_feature_kinds(
        train, labels[:150], val, labels[150:], 4, penalty="l2", progress=False
    )
    train_x, val_x = (features_lib.concat_features(split, kinds) for split in (train, val))
    with caplog.at_level("INFO"):
        again, sweep = fit_lib.fit_logistic(
            train_x, labels[:150], val_x, labels[150:], kinds, 4, penalty="l2", progress=False
        )
    assert "is the one feature selection made" in caplog.text
    assert again.neuron.index == 0 and len(sweep) == 9
    # Anything else (here the labels) is a sweep of its own.
    caplog.clear()
    with caplog.at_level("INFO"):
        other, _ = fit_lib.fit_logistic(
            train_x, labels[::-1][:150], val_x, labels[150:], kinds, 4, penalty="l2"
        )
    assert "is the one feature selection made" not in caplog.text
    assert not np.array_equal(other.head.weights, again.head.weights)
