"""The transfer fit's own logistic-regression solver: full batch, float32, along a C path.

`fit_path` minimizes scikit-learn's `LogisticRegression` objective at each C of an ascending
grid, warm-started: L-BFGS for l2, FISTA for l1; binary, multinomial, or L labels side by side.
Converged means a KKT residual at most `TOL` (docs/transfer.md, "The batch solver").
"""

import dataclasses
from collections.abc import Iterator

import numpy as np
from scipy import sparse
from scipy.special import expit
from scipy.special import log_expit

TASKS = ("binary", "multinomial", "multilabel")
TOL = 1e-4
"""Largest |minimal-norm subgradient| of the mean-scaled objective at a
solution: scikit-learn's default `tol`, which its lbfgs compares with the
same quantity for l2."""
MAX_ITER = 1000
"""Gradient evaluations a fit may take before it is reported unconverged (the
line searches' extra loss evaluations are not counted, as in scikit-learn)."""
STEP_GROWTH = 1.25
"""The step is multiplied by this after an iteration whose quadratic bound held."""
STEP_SHRINK = 0.5
"""... and by this while the bound fails (backtracking)."""
_SMALLEST_STEP = 1e-20
"""A line search stops shrinking here (a step this small moves nothing)."""
_SLACK = 1e-7
"""Relative slack of the sufficient-decrease test: the float32 products give
the loss a rounding noise about this size, which must not pass for a failed
bound at convergence."""


@dataclasses.dataclass(frozen=True)
class PathFit:
    """The solution at one C.

    Attributes:
      C: the inverse regularization strength.
      weights: [R, D] float64 (R = 1 binary, K multinomial, L multilabel).
      bias: [R] float64 intercepts (multinomial: centered, sum 0).
      converged: [G] bool per independent problem (multilabel L, else one).
      iterations: [G] gradient evaluations each took.
      residual: [G] the KKT residual at the returned weights (inf if never checked).

    Example:
    >>> import numpy as np
    >>> x = np.array([[-2.0], [-1.0], [1.0], [2.0], [-0.5], [0.5]])
    >>> y = np.array([0, 0, 1, 1, 1, 0])
    >>> fits = list(fit_path(x, y, [0.1, 1.0], "l2", "binary"))
    >>> [fit.C for fit in fits], fits[0].weights.shape, bool(fits[-1].converged[0])
    ([0.1, 1.0], (1, 1), True)
    >>> bool(fits[-1].weights[0, 0] > fits[0].weights[0, 0] > 0)
    True
    """

    C: float
    weights: np.ndarray
    bias: np.ndarray
    converged: np.ndarray
    iterations: np.ndarray
    residual: np.ndarray


def as_features(x) -> np.ndarray | sparse.csr_matrix:
    """`x` as the solver's features: float32, C-ordered, or float32 CSR when sparse."""
    if sparse.issparse(x):
        return sparse.csr_matrix(x, dtype=np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)


def targets_of(y, task, num_classes=None) -> np.ndarray:
    """The float64 target matrix [N, R] of labels `y` for `task`.

    Args:
      y: binary [N] 0/1; multinomial [N] class indices; multilabel [N, L] 0/1.
      task, num_classes: one of `TASKS`; multinomial: K (None: max(y) + 1).

    Returns:
      float64 [N, R].
    """
    y = np.asarray(y)
    if task == "binary":
        return y.reshape(-1, 1).astype(np.float64)
    if task == "multilabel":
        return y.astype(np.float64)
    k = int(y.max()) + 1 if num_classes is None else int(num_classes)
    out = np.zeros((len(y), k))
    out[np.arange(len(y)), y.astype(np.int64)] = 1.0
    return out


class _Problem:
    """Loss, gradient and penalty of one task; groups (what converges together) of columns."""

    def __init__(self, x, targets, task, penalty):
        self.x = x
        self.targets = targets
        self.multinomial = task == "multinomial"
        self.l1 = penalty == "l1"
        self.n = x.shape[0]
        self.width = targets.shape[1]
        self.groups = 1 if self.multinomial else self.width

    def columns(self, per_group):
        """Values (or a mask) per group -> per column of those groups."""
        return np.repeat(per_group, self.width) if self.multinomial else per_group

    def reduce(self, per_column, how=np.sum):
        """Per-column values -> per group (`how` over a multinomial's columns)."""
        return np.atleast_1d(how(per_column)) if self.multinomial else per_column

    def logits(self, weights, bias):
        """X W + b, float64 [N, R'], the product in float32."""
        product = self.x @ weights.astype(np.float32)
        return np.asarray(product, np.float64) + bias

    def loss(self, logits, cols):
        """(mean loss per group, d mean loss / d logits float32) of `cols`' logits."""
        targets = self.targets[:, cols]
        if self.multinomial:
            top = logits.max(axis=1, keepdims=True)
            shifted = logits - top
            log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            value = -(targets * log_p).sum() / self.n
            grad = (np.exp(log_p) - targets) / self.n
            return np.array([value]), grad.astype(np.float32)
        # log(1 + e^z) - y z = -log expit(z) + (1 - y) z
        value = (-log_expit(logits) + (1.0 - targets) * logits).sum(axis=0) / self.n
        grad = (expit(logits) - targets) / self.n
        return value, grad.astype(np.float32)

    def gradient(self, grad_logits):
        """(d/dW [D, R'] float64, d/db [R']) of the mean loss."""
        gw = np.asarray(self.x.T @ grad_logits, np.float64)
        return gw, grad_logits.sum(axis=0, dtype=np.float64)

    def prox(self, weights, step, lam):
        """The proximal map of step * lam * penalty (steps per column)."""
        if self.l1:
            return np.sign(weights) * np.maximum(np.abs(weights) - step * lam, 0.0)
        return weights / (1.0 + step * lam)

    def residual(self, weights, gw, gb, lam):
        """The KKT residual per group: max |minimal-norm subgradient| (intercepts too)."""
        if self.l1:
            sub = np.where(
                weights != 0,
                gw + lam * np.sign(weights),
                np.sign(gw) * np.maximum(np.abs(gw) - lam, 0.0),
            )
        else:
            sub = gw + lam * weights
        per_column = np.maximum(np.abs(sub).max(axis=0, initial=0.0), np.abs(gb))
        return self.reduce(per_column, np.max)


def initial_step(x, task) -> float:
    """A step below 1/L of the mean loss: L <= c ||[X 1]||_2^2 / N (c: 1/4 sigmoid, 1/2 softmax)."""
    n = x.shape[0]
    v = np.random.default_rng(0).normal(size=x.shape[1]).astype(np.float32)
    norm2 = 0.0
    for _ in range(4):
        v /= np.linalg.norm(v) + 1e-30
        v = np.asarray(x.T @ np.asarray(x @ v).ravel()).ravel().astype(np.float32)
        norm2 = float(np.linalg.norm(v))
    curvature = 0.5 if task == "multinomial" else 0.25
    return n / max(curvature * (2.0 * norm2 + n), 1e-12)


def fit_path(
    x,
    y,
    c_grid,
    penalty,
    task,
    num_classes=None,
    tol=TOL,
    max_iter=MAX_ITER,
    warm_start=True,
    on_iteration=None,
    method=None,
) -> Iterator[PathFit]:
    """Fits at each C of the ascending grid, each from the previous solution.

    Args:
      x, y: [N, D] features (`as_features` is applied), and labels (see `targets_of`).
      c_grid: ascending positive C values.
      penalty, task: "l1" or "l2"; one of `TASKS`.
      num_classes: multinomial: K.
      tol, max_iter: the KKT residual that counts as converged; gradient evaluations per C.
      warm_start: start each C from the previous solution (False: from zero).
      on_iteration: called as on_iteration(c_index, iterations) after every iteration.
      method: one of `METHODS` (None: `DEFAULT_METHODS[penalty]`).

    Yields:
      A `PathFit` per C, in grid order.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if penalty not in ("l1", "l2"):
        raise ValueError(f"penalty must be l1 or l2, got {penalty!r}")
    method = method or DEFAULT_METHODS[penalty]
    if method not in METHODS or (method == "lbfgs" and penalty != "l2"):
        raise ValueError(f"method {method!r} cannot fit the {penalty} penalty")
    fit = METHODS[method]
    x = as_features(x)
    targets = targets_of(y, task, num_classes)
    problem = _Problem(x, targets, task, penalty)
    first_step = initial_step(x, task)
    weights = bias = step = None
    for index, c in enumerate(c_grid):
        if weights is None or not warm_start:
            weights, bias = _start(problem, x.shape[1])
            step = np.full(problem.groups, first_step)
        callback = None
        if on_iteration is not None:

            def callback(iterations, index=index):
                on_iteration(index, iterations)

            callback(0)

        weights, bias, step, converged, iterations, residual = fit(
            problem, weights, bias, step, 1.0 / (float(c) * problem.n), tol, max_iter, callback
        )
        yield PathFit(
            C=float(c),
            weights=np.ascontiguousarray(weights.T),
            bias=bias - bias.mean() if problem.multinomial else bias.copy(),
            converged=converged,
            iterations=iterations,
            residual=residual,
        )


def _start(problem, width):
    """Zero weights and the intercepts alone fitted (the optimum as C -> 0)."""
    rate = np.clip(problem.targets.mean(axis=0), 1e-6, 1 - 1e-6)
    bias = np.log(rate) - np.log(rate).mean() if problem.multinomial else np.log(rate / (1 - rate))
    return np.zeros((width, problem.width)), bias


def _fista(problem, w, b, step, lam, tol, max_iter, callback):
    """One fit from (w, b): FISTA with backtracking and adaptive restart, per active group."""
    groups = problem.groups
    every = np.arange(problem.width)
    w, b, step = w.copy(), b.copy(), step.copy()
    x_logits = problem.logits(w, b)
    x_loss, x_grad = problem.loss(x_logits, every)
    p_w, p_b, p_logits = w.copy(), b.copy(), x_logits.copy()
    theta = np.ones(groups)
    momentum = np.zeros(groups)  # 0: the next gradient is at x itself
    active = np.ones(groups, bool)
    converged = np.zeros(groups, bool)
    iterations = np.zeros(groups, np.int64)
    residual = np.full(groups, np.inf)
    while True:
        gidx = np.flatnonzero(active)
        cols = every[problem.columns(active)]
        m = problem.columns(momentum[gidx])
        y_w = w[:, cols] + m * (w[:, cols] - p_w[:, cols])
        y_b = b[cols] + m * (b[cols] - p_b[cols])
        if np.any(momentum[gidx]):
            y_logits = x_logits[:, cols] + m * (x_logits[:, cols] - p_logits[:, cols])
            y_loss, y_grad = problem.loss(y_logits, cols)
        else:
            y_loss, y_grad = x_loss[gidx], x_grad[:, cols]
        gw, gb = problem.gradient(y_grad)
        iterations[gidx] += 1
        # Without momentum y is x and its gradient exact: the KKT test, for free.
        exact = momentum[gidx] == 0
        if exact.any():
            measured = problem.residual(w[:, cols], gw, gb, lam)
            residual[gidx[exact]] = measured[exact]
            converged[gidx[exact & (measured <= tol)]] = True
        keep = ~converged[gidx] & (iterations[gidx] < max_iter)
        active[gidx[~keep]] = False
        if callback is not None:
            callback(int(iterations.max()))
        if not keep.any():
            break
        kc = problem.columns(keep)
        gidx, cols = gidx[keep], cols[kc]
        y_w, y_b, gw, gb, y_loss = y_w[:, kc], y_b[kc], gw[:, kc], gb[kc], y_loss[keep]
        new_w, new_b = np.empty_like(y_w), np.empty_like(y_b)
        new_logits = np.empty((problem.n, len(cols)))
        new_grad = np.empty((problem.n, len(cols)), np.float32)
        new_loss = np.empty(len(gidx))
        trying = np.ones(len(gidx), bool)
        shrunk = np.zeros(len(gidx), bool)
        while trying.any():
            tc = problem.columns(trying)
            t = problem.columns(step[gidx[trying]])
            cand_w = problem.prox(y_w[:, tc] - t * gw[:, tc], t, lam)
            cand_b = y_b[tc] - t * gb[tc]
            cand_logits = problem.logits(cand_w, cand_b)
            cand_loss, cand_grad = problem.loss(cand_logits, cols[tc])
            d_w, d_b = cand_w - y_w[:, tc], cand_b - y_b[tc]
            linear = problem.reduce((gw[:, tc] * d_w).sum(axis=0) + gb[tc] * d_b)
            square = problem.reduce((d_w**2).sum(axis=0) + d_b**2)
            bound = y_loss[trying] + linear + square / (2.0 * step[gidx[trying]])
            held = cand_loss <= bound + _SLACK * np.abs(y_loss[trying]) + 1e-15
            held |= step[gidx[trying]] < _SMALLEST_STEP  # give up shrinking
            new_w[:, tc], new_b[tc] = cand_w, cand_b
            new_logits[:, tc], new_grad[:, tc] = cand_logits, cand_grad
            new_loss[trying] = cand_loss
            failed = np.flatnonzero(trying)[~held]
            step[gidx[failed]] *= STEP_SHRINK
            trying[:] = False
            trying[failed] = True
            shrunk[failed] = True
        # Gradient restart: momentum that points uphill is dropped; so is it
        # when the step was tiny, so the next gradient is exact for the KKT test.
        uphill = problem.reduce(
            ((y_w - new_w) * (new_w - w[:, cols])).sum(axis=0) + (y_b - new_b) * (new_b - b[cols])
        )
        moved = problem.reduce(
            np.maximum(np.abs(y_w - new_w).max(axis=0, initial=0.0), np.abs(y_b - new_b)), np.max
        )
        restart = (uphill > 0) | (moved <= tol * step[gidx])
        theta_next = (1.0 + np.sqrt(1.0 + 4.0 * theta[gidx] ** 2)) / 2.0
        momentum[gidx] = np.where(restart, 0.0, (theta[gidx] - 1.0) / theta_next)
        theta[gidx] = np.where(restart, 1.0, theta_next)
        step[gidx[~shrunk]] *= STEP_GROWTH
        p_w[:, cols], p_b[cols], p_logits[:, cols] = w[:, cols], b[cols], x_logits[:, cols]
        w[:, cols], b[cols], x_logits[:, cols] = new_w, new_b, new_logits
        x_grad[:, cols], x_loss[gidx] = new_grad, new_loss
    return w, b, step, converged, iterations, residual


MEMORY = 10
"""Curvature pairs L-BFGS keeps (scikit-learn's, scipy's default)."""


def _lbfgs(problem, w, b, step, lam, tol, max_iter, callback):
    """One l2 fit from (w, b): L-BFGS, Armijo backtracking, one shared product for all groups."""
    groups = problem.groups
    every = np.arange(problem.width)
    d = w.shape[0]
    v = np.vstack([w, b[None, :]])  # [D + 1, R]
    mask = np.ones((d + 1, 1))
    mask[-1] = 0.0  # the intercepts are not penalized

    def evaluate(values, cols):
        logits = problem.logits(values[:-1], values[-1])
        loss, grad_logits = problem.loss(logits, cols)
        objective = loss + 0.5 * lam * problem.reduce(((values[:-1]) ** 2).sum(axis=0))
        return objective, grad_logits

    def gradient(values, grad_logits):
        gw, gb = problem.gradient(grad_logits)
        return np.vstack([gw + lam * values[:-1], gb[None, :]])

    def dot(a, c):
        return problem.reduce(np.einsum("ij,ij->j", a, c))

    objective, grad_logits = evaluate(v, every)
    g = gradient(v, grad_logits)
    pairs_s, pairs_y, pairs_rho = [], [], []  # each [D + 1, R] (rho [G])
    iterations = np.ones(groups, np.int64)
    residual = problem.reduce(np.abs(g).max(axis=0), np.max)
    converged = residual <= tol
    active = ~converged & (iterations < max_iter)
    while active.any():
        gidx = np.flatnonzero(active)
        # Every column running (the common case): views, not copies.
        cols = slice(None) if active.all() else every[problem.columns(active)]
        some = every[cols]
        # Two-loop recursion over the stored pairs, for the running columns.
        q = g[:, cols].copy()
        alphas = []
        for s, y, rho in zip(reversed(pairs_s), reversed(pairs_y), reversed(pairs_rho)):
            alpha = rho[gidx] * dot(s[:, cols], q)
            q -= problem.columns(alpha) * y[:, cols]
            alphas.append(alpha)
        if pairs_s:
            s, y = pairs_s[-1][:, cols], pairs_y[-1][:, cols]
            gamma = dot(s, y) / np.maximum(dot(y, y), 1e-300)
            gamma = np.where(np.isfinite(gamma) & (gamma > 0), gamma, step[gidx])
        else:
            gamma = step[gidx]
        r = problem.columns(gamma) * q
        for (s, y, rho), alpha in zip(zip(pairs_s, pairs_y, pairs_rho), reversed(alphas)):
            beta = rho[gidx] * dot(y[:, cols], r)
            r += problem.columns(alpha - beta) * s[:, cols]
        direction = -r
        slope = dot(g[:, cols], direction)
        uphill = ~(slope < 0)
        if uphill.any():  # not a descent direction: steepest descent this time
            uc = problem.columns(uphill)
            direction[:, uc] = -problem.columns(step[gidx[uphill]]) * g[:, cols][:, uc]
            slope = dot(g[:, cols], direction)
        # Backtracking on each running group: step 1, halved until Armijo holds.
        alpha = np.ones(len(gidx))
        trying = np.ones(len(gidx), bool)
        new_v = np.empty((d + 1, len(some)))
        new_obj = np.empty(len(gidx))
        new_grad = np.empty((problem.n, len(some)), np.float32)
        while trying.any():
            tc = problem.columns(trying)
            cand = v[:, some[tc]] + problem.columns(alpha[trying]) * direction[:, tc]
            cand_obj, cand_grad = evaluate(cand, some[tc])
            bound = objective[gidx[trying]] + 1e-4 * alpha[trying] * slope[trying]
            held = cand_obj <= bound + _SLACK * np.abs(objective[gidx[trying]]) + 1e-15
            held |= alpha[trying] < 1e-10  # give up shrinking: take the tiny step
            new_v[:, tc], new_grad[:, tc], new_obj[trying] = cand, cand_grad, cand_obj
            failed = np.flatnonzero(trying)[~held]
            alpha[failed] *= 0.5
            trying[:] = False
            trying[failed] = True
        new_g = gradient(new_v, new_grad)
        iterations[gidx] += 1
        s_new = np.zeros_like(v)
        y_new = np.zeros_like(v)
        s_new[:, cols] = new_v - v[:, cols]
        y_new[:, cols] = new_g - g[:, cols]
        sy = dot(s_new[:, cols], y_new[:, cols])
        rho = np.zeros(groups)
        good = sy > 1e-12 * dot(y_new[:, cols], y_new[:, cols])
        rho[gidx[good]] = 1.0 / sy[good]
        # A group whose pair is bad keeps a zero pair (rho 0: no effect).
        bad_cols = problem.columns(~good)
        s_new[:, some[bad_cols]] = 0.0
        y_new[:, some[bad_cols]] = 0.0
        pairs_s.append(s_new)
        pairs_y.append(y_new)
        pairs_rho.append(rho)
        if len(pairs_s) > MEMORY:
            del pairs_s[0], pairs_y[0], pairs_rho[0]
        v[:, cols], g[:, cols] = new_v, new_g
        objective[gidx] = new_obj
        measured = problem.reduce(np.abs(new_g).max(axis=0), np.max)
        residual[gidx] = measured
        converged[gidx] = measured <= tol
        active = ~converged & (iterations < max_iter)
        if callback is not None:
            callback(int(iterations.max()))
    return v[:-1], v[-1], step, converged, iterations, residual


METHODS = {"lbfgs": _lbfgs, "fista": _fista}
DEFAULT_METHODS = {"l2": "lbfgs", "l1": "fista"}
"""The method per penalty, by measurement (docs/transfer.md): for l2 L-BFGS
took 2-3x fewer products than FISTA; for l1 FISTA beat a Barzilai-Borwein
proximal gradient (SpaRSA) by 1.2-1.5x."""
