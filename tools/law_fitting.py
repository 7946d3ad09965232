"""The scaling law fitted to runs, and the size it plans for a cluster's FLOP budget.

tools/scaling_law.py fits `tf_mlstm.auto.law.ScalingLaw` to its grid of runs with `fit_law`,
measures its error on unseen runs with `leave_one_out`, and plans for a cluster with
`plan_compute` (docs/scaling.md); a run plans its own size with `law.plan_size`.

Example:
>>> from tf_mlstm.auto import law as law_lib
>>> law = law_lib.ScalingLaw(E=1.3, A=0.25, alpha=0.6, B=0.9, beta=0.45)
>>> n = [law_lib.model_weights(u) for u in (64, 128, 256, 512, 1024)]
>>> d = [0.5e6, 1e6, 2e6, 4e6, 8e6]
>>> round(fit_law(n, d, law.predict(n, d)).alpha, 3)
0.6
"""

import dataclasses
import itertools
import math
from collections.abc import Sequence

import numpy as np

from tf_mlstm import errors
from tf_mlstm.auto.law import FORMS
from tf_mlstm.auto.law import Plan
from tf_mlstm.auto.law import ScalingLaw
from tf_mlstm.auto.law import SizeChoice
from tf_mlstm.auto.law import loss as law_loss
from tf_mlstm.auto.law import plan_size

MIN_RUNS = 5
"""The law has five coefficients: a fit needs at least as many runs."""
_MILLION = 1e6
# Exponent bounds: below 0.02 a power law is a constant (E takes it), above 3 it is a step.
_EXPONENT_BOUNDS = (0.02, 3.0)
# The coarse search over (alpha, beta) before refinement: with the exponents fixed the
# law is linear in (E, A, B), solved exactly, so the search cannot start in a wrong basin.
_EXPONENT_GRID = np.linspace(0.05, 2.0, 40)


def _points(weights, chars, losses):
    arrays = [np.asarray(x, dtype=np.float64).reshape(-1) for x in (weights, chars, losses)]
    n, d, loss = arrays
    if not len(n) == len(d) == len(loss):
        raise errors.InvalidValueError(
            f"scaling law: weights, chars and losses differ in length "
            f"({len(n)}, {len(d)}, {len(loss)})."
        )
    for name, values in (("weights", n), ("chars", d), ("losses", loss)):
        bad = ~np.isfinite(values) | (values <= 0)
        if bad.any():
            index = int(np.argmax(bad))
            raise errors.InvalidValueError(
                f"scaling law: run {index} has {name}={float(values[index])!r}; "
                "every value must be positive and finite."
            )
    if len(n) < MIN_RUNS:
        raise errors.InvalidValueError(
            f"scaling law: {len(n)} runs cannot fit its {MIN_RUNS} coefficients; "
            f"give at least {MIN_RUNS}."
        )
    return n / _MILLION, d / _MILLION, loss


def _linear_part(n, d, loss, alpha, beta):
    from scipy import optimize  # pylint: disable=g-import-not-at-top

    design = np.stack([np.ones_like(n), n ** (-alpha), d ** (-beta)], axis=1)
    coefficients, norm = optimize.nnls(design, loss)
    return coefficients, norm


def fit_law(weights, chars, losses, form="additive") -> ScalingLaw:
    """Fits `ScalingLaw` to runs by least squares on the loss.

    Args:
      weights, chars, losses: each run's weights (N), characters trained on (D), and
        held-out loss (bits/char).
      form: one of `FORMS`.

    Returns:
      The fitted `ScalingLaw`, with its fitted ranges and RMS residual.

    Raises:
      errors.InvalidValueError: fewer than `MIN_RUNS` runs, unequal lengths, or a bad value.
    """
    from scipy import optimize  # pylint: disable=g-import-not-at-top

    if form not in FORMS:
        raise errors.InvalidValueError(f"scaling law: form must be one of {FORMS}, got {form!r}.")
    n, d, loss = _points(weights, chars, losses)
    best = None
    for alpha, beta in itertools.product(_EXPONENT_GRID, _EXPONENT_GRID):
        coefficients, norm = _linear_part(n, d, loss, alpha, beta)
        if best is None or norm < best[0]:
            best = (norm, alpha, beta, coefficients)
    _, alpha0, beta0, (e0, a0, b0) = best

    def residuals(p):
        return law_loss(form, *p, n, d) - loss

    low, high = _EXPONENT_BOUNDS
    lower = np.array([0.0, 0.0, low, 0.0, low])
    upper = np.array([np.inf, np.inf, high, np.inf, high])
    starts = [np.array([e0, a0, alpha0, b0, beta0])]
    if form != "additive":
        starts += [starts[0] * [1, 1, fa, 1, fb] for fa in (0.5, 1, 2) for fb in (0.5, 1, 2)]
    refined = None
    for start in starts:
        attempt = optimize.least_squares(
            residuals,
            np.clip(start, lower + 1e-12, upper - 1e-12),
            bounds=(lower, upper),
            x_scale="jac",
            xtol=1e-14,
            ftol=1e-14,
            gtol=1e-14,
        )
        if refined is None or attempt.cost < refined.cost:
            refined = attempt
    e, a, alpha, b, beta = (float(x) for x in refined.x)
    rms = float(np.sqrt(np.mean(residuals(refined.x) ** 2)))
    return ScalingLaw(
        E=e,
        A=a,
        alpha=alpha,
        B=b,
        beta=beta,
        weights_range=(float(np.min(weights)), float(np.max(weights))),
        chars_range=(float(np.min(chars)), float(np.max(chars))),
        rms=rms,
        form=form,
    )


def leave_one_out(weights, chars, losses, form="additive") -> np.ndarray:
    """Each run's error when the law is fitted on all the other runs.

    Args:
      weights, chars, losses: each run's weights (N), characters (D) and held-out loss.
      form: one of `FORMS`.

    Returns:
      error[i] = (the law fitted without run i)'s prediction for run i - loss[i].

    Raises:
      errors.InvalidValueError: fewer than `MIN_RUNS` + 1 runs, or a bad value.
    """
    n = np.asarray(weights, dtype=np.float64).reshape(-1)
    d = np.asarray(chars, dtype=np.float64).reshape(-1)
    loss = np.asarray(losses, dtype=np.float64).reshape(-1)
    if len(loss) < MIN_RUNS + 1:
        raise errors.InvalidValueError(
            f"scaling law: leaving one of {len(loss)} runs out leaves fewer than the "
            f"{MIN_RUNS} a fit needs; give at least {MIN_RUNS + 1}."
        )
    out = np.empty(len(loss))
    for i in range(len(loss)):
        keep = np.arange(len(loss)) != i
        law = fit_law(n[keep], d[keep], loss[keep], form)
        out[i] = law.predict(n[i], d[i]) - loss[i]
    return out


def parse_rates(text: str) -> dict:
    """`"128=20000,256=11000"` -> {128: 20000.0, 256: 11000.0}.

    Args:
      text: comma-separated `UNITS=CHARS_PER_S` pairs.

    Returns:
      The rates by size.

    Raises:
      errors.InvalidValueError: a pair not of a positive integer size and a positive rate.
    """
    rates = {}
    for pair in (p.strip() for p in text.split(",") if p.strip()):
        units, sep, rate = pair.partition("=")
        try:
            value = float(rate)
            size = int(units)
        except ValueError:
            size, value = 0, 0.0
        if not sep or size <= 0 or not (math.isfinite(value) and value > 0):
            raise errors.InvalidValueError(
                f"rates: {pair!r} is not UNITS=CHARS_PER_S with both positive (e.g. 256=11000)."
            )
        rates[size] = value
    return rates


def summary(values: Sequence[float]) -> dict:
    """RMS and largest absolute value of errors (leave-one-out or residuals)."""
    v = np.asarray(values, dtype=np.float64)
    return {"rms": float(np.sqrt(np.mean(v**2))), "max_abs": float(np.max(np.abs(v)))}


# === Planning in FLOPs: a cluster's budget ===


def flops_per_char(units: int, embedding_size: int = 64, vocab: int = 256) -> int:
    """Training FLOPs per character of the mLSTM's matrix products: 6 x (5EH + 5H^2 + HV).

    Args:
      units, embedding_size, vocab: mLSTM units H, byte embedding width E, bytes V (256).

    Returns:
      Training (forward and backward) FLOPs per character.

    Raises:
      errors.InvalidValueError: a size that is not positive.

    Example:
    >>> flops_per_char(4096)  # the paper's model: 0.52 GFLOPs a character
    517472256
    >>> from tf_mlstm.auto.law import model_weights
    >>> round(flops_per_char(768) / (6 * (model_weights(768) - 256 * 64)), 4)
    0.9968
    """
    h, e, v = int(units), int(embedding_size), int(vocab)
    if min(h, e, v) <= 0:
        raise errors.InvalidValueError(
            f"FLOPs: units, embedding size and vocabulary must be positive, got {h}, {e}, {v}."
        )
    multiply_adds = e * 4 * h + e * h + h * h + h * 4 * h + h * v
    forward, backward = 2 * multiply_adds, 4 * multiply_adds
    return forward + backward


def cluster_flops(
    flops_per_s: float, utilization: float, hours: float, name: str = "cluster"
) -> float:
    """The FLOPs a cluster gives a run: peak FLOP/s x utilization x hours.

    Args:
      flops_per_s: the cluster's peak FLOP/s (GPUs x each GPU's peak).
      utilization: the share of peak the training step sustains, in (0, 1].
      hours: the run's wall-clock hours.
      name: what the values are called in an error message.

    Returns:
      The run's FLOP budget C.

    Raises:
      errors.InvalidValueError: a non-positive rate or time, or a utilization outside (0, 1].

    Example:
    >>> f"{cluster_flops(128 * 125e12, 0.3, 4):.3g}"  # 128 V100s for 4 hours at 30%
    '6.91e+19'
    """
    for what, value in (("peak FLOP/s", flops_per_s), ("hours", hours)):
        if not (math.isfinite(value) and value > 0):
            raise errors.InvalidValueError(f"{name}: {what} must be positive, got {value}.")
    if not (math.isfinite(utilization) and 0 < utilization <= 1):
        raise errors.InvalidValueError(
            f"{name}: utilization must be in (0, 1] (a share of peak), got {utilization}."
        )
    return float(flops_per_s) * float(utilization) * float(hours) * 3600.0


def cluster_units(low: int = 128, high: int = 16384) -> tuple:
    """Candidate sizes for a cluster plan: powers of two and the midpoints (1.5x) between.

    Args:
      low, high: the smallest and the largest size.

    Returns:
      The sizes from `low` to `high`, ascending.

    Example:
    >>> cluster_units(512, 4096)
    (512, 768, 1024, 1536, 2048, 3072, 4096)
    """
    sizes = {s for p in range(0, 31) for s in (2**p, 3 * 2**p // 2 if p else 1) if low <= s <= high}
    return tuple(sorted(sizes))


def plan_compute(
    law: ScalingLaw,
    flops_per_s: float,
    seconds: float,
    units: Sequence[int] = (),
    embedding_size: int = 64,
    weight_norm: bool = True,
) -> Plan:
    """The size whose predicted loss is lowest for a FLOP budget (`plan_size` with rates in FLOPs).

    Args:
      law: the `ScalingLaw`.
      flops_per_s: the FLOP/s the run sustains (peak x utilization).
      seconds: the run's wall-clock time.
      units: the candidate sizes; empty: `cluster_units()`.
      embedding_size, weight_norm: the models' byte embedding width, and whether weight norm.

    Returns:
      A `Plan`: `best` the choice, `candidates` every size, `line` the choice in one line.

    Raises:
      errors.InvalidValueError: a FLOP rate, time or size that is not positive.

    Example:
    >>> law = ScalingLaw(E=1.3, A=0.25, alpha=0.6, B=0.9, beta=0.45)
    >>> plan = plan_compute(law, 1e12, 3600, units=(256, 512, 1024))
    >>> plan.best.units, f"{plan.best.chars:.3g}", round(plan.best.predicted, 3)
    (1024, '1.03e+08', 1.498)
    >>> print(plan.line)  # doctest: +NORMALIZE_WHITESPACE
    hidden_size=1024 for 1 hours at 1 TFLOP/s sustained (3.6e+15 FLOPs): 1.498 bits/char,
    5.9M weights on 1e+08 chars
    """
    if not (math.isfinite(flops_per_s) and flops_per_s > 0):
        raise errors.InvalidValueError(
            f"compute plan: the FLOP rate must be positive, got {flops_per_s}."
        )
    sizes = tuple(units) or cluster_units()
    for size in sizes:
        if int(size) <= 0:
            raise errors.InvalidValueError(f"compute plan: size {size} is not a positive number.")
    rates = {int(u): flops_per_s / flops_per_char(int(u), embedding_size) for u in sizes}
    plan = plan_size(law, rates, seconds, embedding_size=embedding_size, weight_norm=weight_norm)
    best = plan.best
    line = (
        f"hidden_size={best.units} for {seconds / 3600:g} hours at "
        f"{flops_per_s / 1e12:,.4g} TFLOP/s sustained ({flops_per_s * seconds:.2g} FLOPs): "
        f"{best.predicted:.3f} bits/char, {best.weights / _MILLION:,.1f}M weights on "
        f"{best.chars:.2g} chars"
    )
    return dataclasses.replace(plan, line=line)


def describe_choice(law: ScalingLaw, choice: SizeChoice, embedding_size: int = 64) -> str:
    """One candidate of a compute plan in one line, with how far it extrapolates the law.

    Args:
      law: the law the plan used (its fitted ranges).
      choice: a `SizeChoice` of `plan_compute`.
      embedding_size: the models' byte embedding width.

    Returns:
      Units, weights, FLOPs and characters, predicted bits/char, and any extrapolation factor.

    Example:
    >>> law = ScalingLaw(E=1.3, A=0.25, alpha=0.6, B=0.9, beta=0.45, chars_range=(5e5, 8e6))
    >>> choice = plan_compute(law, 1e12, 3600, units=(512,)).best
    >>> print(describe_choice(law, choice))  # doctest: +NORMALIZE_WHITESPACE
    512 units: 1.6M weights, 9.6 MFLOPs/char, 3.7e+08 chars (229 per weight): 1.549 bits/char,
    extrapolated: 46.7x the law's characters
    """
    notes = []
    for what, value, (low, high) in (
        ("weights", choice.weights, law.weights_range),
        ("characters", choice.chars, law.chars_range),
    ):
        if value > high:
            notes.append(f"{value / high:,.3g}x the law's {what}")
        elif value < low:
            notes.append(f"1/{low / value:,.3g} of the law's smallest {what}")
    flops = flops_per_char(choice.units, embedding_size)
    return (
        f"{choice.units} units: {choice.weights / _MILLION:,.1f}M weights, "
        f"{flops / _MILLION:,.1f} MFLOPs/char, {choice.chars:.2g} chars "
        f"({choice.chars / choice.weights:,.0f} per weight): {choice.predicted:.3f} bits/char"
        + (f", extrapolated: {', '.join(notes)}" if notes else "")
    )
