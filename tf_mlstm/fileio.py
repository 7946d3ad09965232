"""Whole-file writes that a crash cannot leave half done, on any TensorFlow filesystem.

Run folders may live on local disk, on a network filesystem or in an object
store (`gs://`, `s3://`, `ram://`), so every file goes through `tf.io.gfile`
rather than `open`/`os`. A writer that is killed midway must not leave a
truncated `config.json`, `results.json` or `stats.json` that a later run would
read as complete: the text goes to a temporary sibling first and is renamed
over the target only once it is fully written. On POSIX filesystems the
rename is atomic; object stores give a copy-then-delete, which still never
exposes a partial file under the final name.
"""

import json
import os
import uuid

import tensorflow as tf

from tf_mlstm import errors

_TMP_MARK = ".tmp-"


def write_text_atomic(path, text):
    """Writes `text` to `path` so readers see the old or the new file, never a part.

    Args:
      path: destination file (its folder is created).
      text: the whole content (str, or bytes for a binary file).

    Raises:
      tf.errors.OpError: the filesystem refused (permissions, full disk); the
        destination is left as it was.
    """
    folder = os.path.dirname(path)
    if folder:
        tf.io.gfile.makedirs(folder)
    tmp = f"{path}{_TMP_MARK}{uuid.uuid4().hex}"
    try:
        with tf.io.gfile.GFile(tmp, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)
        raise


def write_json_atomic(path, value):
    """Writes `value` as sorted, indented JSON with `write_text_atomic`."""
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_json(path):
    """Reads a JSON file through `tf.io.gfile`.

    Raises:
      FileNotFoundError: no file at `path`.
      ValueError: the file is not valid JSON (the message names it).
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path}: no such file.")
    with tf.io.gfile.GFile(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise errors.InvalidValueError(f"{path}: not valid JSON ({error}).") from None
