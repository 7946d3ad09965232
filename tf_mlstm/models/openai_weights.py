"""OpenAI's released byte mLSTM (Radford et al. 2017) as a tf_mlstm model.

The arrays are copied as they are, save weight-norm columns too short for the norms to agree.
"""

import os

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm.models.language_model import VOCAB_SIZE
from tf_mlstm.models.language_model import MLSTMLanguageModel

NUM_FILES = 15
PUBLISHED_HIDDEN_SIZE = 4096
PUBLISHED_EMBEDDING_SIZE = 64

# Squared column lengths below this are rescaled to unit length (see the
# module docstring); below the release's own floor they cannot be matched.
_RESCALE_BELOW = 1e-6
_RELEASE_FLOOR = 1e-12


def _layout(hidden, embed):
    rows = [
        (0, "embedding", (VOCAB_SIZE, embed), "byte embedding"),
        (1, "wx", (embed, 4 * hidden), "input kernel Wx"),
    ]
    for offset, gate in enumerate("ifou"):
        rows.append(
            (2 + offset, f"wh_{gate}", (hidden, hidden), f"recurrent kernel Wh, gate {gate}")
        )
    rows += [
        (6, "wmx", (embed, hidden), "multiplicative input kernel Wmx"),
        (7, "wmh", (hidden, hidden), "multiplicative recurrent kernel Wmh"),
        (8, "b", (4 * hidden,), "gate bias b"),
        (9, "gx", (4 * hidden,), "weight-norm gain of Wx"),
        (10, "gh", (4 * hidden,), "weight-norm gain of Wh"),
        (11, "gmx", (hidden,), "weight-norm gain of Wmx"),
        (12, "gmh", (hidden,), "weight-norm gain of Wmh"),
        (13, "out_w", (hidden, VOCAB_SIZE), "output kernel"),
        (14, "out_b", (VOCAB_SIZE,), "output bias"),
    ]
    return rows


def array_path(weights_dir, index) -> str:
    """The file of released array `index` in `weights_dir`."""
    return os.path.join(weights_dir, f"{index}.npy")


def _load_npy(path):
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            return np.load(f, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise errors.InvalidValueError(f"{path}: not a NumPy .npy array file ({e})") from None


def load_openai_arrays(weights_dir) -> dict[str, np.ndarray]:
    """Reads and checks the 15 released arrays (sizes from the files).

    Args:
      weights_dir: the folder holding `0.npy` .. `14.npy` (the release's `model/`).

    Returns:
      dict name -> float32 array (`embedding`, `wx`, `wh_i` .. `wh_u`, ..., `out_b`).

    Raises:
      FileNotFoundError: a missing folder or file.
      ValueError: not a .npy array, the wrong shape for its place, or non-finite values.
    """
    if not tf.io.gfile.isdir(weights_dir):
        raise FileNotFoundError(f"{weights_dir}: no such folder (want the release's model/)")
    missing = [
        f"{i}.npy" for i in range(NUM_FILES) if not tf.io.gfile.exists(array_path(weights_dir, i))
    ]
    if missing:
        raise FileNotFoundError(
            f"{weights_dir}: missing {', '.join(missing)} of the {NUM_FILES} released arrays "
            f"0.npy .. {NUM_FILES - 1}.npy"
        )
    raw = {i: _load_npy(array_path(weights_dir, i)) for i in range(NUM_FILES)}
    wmh, embedding = raw[7], raw[0]
    if wmh.ndim != 2 or wmh.shape[0] != wmh.shape[1] or embedding.ndim != 2:
        raise errors.InvalidValueError(
            f"{array_path(weights_dir, 7)} has shape {wmh.shape} and "
            f"{array_path(weights_dir, 0)} {embedding.shape}: want [H, H] (Wmh) and "
            f"[{VOCAB_SIZE}, E] (byte embedding); is this the release's model/ folder?"
        )
    hidden, embed = wmh.shape[0], embedding.shape[1]
    arrays = {}
    for index, name, shape, what in _layout(hidden, embed):
        path = array_path(weights_dir, index)
        array = raw[index]
        if array.shape != shape:
            raise errors.InvalidValueError(
                f"{path}: shape {tuple(array.shape)}, but the {what} of a {hidden}-unit model "
                f"with a {embed}-wide embedding is {shape}"
            )
        if not np.issubdtype(array.dtype, np.floating):
            raise errors.InvalidValueError(
                f"{path}: {array.dtype} values, want floating point ({what})"
            )
        if not np.all(np.isfinite(array)):
            raise errors.InvalidValueError(f"{path}: non-finite values in the {what}")
        arrays[name] = array.astype(np.float32)
    return arrays


def _exact_weight_norm_kernel(kernel, name):
    squared = np.sum(np.square(kernel.astype(np.float64)), axis=0)
    unmatched = np.flatnonzero((squared > 0) & (squared < _RELEASE_FLOOR))
    if len(unmatched):
        raise errors.InvalidValueError(
            f"cannot represent {name} exactly: columns {unmatched[:10].tolist()} have squared "
            f"length below {_RELEASE_FLOOR:g}, which the release leaves unnormalized and "
            "tf_mlstm's weight norm would normalize"
        )
    short = (squared > 0) & (squared < _RESCALE_BELOW)
    if not short.any():
        return kernel
    logging.info("Rescaling %d short column(s) of %s to unit length.", int(short.sum()), name)
    scale = np.where(short, 1.0 / np.sqrt(np.where(short, squared, 1.0)), 1.0)
    return (kernel * scale).astype(np.float32)


def tf_mlstm_weights(arrays) -> dict[str, np.ndarray]:
    """The tf_mlstm weights of released arrays.

    Args:
      arrays: `load_openai_arrays`'s result.

    Returns:
      dict weight path below the model ("mlstm/cell/kernel_x", ...) -> float32 array.

    Raises:
      ValueError: a kernel that cannot be represented exactly.
    """
    kernel_h = np.concatenate([arrays[f"wh_{gate}"] for gate in "ifou"], axis=1)
    return {
        "embedding/embeddings": arrays["embedding"],
        "mlstm/cell/kernel_x": _exact_weight_norm_kernel(arrays["wx"], "Wx (1.npy)"),
        "mlstm/cell/kernel_mx": _exact_weight_norm_kernel(arrays["wmx"], "Wmx (6.npy)"),
        "mlstm/cell/kernel_mh": _exact_weight_norm_kernel(arrays["wmh"], "Wmh (7.npy)"),
        "mlstm/cell/kernel_h": _exact_weight_norm_kernel(kernel_h, "Wh (2-5.npy)"),
        "mlstm/cell/bias": arrays["b"],
        "mlstm/cell/gain_x": arrays["gx"],
        "mlstm/cell/gain_mx": arrays["gmx"],
        "mlstm/cell/gain_mh": arrays["gmh"],
        "mlstm/cell/gain_h": arrays["gh"],
        "head/kernel": arrays["out_w"],
        "head/bias": arrays["out_b"],
    }


def _relative_path(variable):
    path = variable.path.split("/", 1)[1]
    return path.removeprefix("backbone/")


def _unfilled_model(hidden, embed, name):
    """A float32 model to overwrite (zeros initializers: orthogonal ones are slow)."""
    model = MLSTMLanguageModel(
        hidden_size=hidden, embedding_size=embed, weight_norm=True, dtype="float32", name=name
    )
    cell = model.mlstm.cell
    cell.kernel_initializer = cell.recurrent_initializer = keras.initializers.Zeros()
    model.build()
    return model


def build_model(arrays, name="mlstm_lm") -> MLSTMLanguageModel:
    """A float32 `MLSTMLanguageModel` holding the released weights.

    Args:
      arrays: `load_openai_arrays`'s result.
      name: the model's name (the one `from_train_config` gives).

    Returns:
      The built model.

    Raises:
      ValueError: a kernel not representable exactly, or weights unlike the mapping.
    """
    hidden, embed = arrays["wmh"].shape[0], arrays["embedding"].shape[1]
    model = _unfilled_model(hidden, embed, name)
    weights = tf_mlstm_weights(arrays)
    variables = {_relative_path(v): v for v in model.weights}
    if set(variables) != set(weights):
        raise errors.InvalidValueError(
            f"the model's weights {sorted(variables)} do not match the mapped arrays "
            f"{sorted(weights)}"
        )
    for path, variable in variables.items():
        variable.assign(weights[path])
    return model


def check_round_trip(checkpoint_path, model) -> None:
    """Raises InvalidValueError unless `checkpoint_path` restores every weight of `model` exactly.

    Args:
      checkpoint_path: a prefix written by `tf.train.Checkpoint(model=model).save(...)`.
      model: the model that was saved (`build_model`'s result).
    """
    loaded = _unfilled_model(model.hidden_size, model.embedding_size, model.name)
    tf.train.Checkpoint(model=loaded).restore(checkpoint_path).assert_consumed()
    want = {_relative_path(v): v.numpy() for v in model.weights}
    for variable in loaded.weights:
        path = _relative_path(variable)
        if not np.array_equal(variable.numpy(), want[path]):
            raise errors.InvalidValueError(f"{checkpoint_path}: read back a different {path}")
