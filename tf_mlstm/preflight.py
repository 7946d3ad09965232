"""Checks before work: what a binary's paths are, answered before TensorFlow starts.

Every binary's `preflight` (`tf_mlstm/cli/_main.py`) checks its inputs, outputs and resumed
run folder here, in one line naming the path; this module also tells the kinds of folder apart.
Local paths are read with `os`; a URL (`gs://...`) through TensorFlow, imported only then.
"""

import errno
import glob
import json
import os
import socket

from tf_mlstm import errors
from tf_mlstm import processes
from tf_mlstm.data.fields import INCOMPLETE_MARKER
from tf_mlstm.data.fields import STATS_FILE
from tf_mlstm.data.fields import split_keys
from tf_mlstm.errors import setting_name as _name

# === The run folder's layout (see tf_mlstm/rundir.py) ===

CONFIG_FILE = "config.json"
FINETUNE_CONFIG_FILE = "finetune_config.json"
RESULTS_FILE = "results.json"
CHECKPOINT_SUBDIR = "checkpoints"
LOCK_FILE = "run.lock"

# Settings a checkpoint cannot be resumed under once they change, per config
# file. A value is a function of the setting that must stay equal (None: the
# setting itself).
RESUME_FIXED = {
    CONFIG_FILE: {
        "hidden_size": None,
        "embedding_size": None,
        "weight_norm": None,
        # The optimizer's variables differ (loss scale under mixed_float16),
        # and the carried state is stored in the compute dtype.
        "precision": None,
    },
    FINETUNE_CONFIG_FILE: {
        # Lists compare by their names: a flag's list and a saved string agree.
        "label_key": split_keys,  # the classifier's outputs
        "label_map": None,  # the classes, so the outputs too
        "head_hidden": None,  # the head's variables
        "features": split_keys,  # the head's width
        "precision": None,
        # Whether the LM head is trained decides the optimizer's variables.
        "lm_loss_weight": lambda weight: weight > 0,
    },
}

# A setting given as this is decided later (a resumed run keeps its recorded value).
_AUTO = "auto"


class RunDirError(errors.InvalidValueError):
    """A run folder that cannot be used as asked (in use, changed model, damaged).

    Example:
    >>> from tf_mlstm import errors
    >>> from tf_mlstm.preflight import RunDirError
    >>> errors.is_user_error(RunDirError("runs/a is in use by another run"))
    True
    """


# === The filesystem, without TensorFlow for local paths ===


def _gfile():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.io.gfile


def _remote(path):
    return "://" in path


def exists(path) -> bool:
    """Whether `path` exists (a link that leads nowhere does not)."""
    return _gfile().exists(path) if _remote(path) else os.path.exists(path)


def isdir(path) -> bool:
    """Whether `path` is a folder."""
    return _gfile().isdir(path) if _remote(path) else os.path.isdir(path)


def listdir(path) -> list[str]:
    """The names in the folder `path`."""
    if _remote(path):
        return [name.rstrip("/") for name in _gfile().listdir(path)]
    return os.listdir(path)


def check_link_leads_somewhere(path, what) -> None:
    """Refuses a local path that is a symbolic link to nothing (a loop, or a missing target).

    Args:
      path: an output path (a URL such as `gs://` is not checked).
      what: how to name it in the message (a flag, `--export_dir=...`).

    Raises:
      errors.InvalidValueError: one line naming `what` and the link's target.
    """
    if _remote(path) or not os.path.islink(path) or os.path.exists(path):
        return
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    raise errors.InvalidValueError(
        f"{what}: a symbolic link to {target}, which leads nowhere (a loop of links, or a "
        "missing target); give a folder, or point the link at one"
    )


# === What kind of folder a path is ===

# The kinds of folder the tools make, each told by the file only it writes
# (checked in this order: a fine-tuning run and a preset also hold config.json).
PRESET = "tf_mlstm preset"
PRESET_METADATA_FILE = "metadata.json"
"""The file that tells a preset (`tf_mlstm.models.preset`) from a run folder."""
LANGUAGE_MODEL_RUN = "language-model run"
FINETUNE_RUN = "fine-tuning run"
MODEL_RUNS = (LANGUAGE_MODEL_RUN, FINETUNE_RUN)
TRANSFER_OUTPUT = "tf-mlstm-transfer output folder"
DATA_FOLDER = "tf-mlstm-make-tfrecords data folder"
SAVED_MODEL = "SavedModel"
_KINDS = (
    (PRESET, PRESET_METADATA_FILE),
    (FINETUNE_RUN, FINETUNE_CONFIG_FILE),
    (LANGUAGE_MODEL_RUN, CONFIG_FILE),
    (TRANSFER_OUTPUT, "classifier.json"),
    (DATA_FOLDER, STATS_FILE),
    (DATA_FOLDER, INCOMPLETE_MARKER),
    (SAVED_MODEL, "saved_model.pb"),
)


def use_of(kind, path) -> str:
    """Which command fits a folder of this kind (a sentence for an error line)."""
    return {
        FINETUNE_RUN: f"tf-mlstm-finetune --model_dir={path} continues it",
        LANGUAGE_MODEL_RUN: (
            f"tf-mlstm-train --model_dir={path} continues it; tf-mlstm-finetune takes it "
            f"as --init_model_dir={path}"
        ),
        TRANSFER_OUTPUT: (
            f"tf-mlstm-classify, -export, -generate and -visualize take its "
            f"--classifier={os.path.join(path, 'classifier.json')} beside the --model_dir it "
            "was fitted on"
        ),
        DATA_FOLDER: (
            f"tf-mlstm-train takes it as --train_data={path}, tf-mlstm-eval as --data={path}"
        ),
        SAVED_MODEL: (
            "TensorFlow Serving and tf-mlstm-classify-beam --saved_model serve it; in Python, "
            "tf.saved_model.load loads it after `import tensorflow_text`"
        ),
        PRESET: f"in Python, tf_mlstm.load({path!r}) loads it",
    }[kind]


def with_article(kind) -> str:
    """`kind` with its article ("a fine-tuning run", "an ...")."""
    return f"{'an' if kind[0] in 'aeiouAEIOU' else 'a'} {kind}"


def folder_kind(path) -> tuple[str | None, str | None]:
    """What `path` holds, told by the file only that kind of folder has.

    Args:
      path: a folder (or any path; local or a `tf.io.gfile` URL).

    Returns:
      (kind, the file that tells it): a kind of `MODEL_RUNS`, a transfer output, a data
      folder or a SavedModel (or the folder of its versions); (None, None) when nothing tells.
    """
    if not isdir(path):
        return None, None
    for kind, name in _KINDS:
        if exists(os.path.join(path, name)):
            return kind, name
    for child in sorted(listdir(path)):
        if child.isdigit() and exists(os.path.join(path, child, "saved_model.pb")):
            return SAVED_MODEL, os.path.join(child, "saved_model.pb")
    return None, None


def check_folder_kind(path, flag, command, accept) -> None:
    """Refuses, before anything is read or written, a folder of a kind `command` cannot use.

    Args:
      path, flag: the folder, and the flag that names it (for the message).
      command: the binary (`tf-mlstm-train`), for the message.
      accept: the kinds it takes (see `folder_kind`); None in it accepts a new folder.

    Raises:
      RunDirError: one line: what the folder is, the file that tells it, the command that fits.
    """
    if None in accept:  # a folder the command makes
        check_link_leads_somewhere(path, f"{_name(flag)}={path}")
    kind, evidence = folder_kind(path)
    if kind in accept:
        return
    wanted = [with_article(k) for k in accept if k]
    if None in accept:
        wanted.insert(0, "a new folder")
    if kind is None:
        raise FileNotFoundError(
            f"{path}: no {CONFIG_FILE}, so no trained model; {command} takes "
            f"{' or '.join(wanted)} as {_name(flag)}"
        )
    raise RunDirError(
        f"{_name(flag)}={path} is {with_article(kind)} (it holds {evidence}), and {command} takes "
        f"{' or '.join(wanted)} there: {use_of(kind, path)}."
    )


def missing_config_error(model_dir, name=CONFIG_FILE) -> FileNotFoundError:
    """The error for a run folder without its config file `name`: what the folder is instead."""
    kind, evidence = folder_kind(model_dir) if name == CONFIG_FILE else (None, None)
    if kind is not None:
        return FileNotFoundError(
            f"{model_dir}: no {name}: it is {with_article(kind)} (it holds {evidence}), not a "
            f"trained model; {use_of(kind, model_dir)}."
        )
    return FileNotFoundError(
        f"{model_dir}: no {name}; is it a tf-mlstm-train {_name('model_dir')}?"
    )


def check_trained_model(model_dir, flag="model_dir") -> None:
    """Refuses a run folder to read a model from that holds none (its config.json).

    Args:
      model_dir, flag: the folder, and the flag that names it (for the message).

    Raises:
      FileNotFoundError: one line naming the flag, the folder and what it is instead.
    """
    if not exists(model_dir):
        raise errors.MissingFileError(
            f"{_name(flag)}={model_dir} does not exist, so no trained model ({CONFIG_FILE}) "
            "is there; "
            f"give a tf-mlstm-train or tf-mlstm-finetune {_name('model_dir')}"
        )
    if not isdir(model_dir):
        raise errors.MissingFileError(f"{_name(flag)}={model_dir} is a file, not a run folder")
    if is_preset(model_dir):
        raise preset_not_run_error(model_dir, flag)
    if not exists(os.path.join(model_dir, CONFIG_FILE)):
        raise missing_config_error(model_dir)


def is_preset(path) -> bool:
    """Whether `path` is a preset folder (it holds `PRESET_METADATA_FILE`)."""
    return isdir(path) and exists(os.path.join(path, PRESET_METADATA_FILE))


def preset_not_run_error(path, flag=None) -> RunDirError:
    """The error for a preset given where a run folder goes: what it is and what loads it.

    Args:
      path: the preset folder.
      flag: the flag or argument that named it, or None.

    Returns:
      A `RunDirError` of one line, to raise.
    """
    where = f"{_name(flag)}={path}" if flag else path
    return RunDirError(
        f"{where} is {with_article(PRESET)} (it holds {PRESET_METADATA_FILE}), not a run "
        f"folder: {use_of(PRESET, path)}"
    )


def check_finetune_run(model_dir) -> None:
    """Refuses a `--model_dir` without a finished fine-tuning run, where its head is wanted.

    Raises:
      errors.InvalidValueError: one line naming the folder and the alternative.
    """
    if not is_finetune_run(model_dir):
        raise errors.InvalidValueError(
            f"{_name('model_dir')}={model_dir} is not a finished tf-mlstm-finetune run (no "
            f"{FINETUNE_CONFIG_FILE} and {RESULTS_FILE}); give "
            f"{_name('classifier')}=classifier.json for a tf-mlstm-transfer classifier"
        )


def check_not_run_dir(path, flag) -> None:
    """Refuses an output folder that is a training run's (whose results.json it would replace).

    Args:
      path, flag: the output folder a tool is about to write, and its flag (for the message).

    Raises:
      RunDirError: `path` holds a run (its config or checkpoints).
    """
    for name in (CONFIG_FILE, CHECKPOINT_SUBDIR):
        if exists(os.path.join(path, name)):
            raise RunDirError(
                f"{_name(flag)}={path} is a model folder (it holds {name}); writing here would "
                f"replace the run's {RESULTS_FILE}: give a folder of its own, e.g. "
                f"{os.path.join(path, 'transfer')}."
            )


def is_finetune_run(model_dir) -> bool:
    """Whether `model_dir` holds a finished fine-tuning run (its config and results)."""
    return all(
        exists(os.path.join(model_dir, name)) for name in (FINETUNE_CONFIG_FILE, RESULTS_FILE)
    )


# === A resumed run keeps its model ===


def has_checkpoints(model_dir) -> bool:
    """Whether the run folder holds a checkpoint (an index file or the state file)."""
    folder = os.path.join(model_dir, CHECKPOINT_SUBDIR)
    if not isdir(folder):
        return False
    return any(name.endswith(".index") or name == "checkpoint" for name in listdir(folder))


def flag_value(value) -> str:
    """A setting's value as a flag takes it: a list or dict as JSON, anything else as text."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def refused_changes(saved, new, name) -> list[str]:
    """The settings of `new` a resume under the config file `name` cannot take from `saved`.

    Args:
      saved: the saved config's dict.
      new: {field: value} of the new run (JSON values).
      name: the config file (`CONFIG_FILE` or `FINETUNE_CONFIG_FILE`).

    Returns:
      ["--field=new (saved old)", ...] of the fixed settings that changed, in name order.
    """
    fixed = RESUME_FIXED.get(name, {})
    refused = []
    for field in sorted(new):
        if field in fixed and field in saved and saved[field] != new[field]:
            key = fixed[field] or (lambda v: v)
            if key(saved[field]) != key(new[field]):
                refused.append(
                    f"{_name(field)}={flag_value(new[field])} (saved {flag_value(saved[field])})"
                )
    return refused


def resume_refused_error(model_dir, name, refused) -> RunDirError:
    """The error for a resume that changes the settings `refused` (see `refused_changes`)."""
    return RunDirError(
        f"{model_dir} holds checkpoints of another model or precision ({name}): "
        f"{', '.join(refused)}. Resume with the saved values, or use a new "
        f"{_name('model_dir')}."
    )


def check_resume(model_dir, values, name=CONFIG_FILE, upgrade=None) -> None:
    """Refuses, before the run starts, a resume that changes its model's shape or precision.

    Args:
      model_dir: the run folder (nothing to check when it holds no checkpoint).
      values: {field: the value given}; `auto` (decided later) is not compared.
      name: the config file the values are saved as.
      upgrade: turns a saved dict with earlier field names into today's.

    Raises:
      RunDirError: one line naming each flag with its saved and its new value.
    """
    path = os.path.join(model_dir, name)
    if not has_checkpoints(model_dir) or not exists(path):
        return
    saved = _read_json(path)
    if not isinstance(saved, dict):
        return  # not ours to judge here: reading the config says what is wrong with it
    if upgrade is not None:
        saved = upgrade(saved)
    new = {k: json.loads(json.dumps(v)) for k, v in values.items() if v != _AUTO}
    refused = refused_changes(saved, new, name)
    if refused:
        raise resume_refused_error(model_dir, name, refused)


def check_resume_flags(flag_values, name=CONFIG_FILE, upgrade=None) -> None:
    """`check_resume` of `flag_values.model_dir` with the flags `RESUME_FIXED[name]` names."""
    fixed = RESUME_FIXED[name]
    values = {field: flag_values[field].value for field in fixed}
    check_resume(flag_values.model_dir, values, name, upgrade=upgrade)


def _read_json(path):
    try:
        if _remote(path):
            with _gfile().GFile(path) as f:
                return json.loads(f.read())
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# === The run lock's holder ===


def holder_gone(record) -> bool:
    """True when the lock `record` names a process of this host that no longer runs."""
    if record.get("host") != socket.gethostname():
        return False  # another machine: no way to tell, so it counts as live
    pid = record.get("pid")
    if not isinstance(pid, int):
        return True
    # Our pid but not our lock is an earlier incarnation (containers restart with
    # the same pid); a zombie (a killed worker its dead launcher left) has ended.
    if processes.ended(record.get("host"), pid):
        return True
    start = record.get("process_start")
    now = processes.start_time(pid)
    return start is not None and now is not None and start != now


def describe_holder(record) -> str:
    """The lock holder `record` in words (host, pid, start, command)."""
    return f"host {record.get('host')}, pid {record.get('pid')}, since {record.get('started')}" + (
        f", command {record['command']!r}" if record.get("command") else ""
    )


def in_use_error(model_dir, record) -> RunDirError:
    """The error for a run folder whose lock the live run `record` holds."""
    return RunDirError(
        f"{model_dir} is in use by another run ({describe_holder(record)}): stop it or use "
        f"another {_name('model_dir')}; if that run is gone, delete "
        f"{os.path.join(model_dir, LOCK_FILE)}."
    )


def check_not_in_use(model_dir) -> None:
    """Refuses a run folder a live run holds, before any work (the run takes the lock later).

    Raises:
      RunDirError: one line naming the holder (host, pid, start, command).
    """
    path = os.path.join(model_dir, LOCK_FILE)
    if not exists(path):
        return
    record = _read_json(path)
    if isinstance(record, dict) and record and not holder_gone(record):
        raise in_use_error(model_dir, record)


# === Inputs ===

_GLOB_CHARS = frozenset("*?[")


def _pieces(spec):
    return [piece.strip() for piece in spec.split(",") if piece.strip()]


def _check_readable(flag, path):
    if not _remote(path) and not os.access(path, os.R_OK):
        raise errors.InvalidValueError(f"{_name(flag)}: cannot read {path} (permission denied)")


def check_input_files(flag, spec, folders=False) -> None:
    """Refuses input files that are not there, not files or not readable.

    Args:
      flag: the flag's name (`input`), for the message.
      spec: comma-separated files and globs; "" and "-" (stdin) are not checked.
      folders: a folder is an input too (a TFRecord data folder).

    Raises:
      errors.MissingFileError: a file that does not exist, or a glob that matches none.
      errors.InvalidValueError: a folder where a file is wanted, or an unreadable file.
    """
    for piece in _pieces(spec or ""):
        if piece == "-":
            continue
        if _GLOB_CHARS & set(piece):
            if _remote(piece):
                matches = _gfile().glob(piece)
            else:
                matches = [m for m in glob.glob(piece) if folders or not os.path.isdir(m)]
            if not matches:
                raise errors.MissingFileError(
                    f"{_name(flag)}: input pattern matches no files: {piece}"
                )
            continue
        if not exists(piece):
            what = "input file or folder" if folders else "input file"
            raise errors.MissingFileError(f"{_name(flag)}: {what} not found: {piece}")
        if isdir(piece):
            if not folders:
                raise errors.InvalidValueError(
                    f"{_name(flag)}: input is a directory: {piece} (give a glob such as "
                    f"{piece.rstrip('/')}/*.jsonl)"
                )
            continue
        _check_readable(flag, piece)


def check_input_file(flag, path, what="file") -> None:
    """Refuses one input file (`--classifier`) that is not there, a folder, or unreadable.

    Args:
      flag, what: the flag's name and what the file is ("classifier file"), for the message.
      path: its value ("" is not checked).

    Raises:
      errors.MissingFileError: no such file.
      errors.InvalidValueError: a folder, or unreadable.
    """
    if not path:
        return
    if not exists(path):
        raise errors.MissingFileError(f"{_name(flag)}: {what} not found: {path}")
    if isdir(path):
        raise errors.InvalidValueError(f"{_name(flag)}={path} is a folder, not a {what}")
    _check_readable(flag, path)


# === Outputs ===


def _why_unwritable(path):
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return os.strerror(errno.EROFS)  # "Read-only file system"
    except OSError:
        pass
    return "permission denied"


def _writable_place(flag, path, kind):
    if _remote(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise errors.InvalidValueError(
            f"{_name(flag)}={path}: {parent} is a file, so the {kind} cannot be made there"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise errors.InvalidValueError(
            f"{_name(flag)}={path}: cannot write in {parent} ({_why_unwritable(parent)})"
        )


def check_output_file(flag, path) -> None:
    """Refuses an output file where one cannot be written: a folder, or an unwritable place.

    Args:
      flag, path: the flag's name (for the message) and the file to write ("", "-": unchecked).

    Raises:
      errors.InvalidValueError: one line naming the flag and the path.
    """
    if not path or path == "-" or _remote(path):
        return
    if os.path.isdir(path):
        raise errors.InvalidValueError(
            f"{_name(flag)}={path} is a folder; give the path of the file to write, e.g. "
            f"{os.path.join(path, 'scores.csv')}"
        )
    if os.path.lexists(path) and not os.access(path, os.W_OK):
        raise errors.InvalidValueError(
            f"{_name(flag)}={path}: cannot write it ({_why_unwritable(path)})"
        )
    _writable_place(flag, path, "file")


def check_output_prefix(flag, prefix) -> None:
    """Refuses a prefix of output files (`<prefix>-00000-of-00004.jsonl`) that names a folder.

    Args:
      flag, prefix: the flag's name (for the message) and the files' path up to the shard numbers.

    Raises:
      errors.InvalidValueError: one line naming the flag and the path.
    """
    if not prefix or _remote(prefix):
        return
    if os.path.isdir(prefix):
        raise errors.InvalidValueError(
            f"{_name(flag)}={prefix} is a folder; give a prefix of file names in it, e.g. "
            f"{os.path.join(prefix, 'part')}"
        )
    _writable_place(flag, prefix, "files")


def check_saved_model(flag, path) -> None:
    """Refuses a `--saved_model` that holds no SavedModel (an export's version folder).

    Raises:
      errors.MissingFileError: one line, naming the version folder to give where there is one.
    """
    if any(exists(os.path.join(path, name)) for name in ("saved_model.pb", "saved_model.pbtxt")):
        return
    kind, evidence = folder_kind(path)
    instead = (
        os.path.join(path, os.path.dirname(evidence))
        if kind == SAVED_MODEL
        else "<export_dir>/<version>"
    )
    raise errors.MissingFileError(
        f"{_name(flag)}={path}: no SavedModel there (no saved_model.pb); give the version folder "
        f"that tf-mlstm-export wrote ({instead})"
    )


def check_output_dir(flag, path) -> None:
    """Refuses an output folder where one cannot be made: a file, or an unwritable place.

    Args:
      flag, path: the flag's name (for the message) and the folder to write into (made if missing).

    Raises:
      errors.InvalidValueError: one line naming the flag and the path.
    """
    if not path or _remote(path):
        return
    check_link_leads_somewhere(path, f"{_name(flag)}={path}")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise errors.InvalidValueError(f"{_name(flag)}={path} is a file, not a folder")
    if os.path.isdir(path):
        if not os.access(path, os.W_OK | os.X_OK):
            raise errors.InvalidValueError(
                f"{_name(flag)}={path}: cannot write in it ({_why_unwritable(path)})"
            )
        return
    _writable_place(flag, path, "folder")


def refuse_existing(name, path, overwrite, is_output=None, given=None) -> None:
    """Refuses to replace an existing output unless `overwrite`: the one rerun rule.

    Args:
      name: the flag or argument naming the output, as the user wrote it.
      path: the output file or folder; "", "-" (stdout) and URLs are never refused.
      overwrite: the user's `--overwrite`: replace what is there.
      is_output: for a folder of named files, whether an entry's name counts; None: all do.
      given: the value the user gave, where `path` is its folder; None: `path`.

    Raises:
      errors.InvalidValueError: `path` exists (a folder: holds entries that count), no `overwrite`.
    """
    if overwrite or not path or path == "-" or "://" in path:
        return
    shown = path if given is None else given
    flag = f"{name}={shown}" if name.startswith("--") else f"{name}={shown!r}"
    overwrite_name = "--overwrite" if name.startswith("--") else "overwrite=True"
    if os.path.isdir(path):
        entries = sorted(e for e in os.listdir(path) if is_output is None or is_output(e))
        if not entries:
            return
        held = f"{len(entries)} entries, such as {entries[0]}" if len(entries) > 1 else entries[0]
        what = f"already holds {held}"
    elif os.path.lexists(path):
        what = "already exists"
    else:
        return
    raise errors.InvalidValueError(
        f"{flag} {what}: pass {overwrite_name} to replace it, or choose another"
    )
