"""The feature kinds of a text: what featurization computes and a head reads.

No TensorFlow here, so that the binaries check `--features` at once.
"""

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
