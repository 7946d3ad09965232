"""Checkpoints and the carried recurrent state, for exact resumption.

A `tf.train.Checkpoint` holds the model, the optimizer (with its loss
scale), the step counter and the input iterator (the data position). The
recurrent state each replica carries across batches is not a variable, so
each worker writes it beside the checkpoint as `carried_state/worker-<id>-
step-<step>.npz`; a resumed run reloads it when the step and the replica
layout match, so the loss trajectory continues exactly. When the layout
changed (a checkpoint from N workers resumed on M), the state starts from
zeros and the log says so.
"""

import glob
import os

import numpy as np
import tensorflow as tf
from absl import logging

_STATE_DIR = "carried_state"


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
        arrays[f"h{index}"] = h
        arrays[f"c{index}"] = c
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
        return [(arrays[f"h{i}"], arrays[f"c{i}"]) for i in range(replicas)]


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
