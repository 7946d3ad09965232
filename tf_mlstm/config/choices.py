"""The values a setting may take, each list defined once.

The configs check their fields against these, the binaries' enum flags list
them, and the code that acts on a setting reads the same names: a new choice
is added here and nowhere else.
"""

import numpy as np

from tf_mlstm import sizing
from tf_mlstm.data.fields import NGRAM_KIND

AUTO = "auto"
"""A setting the run resolves itself (measured, or from the hardware's table)."""

# === Runtime ===

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
"""The precision policies a run computes in."""
PRECISION_CHOICES = (AUTO,) + PRECISIONS
"""`precision` of a runner config: a policy, or `auto`, which `train.hardware`
(or `train.autotune`, by measuring) resolves."""
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
ALL_REDUCE = ("auto", "ring", "nccl")
JIT_CHOICES = ("auto", "true", "false")
ALLREDUCE_DTYPES = ("float32", "float16")
CLUSTER_RESOLVERS = ("tf_config", "slurm")

# === Optimization and budget ===

SCHEDULE_LENGTHS = ("budget", "steps")
OPTIMIZE_FOR = sizing.OPTIMIZE_FOR
"""What `hidden_size=auto` optimises (the planner's own list, `tf_mlstm.sizing`)."""
SCALINGS = ("none", "linear", "sqrt")
"""Learning-rate scaling with the batch (train/schedules.py)."""
DECAYS = ("constant", "linear", "cosine", "exponential")
"""Decay shapes after warmup (train/schedules.py)."""

# === Features ===

FEATURE_KINDS = (
    "cell",
    "hidden",
    "mean",
    "max",
    "min",
    "std",
    "cell_mean",
    "cell_max",
    "cell_min",
)
"""What `featurize.featurize_ids` computes for each text, [N, H] each:

- cell, hidden: the final cell and hidden state (Radford et al. 2017 used the
  final cell state of a long-trained 4096-unit model);
- mean, max, min, std: statistics of the hidden state over the text's bytes;
- cell_mean, cell_max, cell_min: the same of the cell state.

The pooled kinds matter for small or briefly trained models, whose final state
forgets most of a sentence (docs/transfer.md gives the measurements). The order
is fixed: classifier files name kinds, and new kinds only ever go at the end.
Each is defined once, by `pooling.pooled_features`.
"""

CELL_KINDS = ("cell", "cell_mean", "cell_max", "cell_min")
"""The kinds that measure the cell state: a held cell unit has its held value
at every byte, so each of these equals it. The sentiment neuron is chosen
among them first (`tf_mlstm.transfer.probe.neuron.neuron_columns`)."""
HIDDEN_KINDS = ("hidden", "mean", "max", "min")
"""The kinds that measure the hidden state's value, which a held hidden unit
gives each of them: the neuron's kinds when the features have no cell-state
kind. (`std` is not one: a held unit's spread is 0, whatever its value.)"""

SEQUENCE_KINDS = FEATURE_KINDS[:6]
"""The kinds a sequence of hidden states and the final states give (no cell
sequence): what a fine-tuned `MLSTMClassifier` head reads."""

ALL_KINDS = FEATURE_KINDS + (NGRAM_KIND,)
"""Every kind of the linear probe, in the order they are concatenated: the
model's, then the word n-grams."""
AUTO_NGRAMS = "auto,tfidf"
"""`auto` over the model's feature groups and the word n-grams."""

SENTIMENTS = ("positive", "negative")
"""The sides of the sentiment neuron that generation may hold it on."""

BATCH_SIGNATURES = ("classify", "featurize")
"""The SavedModel signatures a batch-inference pipeline applies (`tf-mlstm-classify-beam`)."""

# === Heads and their fit ===

HEAD_INITS = ("random", "probe")
"""How the head starts: random, or (`probe`, linear heads) the logistic
regression fitted on the starting model's features of the training texts
("linear probing, then fine-tuning")."""
THRESHOLD_METRICS = ("accuracy", "f1")
"""What a label's probability threshold maximizes on validation."""
PENALTIES = ("l1", "l2")
"""l1: Radford et al.'s sparse weights, which single out the units that carry
sentiment; l2: dense weights, which classify better from the many weak,
correlated pooled features of a small or briefly trained model
(docs/transfer.md)."""
SOLVERS = ("auto", "batch", "liblinear", "saga", "lbfgs")
"""auto: batch, this project's full-batch solver on float32 features
(`tf_mlstm.transfer.probe.solver`: L-BFGS for l2, FISTA for l1; every task, the
labels of a multilabel task side by side, convergence by the KKT residual);
the others are scikit-learn's: liblinear (two classes), saga, lbfgs (l2)."""
DEFAULT_C_GRID = tuple(float(c) for c in np.logspace(-4, 0, 9))
"""Half-decade steps from 1e-4 (almost no unit kept) to 1 (Radford et al.'s
largest C). Larger C keeps more units but makes liblinear slow on the
correlated features of a poorly trained model."""
CV_FOLDS = 5
"""Folds of the cross-validation that chooses features and C on small data."""
