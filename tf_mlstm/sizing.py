"""The model's size for a budget: a scaling law of loss in weights and characters, and a planner.

    loss(N, D) = E + A / n**alpha + B / d**beta,   n = N / 1e6,  d = D / 1e6

(Hoffmann et al. 2022's form). `fit_law` fits it, `leave_one_out` measures its error on
unseen runs, `plan_size` and `plan_compute` pick a size for a budget (docs/scaling.md).

Example:
>>> import numpy as np
>>> from tf_mlstm import sizing
>>> law = sizing.ScalingLaw(E=1.0, A=0.5, alpha=0.5, B=0.5, beta=0.5)
>>> round(law.predict(1e6, 4e6), 4)
1.75
>>> sizing.model_weights(768)
3418880
"""

import dataclasses
import itertools
import json
import math
from collections.abc import Mapping
from collections.abc import Sequence

import numpy as np

from tf_mlstm import errors

MIN_RUNS = 5
"""The law has five coefficients: a fit needs at least as many runs."""
_MILLION = 1e6
# Exponent bounds: below 0.02 a power law is a constant (E takes it), above 3 it is a step.
_EXPONENT_BOUNDS = (0.02, 3.0)
# The coarse search over (alpha, beta) before refinement: with the exponents fixed the
# law is linear in (E, A, B), solved exactly, so the search cannot start in a wrong basin.
_EXPONENT_GRID = np.linspace(0.05, 2.0, 40)


FORMS = ("additive", "coupled")
"""The law's forms: the two terms added (Chinchilla), or combined as in Kaplan et al. (2020)."""

# `optimize_for="transfer"`: the widest size whose predicted held-out bits/char is within this
# of the lowest. Measured (docs/scaling.md, "--hidden_size=auto"): on a 2-core CPU in 30
# minutes, 768 units were predicted 0.131 bits/char worse than the 384 the law of 13 short runs
# chose (0.071 by the law refitted with longer runs), ended 0.021-0.030 worse, and their
# features scored 4.5 points higher on SST-2, 2.3 on SST-5.
TRANSFER_MARGIN = 0.15

OPTIMIZE_FOR = ("bits", "transfer")
"""What the planner optimises: bits/char, or transfer (the widest within `TRANSFER_MARGIN`)."""


def _law(form, e, a, alpha, b, beta, n, d):
    size, data = a * n ** (-alpha), b * d ** (-beta)
    if form == "additive":
        return e + size + data
    # Kaplan et al. (2020)'s L(N, D) with a floor: the larger term dominates, so a model's
    # size only pays once the data no longer limits it.
    return e + (size ** (1 / beta) + data ** (1 / beta)) ** beta


def model_weights(units: int, embedding_size: int = 64, vocab: int = 256, weight_norm=True) -> int:
    """The trainable weights of a byte-level mLSTM language model (`MLSTMLanguageModel`).

    Args:
      units: mLSTM units (`hidden_size`).
      embedding_size, vocab: byte embedding width, byte vocabulary (256).
      weight_norm: whether the cell has weight-norm gains (one per kernel column).

    Returns:
      The count: embedding, the cell's kernels, bias (and gains), the softmax layer.
    """
    h, e = int(units), int(embedding_size)
    kernels = e * 4 * h + e * h + h * h + h * 4 * h
    gains = (4 * h + h + h + 4 * h) if weight_norm else 0
    return vocab * e + kernels + 4 * h + gains + h * vocab + vocab


@dataclasses.dataclass(frozen=True)
class ScalingLaw:
    """loss = E + A / (N/1e6)**alpha + B / (D/1e6)**beta, N weights, D characters.

    Attributes:
      E, A, alpha, B, beta: the coefficients (E, A and B in bits/char).
      weights_range, chars_range: the (smallest, largest) weights, characters of the fitted runs.
      rms: the root-mean-square residual over the fitted runs.
      form: `additive` (Hoffmann et al.), or `coupled` (Kaplan et al.).

    Example:
    >>> law = ScalingLaw(E=1.3, A=0.25, alpha=0.6, B=0.9, beta=0.45)
    >>> law.formula()
    'loss = 1.300 + 0.250 / (N/1M)^0.600 + 0.900 / (D/1M)^0.450'
    >>> round(law.predict(model_weights(768), 8e6), 3)
    1.773
    """

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    weights_range: tuple = (0.0, math.inf)
    chars_range: tuple = (0.0, math.inf)
    rms: float = 0.0
    form: str = "additive"

    def predict(self, weights, chars) -> "float | np.ndarray":
        """The predicted loss at `weights` and `chars` (scalars or arrays, broadcast)."""
        n = np.asarray(weights, dtype=np.float64) / _MILLION
        d = np.asarray(chars, dtype=np.float64) / _MILLION
        loss = _law(self.form, self.E, self.A, self.alpha, self.B, self.beta, n, d)
        return float(loss) if np.ndim(loss) == 0 else loss

    def extrapolates(self, weights, chars) -> bool:
        """Whether (`weights`, `chars`) lies outside the ranges the law was fitted on."""
        low_n, high_n = self.weights_range
        low_d, high_d = self.chars_range
        return not (low_n <= weights <= high_n and low_d <= chars <= high_d)

    def formula(self) -> str:
        """The law in one line, with its coefficients."""
        size = f"{self.A:.3f} / (N/1M)^{self.alpha:.3f}"
        data = f"{self.B:.3f} / (D/1M)^{self.beta:.3f}"
        if self.form == "additive":
            return f"loss = {self.E:.3f} + {size} + {data}"
        p = 1 / self.beta
        return f"loss = {self.E:.3f} + [({size})^{p:.3f} + ({data})^{p:.3f}]^{self.beta:.3f}"

    def to_json(self) -> dict:
        """The coefficients and ranges as a JSON-ready dict."""
        return {
            "E": self.E,
            "A": self.A,
            "alpha": self.alpha,
            "B": self.B,
            "beta": self.beta,
            "weights_range": list(self.weights_range),
            "chars_range": list(self.chars_range),
            "rms": self.rms,
            "form": self.form,
            "formula": self.formula(),
        }


# The additive law fitted to 20 runs of the CPU recipe on the shared review corpora (held-out
# Amazon electronics reviews; docs/scaling.md, "Results"): 18 grid runs of 0.5-16M characters
# and two 30-minute runs of the recipe (9.2M and 24.6M), reproduced by the commands there
# ending with `python tools/scaling_law.py --output_dir=runs/scaling_law --fit_only`.
REVIEWS_LAW = ScalingLaw(
    E=1.765,
    A=0.112,
    alpha=0.688,
    B=1.074,
    beta=0.583,
    weights_range=(174080.0, 3418880.0),
    chars_range=(503808.0, 24637440.0),
    rms=0.029,
)
"""The law `--hidden_size=auto` plans with when no `--scaling_law` file is given."""

_LAW_FIELDS = ("E", "A", "alpha", "B", "beta")


def law_from_json(values: Mapping, source: str = "scaling law") -> ScalingLaw:
    """A `ScalingLaw` from `ScalingLaw.to_json()` (or a fit.json holding it under "law").

    Args:
      values: the JSON object.
      source: what to name in an error (a path).

    Returns:
      The law.

    Raises:
      errors.InvalidValueError: a missing or non-finite coefficient, a bad range or form.

    Example:
    >>> law_from_json({"law": REVIEWS_LAW.to_json()}) == REVIEWS_LAW
    True
    """
    if isinstance(values, Mapping) and isinstance(values.get("law"), Mapping):
        values = values["law"]
    if not isinstance(values, Mapping):
        raise errors.InvalidValueError(
            f"{source}: expected a JSON object with {', '.join(_LAW_FIELDS)} "
            f"(a fit.json of tools/scaling_law.py), got {type(values).__name__}."
        )
    fields = {}
    for name in _LAW_FIELDS:
        value = values.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise errors.InvalidValueError(
                f"{source}: {name} must be a number (the law's coefficients are "
                f"{', '.join(_LAW_FIELDS)}), got {value!r}."
            )
        if not math.isfinite(value) or value < 0:
            raise errors.InvalidValueError(f"{source}: {name} must be >= 0, got {value!r}.")
        fields[name] = float(value)
    for name in ("weights_range", "chars_range"):
        if name in values:
            pair = values[name]
            try:
                low, high = (float(x) for x in pair)
            except (TypeError, ValueError):
                low, high = math.nan, math.nan
            if not low <= high:
                raise errors.InvalidValueError(
                    f"{source}: {name} must be [low, high], got {pair!r}."
                )
            fields[name] = (low, high)
    form = values.get("form", "additive")
    if form not in FORMS:
        raise errors.InvalidValueError(f"{source}: form must be one of {FORMS}, got {form!r}.")
    return ScalingLaw(**fields, rms=float(values.get("rms", 0.0) or 0.0), form=form)


def load_law(path: str) -> ScalingLaw:
    """The law in the JSON file `path` (`law_from_json`); `""`: `REVIEWS_LAW`.

    Args:
      path: a fit.json of tools/scaling_law.py, a JSON of `ScalingLaw` fields, or "".

    Returns:
      The law.

    Raises:
      errors.InvalidValueError: no readable law at `path`.

    Example:
    >>> load_law("") is REVIEWS_LAW
    True
    """
    if not path:
        return REVIEWS_LAW
    source = f"{errors.setting_name('scaling_law')}={path}"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise errors.InvalidValueError(f"{source}: cannot read it ({e.strerror or e}).") from None
    try:
        values = json.loads(text)
    except ValueError as e:
        raise errors.InvalidValueError(f"{source}: not valid JSON ({e}).") from None
    return law_from_json(values, source)


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
        return _law(form, *p, n, d) - loss

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


@dataclasses.dataclass(frozen=True)
class SizeChoice:
    """One size's prediction for a budget.

    Its `units` and `weights`, measured `chars_per_s` (NaN: not measured), the `chars` it
    trains on within the budget, the law's loss there (`predicted`), and whether that point
    is outside the fitted ranges (`extrapolated`).

    Example:
    >>> law = ScalingLaw(E=1.3, A=0.25, alpha=0.6, B=0.9, beta=0.45)
    >>> plan = plan_size(law, {256: 11000.0}, seconds=120)
    >>> plan.best.units, plan.best.chars, round(plan.best.predicted, 3)
    (256, 1320000.0, 2.475)
    """

    units: int
    weights: int
    chars_per_s: float
    chars: float
    predicted: float
    extrapolated: bool


@dataclasses.dataclass(frozen=True)
class Plan:
    """The planner's answer: the chosen size (`best`), every candidate, and one `line` saying why.

    Example:
    >>> law = ScalingLaw(E=1.3, A=0.25, alpha=0.6, B=0.9, beta=0.45)
    >>> plan = plan_size(law, {128: 20000.0, 256: 11000.0}, seconds=120)
    >>> print(plan.line)  # doctest: +NORMALIZE_WHITESPACE
    hidden_size=256 for 2 minutes: 256 units: 2.475 bits/char (11,000 chars/s, 1.3M chars);
    alternatives 128 units: 2.621 bits/char (20,000 chars/s, 2.4M chars)
    """

    best: SizeChoice
    candidates: tuple
    line: str


def plan_size(
    law: ScalingLaw,
    rates: Mapping[int, float | None],
    seconds: float,
    embedding_size: int = 64,
    weight_norm: bool = True,
    max_chars: float = math.inf,
    optimize_for: str = "bits",
) -> Plan:
    """The size whose predicted loss at the end of a budget is lowest (or, for transfer, widest).

    Args:
      law: the fitted `ScalingLaw`.
      rates: mLSTM units -> training characters per second here (None: not measured).
      seconds: the time budget (`math.inf`: none); a size trains on rate x seconds characters.
      embedding_size, weight_norm: the models' byte embedding width, and whether weight norm.
      max_chars: the most characters a size trains on (a step budget; `math.inf`: none).
      optimize_for: "bits" (lowest loss) or "transfer" (widest within `TRANSFER_MARGIN`).

    Returns:
      A `Plan`; `plan.best.units` is the choice, `plan.line` says why.

    Raises:
      errors.InvalidValueError: no rates, a non-positive rate or size, or no finite budget.

    Example:
    >>> law = ScalingLaw(E=1.3, A=0.25, alpha=0.6, B=0.9, beta=0.45)
    >>> plan = plan_size(law, {128: None, 256: None}, math.inf, max_chars=2e6)
    >>> plan.best.units, plan.best.chars
    (256, 2000000.0)
    """
    if not rates:
        raise errors.InvalidValueError("planner: no sizes with a measured rate were given.")
    if optimize_for not in OPTIMIZE_FOR:
        raise errors.InvalidValueError(
            f"planner: optimize_for must be {' or '.join(OPTIMIZE_FOR)}, got {optimize_for!r}."
        )
    timed = math.isfinite(seconds)
    if not (seconds > 0 and max_chars > 0 and (timed or math.isfinite(max_chars))):
        raise errors.InvalidValueError(
            f"planner: the budget must be positive, got {seconds}s and {max_chars} characters."
        )
    candidates = []
    for units, rate in sorted(rates.items()):
        known = rate is not None and math.isfinite(rate) and rate > 0
        if int(units) <= 0 or not (known or (rate is None and not timed)):
            raise errors.InvalidValueError(
                f"planner: size {units} has rate {rate!r}; sizes and rates must be positive."
            )
        weights = model_weights(int(units), embedding_size, weight_norm=weight_norm)
        chars = min(float(rate) * float(seconds), max_chars) if timed else float(max_chars)
        candidates.append(
            SizeChoice(
                units=int(units),
                weights=weights,
                chars_per_s=float(rate) if known else math.nan,
                chars=chars,
                predicted=float(law.predict(weights, chars)),
                extrapolated=law.extrapolates(weights, chars),
            )
        )
    best = min(candidates, key=lambda c: c.predicted)
    budget = f"{round(seconds / 60, 1):g} minutes" if timed else f"{_chars(max_chars)} chars"
    if timed and math.isfinite(max_chars):
        budget += f" or {_chars(max_chars)} chars"
    if not timed:
        budget += " (no time budget: every size trains on them, so the law favours the largest)"
    if optimize_for == "transfer":
        lowest = best
        best = max(
            (c for c in candidates if c.predicted <= lowest.predicted + TRANSFER_MARGIN),
            key=lambda c: c.units,
        )
        budget += (
            f", for transfer (the largest within {TRANSFER_MARGIN:g} bits/char of the lowest,"
            f" {lowest.units} units)"
        )
    return Plan(best=best, candidates=tuple(candidates), line=_plan_line(best, candidates, budget))


def _chars(count):
    return f"{count / _MILLION:.1f}M" if count >= _MILLION / 10 else f"{count:,.0f}"


def _plan_line(best, candidates, budget):
    def describe(c):
        note = ", extrapolated" if c.extrapolated else ""
        rate = "not measured" if math.isnan(c.chars_per_s) else f"{c.chars_per_s:,.0f} chars/s"
        return (
            f"{c.units} units: {c.predicted:.3f} bits/char ({rate}, {_chars(c.chars)} chars{note})"
        )

    others = [describe(c) for c in candidates if c is not best]
    return f"hidden_size={best.units} for {budget}: {describe(best)}" + (
        f"; alternatives {'; '.join(others)}" if others else ""
    )


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
