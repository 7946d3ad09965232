"""One feature's threshold: the one-feature classifier a sentiment neuron is."""

import dataclasses

import numpy as np
from scipy import sparse


def column(x, index) -> np.ndarray:
    """Column `index` of features `x` (a NumPy array or a scipy sparse matrix) as [N]."""
    if sparse.issparse(x):
        return np.asarray(x[:, [index]].todense(), np.float64).ravel()
    return np.asarray(x)[:, index]


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A one-feature classifier: positive where `sign * (x - threshold) > 0`.

    Attributes:
      index: the feature column.
      sign: +1 (large values are positive) or -1.
      threshold: the cut.

    Example:
    >>> import numpy as np
    >>> values, labels = np.array([0.1, 0.4, 0.6, 0.9]), np.array([1, 1, 0, 0])
    >>> sign, cut, accuracy = fit_threshold(values, labels)
    >>> neuron = Threshold(index=1, sign=sign, threshold=cut)
    >>> neuron, accuracy
    (Threshold(index=1, sign=-1, threshold=0.5), 1.0)
    >>> neuron.predict01(np.array([[5.0, 0.2], [5.0, 0.8]])).tolist()
    [1, 0]
    """

    index: int
    sign: int
    threshold: float

    def predict01(self, x) -> np.ndarray:
        """0/1 predictions for the rows of features `x` [N, D]."""
        return (self.sign * (column(x, self.index) - self.threshold) > 0).astype(np.int64)


def fit_threshold(values, labels01, balanced=False) -> tuple[int, float, float]:
    """The cut and direction on one feature that classify best.

    Args:
      values, labels01: [N] feature values, and labels in {0, 1}.
      balanced: maximize balanced accuracy (one class against the rest).

    Returns:
      (sign, threshold, accuracy); ties go to sign +1, then the lowest cut.
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
