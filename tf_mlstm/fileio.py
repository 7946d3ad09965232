"""Whole-file writes that a crash cannot leave half done, on any TensorFlow filesystem.

Run folders may live on local disk, on a network filesystem or in an object
store (`gs://`, `s3://`, `ram://`), so every file goes through `tf.io.gfile`
rather than `open`/`os`. A writer that is killed midway must not leave a
truncated `config.json`, `results.json` or `stats.json` that a later run would
read as complete: the text goes to a temporary sibling first and is renamed
over the target only once it is fully written. On POSIX filesystems the
rename is atomic; object stores give a copy-then-delete, which still never
exposes a partial file under the final name.

`Staged` is the one way every binary writes what a user keeps (a
classification CSV, a classifier and its plots, an export, a conversion's
shards): beside the final names first, renamed in only once all is written,
so a failure at any stage leaves earlier outputs byte for byte as they were.
"""

import contextlib
import json
import os
import uuid

import tensorflow as tf

from tf_mlstm import errors

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
def write_errors(where):
    """Turns the filesystem refusing a write under `where` into one `errors.WriteError`.

    A full disk, a quota, a file-size limit (`RLIMIT_FSIZE`: TensorFlow says
    OutOfRange, "File too large"), a read-only filesystem, a permission: each
    TensorFlow or OS error raised inside becomes one line naming `where` and
    the cause. What was written before (the older checkpoints) is untouched,
    so the same command resumes once the filesystem takes writes again.

    Args:
      where: the folder or file being written, for the message.

    Raises:
      errors.WriteError: from an `OSError` or a TensorFlow error of a
        filesystem's kinds inside; other errors (a peer that stopped, during
        a multi-worker save) pass through unchanged.
    """
    try:
        yield
    except _WRITE_ERRORS as e:
        raise errors.WriteError(
            f"cannot write to {where}: {errors.one_line(e)}; the files written before are "
            "intact: free space or lift the limit, then run the same command again"
        ) from e


def check_link_leads_somewhere(path, what):
    """Refuses a local path that is a symbolic link to nothing (a loop, or a missing target).

    TensorFlow's filesystem reads such a path as absent, creates nothing
    there without a word, and fails at the first file written inside with
    an `UnknownError` ("Too many levels of symbolic links").

    Args:
      path: an output path (a URL such as `gs://` is not checked).
      what: how to name it in the message (a flag, `--export_dir=...`).

    Raises:
      errors.InvalidValueError: one line naming `what` and the link's target.
    """
    if "://" in path or not os.path.islink(path) or os.path.exists(path):
        return
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    raise errors.InvalidValueError(
        f"{what}: a symbolic link to {target}, which leads nowhere (a loop of links, or a "
        "missing target); give a folder, or point the link at one"
    )


def is_temp_name(name):
    """Whether a folder entry is an output being written or replaced (`Staged`'s)."""
    return os.path.basename(name.rstrip("/")).startswith((TMP_PREFIX, OLD_PREFIX))


def _sibling(path, prefix):
    # A prefix, not a suffix: some filesystems (ram://) report a file as
    # existing when another one's name extends it.
    folder, name = os.path.split(path.rstrip("/"))
    return os.path.join(folder, f"{prefix}{name}-{uuid.uuid4().hex}")


def _fsync(path, recursive=True):
    """Flushes a local file or folder (with what it holds) to disk.

    Other filesystems (object stores) commit a file when it is closed.
    """
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

    Every binary writes what a user keeps this way: `path(final)` gives a
    hidden temporary name in the same folder (a file or a folder may be
    written there); leaving the `with` block normally flushes each to disk and
    renames it over its final name (a folder replaces an earlier one as a
    whole), and leaving it with an error removes them all, so an earlier
    output is left byte for byte as it was. A binary checks its inputs before
    it stages anything.

      with fileio.Staged() as staged:
          write_csv(staged.path("scores.csv"))
          draw(staged.path("plot.png"))
    """

    def __init__(self):
        self._pending = []  # (temporary, final)

    def path(self, final):
        """A temporary sibling of `final` to write (its folder is created)."""
        folder = os.path.dirname(final.rstrip("/"))
        if folder:
            tf.io.gfile.makedirs(folder)
        tmp = _sibling(final, TMP_PREFIX)
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

    def commit(self):
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
        except BaseException:
            self.discard()
            raise

    def discard(self):
        """Removes what was staged and not yet renamed in."""
        for tmp, _ in self._pending:
            _remove(tmp)
        self._pending = []


def _remove(path):
    try:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        elif tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    except tf.errors.NotFoundError:
        pass


def _rename_over(tmp, final):
    """Renames `tmp` to `final`; a folder there is moved aside, then removed."""
    if not tf.io.gfile.isdir(tmp):
        tf.io.gfile.rename(tmp, final, overwrite=True)
    else:
        old = _sibling(final, OLD_PREFIX) if tf.io.gfile.exists(final) else None
        if old:
            tf.io.gfile.rename(final, old)
        try:
            tf.io.gfile.rename(tmp, final)
        except BaseException:
            if old:
                tf.io.gfile.rename(old, final)
            raise
        if old:
            tf.io.gfile.rmtree(old)
    # The renamed entry itself is durable once its folder is.
    _fsync(os.path.dirname(final.rstrip("/")) or ".", recursive=False)


@contextlib.contextmanager
def replacing(path):
    """`Staged` for one output: yields the temporary name to write for `path`."""
    with Staged() as staged:
        yield staged.path(path)


def write_text_atomic(path, text):
    """Writes `text` to `path` so readers see the old or the new file, never a part.

    Args:
      path: destination file (its folder is created).
      text: the whole content (str, or bytes for a binary file).

    Raises:
      tf.errors.OpError: the filesystem refused (permissions, full disk); the
        destination is left as it was.
    """
    with replacing(path) as tmp:
        with tf.io.gfile.GFile(tmp, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)


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
