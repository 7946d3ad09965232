"""`ClassifierHead`: a fitted classifier head as plain arrays, for serving.

The shape both classifiers take when they leave Python: the logistic
probe (`transfer.probe`) and a fine-tuned `MLSTMClassifier`
(`transfer.finetune`) each give one, and the SavedModel's `classify`
signature (`export.saved_model`) runs it in the graph. How its outputs become
decisions is its `HeadSpec` (`models.head`).
"""

import dataclasses

import numpy as np

from tf_mlstm import errors
from tf_mlstm.data import words
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.kinds import FEATURE_KINDS


def model_kinds(feature_kinds) -> tuple[str, ...]:
    """The feature kinds of `feature_kinds` the language model computes (all but `tfidf`)."""
    return tuple(k for k in feature_kinds if k != words.NGRAM_KIND)


@dataclasses.dataclass(frozen=True, eq=False)
class ClassifierHead:
    """A classifier on standardized features, as plain arrays.

    The transfer tools build one from a fitted logistic regression or a
    fine-tuned head, and the SavedModel's `classify` signature runs it; it
    lives with the models, with no scikit-learn in it, so neither the export
    nor the transfer code depends on the other.

    Attributes:
      feature_kinds: which of `kinds.FEATURE_KINDS` are concatenated, in order.
      mean: [D] standardizer mean (D = hidden size x number of kinds).
      scale: [D] standardizer scale.
      weights: [R, D] output weights on standardized features (or on the
        hidden layer's U outputs), one row per output: 1 for two classes (the
        second class's logit), K for K > 2 classes (softmax), L for L labels
        (a sigmoid each). [D] is one row.
      bias: [R] output intercepts (a number for one row).
      classes: the class values (ints or names), in probability-column order;
        multilabel: the label names.
      neuron: index into the D features of the sentiment neuron (binary; -1
        for none).
      multilabel: the rows are independent 0/1 labels.
      thresholds: multilabel: the L probability thresholds; binary: () for
        0.5, or the one threshold of the positive class's probability.
      hidden_weights: None, or [U, D]: a ReLU layer before the output layer.
      hidden_bias: [U] with `hidden_weights`.
      max_length: framed bytes per text read (document start included), as a
        fine-tuned model was trained; 0 = the whole text.
      weights_sha256: fingerprint of the model weights it was fitted on
        (`rundir.weights_checksum`); "" = not recorded.
      precision: the policy its features were computed in; "" = not recorded.
      ngram_terms: with the `tfidf` kind (last of `feature_kinds`): the V
        n-grams, in column order.
      ngram_idf: [V] their inverse document frequencies.

    Example:

    >>> import numpy as np
    >>> head = ClassifierHead(
    ...     feature_kinds=("cell",), mean=np.zeros(4), scale=np.ones(4),
    ...     weights=np.array([[1.0, 0.0, 0.0, -1.0]]), bias=0.0, classes=("neg", "pos"),
    ... )
    >>> head.check(hidden_size=4)
    >>> head.binary, head.head_spec.kind
    (True, 'binary')
    """

    feature_kinds: tuple
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float | np.ndarray
    classes: tuple = (0, 1)
    neuron: int = 0
    multilabel: bool = False
    thresholds: tuple = ()
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

    @property
    def head_spec(self) -> HeadSpec:
        """The `models.head.HeadSpec`: how the logits become decisions."""
        return HeadSpec.of(self.classes, self.multilabel, self.thresholds)

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
        rows = 1 if self.binary else len(self.classes)
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
        if len(self.classes) < 2 and not self.multilabel:
            raise errors.InvalidValueError(
                f"classifier classes {list(self.classes)}: two or more needed"
            )
        if self.binary and len(self.thresholds) > 1:
            raise errors.InvalidValueError(
                f"classifier has {len(self.thresholds)} thresholds for one binary label"
            )
        if self.multilabel and len(self.thresholds) != len(self.classes):
            raise errors.InvalidValueError(
                f"classifier has {len(self.thresholds)} thresholds for {len(self.classes)} labels"
            )
        if self.binary and self.neuron != -1 and not 0 <= self.neuron < width:
            raise errors.InvalidValueError(
                f"classifier neuron {self.neuron} is outside [0, {width})"
            )
