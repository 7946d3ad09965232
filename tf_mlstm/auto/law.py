"""The model's size for a budget: a scaling law of loss in weights and characters, and a planner.

    loss(N, D) = E + A / n**alpha + B / d**beta,   n = N / 1e6,  d = D / 1e6

(Hoffmann et al. 2022's form). `plan_size` picks the size with the lowest predicted loss for a
budget (docs/scaling.md); tools/law_fitting.py fits the law to runs and plans for a cluster.

Example:
>>> import numpy as np
>>> from tf_mlstm.auto import law as law_lib
>>> law = law_lib.ScalingLaw(E=1.0, A=0.5, alpha=0.5, B=0.5, beta=0.5)
>>> round(law.predict(1e6, 4e6), 4)
1.75
>>> law_lib.model_weights(768)
3418880
"""

import dataclasses
import json
import math
from collections.abc import Mapping

import numpy as np

from tf_mlstm import errors
from tf_mlstm.config.choices import OPTIMIZE_FOR

_MILLION = 1e6


FORMS = ("additive", "coupled")
"""The law's forms: the two terms added (Chinchilla), or combined as in Kaplan et al. (2020)."""

# `optimize_for="transfer"`: the widest size whose predicted held-out bits/char is within this
# of the lowest. Measured (docs/scaling.md, "--hidden_size=auto"): on a 2-core CPU in 30
# minutes, 768 units were predicted 0.131 bits/char worse than the 384 the law of 13 short runs
# chose (0.071 by the law refitted with longer runs), ended 0.021-0.030 worse, and their
# features scored 4.5 points higher on SST-2, 2.3 on SST-5.
TRANSFER_MARGIN = 0.15


def loss(form, e, a, alpha, b, beta, n, d) -> "float | np.ndarray":
    """The law of `form` with these coefficients at n = N / 1e6 weights, d = D / 1e6 characters."""
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
        value = loss(self.form, self.E, self.A, self.alpha, self.B, self.beta, n, d)
        return float(value) if np.ndim(value) == 0 else value

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
