"""The head specification: what a classifier's outputs mean, and how they become decisions.

In NumPy and in the graph: binary (one logit), multiclass (softmax), multilabel (sigmoids).
"""

import dataclasses

import numpy as np
import tensorflow as tf
from scipy.special import expit
from scipy.special import softmax

BINARY, MULTICLASS, MULTILABEL = "binary", "multiclass", "multilabel"
KINDS = (BINARY, MULTICLASS, MULTILABEL)


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """A classifier head's kind, output names and decision thresholds.

    Attributes:
      kind: one of `KINDS`.
      classes: the probability columns' names (binary: negative first).
      thresholds: binary: () (the logit cut at 0) or the positive probability's; multilabel: L.

    Example:

    >>> spec = HeadSpec.of(("negative", "positive"), thresholds=(0.7,))
    >>> spec.kind, spec.outputs
    ('binary', 1)
    >>> probabilities = spec.probabilities([[0.0], [2.0]])
    >>> probabilities.round(2).tolist()
    [[0.5, 0.5], [0.12, 0.88]]
    >>> spec.decide(probabilities).tolist()
    ['negative', 'positive']
    """

    kind: str
    classes: tuple
    thresholds: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "classes", tuple(self.classes))
        object.__setattr__(self, "thresholds", tuple(float(t) for t in self.thresholds))
        if self.kind not in KINDS:
            raise ValueError(f"head kind must be one of {KINDS}, got {self.kind!r}")
        expected = {BINARY: (0, 1), MULTICLASS: (0,), MULTILABEL: (len(self.classes),)}
        if len(self.thresholds) not in expected[self.kind]:
            raise ValueError(
                f"a {self.kind} head of {len(self.classes)} outputs takes "
                f"{' or '.join(map(str, expected[self.kind]))} thresholds, "
                f"got {len(self.thresholds)}"
            )
        if self.kind == BINARY and len(self.classes) != 2:
            raise ValueError(f"a binary head has two classes, got {self.classes}")

    @classmethod
    def of(cls, classes, multilabel=False, thresholds=()) -> "HeadSpec":
        """The spec of a head by its outputs: multilabel, else binary for two classes."""
        if multilabel:
            return cls(MULTILABEL, classes, thresholds)
        return cls(BINARY if len(classes) == 2 else MULTICLASS, classes, thresholds)

    @property
    def outputs(self) -> int:
        """Logits per row: 1 for binary, else K or L."""
        return 1 if self.kind == BINARY else len(self.classes)

    # === NumPy ===

    def probabilities(self, logits) -> np.ndarray:
        """[N, C] probabilities of [N, outputs] logits ([N] for binary too)."""
        logits = np.asarray(logits, np.float64)
        if self.kind == BINARY:
            positive = expit(logits.reshape(len(logits), -1)[:, 0])
            return np.stack([1.0 - positive, positive], axis=1)
        return expit(logits) if self.kind == MULTILABEL else softmax(logits, axis=1)

    def decide(self, probabilities, logits=None) -> np.ndarray:
        """Decisions from `probabilities` (as `probabilities` returns them).

        Args:
          probabilities: [N, C].
          logits: optional; a binary head without a threshold then cuts the logit at 0 exactly.

        Returns:
          [N] classes (binary, multiclass), or [N, L] int64 0/1 (multilabel).
        """
        probabilities = np.asarray(probabilities)
        if self.kind == MULTILABEL:
            return (probabilities > np.asarray(self.thresholds)).astype(np.int64)
        if self.kind == MULTICLASS:
            return np.asarray(self.classes)[np.argmax(probabilities, axis=1)]
        if self.thresholds:
            positive = probabilities[:, 1] > self.thresholds[0]
        elif logits is not None:
            positive = np.asarray(logits).reshape(len(probabilities), -1)[:, 0] > 0
        else:
            positive = probabilities[:, 1] > 0.5
        return np.asarray(self.classes)[positive.astype(np.int64)]

    # === The graph ===

    def probabilities_tf(self, logits) -> tf.Tensor:
        """`probabilities` in the graph: float32 [N, C] of [N, outputs] logits."""
        if self.kind == BINARY:
            positive = tf.sigmoid(logits[:, 0])
            return tf.stack([1.0 - positive, positive], axis=1)
        return tf.sigmoid(logits) if self.kind == MULTILABEL else tf.nn.softmax(logits, axis=1)

    def decide_tf(self, logits) -> tf.Tensor:
        """`decide` in the graph, from the logits.

        Returns:
          [N] int32 indices into `classes`, or [N, L] int64 0/1 (multilabel).
        """
        if self.kind == MULTILABEL:
            return tf.cast(tf.sigmoid(logits) > tf.constant(self.thresholds), tf.int64)
        if self.kind == MULTICLASS:
            return tf.argmax(logits, axis=1, output_type=tf.int32)
        if self.thresholds:
            return tf.cast(tf.sigmoid(logits[:, 0]) > self.thresholds[0], tf.int32)
        return tf.cast(logits[:, 0] > 0, tf.int32)
