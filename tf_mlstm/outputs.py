"""The one rerun rule for what a binary writes: what is there stays, unless `--overwrite`.

Every binary that writes an output checks it with `refuse_existing` before
TensorFlow starts: an existing file, or a folder holding anything (or any of
its named files), is refused in one line naming flag and path. Training run
folders are no outputs in this sense (a rerun resumes); `gs://` paths are
left to the writers.
"""

import os

from tf_mlstm import errors


def refuse_existing(name, path, overwrite, is_output=None, given=None) -> None:
    """Refuses to replace an existing output unless `overwrite`.

    Args:
      name: the flag or argument naming the output, as the user wrote it.
      path: the output file or folder; "" or "-" (stdout) is never refused.
      overwrite: the user's `--overwrite`: replace what is there.
      is_output: for a folder of named files, whether an entry's name counts; None: all do.
      given: the value the user gave, where `path` is its folder; None: `path`.

    Raises:
      errors.InvalidValueError: `path` exists (a folder: holds entries that count)
        and `overwrite` is false.
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
