"""`ClassifierHead`: a fitted classifier head as plain arrays, its weights and its `HeadSpec`."""

import dataclasses

import numpy as np
from scipy import sparse

from tf_mlstm import errors
from tf_mlstm.data import words
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.kinds import FEATURE_KINDS


def model_kinds(feature_kinds) -> tuple[str, ...]:
    """The feature kinds of `feature_kinds` the language model computes (all but `tfidf`)."""
    return tuple(k for k in feature_kinds if k != words.NGRAM_KIND)


@dataclasses.dataclass(frozen=True, eq=False)
class ClassifierHead:
    """A classifier on standardized features: its weights as plain arrays, and its `HeadSpec`.

    Attributes:
      feature_kinds: which of `kinds.FEATURE_KINDS` are concatenated, in order.
      mean: [D] standardizer mean (D = hidden size x number of kinds).
      scale: [D] standardizer scale.
      weights: [R, D] output weights, a row per logit (binary 1, K, L); [D] is one row.
      bias: [R] output intercepts (a number for one row).
      head_spec: the `HeadSpec`: kind, classes (or labels) in column order, thresholds.
      neuron: index into the D features of the sentiment neuron (binary; -1 for none).
      hidden_weights: None, or [U, D]: a ReLU layer before the output layer.
      hidden_bias: [U] with `hidden_weights`.
      max_length: framed bytes per text read, as a fine-tuned model was trained; 0 = all.
      weights_sha256: the fitted-on model's `rundir.weights_checksum`; "" = not recorded.
      precision: the policy its features were computed in; "" = not recorded.
      ngram_terms: with the `tfidf` kind (last): the V n-grams, in column order.
      ngram_idf: [V] their inverse document frequencies.

    Example:

    >>> import numpy as np
    >>> from tf_mlstm.models.head import HeadSpec
    >>> head = ClassifierHead(
    ...     feature_kinds=("cell",), mean=np.zeros(4), scale=np.ones(4),
    ...     weights=np.array([[1.0, 0.0, 0.0, -1.0]]), bias=0.0,
    ...     head_spec=HeadSpec.of(("neg", "pos")),
    ... )
    >>> head.check(hidden_size=4)
    >>> head.binary, head.head_spec.kind
    (True, 'binary')
    >>> features = np.array([[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]])
    >>> head.probabilities(features).round(2).tolist()
    [[0.12, 0.88], [0.95, 0.05]]
    >>> head.predict(features).tolist()
    ['pos', 'neg']
    """

    feature_kinds: tuple
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float | np.ndarray
    head_spec: HeadSpec = HeadSpec(BINARY, (0, 1))
    neuron: int = 0
    hidden_weights: np.ndarray | None = None
    hidden_bias: np.ndarray | None = None
    max_length: int = 0
    weights_sha256: str = ""
    precision: str = ""
    ngram_terms: tuple = ()
    ngram_idf: np.ndarray | None = None

    @property
    def model_kinds(self) -> tuple[str, ...]:
        """The feature kinds the language model computes (all but `tfidf`)."""
        return model_kinds(self.feature_kinds)

    @property
    def binary(self) -> bool:
        """Two classes, one logit."""
        return self.head_spec.kind == BINARY

    # === NumPy ===

    def logits(self, x) -> np.ndarray:
        """Float64 logits [N, R] of features `x` [N, D] (dense, or scipy sparse)."""
        if sparse.issparse(x):
            # The centering folded into the bias keeps the n-gram columns sparse.
            weights = np.asarray(self.weights, np.float64).reshape(-1, np.shape(self.mean)[0])
            folded = weights / self.scale
            shift = np.reshape(self.bias, -1) - (self.mean / self.scale) @ weights.T
            return np.asarray(x.astype(np.float64) @ folded.T) + shift
        inputs = (np.asarray(x, np.float64) - self.mean) / self.scale
        if self.hidden_weights is not None:
            inputs = np.maximum(inputs @ np.asarray(self.hidden_weights).T + self.hidden_bias, 0.0)
        weights = np.asarray(self.weights, np.float64).reshape(-1, inputs.shape[1])
        return inputs @ weights.T + np.reshape(self.bias, -1)

    def probabilities(self, x) -> np.ndarray:
        """[N, C] probabilities of features `x` (`HeadSpec.probabilities`)."""
        return self.head_spec.probabilities(self.logits(x))

    def predict(self, x) -> np.ndarray:
        """Decisions for features `x` (`HeadSpec.decide`): [N] classes, or [N, L] 0/1."""
        logits = self.logits(x)
        return self.head_spec.decide(self.head_spec.probabilities(logits), logits)

    def check(self, hidden_size: int) -> None:
        """Raises ValueError unless the arrays fit a model of `hidden_size` units."""
        known = FEATURE_KINDS + (words.NGRAM_KIND,)
        unknown = [k for k in self.feature_kinds if k not in known]
        if unknown or not self.feature_kinds:
            raise errors.InvalidValueError(
                f"classifier feature kinds {list(self.feature_kinds)} are not a non-empty "
                f"subset of {list(known)}"
            )
        with_ngrams = words.NGRAM_KIND in self.feature_kinds
        if with_ngrams != bool(len(self.ngram_terms)) or (
            with_ngrams and self.feature_kinds[-1] != words.NGRAM_KIND
        ):
            raise errors.InvalidValueError(
                f"classifier feature kinds {list(self.feature_kinds)} with "
                f"{len(self.ngram_terms)} n-gram terms: the tfidf kind (last) and a "
                "vocabulary go together"
            )
        if with_ngrams and np.shape(self.ngram_idf) != (len(self.ngram_terms),):
            raise errors.InvalidValueError(
                f"classifier has {np.size(self.ngram_idf)} IDF values for "
                f"{len(self.ngram_terms)} n-gram terms"
            )
        width = hidden_size * len(self.model_kinds) + len(self.ngram_terms)
        spec = self.head_spec
        rows = spec.outputs
        inputs = width
        shapes = {"mean": ((width,),), "scale": ((width,),)}
        if self.hidden_weights is not None:
            inputs = np.shape(self.hidden_weights)[0]
            shapes["hidden_weights"] = ((inputs, width),)
            shapes["hidden_bias"] = ((inputs,),)
        shapes["weights"] = ((rows, inputs),) + (((inputs,),) if rows == 1 else ())
        for name, allowed in shapes.items():
            shape = np.shape(getattr(self, name))
            if shape not in allowed:
                raise errors.InvalidValueError(
                    f"classifier {name} has shape {shape}, but a {hidden_size}-unit model with "
                    f"features {list(self.feature_kinds)} gives {allowed[-1]}: was it fitted on "
                    "another model?"
                )
        if np.size(self.bias) != rows:
            raise errors.InvalidValueError(
                f"classifier bias has {np.size(self.bias)} values, not {rows}"
            )
        if len(spec.classes) < 2 and spec.kind != MULTILABEL:
            raise errors.InvalidValueError(
                f"classifier classes {list(spec.classes)}: two or more needed"
            )
        if self.binary and self.neuron != -1 and not 0 <= self.neuron < width:
            raise errors.InvalidValueError(
                f"classifier neuron {self.neuron} is outside [0, {width})"
            )
