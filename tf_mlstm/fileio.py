"""Whole-file writes that a crash cannot leave half done, on any TensorFlow filesystem.

Every file goes through `tf.io.gfile` (run folders may be on `gs://`, `s3://`, `ram://`) and
is written to a hidden sibling, then renamed over its final name, so no reader sees a part.
`Staged` writes every output a user keeps this way; a staged name carries its writer's host
and pid, so the next writer removes what an ended writer left (`clean_leftovers`).
"""

import contextlib
import json
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm import processes

TMP_PREFIX = ".tmp-"
"""Names of outputs being written (`Staged`): hidden, beside their final name."""
OLD_PREFIX = ".old-"
"""Names of replaced folders for the moment between two renames (`Staged`)."""


# What TensorFlow raises when a filesystem refuses a write: EFBIG (a size
# limit) is OutOfRange; ENOSPC and EDQUOT ResourceExhausted; EROFS and EACCES
# PermissionDenied; EIO and the like Unknown.
_WRITE_ERRORS = (
    OSError,
    tf.errors.OutOfRangeError,
    tf.errors.ResourceExhaustedError,
    tf.errors.PermissionDeniedError,
    tf.errors.NotFoundError,
    tf.errors.AlreadyExistsError,
    tf.errors.DataLossError,
    tf.errors.UnknownError,
)


@contextlib.contextmanager
def write_errors(where) -> Iterator[None]:
    """Turns the filesystem refusing a write under `where` into one `errors.WriteError`.

    Args:
      where: the folder or file being written, for the message.

    Raises:
      errors.WriteError: a full disk, quota, size limit, read-only filesystem, permission.
    """
    try:
        yield
    except _WRITE_ERRORS as e:
        raise errors.WriteError(
            f"cannot write to {where}: {errors.one_line(e)}; the files written before are "
            "intact: free space or lift the limit, then run the same command again"
        ) from e


def is_temp_name(name) -> bool:
    """Whether a folder entry is an output being written or replaced (`Staged`'s)."""
    return os.path.basename(name.rstrip("/")).startswith((TMP_PREFIX, OLD_PREFIX))


# Staged names this process has made and not yet renamed in or removed: a
# leftover of this pid outside it belongs to an earlier process that had the
# same pid (a restarted container).
_IN_FLIGHT = set()


def _sibling(path, prefix):
    # A prefix, not a suffix: some filesystems (ram://) report a file as
    # existing when another one's name extends it. The writer's host and pid
    # tell a later writer whether it is still running (`clean_leftovers`).
    folder, name = os.path.split(path.rstrip("/"))
    writer = f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:16]}"
    return os.path.join(folder, f"{prefix}{name}-{writer}")


def staging_name(final) -> str:
    """Where to stage `final`: a hidden sibling `clean_leftovers` removes once its writer ends."""
    return _sibling(final, TMP_PREFIX)


def _leftover_of(entry, name, folder):
    for prefix in (TMP_PREFIX, OLD_PREFIX):
        head = f"{prefix}{name}-"
        if not entry.startswith(head):
            continue
        writer = entry[len(head) :].rsplit(".", 2)
        if (
            len(writer) != 3
            or not writer[1].isdigit()
            or os.path.join(folder, entry) in (_IN_FLIGHT)
        ):
            continue
        if processes.ended(writer[0], int(writer[1])):
            return prefix
    return None


def clean_leftovers(final) -> None:
    """Removes what an ended writer of `final` left beside it; restores a moved-aside `final`.

    Staged siblings (`.tmp-<name>-<writer>`) of ended writers are removed; an earlier output
    moved aside (`.old-<name>-<writer>`) comes back when `final` is missing, else goes.
    Writers that still run, or run on another host, are left alone.

    Args:
      final: the output's final name.
    """
    folder, name = os.path.split(final.rstrip("/"))
    try:
        if set("*?[]\\") & set(name):
            entries = tf.io.gfile.listdir(folder or ".")
        else:
            # By prefix: an object store lists only those names, not the whole folder.
            entries = [
                os.path.basename(path.rstrip("/"))
                for prefix in (TMP_PREFIX, OLD_PREFIX)
                for path in tf.io.gfile.glob(os.path.join(folder, f"{prefix}{name}-*"))
            ]
    except tf.errors.NotFoundError:
        return
    for entry in sorted(entry.rstrip("/") for entry in entries):
        kind = _leftover_of(entry, name, folder)
        path = os.path.join(folder, entry)
        if kind == OLD_PREFIX and not tf.io.gfile.exists(final) and not os.path.islink(final):
            tf.io.gfile.rename(path, final)
        elif kind:
            _remove(path)


def clean_checkpoint_temps(checkpoint_dir) -> None:
    """Removes the `<prefix>_temp` folders a failed or killed `tf.train.Checkpoint.save` left.

    Only the folder's writer (the run lock's holder) may call this, before it saves.

    Args:
      checkpoint_dir: a folder of checkpoints (may be missing).
    """
    if not tf.io.gfile.isdir(checkpoint_dir):
        return
    for entry in tf.io.gfile.listdir(checkpoint_dir):
        entry = entry.rstrip("/")
        path = os.path.join(checkpoint_dir, entry)
        if entry.endswith("_temp") and tf.io.gfile.isdir(path) and not os.path.islink(path):
            _remove(path)


def _fsync(path, recursive=True):
    """Flushes a local file or folder (with what it holds) to disk; object stores need not."""
    if "://" in path:
        return
    paths = [path]
    if recursive and os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            paths += [os.path.join(root, name) for name in files + dirs]
    for name in paths:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Staged:
    """Outputs written beside their final names, renamed in together only on success.

    `path(final)` gives a hidden temporary name in the same folder; leaving the `with` block
    normally flushes and renames each over its final name, leaving it with an error removes
    them all, so an earlier output is left as it was.

    Example:
    >>> import os
    >>> from tf_mlstm import fileio
    >>> with fileio.Staged() as staged:
    ...     with open(staged.path("scores.csv"), "w") as f:
    ...         _ = f.write("text,score")
    >>> os.listdir(".")
    ['scores.csv']
    """

    def __init__(self):
        self._pending = []  # (temporary, final)

    def path(self, final) -> str:
        """A temporary sibling of `final` to write (its folder is made, old leftovers removed)."""
        folder = os.path.dirname(final.rstrip("/"))
        if folder:
            tf.io.gfile.makedirs(folder)
        clean_leftovers(final)
        tmp = _sibling(final, TMP_PREFIX)
        _IN_FLIGHT.add(tmp)
        self._pending.append((tmp, final))
        return tmp

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.commit()
        else:
            self.discard()
        return False

    def commit(self) -> None:
        """Renames every staged output over its final name (each written by now)."""
        try:
            # A staged name the writer did not use (an optional output) is no output.
            self._pending = [(t, f) for t, f in self._pending if tf.io.gfile.exists(t)]
            for tmp, _ in self._pending:
                _fsync(tmp)
            while self._pending:
                tmp, final = self._pending[0]
                _rename_over(tmp, final)
                self._pending.pop(0)
                _IN_FLIGHT.discard(tmp)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Removes what was staged and not yet renamed in."""
        for tmp, _ in self._pending:
            _remove(tmp)
            _IN_FLIGHT.discard(tmp)
        self._pending = []


def _remove(path):
    """Removes a file or folder; a symbolic link goes itself, never what it points to."""
    try:
        if os.path.islink(path):
            os.unlink(path)
        elif tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    except tf.errors.NotFoundError:
        pass


def _rename_over(tmp, final):
    """Renames `tmp` over `final`: a folder there is moved aside, then removed; a link replaced."""
    if not tf.io.gfile.isdir(tmp):
        tf.io.gfile.rename(tmp, final, overwrite=True)
    else:
        there = tf.io.gfile.exists(final) or os.path.islink(final)
        old = _sibling(final, OLD_PREFIX) if there else None
        if old:
            tf.io.gfile.rename(final, old)
        try:
            tf.io.gfile.rename(tmp, final)
        except BaseException:
            if old:
                tf.io.gfile.rename(old, final)
            raise
        if old:
            _remove(old)
    # The renamed entry itself is durable once its folder is.
    _fsync(os.path.dirname(final.rstrip("/")) or ".", recursive=False)


@contextlib.contextmanager
def replacing(path) -> Iterator[str]:
    """`Staged` for one output: yields the temporary name to write for `path`."""
    with Staged() as staged:
        yield staged.path(path)


def write_text_atomic(path, text) -> None:
    """Writes `text` to `path` so readers see the old or the new file, never a part.

    Args:
      path: destination file (its folder is created).
      text: the whole content (str, or bytes for a binary file).

    Raises:
      tf.errors.OpError: the filesystem refused; the destination is left as it was.
    """
    with replacing(path) as tmp:
        with tf.io.gfile.GFile(tmp, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)


def write_json_atomic(path, value) -> None:
    """Writes `value` as sorted, indented JSON with `write_text_atomic`."""
    write_text_atomic(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def read_json(path) -> Any:
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
