"""Multiplicative LSTM cell (Krause et al. 2016), as used by Radford et al. 2017.

Per step, with input x, hidden state h and cell state c:

    m  = (x Wmx) * (h Wmh)
    z  = x Wx + m Wh + b                 gates i, f, o, u: 4 * units columns
    c' = sigmoid(f) * c + sigmoid(i) * tanh(u)
    h' = sigmoid(o) * tanh(c')

With `weight_norm=True` each kernel is `g * W / ||W||` per output column, `g`
starting at the initial column norm, so the initial function is unchanged.
"""

import keras
from keras import ops

# The four kernels, by weight name: kernel_x (input_dim, 4H), kernel_mx (input_dim, H),
# kernel_mh (H, H), kernel_h (H, 4H); `build` gives the shapes, `kernels` this order.
_KERNELS = ("kernel_x", "kernel_mx", "kernel_mh", "kernel_h")


@keras.saving.register_keras_serializable(package="tf_mlstm")
class MLSTMCell(keras.layers.Layer):
    """A multiplicative LSTM cell for `keras.layers.RNN`, as `keras.layers.LSTMCell` is.

    Variables are float32 under any mixed policy; math and state are in the compute dtype.

    Args:
      units, weight_norm: hidden size H, and weight-normalized kernels (default True).
      kernel_initializer, recurrent_initializer: of the input (Wx, Wmx) and recurrent (Wmh, Wh)
        kernels.
      bias_initializer: initializer of the gate bias b.
      **kwargs: base layer arguments (name, dtype, ...).

    Example:
    >>> import keras
    >>> import numpy as np
    >>> from tf_mlstm.layers.mlstm_cell import MLSTMCell
    >>> inputs = np.random.random((2, 5, 3)).astype("float32")
    >>> rnn = keras.layers.RNN(MLSTMCell(4), return_sequences=True, return_state=True)
    >>> outputs, h, c = rnn(inputs)
    >>> tuple(outputs.shape), tuple(h.shape), tuple(c.shape)
    ((2, 5, 4), (2, 4), (2, 4))
    """

    def __init__(
        self,
        units,
        weight_norm=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if units <= 0:
            raise ValueError(f"MLSTMCell units must be positive, got {units}.")
        self.units = int(units)
        self.weight_norm = bool(weight_norm)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.state_size = [self.units, self.units]
        self.output_size = self.units

    # === Layers ===
    def build(self, input_shape) -> None:
        input_dim = input_shape[-1]
        h = self.units
        shapes = {
            "kernel_x": ((input_dim, 4 * h), self.kernel_initializer),
            "kernel_mx": ((input_dim, h), self.kernel_initializer),
            "kernel_mh": ((h, h), self.recurrent_initializer),
            "kernel_h": ((h, 4 * h), self.recurrent_initializer),
        }
        for name, (shape, init) in shapes.items():
            setattr(self, name, self.add_weight(name=name, shape=shape, initializer=init))
        self.bias = self.add_weight(name="bias", shape=(4 * h,), initializer=self.bias_initializer)
        if self.weight_norm:
            for name in _KERNELS:
                kernel = getattr(self, name)
                gain_name = name.replace("kernel", "gain")
                # The initial column norms, so weight norm starts at the identity.
                init = _ColumnNormInitializer(kernel)
                setattr(
                    self,
                    gain_name,
                    self.add_weight(name=gain_name, shape=(kernel.shape[1],), initializer=init),
                )

    def kernels(self) -> tuple:
        """Returns (Wx, Wmx, Wmh, Wh, b), weight-normalized, in compute dtype."""
        out = []
        # Normalize in the variable dtype (float32 under mixed policies): the
        # column norm of 4096 squares in float16 loses precision and can overflow.
        dtype = self.variable_dtype
        for name in _KERNELS:
            kernel = ops.cast(getattr(self, name), dtype)
            if self.weight_norm:
                gain = ops.cast(getattr(self, name.replace("kernel", "gain")), dtype)
                kernel = kernel * (gain / ops.sqrt(ops.sum(ops.square(kernel), axis=0) + 1e-12))
            out.append(ops.cast(kernel, self.compute_dtype))
        out.append(ops.cast(self.bias, self.compute_dtype))
        return tuple(out)

    def call(self, inputs, states, training=None) -> tuple:
        h, c = states
        w_x, w_mx, w_mh, w_h, b = self.kernels()
        m = ops.matmul(inputs, w_mx) * ops.matmul(h, w_mh)
        z = ops.matmul(inputs, w_x) + ops.matmul(m, w_h) + b
        zi, zf, zo, zu = ops.split(z, 4, axis=-1)
        c = ops.sigmoid(zf) * c + ops.sigmoid(zi) * ops.tanh(zu)
        h = ops.sigmoid(zo) * ops.tanh(c)
        return h, [h, c]

    def get_initial_state(self, batch_size=None) -> list:
        return [ops.zeros((batch_size, self.units), dtype=self.compute_dtype) for _ in range(2)]

    # === Config ===
    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "weight_norm": self.weight_norm,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


class _ColumnNormInitializer(keras.initializers.Initializer):
    """Initializes a weight-norm gain to its kernel's initial column norms."""

    def __init__(self, kernel):
        self._kernel = kernel

    def __call__(self, shape, dtype=None):
        norm = ops.sqrt(ops.sum(ops.square(ops.convert_to_tensor(self._kernel)), axis=0))
        return ops.cast(ops.reshape(norm, shape), dtype or "float32")
