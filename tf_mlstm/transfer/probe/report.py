"""The fit report of a logistic probe: how it was fitted, beside the head it produced.

`probe.fit.fit_logistic` produces a head (`models.head_arrays.ClassifierHead`)
and a `FitReport`; classifier.json (`probe.file_format`) keeps both but the
sweep's rows, which `tf-mlstm-transfer` writes to results.json.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class FitReport:
    """How a logistic probe was fitted: what the head's arrays do not say.

    Attributes:
      hidden_size: units of the model the features came from.
      C: the inverse regularization strength chosen (multilabel: a tuple,
        one per label).
      neurons: one `Threshold` per row of the head's weights (on
        unstandardized features), each a unit of the model: binary, the
        sentiment neuron; multiclass, each class's top unit against the
        rest; multilabel, each label's. Empty (`logistic.LogisticClassifier.no_neuron`
        says why) on word n-grams alone.
      sweep: the fit's rows, one per C of the grid (per label and C for
        multi-label): the scores, nonzero weights, iterations and
        convergence of each fit (`probe.fit.fit_logistic`); () for a
        classifier read from classifier.json, which does not keep them.

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
