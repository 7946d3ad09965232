"""The fit report of a logistic probe: how it was fitted, beside the head it produced."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class FitReport:
    """How a logistic probe was fitted: what the head's arrays do not say.

    Attributes:
      hidden_size: units of the model the features came from.
      C: the inverse regularization strength chosen (multilabel: one per label).
      neurons: one `Threshold` per weight row, each a unit of the model (none on n-grams alone).
      sweep: the fit's rows, one per C (and label); () when read from classifier.json.

    Example:
    >>> from tf_mlstm.transfer.probe.threshold import Threshold
    >>> report = FitReport(hidden_size=4, C=0.1, neurons=(Threshold(3, -1, 0.5),))
    >>> report.neurons[0].index, report.converged
    (3, True)
    """

    hidden_size: int
    C: float | tuple
    neurons: tuple = ()
    sweep: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "hidden_size", int(self.hidden_size))
        object.__setattr__(self, "neurons", tuple(self.neurons))
        object.__setattr__(self, "sweep", tuple(self.sweep))

    @property
    def converged(self) -> bool:
        """Whether every fit of the sweep converged (True without a sweep)."""
        return all(row["converged"] for row in self.sweep)
