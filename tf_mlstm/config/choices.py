"""The values a setting may take, each list defined once, for configs, flags and code alike."""

import numpy as np

from tf_mlstm.data.fields import NGRAM_KIND

AUTO = "auto"
"""A setting the run resolves itself (measured, or from the hardware's table)."""

# === Runtime ===

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
"""The precision policies a run computes in."""
PRECISION_CHOICES = (AUTO,) + PRECISIONS
"""`precision` of a runner config: a policy, or `auto` (`auto.hardware`, `auto.measure`)."""
STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
ALL_REDUCE = ("auto", "ring", "nccl")
JIT_CHOICES = ("auto", "true", "false")
ALLREDUCE_DTYPES = ("float32", "float16")
CLUSTER_RESOLVERS = ("tf_config", "slurm")

# === Optimization and budget ===

SCHEDULE_LENGTHS = ("budget", "steps")
OPTIMIZE_FOR = ("bits", "transfer")
"""What `hidden_size=auto` optimises (`auto.law.plan_size`): bits/char, or transfer (the widest
size within `auto.law.TRANSFER_MARGIN` bits/char of the lowest)."""
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
"""What `featurize.featurize_ids` computes for each text, [N, H] each.

cell, hidden: the final states; mean, max, min, std: statistics of the hidden
state over the bytes; cell_mean, cell_max, cell_min: the same of the cell
state (each defined once, by `pooling.pooled_features`). The order is fixed:
classifier files name kinds, so new kinds go at the end.
"""

CELL_STATISTICS = ("cell_mean", "cell_max", "cell_min")
"""Statistics of the cell state over the bytes: the probe's, not a fine-tuned head's."""

CELL_KINDS = ("cell", *CELL_STATISTICS)
"""The cell-state kinds (a held cell unit gives each its value); the neuron's first choice."""
HIDDEN_KINDS = ("hidden", "mean", "max", "min")
"""The hidden-state kinds a held hidden unit gives its value (not `std`: its spread is 0)."""

SEQUENCE_KINDS = tuple(kind for kind in FEATURE_KINDS if kind not in CELL_STATISTICS)
"""The kinds of the hidden sequence and final states: what a fine-tuned head reads."""

ALL_KINDS = FEATURE_KINDS + (NGRAM_KIND,)
"""Every kind of the linear probe, in concatenation order: the model's, then the word n-grams."""
AUTO_NGRAMS = "auto,tfidf"
"""`auto` over the model's feature groups and the word n-grams."""

SENTIMENTS = ("positive", "negative")
"""The sides of the sentiment neuron that generation may hold it on."""

BATCH_SIGNATURES = ("classify", "featurize")
"""The SavedModel signatures a batch-inference pipeline applies (`tf-mlstm-classify-beam`)."""

# === Heads and their fit ===

HEAD_INITS = ("random", "probe")
"""How the head starts: random, or (`probe`, linear heads) the logistic regression's weights."""
THRESHOLD_METRICS = ("accuracy", "f1")
"""What a label's probability threshold maximizes on validation."""
PENALTIES = ("l1", "l2")
"""l1: sparse weights that single out sentiment units (Radford et al.); l2: dense, more accurate."""
SOLVERS = ("auto", "batch", "liblinear", "saga", "lbfgs")
"""auto: batch, this project's full-batch solver (`transfer.probe.solver`); others: scikit-learn."""
DEFAULT_C_GRID = tuple(float(c) for c in np.logspace(-4, 0, 9))
"""Half-decade steps from 1e-4 (almost no unit kept) to 1 (Radford et al.'s largest C)."""
CV_FOLDS = 5
"""Folds of the cross-validation that chooses features and C on small data."""
