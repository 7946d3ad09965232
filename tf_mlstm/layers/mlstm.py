"""The mLSTM over a sequence: the fast recurrence behind a Keras layer.

`MLSTM` runs its `MLSTMCell` with `tf_mlstm.layers.recurrence`: the input side of every gate
in one product outside the loop, a hand-written sequence gradient in training.
"""

from typing import Any

import keras
import tensorflow as tf

from tf_mlstm.layers import recurrence
from tf_mlstm.layers.mlstm_cell import MLSTMCell


@keras.saving.register_keras_serializable(package="tf_mlstm")
class MLSTM(keras.layers.Layer):
    """A multiplicative LSTM layer over whole sequences.

    Call: `layer(inputs [B, T, D], initial_state, keep, valid, training)` ->
    `(outputs [B, T, H] or None, [h, c])`; `keep` 0 resets the state before a
    step, `valid` 0 leaves it unchanged (inference padding).

    Args:
      units, weight_norm: hidden size H, and weight-normalized kernels (default True).
      return_sequences: return the hidden state of every step.
      **kwargs: `MLSTMCell` initializer arguments and base layer arguments.

    Example:
    >>> import numpy as np
    >>> from tf_mlstm.layers.mlstm import MLSTM
    >>> inputs = np.random.random((2, 5, 3)).astype("float32")
    >>> outputs, (h, c) = MLSTM(4)(inputs)
    >>> tuple(outputs.shape), tuple(h.shape), tuple(c.shape)
    ((2, 5, 4), (2, 4), (2, 4))
    """

    def __init__(
        self,
        units,
        weight_norm=True,
        return_sequences=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = units
        self.return_sequences = return_sequences
        self.cell = MLSTMCell(
            units,
            weight_norm=weight_norm,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            dtype=self.dtype_policy,
            name="cell",
        )

    # === Layers ===
    def build(self, input_shape) -> None:
        self.cell.build(input_shape)

    def project_inputs(self, inputs, kernels=None) -> tuple:
        """Input side of the gates for any vectors (of an embedding table: per-byte tables).

        Args:
          inputs, kernels: [..., D] input vectors; the cell's `kernels()`, if already computed.

        Returns:
          (xz [..., 4H] = x Wx + b, xm [..., H] = x Wmx).
        """
        w_x, w_mx, _, _, b = kernels or self.cell.kernels()
        return (keras.ops.matmul(inputs, w_x) + b, keras.ops.matmul(inputs, w_mx))

    def run_projected(
        self,
        xz,
        xm,
        initial_state=None,
        keep=None,
        valid=None,
        training=None,
        kernels=None,
        return_sequences=None,
    ) -> Any:
        """Runs the recurrence on already projected inputs.

        Args:
          xz, xm: [B, T, 4H] gate and [B, T, H] multiplicative input contributions.
          initial_state: optional [h, c], each [B, H].
          keep, valid: optional [B, T] masks; keep 0 resets before a step, valid 0 leaves the state.
          training: if true, the trainable path with the sequence gradient.
          kernels: the cell's `kernels()`, if already computed.
          return_sequences: overrides the layer's setting.

        Returns:
          (outputs [B, T, H] or None, [h, c]).
        """
        return self._run(
            xz, xm, None, initial_state, keep, valid, training, kernels, return_sequences
        )

    def run_tables(
        self,
        xz_table,
        xm_table,
        ids,
        initial_state=None,
        keep=None,
        valid=None,
        training=None,
        kernels=None,
        return_sequences=None,
        pool=False,
    ) -> Any:
        """Runs the recurrence on rows `ids` of projected tables, gathered per step.

        Args:
          xz_table, xm_table: [V, 4H] and [V, H] input contributions, a row per input.
          ids: [B, T] integer rows of the tables.
          initial_state, keep, valid, training, kernels, return_sequences: as in `run_projected`.
          pool: inference only: return the states' statistics (`recurrence.POOLED`) instead.

        Returns:
          (outputs [B, T, H] or None or the pooled statistics, [h, c]).
        """
        return self._run(
            xz_table,
            xm_table,
            ids,
            initial_state,
            keep,
            valid,
            training,
            kernels,
            return_sequences,
            pool,
        )

    def _run(
        self,
        xz,
        xm,
        ids,
        initial_state,
        keep,
        valid,
        training,
        kernels,
        return_sequences,
        pool=False,
    ):
        if return_sequences is None:
            return_sequences = self.return_sequences
        _, _, w_mh, w_h, _ = kernels or self.cell.kernels()
        dtype = xz.dtype
        shape = tf.shape(ids if ids is not None else xz)
        if initial_state is None:
            zeros = tf.zeros((shape[0], self.units), dtype)
            initial_state = [zeros, zeros]
        h0, c0 = (tf.cast(s, dtype) for s in initial_state)
        if keep is None:
            keep = tf.ones(shape[:2], dtype)
        keep = tf.cast(keep, dtype)[..., None]
        if training:
            if pool:
                raise ValueError("MLSTM: `pool` is for inference only.")
            if valid is not None:
                raise ValueError(
                    "MLSTM: `valid` masks are for inference only; training streams have no padding."
                )
            outputs, h, c = recurrence.mlstm_sequence(xz, xm, h0, c0, keep, w_mh, w_h, ids=ids)
        else:
            if valid is not None:
                valid = tf.cast(valid, dtype)[..., None]
            outputs, h, c = recurrence.mlstm_forward(
                xz,
                xm,
                h0,
                c0,
                keep,
                w_mh,
                w_h,
                valid=valid,
                return_sequences=return_sequences,
                ids=ids,
                pool=pool,
            )
        if not (return_sequences or pool):
            outputs = None
        return outputs, [h, c]

    def call(self, inputs, initial_state=None, keep=None, valid=None, training=None) -> Any:
        kernels = self.cell.kernels()
        xz, xm = self.project_inputs(inputs, kernels)
        return self.run_projected(xz, xm, initial_state, keep, valid, training, kernels)

    def compute_output_spec(
        self, inputs, initial_state=None, keep=None, valid=None, training=None
    ) -> tuple:
        batch, steps = inputs.shape[0], inputs.shape[1]
        state = keras.KerasTensor((batch, self.units), dtype=self.compute_dtype)
        outputs = None
        if self.return_sequences:
            outputs = keras.KerasTensor((batch, steps, self.units), dtype=self.compute_dtype)
        return outputs, [state, state]

    # === Config ===
    def get_config(self) -> dict:
        config = super().get_config()
        cell = self.cell.get_config()
        config.update(
            {
                "units": self.units,
                "return_sequences": self.return_sequences,
                "weight_norm": cell["weight_norm"],
                "kernel_initializer": cell["kernel_initializer"],
                "recurrent_initializer": cell["recurrent_initializer"],
                "bias_initializer": cell["bias_initializer"],
            }
        )
        return config
