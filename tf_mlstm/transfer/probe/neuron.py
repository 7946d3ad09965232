"""The sentiment neuron: found when a classifier is fitted, read back to generate and draw.

A neuron is a cell (`CELL_KINDS`) or hidden (`HIDDEN_KINDS`) unit of the model, which
generation can hold and the heat map draw. Explicit flags win over the classifier's, each
disagreement logged. No TensorFlow or scikit-learn at import: binaries read `SENTIMENTS` early.
"""

import dataclasses
import itertools

import numpy as np
from absl import logging
from scipy import sparse

from tf_mlstm import errors
from tf_mlstm.config.choices import SENTIMENTS
from tf_mlstm.errors import setting_name as _name
from tf_mlstm.models.kinds import CELL_KINDS
from tf_mlstm.models.kinds import FEATURE_KINDS
from tf_mlstm.models.kinds import HIDDEN_KINDS
from tf_mlstm.transfer.probe.threshold import Threshold
from tf_mlstm.transfer.probe.threshold import column
from tf_mlstm.transfer.probe.threshold import fit_threshold

HOLD_SPREADS = 2.0
"""How far past the neuron's threshold generation holds it, in standard
deviations of the feature over the classifier's training texts: far enough to
sit on the chosen side for every text the classifier saw that was not an
outlier, near enough to stay in the range the model produced."""


# === Finding the neuron ===


NEURON_CANDIDATES = 10
"""Units by |weight| and by |correlation| considered for a neuron."""


def neuron_columns(kinds, hidden_size) -> np.ndarray | None:
    """The columns a neuron is chosen among: cell kinds, else hidden kinds, else all but n-grams.

    Args:
      kinds: the concatenated feature kinds (`tfidf`, if there, last).
      hidden_size: the model's units.

    Returns:
      int64 array of column indices, ascending; None with `tfidf` alone (no neuron).
    """
    model_kinds = [kind for kind in kinds if kind in FEATURE_KINDS]
    for wanted in (CELL_KINDS, HIDDEN_KINDS, tuple(model_kinds)):
        blocks = [i for i, kind in enumerate(model_kinds) if kind in wanted]
        if blocks:
            return np.concatenate(
                [np.arange(b * hidden_size, (b + 1) * hidden_size) for b in blocks]
            ).astype(np.int64)
    return None


def find_neuron(
    train_x, train_y01, weights, candidates=NEURON_CANDIDATES, balanced=False, columns=None
) -> Threshold:
    """The single feature whose best threshold classifies the training rows best.

    Args:
      train_x, train_y01: [N, D] features and [N] labels in {0, 1}.
      weights: [D] fitted weights.
      candidates: how many units of largest |weight| and of largest |correlation| to try.
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


# === Reading it back ===


@dataclasses.dataclass(frozen=True)
class SentimentNeuron:
    """The sentiment neuron of a classifier file.

    Attributes:
      source: the classifier file.
      kind: its feature kind (one of `CELL_KINDS` or `HIDDEN_KINDS`).
      unit: the unit of the cell state (`CELL_KINDS`) or hidden state.
      sign: +1 where large values mean the positive class, else -1.
      threshold, spread: the cut between the classes; the feature's training standard deviation.
      hidden_size: units of the model the classifier was fitted on.

    Example:
    >>> neuron = SentimentNeuron(
    ...     source="classifier.json", kind="cell_mean", unit=3, sign=-1, threshold=0.2,
    ...     spread=0.5, hidden_size=16,
    ... )
    >>> neuron.state, neuron.value_for("positive"), neuron.value_for("negative")
    ('cell', -0.8, 1.2)
    """

    source: str
    kind: str
    unit: int
    sign: int
    threshold: float
    spread: float
    hidden_size: int

    @property
    def state(self) -> str:
        """ "cell" or "hidden": the state the unit is held and drawn in."""
        return "cell" if self.kind in CELL_KINDS else "hidden"

    @property
    def hidden_state(self) -> bool:
        """Whether the unit is a hidden-state one (`sampling`'s `hidden_state`)."""
        return self.state == "hidden"

    def value_for(self, sentiment="positive", spreads=HOLD_SPREADS) -> float:
        """The value that puts the neuron `spreads` deviations into `sentiment`'s side.

        Args:
          sentiment, spreads: "positive" or "negative"; the distance past the threshold, in spreads.

        Returns:
          `threshold + direction * sign * spreads * spread`, direction +1 for positive.

        Raises:
          ValueError: an unknown sentiment.
        """
        if sentiment not in SENTIMENTS:
            raise errors.InvalidValueError(
                f"sentiment must be one of {SENTIMENTS}, got {sentiment!r}."
            )
        direction = 1 if sentiment == "positive" else -1
        return float(self.threshold + direction * self.sign * spreads * self.spread)

    def describe(self) -> str:
        """A short phrase for logs: which feature, which unit, which direction."""
        return (
            f"the sentiment neuron of {self.source} ({self.kind} of {self.state} unit {self.unit}, "
            f"sign {self.sign:+d}, threshold {self.threshold:+.4g})"
        )


def neuron_from_classifier(path, tool, hidden_size=None) -> "SentimentNeuron":
    """Reads the sentiment neuron of a classifier.json.

    Args:
      path, tool: a classifier file, and the binary asking, for the error ("tf-mlstm-generate").
      hidden_size: the model's units, checked against the classifier's (None: not checked).

    Returns:
      A `SentimentNeuron`.

    Raises:
      FileNotFoundError: no file at `path`.
      ValueError: not a two-class classifier file, another size, a bad sign or kind (one line).
    """
    # Imported here: the binaries read SENTIMENTS while defining flags, before
    # TensorFlow and scikit-learn are worth loading.
    from tf_mlstm.transfer.probe import logistic  # pylint: disable=import-outside-toplevel

    classifier = logistic.LogisticClassifier.load(path)
    report = classifier.report
    try:
        neuron = classifier.neuron
    except errors.InvalidValueError as e:
        if not classifier.head.binary:  # a neuron per class or label
            advice = f"{tool} takes a two-class classifier's, or a unit with {_name('neuron')}"
        else:
            advice = (
                f"{tool} works on units of the model; choose a unit with --neuron instead of "
                "--classifier"
            )
        raise errors.InvalidValueError(f"{path}: {e}; {advice}") from None
    index = neuron.index
    kind, unit = classifier.describe(index)
    if hidden_size is not None and report.hidden_size != hidden_size:
        raise errors.InvalidValueError(
            f"{path}: fitted on a {report.hidden_size}-unit model, but the model has "
            f"{hidden_size} units"
        )
    if neuron.sign not in (1, -1):
        raise errors.InvalidValueError(f"{path}: the neuron's sign is {neuron.sign}, not +1 or -1")
    if kind == "tfidf":
        raise errors.InvalidValueError(
            f"{path}: the sentiment neuron is feature {index}, the word n-gram "
            f"{classifier.head.ngram_terms[unit]!r}, not a unit of the model (a classifier on "
            f"tfidf alone); {tool} works on units of the model (a classifier fitted with "
            f"{_name('features')}=auto or a model kind); choose a unit with {_name('neuron')} "
            f"instead of {_name('classifier')}"
        )
    if kind not in CELL_KINDS + HIDDEN_KINDS:
        raise errors.InvalidValueError(
            f"{path}: the sentiment neuron is feature {index}, the {kind!r} feature of unit "
            f"{unit}, the spread of the hidden state, which no held value gives; {tool} works on "
            f"the kinds {', '.join(CELL_KINDS + HIDDEN_KINDS)}; choose a unit with "
            f"{_name('neuron')} instead of {_name('classifier')}"
        )
    return SentimentNeuron(
        source=path,
        kind=kind,
        unit=int(unit),
        sign=int(neuron.sign),
        threshold=float(neuron.threshold),
        spread=float(classifier.head.scale[index]),
        hidden_size=int(report.hidden_size),
    )


def resolve_unit(neuron, flag_unit, flag_name="neuron") -> int | None:
    """The unit to use: an explicit flag wins over the classifier's neuron.

    Args:
      neuron: a `SentimentNeuron`, or None (no classifier).
      flag_unit, flag_name: the flag's value (None: not given), and its setting, for the log.

    Returns:
      The flag's unit when given, else the neuron's, or None when neither names one.
    """
    if neuron is None:
        return flag_unit
    if flag_unit is None:
        return neuron.unit
    if flag_unit != neuron.unit:
        logging.warning(
            "%s=%d overrides unit %d, %s.",
            _name(flag_name),
            flag_unit,
            neuron.unit,
            neuron.describe(),
        )
    return flag_unit


def resolve_value(neuron, unit, flag_value, sentiment, flag_name="neuron_value") -> float:
    """The value to hold `unit` at: an explicit flag wins over the classifier's.

    Args:
      neuron: a `SentimentNeuron`, or None (no classifier).
      unit: the unit that will be held (`resolve_unit`'s result).
      flag_value, flag_name: the flag's value (None: not given), and its setting, for the log.
      sentiment: the side of the neuron to hold ("positive"/"negative").

    Returns:
      The flag's value; else `neuron.value_for(sentiment)` for the neuron's unit; else 0.0.
    """
    if unit is None or unit < 0:
        return 0.0 if flag_value is None else float(flag_value)  # nothing is held
    if neuron is None or unit != neuron.unit:
        if neuron is not None and flag_value is None:
            logging.warning(
                "Unit %d is not %s: holding it at 0.0 (set %s).",
                unit,
                neuron.describe(),
                _name(flag_name),
            )
        return 0.0 if flag_value is None else float(flag_value)
    wanted = neuron.value_for(sentiment)
    if flag_value is None:
        return wanted
    if flag_value != wanted:
        logging.warning(
            "%s=%g overrides %g, the %s side of %s.",
            _name(flag_name),
            flag_value,
            wanted,
            sentiment,
            neuron.describe(),
        )
    return float(flag_value)


def held_unit(
    classifier, hidden_size, flag_unit, flag_value, sentiment, tool
) -> tuple[int, float, bool]:
    """The (unit, value) generation holds, from a classifier file and the flags.

    Args:
      classifier, hidden_size: a classifier.json path ("" for none), and the model's units.
      flag_unit, flag_value: `--neuron` (-1 holds nothing), `--neuron_value`; None: not given.
      sentiment, tool: the side to hold ("positive"/"negative"; None: positive); the binary asking.

    Returns:
      (unit, value, hidden_state): unit -1 when nothing is held.

    Raises:
      FileNotFoundError, ValueError: as `neuron_from_classifier`.
    """
    neuron = neuron_from_classifier(classifier, tool, hidden_size) if classifier else None
    unit = resolve_unit(neuron, flag_unit)
    unit = -1 if unit is None else unit
    value = resolve_value(neuron, unit, flag_value, sentiment or "positive")
    hidden_state = neuron is not None and neuron.hidden_state
    if unit >= 0:
        origin = (
            neuron.describe() if neuron is not None and unit == neuron.unit else _name("neuron")
        )
        state = "hidden" if hidden_state else "cell"
        logging.info("Holding %s unit %d at %.6g (%s).", state, unit, value, origin)
    return unit, value, hidden_state


def drawn_unit(classifier, hidden_size, flag_unit, tool) -> tuple:
    """The (unit, sign) a heat map draws, from a classifier file and `--neuron`.

    Args:
      classifier, hidden_size: a classifier.json path ("" for none), and the model's units.
      flag_unit, tool: `--neuron` (None when not given), and the binary asking, for errors.

    Returns:
      (unit, sign, neuron): the neuron's sign for its own unit, else +1; neuron or None.

    Raises:
      FileNotFoundError, ValueError: as `neuron_from_classifier`, or neither classifier nor unit.
    """
    neuron = neuron_from_classifier(classifier, tool, hidden_size) if classifier else None
    unit = resolve_unit(neuron, flag_unit)
    if unit is None:
        raise errors.InvalidValueError(
            f"no unit to draw: give {_name('neuron')} or {_name('classifier')}."
        )
    if neuron is None or unit != neuron.unit:
        state = neuron.state if neuron is not None else "cell"
        logging.info("Drawing %s unit %d (%s).", state, unit, _name("neuron"))
        return unit, 1, neuron
    logging.info("Drawing %s unit %d, %s.", neuron.state, unit, neuron.describe())
    return unit, neuron.sign, neuron
