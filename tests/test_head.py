"""The head specification: one decision rule, equal in NumPy and in the graph."""

import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTICLASS
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.head import HeadSpec


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.parametrize(
    "spec, logits, want_probabilities, want",
    [
        # No threshold: the logit's sign, exactly (0 is negative).
        (
            HeadSpec(BINARY, ("neg", "pos")),
            [[2.0], [-1.0], [0.0]],
            np.stack([1 - _sigmoid(np.array([2.0, -1, 0])), _sigmoid(np.array([2.0, -1, 0]))], 1),
            ["pos", "neg", "neg"],
        ),
        # A chosen threshold on the positive probability.
        (
            HeadSpec(BINARY, (0, 1), (0.8,)),
            [[1.0], [2.0]],
            np.stack([1 - _sigmoid(np.array([1.0, 2])), _sigmoid(np.array([1.0, 2]))], 1),
            [0, 1],
        ),
        (
            HeadSpec(MULTICLASS, ("a", "b", "c")),
            [[1.0, 3.0, 2.0], [0.0, -1.0, -2.0]],
            np.exp([[1.0, 3, 2], [0, -1, -2]])
            / np.exp([[1.0, 3, 2], [0, -1, -2]]).sum(1, keepdims=True),
            ["b", "a"],
        ),
        (
            HeadSpec(MULTILABEL, ("joy", "anger"), (0.5, 0.9)),
            [[0.1, 2.0], [-1.0, 3.0]],
            _sigmoid(np.array([[0.1, 2.0], [-1.0, 3.0]])),
            [[1, 0], [0, 1]],
        ),
    ],
)
def test_probabilities_and_decisions_in_numpy_and_the_graph(spec, logits, want_probabilities, want):
    probabilities = spec.probabilities(logits)
    np.testing.assert_allclose(probabilities, want_probabilities, rtol=1e-12)
    decided = spec.decide(probabilities, logits)
    assert decided.tolist() == want
    graph = spec.decide_tf(tf.constant(logits, tf.float32)).numpy()
    if spec.kind == MULTILABEL:
        assert graph.tolist() == want
    else:
        assert np.asarray(spec.classes)[graph].tolist() == want
    np.testing.assert_allclose(
        spec.probabilities_tf(tf.constant(logits, tf.float32)).numpy(), want_probabilities, 1e-6
    )


def test_of_names_the_kind_by_outputs():
    assert HeadSpec.of((0, 1)).kind == BINARY and HeadSpec.of((0, 1)).outputs == 1
    assert HeadSpec.of(("a", "b", "c")).outputs == 3
    assert HeadSpec.of(("x", "y"), multilabel=True, thresholds=(0.5, 0.5)).kind == MULTILABEL


@pytest.mark.parametrize(
    "kind, classes, thresholds, message",
    [
        ("ternary", (0, 1), (), r"head kind must be one of"),
        (MULTILABEL, ("x", "y"), (0.5,), r"multilabel head of 2 outputs takes 2 thresholds, got 1"),
        (BINARY, (0, 1), (0.3, 0.4), r"binary head of 2 outputs takes 0 or 1 thresholds, got 2"),
        (MULTICLASS, ("a", "b", "c"), (0.5,), r"multiclass head of 3 outputs takes 0 thresh"),
        (BINARY, ("a", "b", "c"), (), r"a binary head has two classes"),
    ],
)
def test_an_inconsistent_spec_is_refused(kind, classes, thresholds, message):
    with pytest.raises(ValueError, match=message):
        HeadSpec(kind, classes, thresholds)
