"""The run directory (`--model_dir`): its layout, config files, lock and trained model.

```
MODEL_DIR/
  config.json                  the language model's TrainConfig (tf-mlstm-train)
  finetune_config.json         the FinetuneConfig (tf-mlstm-finetune runs only)
  openai_import.json           where the weights came from (tf-mlstm-import-openai only)
  results.json, run.lock       the results, when it ends; the chief's lock while it writes
  checkpoints/ckpt-<step>.*    model, optimizer (with loss scale) and step
  carried_state/worker-<i>-step-<step>.tensor   each worker's recurrent state
  input_state/worker-<i>/step-<step>.*          each worker's input position
  export/, train/, validation/ the SavedModel of tf-mlstm-train; TensorBoard events
  demo_data/                   the demo corpus's TFRecords (a run without train_data)
```
"""

import atexit
import dataclasses
import datetime
import hashlib
import json
import os
import re
import socket
import sys
import uuid
from typing import TypeVar

import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm import preflight
from tf_mlstm import processes
from tf_mlstm.config import PRECISIONS
from tf_mlstm.config import TrainConfig
from tf_mlstm.errors import setting_name as _name

C = TypeVar("C")  # the config dataclass `read_config` builds

# === Layout ===

# The names that tell a folder's kind, and the settings a resume keeps, are
# defined with the checks that run before TensorFlow starts (`preflight`).
CONFIG_FILE = preflight.CONFIG_FILE
FINETUNE_CONFIG_FILE = preflight.FINETUNE_CONFIG_FILE
RESULTS_FILE = preflight.RESULTS_FILE
OPENAI_IMPORT_FILE = "openai_import.json"
LOCK_FILE = preflight.LOCK_FILE
CHECKPOINT_SUBDIR = preflight.CHECKPOINT_SUBDIR
CARRIED_STATE_SUBDIR = "carried_state"
INPUT_STATE_SUBDIR = "input_state"
EXPORT_SUBDIR = "export"
DEMO_DATA_SUBDIR = "demo_data"

RESUME_FIXED = preflight.RESUME_FIXED
RunDirError = preflight.RunDirError


def checkpoint_dir(model_dir: str) -> str:
    """The checkpoint folder of a run."""
    return os.path.join(model_dir, CHECKPOINT_SUBDIR)


def holds(model_dir: str, name: str) -> bool:
    """Whether the run folder holds the file or folder `name`."""
    return tf.io.gfile.exists(os.path.join(model_dir, name))


def export_dir(model_dir: str) -> str:
    """The SavedModel folder of a run."""
    return os.path.join(model_dir, EXPORT_SUBDIR)


def demo_data_dir(model_dir: str) -> str:
    """The TFRecords a run without `train_data` converts the embedded demo corpus into."""
    return os.path.join(model_dir, DEMO_DATA_SUBDIR)


is_finetune_run = preflight.is_finetune_run


def carried_state_dir(model_dir: str) -> str:
    """The folder of the workers' carried recurrent states."""
    return os.path.join(model_dir, CARRIED_STATE_SUBDIR)


def input_state_dir(model_dir: str, worker: int) -> str:
    """The folder of one worker's saved input positions."""
    return os.path.join(model_dir, INPUT_STATE_SUBDIR, f"worker-{worker}")


# === What kind of folder a path is (`preflight`, TensorFlow-free) ===

LANGUAGE_MODEL_RUN = preflight.LANGUAGE_MODEL_RUN
FINETUNE_RUN = preflight.FINETUNE_RUN
MODEL_RUNS = preflight.MODEL_RUNS
folder_kind = preflight.folder_kind
check_folder_kind = preflight.check_folder_kind


# === Config files ===


def read_config(model_dir, config_class: type[C] = TrainConfig, name=CONFIG_FILE) -> C:
    """Reads a config file of a run.

    Args:
      model_dir: the run folder.
      config_class: the frozen config dataclass (with `from_json`) to build.
      name: the file name in `model_dir`.

    Returns:
      The config.

    Raises:
      FileNotFoundError: no such file.
      ValueError: the file is not valid JSON, or `model_dir` is a preset, not a run.
    """
    if preflight.is_preset(model_dir):  # its config.json is a Keras model's
        raise preflight.preset_not_run_error(model_dir)
    path = os.path.join(model_dir, name)
    if not tf.io.gfile.exists(path):
        raise preflight.missing_config_error(model_dir, name)
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    try:
        return config_class.from_json(text)
    except (json.JSONDecodeError, TypeError) as error:
        raise errors.InvalidValueError(
            f"{path}: not a valid {config_class.__name__} ({error})."
        ) from None


def _recorded_config(model_dir, name, what):
    """The run's config file `name` as a dict, or None when it does not exist."""
    path = os.path.join(model_dir, name)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    try:
        values = json.loads(text)
    except json.JSONDecodeError as e:
        raise errors.InvalidValueError(
            f"{path}: not valid JSON ({e}); cannot read the run's {what}."
        ) from None
    if not isinstance(values, dict):
        raise errors.InvalidValueError(
            f"{path}: expected a JSON object, got {type(values).__name__}."
        )
    return values


def recorded_precision(model_dir: str, name: str = CONFIG_FILE) -> str | None:
    """The precision a run recorded in its config file, or None.

    Args:
      model_dir: the run folder.
      name: its config file (config.json, finetune_config.json).

    Returns:
      The recorded policy name, or None when there is no file or no concrete precision.

    Raises:
      ValueError: the file exists but is not a JSON object.

    Example:
      >>> import tempfile
      >>> recorded_precision(tempfile.mkdtemp()) is None
      True
    """
    values = _recorded_config(model_dir, name, "precision")
    precision = (values or {}).get("precision")
    return precision if precision in PRECISIONS else None


def recorded_hidden_size(model_dir: str) -> tuple[int, dict] | None:
    """The model size a language-model run recorded in config.json, with its `autosize` record.

    Args:
      model_dir: the run folder.

    Returns:
      (units, the "autosize" record or {}), or None when there is no file or no positive size.

    Raises:
      ValueError: the file exists but is not a JSON object.

    Example:
      >>> import tempfile
      >>> recorded_hidden_size(tempfile.mkdtemp()) is None
      True
    """
    values = _recorded_config(model_dir, CONFIG_FILE, "model size")
    size = (values or {}).get("hidden_size")
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        return None
    record = values.get("autosize")
    return size, record if isinstance(record, dict) else {}


def write_config(model_dir, config, name=CONFIG_FILE, extra=None, staged=None) -> None:
    """Writes `config.to_json()` to `model_dir/name` atomically.

    Args:
      model_dir: the run folder.
      config: the config dataclass.
      name: the file name.
      extra: optional {key: JSON value} written beside the config's fields.
      staged: a `fileio.Staged` to write through (the file appears when it commits), or None.
    """
    text = config.to_json()
    if extra:
        text = json.dumps({**json.loads(text), **extra}, indent=2, sort_keys=True)
    _write_text(os.path.join(model_dir, name), text + "\n", staged)


# The config fields that name places on the machine that ran: a copy that travels keeps names.
PATH_FIELDS = ("model_dir", "train_data", "validation_data")


def portable_config(config) -> dict:
    """A run's config as a JSON object, each path cut to its last part (a name, not a place).

    Args:
      config: the run's `TrainConfig`.

    Returns:
      The config's fields; those of `PATH_FIELDS` as names only (each of a comma list).

    Example:
    >>> from tf_mlstm import rundir
    >>> from tf_mlstm.config import TrainConfig
    >>> rundir.portable_config(TrainConfig(train_data="/data/a,/data/b/"))["train_data"]
    'a,b'
    """
    values = json.loads(config.to_json())
    for field in PATH_FIELDS:
        if values.get(field):
            values[field] = names_of(values[field])
    return values


def names_of(paths: str) -> str:
    """Each path of a comma list cut to its last part: `"/data/a,/data/b/"` -> `"a,b"`.

    Args:
      paths: one path, or several joined by commas.

    Returns:
      Their names, joined by commas.
    """
    return ",".join(os.path.basename(os.path.normpath(p)) for p in str(paths).split(","))


def _write_text(path, text, staged):
    if staged is None:
        fileio.write_text_atomic(path, text)
        return
    with tf.io.gfile.GFile(staged.path(path), "w") as f:
        f.write(text)


def read_finetune_run(model_dir: str) -> tuple[dict, dict]:
    """The config and results of the finished fine-tuning run in `model_dir`.

    Returns:
      (finetune_config.json, results.json), each a dict.

    Raises:
      InvalidValueError: `model_dir` holds no finished fine-tuning run.
      ValueError: a file that is not valid JSON.
    """
    preflight.check_finetune_run(model_dir)
    return tuple(
        fileio.read_json(os.path.join(model_dir, name))
        for name in (FINETUNE_CONFIG_FILE, RESULTS_FILE)
    )


def write_results(model_dir: str, results: dict) -> None:
    """Writes the results dict to `model_dir/results.json` atomically."""
    fileio.write_json_atomic(os.path.join(model_dir, RESULTS_FILE), results)


def read_results(model_dir: str) -> dict | None:
    """The results.json a run wrote when it ended, or None when there is none (or not a dict)."""
    try:
        results = fileio.read_json(os.path.join(model_dir, RESULTS_FILE))
    except (FileNotFoundError, tf.errors.NotFoundError, ValueError):
        return None
    return results if isinstance(results, dict) else None


def write_openai_import(model_dir: str, source: dict, staged=None) -> None:
    """Writes openai_import.json, where an imported run's weights came from.

    Args:
      model_dir: the run folder.
      source: {key: JSON value}: the release, its folder, the model's sizes.
      staged: a `fileio.Staged` the file is written through, or None: in place now.
    """
    text = json.dumps(source, indent=2, sort_keys=True) + "\n"
    _write_text(os.path.join(model_dir, OPENAI_IMPORT_FILE), text, staged)


def check_resumed_config(model_dir, config, name=CONFIG_FILE) -> dict[str, tuple]:
    """Compares a resumed run's config with its checkpoints': logs changes, refuses fixed ones.

    Args:
      model_dir: the run folder.
      config: the new config (a dataclass).
      name: the config file it is saved as.

    Returns:
      {field: (saved, new)} of the changed settings (empty when none or none was saved).

    Raises:
      RunDirError: a setting of `RESUME_FIXED[name]` changed.
    """
    path = os.path.join(model_dir, name)
    if not tf.io.gfile.exists(path):
        return {}
    saved = fileio.read_json(path)
    if hasattr(config, "upgrade_saved"):  # a file written before a field was renamed
        saved = config.upgrade_saved(saved)
    new = json.loads(json.dumps(dataclasses.asdict(config)))
    # In name order, as the file lists them.
    changed = {k: (saved[k], v) for k, v in sorted(new.items()) if k in saved and saved[k] != v}
    refused = preflight.refused_changes(saved, new, name)
    if refused:
        raise preflight.resume_refused_error(model_dir, name, refused)
    if changed:
        logging.info(
            "Resuming %s with changed settings (%s): %s.",
            model_dir,
            name,
            ", ".join(
                f"{_name(k)} {preflight.flag_value(old)} -> {preflight.flag_value(v)}"
                for k, (old, v) in changed.items()
            ),
        )
    return changed


def begin_run(model_dir, configs, chief=True, extras=None) -> None:
    """Starts or resumes a training run in `model_dir`: lock, check, write the configs.

    Args:
      model_dir: the run folder (created).
      configs: {file name: config dataclass}, e.g. `{CONFIG_FILE: train_config}`.
      chief: whether this worker keeps the run's outputs (takes the lock, writes the configs).
      extras: optional {file name: {key: JSON value}} for `write_config`.

    Raises:
      RunDirError: another live run holds the folder, or a config changes a fixed setting.
    """
    if chief:
        tf.io.gfile.makedirs(model_dir)
        acquire_lock(model_dir)
    if list_checkpoints(checkpoint_dir(model_dir)):
        for name, config in configs.items():
            check_resumed_config(model_dir, config, name)
    if chief:
        # config.json last: a folder with it and without finetune_config.json
        # is a language-model run (`folder_kind`), also after a kill between them.
        for name in sorted(configs, key=lambda name: name == CONFIG_FILE):
            write_config(model_dir, configs[name], name, (extras or {}).get(name))


# === The run lock ===

_HELD = {}  # lock path -> the record this process wrote


def _lock_record():
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "process_start": _process_start(os.getpid()),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.argv[0] or "python")] + sys.argv[1:])[:300],
    }


# Who holds a lock, and whether it is gone: TensorFlow-free, so the binaries ask it
# before any work too (`preflight.check_not_in_use`).
_process_start = processes.start_time
_holder_gone = preflight.holder_gone
_describe_holder = preflight.describe_holder


def _read_lock(path):
    try:
        record = fileio.read_json(path)
    except FileNotFoundError:
        return None
    except (ValueError, tf.errors.OpError):
        return {}  # unreadable: not written by this module (its writes are atomic)
    return record if isinstance(record, dict) else {}


def acquire_lock(model_dir: str) -> str:
    """Takes `model_dir`'s run lock for this process, until it exits (a gone holder's too).

    Args:
      model_dir: the run folder (must exist).

    Returns:
      The lock file's path.

    Raises:
      RunDirError: another run (live, or on another host) holds the lock.
    """
    path = os.path.join(model_dir, LOCK_FILE)
    if path in _HELD and _read_lock(path) == _HELD[path]:
        return path
    record = _lock_record()
    # Not named `path` + suffix: some filesystems (ram://) report a file as
    # existing when another one's name extends it.
    tmp = os.path.join(model_dir, f".lock-{uuid.uuid4().hex}.tmp")
    fileio.write_json_atomic(tmp, record)
    try:
        try:
            tf.io.gfile.rename(tmp, path, overwrite=False)
        except tf.errors.AlreadyExistsError:
            holder = _read_lock(path)
            if holder is None:  # released meanwhile
                tf.io.gfile.rename(tmp, path, overwrite=False)
            elif holder and not _holder_gone(holder):
                raise preflight.in_use_error(model_dir, holder) from None
            else:
                logging.warning(
                    "Taking over the lock of %s from a run that is gone (%s).",
                    model_dir,
                    _describe_holder(holder) if holder else "unreadable lock file",
                )
                tf.io.gfile.rename(tmp, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)
    # Two starts racing past the checks above: the last rename wins, the
    # other sees the winner's record here.
    holder = _read_lock(path)
    if holder != record:
        raise RunDirError(
            f"{model_dir} is in use by another run ({_describe_holder(holder or {})}) that "
            f"started at the same moment: use another {_name('model_dir')}."
        )
    if not _HELD:
        atexit.register(release_locks)
    _HELD[path] = record
    return path


def release_locks() -> None:
    """Removes the run locks this process holds (run at exit; safe to call twice)."""
    for path, record in list(_HELD.items()):
        try:
            if _read_lock(path) == record:
                tf.io.gfile.remove(path)
        except tf.errors.OpError as error:
            logging.warning("Could not remove the run lock %s: %s", path, error)
        del _HELD[path]


# === Checkpoints ===


def checkpoint_step(prefix: str) -> int:
    """The step a checkpoint prefix (`.../ckpt-<step>`) was saved at; -1 if none."""
    match = re.search(r"-(\d+)$", prefix)
    return int(match.group(1)) if match else -1


def list_checkpoints(directory: str) -> list[str]:
    """The checkpoint prefixes in `directory` (its state file's and `*.index` files), newest first.

    Args:
      directory: a checkpoint folder (may be missing).

    Returns:
      A list of prefixes (paths without the `.index`/`.data-*` suffix).
    """
    if not tf.io.gfile.isdir(directory):
        return []
    prefixes = [p[: -len(".index")] for p in tf.io.gfile.glob(os.path.join(directory, "*.index"))]
    state = tf.train.get_checkpoint_state(directory)  # None (logged) when unreadable
    listed = list(state.all_model_checkpoint_paths) if state else []
    if state and state.model_checkpoint_path and state.model_checkpoint_path not in listed:
        listed.append(state.model_checkpoint_path)
    for prefix in listed:
        if not os.path.isabs(prefix) and "://" not in prefix:
            prefix = os.path.join(directory, prefix)
        if prefix not in prefixes:
            prefixes.append(prefix)
    return sorted(prefixes, key=checkpoint_step, reverse=True)


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (at most 300 characters), for a one-line report."""
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return text.strip().splitlines()[0][:300]


def restore_checkpoint(checkpoint, directory, partial=False, newest_step=None) -> str | None:
    """Restores the newest intact checkpoint of `directory` into `checkpoint` (warns of others).

    Args:
      checkpoint: a `tf.train.Checkpoint`.
      directory: the checkpoint folder.
      partial: the checkpoint may hold more than `checkpoint`; else every object must restore.
      newest_step: None, or the step of the newest checkpoint to consider.

    Returns:
      The restored prefix, or None when the folder holds no checkpoint.

    Raises:
      RunDirError: checkpoints exist but none is intact.
      AssertionError: an intact checkpoint of another model.
    """
    damaged = []
    for prefix in list_checkpoints(directory):
        if newest_step is not None and checkpoint_step(prefix) > newest_step:
            continue
        try:
            status = checkpoint.restore(prefix)
            if partial:
                status.expect_partial()
            else:
                status.assert_existing_objects_matched()
        except (tf.errors.OpError, IndexError) as error:
            # A truncated data file reads short (IndexError); a missing one
            # is NotFound.
            logging.warning(
                "Checkpoint %s is missing or damaged (%s): falling back to an older one.",
                prefix,
                first_line(error),
            )
            damaged.append(os.path.basename(prefix))
            continue
        # A full restore is a training run resuming; a partial one loads a model.
        verb = "Restored" if partial else "Resumed from"
        if damaged:
            logging.warning(
                "%s %s, the newest intact checkpoint (skipped %s).",
                verb,
                prefix,
                ", ".join(damaged),
            )
        else:
            logging.info("%s %s", verb, prefix)
        return prefix
    if damaged and _never_finished(directory, damaged):
        # Killed inside its first save: the files a save writes before it lists the
        # checkpoint (TensorFlow merges the `.index` in place); nothing was committed yet.
        logging.warning(
            "%s: %s was being written when the run stopped (no checkpoint was ever listed "
            "as saved): starting from the beginning.",
            directory,
            ", ".join(damaged),
        )
        return None
    if damaged:
        raise RunDirError(
            f"{directory}: no intact checkpoint (missing or damaged: {', '.join(damaged)}; see "
            "the warnings); move them away to start the run afresh."
        )
    return None


def _never_finished(directory, names):
    """Whether no save in `directory` ever ended: no checkpoint state file lists one."""
    del names
    return not tf.io.gfile.exists(os.path.join(directory, "checkpoint"))


def restore_model(checkpoint, model_dir, prefix=None) -> str:
    """Restores a trained model (`checkpoint`'s objects) from a run folder.

    Args:
      checkpoint: a `tf.train.Checkpoint` of the model's parts, under the names the run saved.
      model_dir: the run folder.
      prefix: a specific checkpoint prefix (default: the newest intact).

    Returns:
      The prefix restored.

    Raises:
      FileNotFoundError: no checkpoint in `model_dir`.
      RunDirError: no intact checkpoint, or `prefix` is missing or damaged.
    """
    if prefix:
        try:
            checkpoint.restore(prefix).expect_partial()
        except (tf.errors.OpError, IndexError) as error:
            raise RunDirError(
                f"checkpoint {prefix} is missing or damaged ({first_line(error)})."
            ) from None
        logging.info("Restored %s", prefix)
        return prefix
    restored = restore_checkpoint(checkpoint, checkpoint_dir(model_dir), partial=True)
    if not restored:
        raise FileNotFoundError(f"{model_dir}: no checkpoint to load.")
    return restored


def weights_checksum(variables) -> str:
    """SHA-256 (hex, 16 digits) of the variables' values, in order: a model's fingerprint."""
    digest = hashlib.sha256()
    for variable in variables:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


class OtherModelError(RunDirError):
    """A classifier applied to model weights other than those it was fitted on.

    Example:
    >>> from tf_mlstm import rundir
    >>> error = rundir.OtherModelError("classifier.json was fitted on other model weights")
    >>> isinstance(error, rundir.RunDirError), isinstance(error, ValueError)
    (True, True)
    """


def check_fitted_model(model, fitted_sha256, source, model_dir, allow_other_model=False) -> None:
    """Checks that `model` has the weights a classifier was fitted on.

    Args:
      model: the loaded language model.
      fitted_sha256: the classifier's recorded `weights_checksum` ("": nothing to check).
      source: the classifier file, for the message ("" when the caller names it).
      model_dir: the model's folder, for the message.
      allow_other_model: warn instead of raising.

    Raises:
      OtherModelError: other weights, unless `allow_other_model`.
    """
    if not fitted_sha256:
        return
    actual = weights_checksum(model.weights)
    if actual == fitted_sha256:
        return
    message = (
        f"classifier {source + ' ' if source else ''}was fitted on other model weights "
        f"(sha256 {fitted_sha256}) than those of {model_dir} ({actual})"
    )
    if not allow_other_model:
        raise OtherModelError(
            f"{message}: give the {_name('model_dir')} it was fitted on, refit it with "
            f"tf-mlstm-transfer, or pass {_name('allow_other_model')} to apply it anyway"
        )
    logging.warning("%s; applied anyway (%s).", message, _name("allow_other_model"))


check_not_run_dir = preflight.check_not_run_dir
