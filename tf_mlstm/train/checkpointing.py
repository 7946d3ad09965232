"""Checkpoints, the carried recurrent state and the input position, for exact resumption.

A `tf.train.Checkpoint` holds the model, the optimizer (with its loss
scale) and the step counter; only the chief's copy is kept. What differs
between workers is written by each worker beside it, in the shared model
folder:

* the recurrent state each replica carries across batches (not a variable),
  as `carried_state/worker-<id>-step-<step>.npz`;
* the position of the worker's input iterator, as a small checkpoint
  `input_state/worker-<id>/step-<step>` with the input layout it belongs to
  in `step-<step>.json` (every worker reads its own shards, so one iterator
  state cannot serve all).

A resumed run reloads both when the step and the layout match, so the loss
trajectory continues exactly. When the layout changed (a checkpoint from N
workers resumed on M), the state starts from zeros and the input from the
start of this worker's shards, and the log says so.
"""

import glob
import json
import os

import numpy as np
import tensorflow as tf
from absl import logging

_STATE_DIR = "carried_state"
_INPUT_DIR = "input_state"


def _state_path(model_dir, worker, step):
    return os.path.join(model_dir, _STATE_DIR, f"worker-{worker}-step-{step}.npz")


def save_carried_state(model_dir, worker, step, local_states, keep=3):
    """Writes this worker's per-replica [h, c] arrays atomically.

    Args:
      model_dir: the run's folder (shared by all workers).
      worker: this worker's index.
      step: the global step the state belongs to.
      local_states: list over local replicas of (h, c) numpy arrays.
      keep: how many of this worker's newest files to keep.
    """
    path = _state_path(model_dir, worker, step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    arrays = {}
    for index, (h, c) in enumerate(local_states):
        # float32 holds float16 and bfloat16 values exactly; NumPy's .npz has no bfloat16
        # and would store it as raw 2-byte voids that no dtype can be cast from.
        arrays[f"h{index}"] = np.asarray(h, np.float32)
        arrays[f"c{index}"] = np.asarray(c, np.float32)
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    pattern = os.path.join(model_dir, _STATE_DIR, f"worker-{worker}-step-*.npz")
    files = sorted(glob.glob(pattern), key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    for old in files[:-keep]:
        os.remove(old)


def load_carried_state(model_dir, worker, step, replicas, shape):
    """Returns the saved per-replica (h, c) list, or None if it doesn't fit.

    Args:
      model_dir: the run's folder.
      worker: this worker's index.
      step: the restored checkpoint's step.
      replicas: local replicas now.
      shape: expected (rows, units) of each array.
    """
    path = _state_path(model_dir, worker, step)
    if not os.path.exists(path):
        logging.warning(
            "No carried state for worker %d at step %d: the "
            "recurrent state restarts from zeros.",
            worker,
            step,
        )
        return None
    with np.load(path) as arrays:
        if len(arrays.files) != 2 * replicas or arrays["h0"].shape != tuple(shape):
            logging.warning(
                "Carried state in %s was saved for another replica "
                "layout: the recurrent state restarts from zeros.",
                path,
            )
            return None
        return [
            (_state_array(arrays[f"h{i}"]), _state_array(arrays[f"c{i}"]))
            for i in range(replicas)
        ]


def _state_array(array):
    """A saved state array as float32; older files hold bfloat16 as raw 2-byte voids."""
    if array.dtype.kind == "V" and array.dtype.itemsize == 2:
        array = array.view(tf.bfloat16.as_numpy_dtype)
    return array.astype(np.float32)


def restore_latest(checkpoint, checkpoint_dir):
    """Restores the newest checkpoint in `checkpoint_dir`, if any.

    Returns:
      The restored checkpoint path, or None for a fresh start.
    """
    latest = tf.train.latest_checkpoint(checkpoint_dir)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        logging.info("Resumed from %s", latest)
    return latest


def _input_prefix(model_dir, worker, step):
    return os.path.join(model_dir, _INPUT_DIR, f"worker-{worker}", f"step-{step}")


def save_input_state(model_dir, worker, step, iterator, layout, keep=3):
    """Writes this worker's input-iterator position and its layout.

    Args:
      model_dir: the run's folder (shared by all workers).
      worker: this worker's index.
      step: the global step the position belongs to.
      iterator: the worker's tf.data iterator.
      layout: JSON-serializable description of the input pipeline; a restore
        needs an equal one.
      keep: how many of this worker's newest positions to keep.
    """
    prefix = _input_prefix(model_dir, worker, step)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    tf.train.Checkpoint(iterator=iterator).write(prefix)
    tmp = prefix + ".json.tmp"
    with open(tmp, "w") as f:
        json.dump(layout, f, sort_keys=True)
    # The layout file last: its presence says the position is complete.
    os.replace(tmp, prefix + ".json")
    saved = glob.glob(os.path.join(os.path.dirname(prefix), "step-*.json"))
    steps = sorted(int(os.path.basename(p)[len("step-") : -len(".json")]) for p in saved)
    for old in steps[:-keep]:
        old_prefix = _input_prefix(model_dir, worker, old)
        for path in glob.glob(old_prefix + ".*"):
            os.remove(path)


def restore_input_state(model_dir, worker, step, iterator, layout):
    """Restores this worker's input position at `step` if its layout matches.

    Returns:
      True when restored; False (with a warning) when the input restarts
      from the beginning of this worker's shards.
    """
    prefix = _input_prefix(model_dir, worker, step)
    if not os.path.exists(prefix + ".json"):
        logging.warning(
            "No input position for worker %d at step %d: its input restarts from the "
            "beginning of its shards.",
            worker,
            step,
        )
        return False
    with open(prefix + ".json") as f:
        saved = json.load(f)
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
