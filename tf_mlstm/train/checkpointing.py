"""Each worker's state beside the shared checkpoint (carried [h, c], input position)."""

import io
import json
import os
import re

import numpy as np
import tensorflow as tf
from absl import logging
from tensorflow.core.framework import tensor_pb2

from tf_mlstm import fileio
from tf_mlstm import rundir

_STATE_SUFFIX = ".tensor"
_LEGACY_STATE_SUFFIX = ".npz"  # written by earlier versions; read for their resumes


def _state_path(model_dir, worker, step, suffix=_STATE_SUFFIX):
    return os.path.join(rundir.carried_state_dir(model_dir), f"worker-{worker}-step-{step}{suffix}")


def _step_of(path):
    match = re.search(r"step-(\d+)(\.[a-z]+)?$", path)
    return int(match.group(1)) if match else -1


def save_carried_state(model_dir, worker, step, local_states, keep=3) -> None:
    """Writes this worker's per-replica [h, c] atomically, in their own dtype.

    Args:
      model_dir: the run's folder (shared by all workers).
      worker: this worker's index.
      step: the global step the state belongs to.
      local_states: (h, c) arrays or tensors per local replica, of one shape and dtype.
      keep: how many of this worker's newest files to keep.
    """
    stacked = tf.stack([tf.stack([h, c]) for h, c in local_states])
    fileio.write_text_atomic(
        _state_path(model_dir, worker, step), tf.io.serialize_tensor(stacked).numpy()
    )
    pattern = os.path.join(rundir.carried_state_dir(model_dir), f"worker-{worker}-step-*")
    files = sorted(tf.io.gfile.glob(pattern), key=_step_of)
    for old in files[:-keep]:
        tf.io.gfile.remove(old)


def _read_state(path):
    """The saved array [replicas, 2, rows, units] at `path`, in its saved dtype."""
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    if path.endswith(_LEGACY_STATE_SUFFIX):
        with np.load(io.BytesIO(data)) as arrays:
            replicas = len(arrays.files) // 2
            stacked = np.stack(
                [np.stack([arrays[f"h{i}"], arrays[f"c{i}"]]) for i in range(replicas)]
            )
        if stacked.dtype.kind == "V" and stacked.dtype.itemsize == 2:
            # NumPy saved bfloat16 as anonymous 2-byte records.
            stacked = stacked.view(tf.bfloat16.as_numpy_dtype)
        return stacked
    dtype = tf.as_dtype(tensor_pb2.TensorProto.FromString(data).dtype)
    return tf.io.parse_tensor(data, dtype).numpy()


def load_carried_state(model_dir, worker, step, replicas, shape, dtype=None) -> list | None:
    """Returns the saved per-replica (h, c) list, or None if it doesn't fit.

    Args:
      model_dir: the run's folder.
      worker: this worker's index.
      step: the restored checkpoint's step.
      replicas: local replicas now.
      shape: expected (rows, units) of each array.
      dtype: the compute dtype now (None: any); another saved dtype does not fit.

    Returns:
      (h, c) NumPy arrays per local replica, or None (with a warning) to restart from zeros.
    """
    path = _state_path(model_dir, worker, step)
    if not tf.io.gfile.exists(path):
        legacy = _state_path(model_dir, worker, step, _LEGACY_STATE_SUFFIX)
        path = legacy if tf.io.gfile.exists(legacy) else None
    if path is None:
        logging.warning(
            "No carried state for worker %d at step %d: the recurrent state restarts from zeros.",
            worker,
            step,
        )
        return None
    stacked = _read_state(path)
    if stacked.shape != (replicas, 2) + tuple(shape):
        logging.warning(
            "Carried state in %s was saved for another replica layout: the recurrent state "
            "restarts from zeros.",
            path,
        )
        return None
    if dtype is not None and tf.as_dtype(stacked.dtype) != dtype:
        logging.warning(
            "Carried state in %s was saved in %s, not %s: the recurrent state restarts from zeros.",
            path,
            tf.as_dtype(stacked.dtype).name,
            tf.as_dtype(dtype).name,
        )
        return None
    return [(stacked[i, 0], stacked[i, 1]) for i in range(replicas)]


def restore_latest(checkpoint, checkpoint_dir, newest_step=None) -> str | None:
    """Restores the newest intact checkpoint in `checkpoint_dir`, if any.

    Args:
      checkpoint: the `tf.train.Checkpoint`.
      checkpoint_dir: the checkpoint folder.
      newest_step: None, or the step of the newest checkpoint to consider.

    Returns:
      The restored checkpoint path, or None for a fresh start.

    Raises:
      rundir.RunDirError: checkpoints exist but none is intact.
    """
    return rundir.restore_checkpoint(checkpoint, checkpoint_dir, newest_step=newest_step)


def has_state(model_dir, worker, step, layout, carried) -> bool:
    """Whether this worker's own state of `step` is there and fits this run.

    Args:
      model_dir: the run's folder.
      worker: this worker's index.
      step: a checkpoint's step.
      layout: this run's input layout (a position saved under another does not count).
      carried: whether the task carries a recurrent state.

    Returns:
      True when the input position of `step` (and the carried state, if any) is saved.
    """
    prefix = _input_prefix(model_dir, worker, step)
    if not tf.io.gfile.exists(prefix + ".json"):
        return False
    if fileio.read_json(prefix + ".json") != json.loads(json.dumps(layout)):
        return False
    return not carried or any(
        tf.io.gfile.exists(_state_path(model_dir, worker, step, suffix))
        for suffix in (_STATE_SUFFIX, _LEGACY_STATE_SUFFIX)
    )


def _input_prefix(model_dir, worker, step):
    return os.path.join(rundir.input_state_dir(model_dir, worker), f"step-{step}")


def save_input_state(model_dir, worker, step, iterator, layout, keep=3) -> None:
    """Writes this worker's input-iterator position and its layout.

    Args:
      model_dir: the run's folder (shared by all workers).
      worker: this worker's index.
      step: the global step the position belongs to.
      iterator: the worker's tf.data iterator.
      layout: JSON-able description of the input pipeline; a restore needs an equal one.
      keep: how many of this worker's newest positions to keep.
    """
    prefix = _input_prefix(model_dir, worker, step)
    tf.io.gfile.makedirs(os.path.dirname(prefix))
    tf.train.Checkpoint(iterator=iterator).write(prefix)
    # The layout file last: its presence says the position is complete.
    fileio.write_json_atomic(prefix + ".json", layout)
    saved = tf.io.gfile.glob(_input_prefix(model_dir, worker, "*") + ".json")
    steps = sorted(_step_of(p[: -len(".json")]) for p in saved)
    for old in steps[:-keep]:
        old_prefix = _input_prefix(model_dir, worker, old)
        # The layout file first: without it the rest is never read.
        paths = tf.io.gfile.glob(old_prefix + ".*")
        for path in sorted(paths, key=lambda p: not p.endswith(".json")):
            tf.io.gfile.remove(path)


def restore_input_state(model_dir, worker, step, iterator, layout) -> bool:
    """Restores this worker's input position at `step` if its layout matches.

    Returns:
      True when restored; False (with a warning) when the input restarts from its start.
    """
    prefix = _input_prefix(model_dir, worker, step)
    if not tf.io.gfile.exists(prefix + ".json"):
        logging.warning(
            "No input position for worker %d at step %d: its input restarts from the "
            "beginning of its shards.",
            worker,
            step,
        )
        return False
    saved = fileio.read_json(prefix + ".json")
    if saved != json.loads(json.dumps(layout)):
        logging.warning(
            "Input position in %s was saved for another input layout (%s, now %s): the "
            "input restarts from the beginning of this worker's shards.",
            prefix,
            _layout_summary(saved),
            _layout_summary(layout),
        )
        return False
    tf.train.Checkpoint(iterator=iterator).read(prefix).assert_consumed()
    return True


def _layout_summary(layout):
    return ", ".join(f"{k}={layout[k]}" for k in sorted(layout) if k != "train_files")
