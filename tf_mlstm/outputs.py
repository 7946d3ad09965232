"""The one rerun rule for what a binary writes: what is there stays, unless `--overwrite`.

Every binary that writes an output file or folder (`tf-mlstm-transfer`,
`-classify`, `-visualize`, `-make-tfrecords`, ...) checks its output with
`refuse_existing`, before TensorFlow starts and before any work: an output
file that exists, or an output folder that holds anything (for a folder of
named files, any file of those names), is refused in one line naming the
flag and the path, unless the user passes `--overwrite`. Training run
folders are not outputs in this sense: a rerun resumes them.

No TensorFlow here, so a binary refuses before it imports it. Paths with a
scheme (`gs://...`) are left to the writers' own checks.
"""

import os

from tf_mlstm import errors


def refuse_existing(name, path, overwrite, is_output=None, given=None) -> None:
    """Refuses to replace an existing output unless `overwrite`.

    Args:
      name: the flag or argument naming the output, as the user wrote it
        (`--output_dir`, or `output_dir` for a Python argument).
      path: the output file or folder; "" or "-" (stdout) is never refused.
      overwrite: the user's `--overwrite`: replace what is there.
      is_output: for a folder of named files, whether an entry's name is one
        the binary writes (others are left alone and do not count); None: a
        folder counts whole.
      given: the value the user gave, for the message, where `path` is its
        folder (a prefix of shards); None: `path`.

    Raises:
      errors.InvalidValueError: `path` exists (a folder: holds entries that
        count) and `overwrite` is false.
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
