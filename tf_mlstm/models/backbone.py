"""`MLSTMBackbone`: byte embedding and mLSTM, the network every task of the project shares.

The state resets at every `DOC_START`; gate inputs are gathered from 256-row projected tables.
"""

import keras
import tensorflow as tf

from tf_mlstm.data.text import DOC_START
from tf_mlstm.layers import MLSTM

VOCAB_SIZE = 256


@keras.saving.register_keras_serializable(package="tf_mlstm")
class MLSTMBackbone(keras.Model):
    """Byte embedding -> mLSTM: `backbone(ids)` -> `(hidden states [B, T, H], [h, c])`.

    Args:
      hidden_size: mLSTM units (4096 in the paper).
      embedding_size: byte embedding width (64 in the paper).
      weight_norm: weight-normalized mLSTM kernels.
      **kwargs: base model arguments (name, dtype policy, ...).

    Example:

    >>> backbone = MLSTMBackbone(hidden_size=8, embedding_size=4)
    >>> hidden, (h, c) = backbone(tf.constant([[0, 72, 105]]))
    >>> hidden.shape, h.shape
    (TensorShape([1, 3, 8]), TensorShape([1, 8]))
    >>> backbone.architecture()
    {'hidden_size': 8, 'embedding_size': 4, 'weight_norm': True}
    """

    def __init__(self, hidden_size=4096, embedding_size=64, weight_norm=True, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = int(hidden_size)
        self.embedding_size = int(embedding_size)
        self.weight_norm = bool(weight_norm)
        self.embedding = keras.layers.Embedding(
            VOCAB_SIZE, self.embedding_size, dtype=self.dtype_policy, name="embedding"
        )
        self.mlstm = MLSTM(
            self.hidden_size, weight_norm=self.weight_norm, dtype=self.dtype_policy, name="mlstm"
        )

    def build(self, input_shape=None) -> None:
        self.embedding.build((None, None))
        self.mlstm.build((None, None, self.embedding_size))
        self.built = True

    def _projected(self, ids):
        ids = tf.cast(ids, tf.int32)
        kernels = self.mlstm.cell.kernels()
        table = tf.cast(self.embedding.embeddings, self.compute_dtype)
        xz_table, xm_table = self.mlstm.project_inputs(table, kernels)
        keep = tf.cast(tf.not_equal(ids, DOC_START), self.compute_dtype)
        return (xz_table, xm_table, ids, keep, kernels)

    def encode(
        self, ids, initial_state=None, valid=None, training=None, return_sequences=True, pool=False
    ) -> tuple:
        """Runs the mLSTM over byte ids.

        Args:
          ids: [B, T] byte ids.
          initial_state: optional [h, c], each [B, H].
          valid: optional [B, T] 1/0 mask; the state stays put where 0.
          training: selects the trainable path.
          return_sequences: return every step's hidden state.
          pool: inference only: return the states' statistics (`recurrence.POOLED`) instead.

        Returns:
          (hidden states [B, T, H], or None, or the pooled statistics; [h, c]).
        """
        xz_table, xm_table, ids, keep, kernels = self._projected(ids)
        return self.mlstm.run_tables(
            xz_table,
            xm_table,
            ids,
            initial_state,
            keep=keep,
            valid=valid,
            training=training,
            kernels=kernels,
            return_sequences=return_sequences,
            pool=pool,
        )

    def call(self, ids, initial_state=None, valid=None, training=None) -> tuple:
        return self.encode(ids, initial_state, valid=valid, training=training)

    def initial_state(self, batch_size) -> list[tf.Tensor]:
        """Zero [h, c] for `batch_size` rows in the compute dtype."""
        zeros = tf.zeros((batch_size, self.hidden_size), self.compute_dtype)
        return [zeros, zeros]

    def architecture(self) -> dict:
        """The sizes that define the network (every task on it has them in its config)."""
        return {
            "hidden_size": self.hidden_size,
            "embedding_size": self.embedding_size,
            "weight_norm": self.weight_norm,
        }

    def get_config(self) -> dict:
        return {**super().get_config(), **self.architecture()}
