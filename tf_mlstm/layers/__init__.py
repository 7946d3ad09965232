"""Keras layers: the mLSTM cell and the sequence layer that runs it fast."""

from tf_mlstm.layers.mlstm import MLSTM
from tf_mlstm.layers.mlstm_cell import MLSTMCell

__all__ = ["MLSTM", "MLSTMCell"]
