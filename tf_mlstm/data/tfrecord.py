"""TFRecord schema, sharded writer and parser for review corpora.

A record is a `tf.train.Example` of `text`, `label` (-1 unknown), `rating` (NaN unknown) and
`source`. `ShardAssignment` places a document by a stable hash, so every converter agrees.
"""

import bisect
import concurrent.futures
import contextlib
import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Sequence
from typing import Any

import tensorflow as tf
from google.protobuf.message import DecodeError

from tf_mlstm import errors
from tf_mlstm.data import fields
from tf_mlstm.data.fields import SPLITS
from tf_mlstm.data.readers import Document

TEXT_FEATURE = "text"
LABEL_FEATURE = "label"
RATING_FEATURE = "rating"
SOURCE_FEATURE = "source"
UNKNOWN_LABEL = -1

TFRECORD_SUFFIX = ".tfrecord"
GZIP_SUFFIX = ".gz"
_COMPRESSIONS = (None, "GZIP")
# File present in an output folder from the start to the end of a conversion
# (named in `fields`, where the TensorFlow-free checks before work read it too).
INCOMPLETE_MARKER = fields.INCOMPLETE_MARKER
SPILL_SUBDIR = "_shard_parts"
"""Where `ShardedWriter` keeps buffered records when it cannot hold every shard open."""
# Files ShardedWriter holds open at most, of the process's open-file limit:
# the rest is left to input files (up to 64 when interleaving), TensorFlow
# and Python.
_OPEN_FILES_SHARE = 4
_DEFAULT_MAX_OPEN_FILES = 256
_SPILL_BYTES = 128 << 20
_PROBE_THREADS = 16
# zlib level 1 compresses review text to 46% instead of 40% (the default
# level 6) but at 5x the speed, which keeps the single-threaded converter
# above 20 MB/s of input; readers decompress any level.
_GZIP_LEVEL = 1


def make_example(doc: Document) -> bytes:
    """Serializes a document as a `tf.train.Example`.

    Args:
        doc: The document; its text is stored as is.

    Returns:
        The serialized `tf.train.Example`.
    """
    return serialize(doc.text.encode("utf-8"), doc)


def serialize(text: bytes, doc: Document) -> bytes:
    """`make_example` of `doc` with its text already encoded as UTF-8 `text`."""
    label, rating = doc.label, doc.rating
    example = tf.train.Example()
    feature = example.features.feature
    feature[TEXT_FEATURE].bytes_list.value.append(text)
    feature[LABEL_FEATURE].int64_list.value.append(UNKNOWN_LABEL if label is None else label)
    feature[RATING_FEATURE].float_list.value.append(float("nan") if rating is None else rating)
    feature[SOURCE_FEATURE].bytes_list.value.append(doc.source.encode("utf-8"))
    # Map keys in sorted order: a document's bytes are the same in every
    # process (the order of a proto map otherwise varies), so shards written
    # by Beam workers are byte for byte the same however the work was divided.
    return example.SerializeToString(deterministic=True)


def feature_spec() -> dict[str, tf.io.FixedLenFeature]:
    """Returns the parsing spec; label, rating and source default to unknown if absent."""
    return {
        TEXT_FEATURE: tf.io.FixedLenFeature([], tf.string),
        LABEL_FEATURE: tf.io.FixedLenFeature([], tf.int64, default_value=UNKNOWN_LABEL),
        RATING_FEATURE: tf.io.FixedLenFeature([], tf.float32, default_value=float("nan")),
        SOURCE_FEATURE: tf.io.FixedLenFeature([], tf.string, default_value=""),
    }


def parse_example(serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """Parses one serialized record, for `tf.data.Dataset.map`.

    Args:
        serialized: A scalar `tf.string` tensor.

    Returns:
        {"text", "label", "rating", "source"}: string, int64, float32 and string scalars.
    """
    return tf.io.parse_single_example(serialized, feature_spec())


def shard_name(split: str, index: int, count: int, compression: str | None = None) -> str:
    """Returns the file name of one shard.

    Args:
        split: One of `SPLITS`.
        index: 0-based shard index.
        count: Number of shards of the split.
        compression: None or "GZIP" (which appends ".gz").

    Returns:
        For example "train-00003-of-00100.tfrecord".
    """
    suffix = TFRECORD_SUFFIX + (GZIP_SUFFIX if compression == "GZIP" else "")
    return f"{split}-{index:05d}-of-{count:05d}{suffix}"


def split_files(data_dir_or_glob: str, split: str) -> list[str]:
    """Lists the shard files of one split.

    Args:
        data_dir_or_glob: A `ShardedWriter` folder (its `{split}-*` files) or a glob (all matches).
        split: One of `SPLITS`.

    Returns:
        The files, sorted.

    Raises:
        ValueError: If `split` is not one of `SPLITS`.
        FileNotFoundError: If nothing matches.
        IncompleteDataError: If a folder holds a conversion that has not finished.
    """
    if split not in SPLITS:
        raise errors.InvalidValueError(f"split must be one of {SPLITS}, got {split!r}")
    pattern = data_dir_or_glob
    if tf.io.gfile.isdir(data_dir_or_glob):
        check_complete(data_dir_or_glob)
        pattern = os.path.join(data_dir_or_glob, f"{split}-*{TFRECORD_SUFFIX}*")
    files = sorted(tf.io.gfile.glob(pattern))
    for folder in sorted({os.path.dirname(f) for f in files}):
        check_complete(folder)
    if not files:
        raise FileNotFoundError(f"no {split} TFRecord files match {pattern}")
    return files


def is_tfrecord_data(spec: str) -> bool:
    """Whether `spec` names TFRecord data rather than raw corpus files.

    Args:
        spec: a `--data`/`--train_data` value.

    Returns:
        True for TFRecord data or a spec that matches nothing; False for raw files.
    """
    if tf.io.gfile.isdir(spec) or TFRECORD_SUFFIX in spec:
        return True
    if "," in spec:
        return False
    matches = sorted(m for m in tf.io.gfile.glob(spec) if not tf.io.gfile.isdir(m))
    if not matches:
        return True
    first = matches[0]
    try:
        with _record_stream(first, first.endswith(GZIP_SUFFIX)) as stream:
            head = stream.read(_RECORD_HEADER)
    except (OSError, EOFError, zlib.error, tf.errors.OpError):
        return False
    if not head:
        return True  # No bytes at all: an empty shard (nothing to read either way).
    # Read in Python, not by a TFRecordDataset: on a CSV or text file that one
    # logs "DATA_LOSS: corrupted record" although the run then goes on well.
    return starts_with_tfrecord_header(head)


_RECORD_HEADER = 12
"""Bytes a TFRecord starts with: the record's length (uint64) and its masked CRC-32C (uint32)."""


@contextlib.contextmanager
def _record_stream(path, gzipped):
    with tf.io.gfile.GFile(path, "rb") as f:
        if gzipped:
            with gzip.GzipFile(fileobj=f) as stream:
                yield stream
        else:
            yield f


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C (Castagnoli) TFRecord framing stores after the length and the data."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def starts_with_tfrecord_header(head: bytes) -> bool:
    """Whether `head` (a file's first bytes) opens a TFRecord: a length and its checksum."""
    if len(head) < _RECORD_HEADER:
        return False  # Some bytes but shorter than a record's framing: text ("Ok\n").
    length, stored = head[:8], int.from_bytes(head[8:_RECORD_HEADER], "little")
    return masked_crc32c(length) == stored


class IncompleteDataError(errors.InvalidValueError):
    """A TFRecord folder whose conversion did not finish.

    Example:

    >>> from tf_mlstm import errors
    >>> from tf_mlstm.data.tfrecord import IncompleteDataError
    >>> errors.is_user_error(IncompleteDataError("data/: the conversion did not finish"))
    True
    """


def split_bytes(files: Sequence[str], split: str) -> int:
    """UTF-8 bytes of normalized text in `files`, from their folders' stats.json.

    Args:
      files: shards of `split`.
      split: the split's name ("train", ...).

    Returns:
      The byte count.

    Raises:
      ValueError: a folder has no stats.json, or it records no such split.
    """
    return split_counts(files, split)["bytes"]


def split_counts(files: Sequence[str], split: str) -> dict[str, int]:
    """Records and bytes of normalized text in `files`, from their folders' stats.json.

    Args:
      files: shards of `split`.
      split: the split's name ("train", ...).

    Returns:
      {"records": int, "bytes": int}.

    Raises:
      ValueError: a folder has no stats.json, or it records no such split.
    """
    by_folder: dict[str, int] = {}
    for path in files:
        folder = os.path.dirname(path)
        by_folder[folder] = by_folder.get(folder, 0) + 1
    totals = {"records": 0.0, "bytes": 0.0}
    for folder, named in by_folder.items():
        stats_path = os.path.join(folder, fields.STATS_FILE)
        if not tf.io.gfile.exists(stats_path):
            raise errors.InvalidValueError(
                f"{folder}: no stats.json to count the {split} characters from; convert the "
                f"corpus with tf-mlstm-make-tfrecords, or give {errors.setting_name('max_steps')} "
                "instead."
            )
        with tf.io.gfile.GFile(stats_path) as f:
            record = json.load(f).get("splits", {}).get(split)
        if not record or not record.get("shards"):
            raise errors.InvalidValueError(f"{stats_path}: records no {split!r} split.")
        for key in totals:
            totals[key] += record[key] * min(named, record["shards"]) / record["shards"]
    return {key: int(value) for key, value in totals.items()}


def check_complete(folder: str) -> None:
    """Raises if `folder` holds a conversion that has not finished.

    Args:
        folder: A TFRecord folder.

    Raises:
        IncompleteDataError: If `INCOMPLETE_MARKER` is there.
    """
    if tf.io.gfile.exists(os.path.join(folder or ".", INCOMPLETE_MARKER)):
        raise IncompleteDataError(
            f"{folder}: incomplete TFRecord data (its conversion did not finish; "
            f"{INCOMPLETE_MARKER} is still there): re-run tf-mlstm-make-tfrecords into it "
            "with --overwrite"
        )


def _first_record(path: str, compression: str) -> bytes | None:
    """The data of the first record of the TFRecord file `path`; None when it holds none."""
    try:
        with _record_stream(path, compression == "GZIP") as stream:
            head = stream.read(_RECORD_HEADER)
            if not head:
                return None
            if not starts_with_tfrecord_header(head):
                raise errors.InvalidValueError(
                    f"{path}: not a TFRecord file (it does not start with a record's length "
                    "and its checksum); convert the corpus with tf-mlstm-make-tfrecords"
                )
            length = int.from_bytes(head[:8], "little")
            data = stream.read(length)
    except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:
        message = getattr(e, "message", None) or str(e)
        raise errors.InvalidValueError(
            f"{path}: not a readable {compression or 'uncompressed'} TFRecord file ({message})"
        ) from None
    if len(data) < length:
        raise errors.InvalidValueError(
            f"{path}: record 1 is cut short ({len(data)} of its {length} bytes)"
        )
    return data


# The `tf.train.Feature` value list `parse_example` reads each dtype of `feature_spec` from.
_LIST_OF_DTYPE = {tf.string: "bytes_list", tf.int64: "int64_list", tf.float32: "float_list"}


def check_example(record: bytes, where: str) -> None:
    """Raises unless `record` is an Example of `feature_spec`.

    Args:
        record: A record's bytes.
        where: The shard and record, for the message.

    Raises:
        InvalidValueError: One line naming `where` and what is wrong.
    """
    try:
        example = tf.train.Example.FromString(record)
    except DecodeError:
        raise errors.InvalidValueError(
            f"{where} is not a tf.train.Example (its bytes do not parse as one); convert the "
            "corpus with tf-mlstm-make-tfrecords"
        ) from None
    # A feature without a value list reads as absent, as TensorFlow's parser takes it.
    kinds = {name: f.WhichOneof("kind") for name, f in example.features.feature.items()}
    kinds = {name: kind for name, kind in kinds.items() if kind}
    for name, spec in feature_spec().items():
        wanted = _LIST_OF_DTYPE[spec.dtype]
        if name not in kinds:
            if spec.default_value is not None:
                continue  # optional: parse_example fills in its default
            has = ", ".join(sorted(kinds)) or "no features"
            raise errors.InvalidValueError(
                f"{where} has no feature {name!r} (it has: {has}): not a tf-mlstm-make-tfrecords "
                "record; convert the corpus with tf-mlstm-make-tfrecords"
            )
        if kinds[name] != wanted:
            held, want = kinds[name].removesuffix("_list"), wanted.removesuffix("_list")
            raise errors.InvalidValueError(
                f"{where}: feature {name!r} holds {held} values, where tf-mlstm-make-tfrecords "
                f"writes {want}; convert the corpus with tf-mlstm-make-tfrecords"
            )
        count = len(getattr(example.features.feature[name], wanted).value)
        if count != 1:
            raise errors.InvalidValueError(
                f"{where}: feature {name!r} holds {count} values, where tf-mlstm-make-tfrecords "
                "writes one"
            )


def _holds_records(path: str, compression: str) -> bool:
    record = _first_record(path, compression)
    if record is None:
        return False
    check_example(record, f"{path}: record 1")
    return True


def nonempty_files(files: Sequence[str]) -> list[str]:
    """The files that hold at least one record, in order, each checked against the schema.

    Args:
        files: TFRecord files, all gzip or all uncompressed.

    Returns:
        The files with records.

    Raises:
        ValueError: A file unreadable or not of the schema, or compression is mixed.
    """
    files = list(files)
    if not files:
        return []
    compression = compression_type(files)
    with concurrent.futures.ThreadPoolExecutor(min(_PROBE_THREADS, len(files))) as pool:
        has = list(pool.map(lambda path: _holds_records(path, compression), files))
    return [path for path, keep in zip(files, has) if keep]


def compression_type(files: Sequence[str]) -> str:
    """Returns the `tf.data.TFRecordDataset` compression type of shard files.

    Args:
        files: Shard files, as from `split_files`.

    Returns:
        "GZIP" if every name ends in ".gz", "" if none does.

    Raises:
        ValueError: If compressed and uncompressed files are mixed.
    """
    gzipped = {name.endswith(GZIP_SUFFIX) for name in files}
    if len(gzipped) > 1:
        raise errors.InvalidValueError(
            f"mixed gzip and uncompressed TFRecord files: {list(files)[:4]} ..."
        )
    return "GZIP" if gzipped == {True} else ""


def split_shard_counts(num_train_shards: int, split_weights: Sequence[int]) -> dict[str, int]:
    """Returns the shard count per split, each shard about a train shard's size.

    Args:
        num_train_shards: Shards of the train split, >= 1.
        split_weights: Positive weights (train, validation, test).

    Returns:
        `{split: shard count}` for every split in `SPLITS`.
    """
    train_weight = split_weights[0]
    return {
        split: (
            num_train_shards
            if split == "train"
            else max(1, round(num_train_shards * weight / train_weight))
        )
        for split, weight in zip(SPLITS, split_weights)
    }


def document_key(source: str, line: int, text: str = "") -> bytes:
    """The stable hash of a document's identity (file base name and line, or text).

    Args:
        source: The input file, as named to the converter.
        line: The line the record starts at; 0 for none.
        text: The document's text, used only when `line` is 0.

    Returns:
        16 bytes.
    """
    name = os.path.basename(source.rstrip("/"))
    identity = f"{name}\n{line}" if line > 0 else f"{name}\n0\n{text}"
    return hashlib.blake2b(identity.encode(), digest_size=16).digest()


class ShardAssignment:
    """Which split and which shard of it a document goes to, from its identity alone.

    Args:
        num_train_shards: Number of train shards, >= 1.
        split_weights: Positive weights (train, validation, test).

    Example:

    >>> from tf_mlstm.data.tfrecord import ShardAssignment
    >>> assignment = ShardAssignment(num_train_shards=4, split_weights=(8, 1, 1))
    >>> place = assignment.assign("reviews.json", line=1)
    >>> place == assignment.assign("reviews.json", line=1)  # the same whatever else comes
    True
    >>> assignment.shard_counts
    {'train': 4, 'validation': 1, 'test': 1}
    """

    def __init__(self, num_train_shards: int, split_weights: Sequence[int]):
        self.shard_counts = split_shard_counts(num_train_shards, split_weights)
        self._counts = [self.shard_counts[split] for split in SPLITS]
        self._total = sum(split_weights)
        bounds, running = [], 0
        for weight in split_weights:
            running += weight
            bounds.append(running)
        self._bounds = bounds

    def assign(self, source: str, line: int, text: str = "") -> tuple[int, int]:
        """(index of the split in `SPLITS`, shard index in the split); args as `document_key`'s."""
        return self.assign_key(document_key(source, line, text))

    def assign_key(self, key: bytes) -> tuple[int, int]:
        """`assign` for a `document_key` already computed."""
        high = int.from_bytes(key[:8], "big")
        split = bisect.bisect_right(self._bounds, (high * self._total) >> 64)
        return split, int.from_bytes(key[8:16], "big") % self._counts[split]


def record_options(compression: str | None) -> tf.io.TFRecordOptions:
    """How the converters write shards: uncompressed, or GZIP at the fast level 1.

    Args:
        compression: None or "GZIP".

    Returns:
        The options for `tf.io.TFRecordWriter`.
    """
    return tf.io.TFRecordOptions(
        compression_type=compression or "",
        compression_level=_GZIP_LEVEL if compression else None,
    )


class ShardedWriter:
    """Writes documents into sharded TFRecord files, split by weights (`ShardAssignment`).

    Past `max_open_files` shards, records spill to part files that `close` assembles.

    Args:
        output_dir: Directory for the shards; created if missing.
        num_train_shards: Number of train shards, >= 1.
        split_weights: Positive integer weights (train, validation, test).
        compression: None, or "GZIP" for gzip-compressed shards ("*.gz").
        max_open_files: Most shard files open at once; None: a quarter of the limit.
        spill_bytes: Records buffered before they go to part files.

    Raises:
        ValueError: If an argument is out of range.

    Example:

    >>> from tf_mlstm.data.readers import Document
    >>> from tf_mlstm.data.tfrecord import ShardedWriter
    >>> with ShardedWriter("shards", num_train_shards=2) as writer:
    ...     for line, text in enumerate(["One review.", "Another."], start=1):
    ...         _ = writer.write(Document(text, source="reviews.txt", line=line))
    >>> sum(split["records"] for split in writer.split_stats().values())
    2
    >>> writer.split_stats()["train"]["shards"]
    2
    """

    def __init__(
        self,
        output_dir: str,
        num_train_shards: int,
        split_weights: Sequence[int] = (1000, 1, 1),
        compression: str | None = None,
        max_open_files: int | None = None,
        spill_bytes: int = _SPILL_BYTES,
    ):
        split_weights = tuple(split_weights)
        if num_train_shards < 1:
            raise errors.InvalidValueError(f"num_train_shards must be >= 1, got {num_train_shards}")
        if len(split_weights) != len(SPLITS) or not all(
            isinstance(w, int) and w > 0 for w in split_weights
        ):
            raise errors.InvalidValueError(
                f"split_weights must be {len(SPLITS)} positive integers "
                f"(train, validation, test), got {split_weights}"
            )
        compression = compression.upper() if compression else None
        if compression not in _COMPRESSIONS:
            raise errors.InvalidValueError(
                f"compression must be None or 'GZIP', got {compression!r}"
            )
        if max_open_files is not None and max_open_files < 1:
            raise errors.InvalidValueError(f"max_open_files must be >= 1, got {max_open_files}")
        self._output_dir = output_dir
        self._compression = compression
        self._shard_counts = split_shard_counts(num_train_shards, split_weights)
        self._paths = {
            split: [
                os.path.join(output_dir, shard_name(split, i, count, compression))
                for i in range(count)
            ]
            for split, count in self._shard_counts.items()
        }
        self._max_open_files = max_open_files or _default_max_open_files()
        self._spill_bytes = spill_bytes
        self._open = False
        # Direct mode: one writer per shard. Spill mode: records per shard.
        self._writers: dict[str, list[tf.io.TFRecordWriter]] | None = None
        self._buffers: dict[str, list[list[bytes]]] | None = None
        self._parts: dict[str, list[list[str]]] = {}
        self._buffered = 0
        self._spills = 0
        self._assignment = ShardAssignment(num_train_shards, split_weights)
        self._records = [0] * len(SPLITS)
        self._bytes = [0] * len(SPLITS)

    @property
    def paths(self) -> dict[str, list[str]]:
        """The shard files per split."""
        return {split: list(paths) for split, paths in self._paths.items()}

    @property
    def spills(self) -> bool:
        """Whether the shards go through part files (too many to hold open)."""
        return sum(self._shard_counts.values()) > self._max_open_files

    def open(self) -> "ShardedWriter":
        """Creates the output directory and opens the shard files.

        Returns:
            self.

        Raises:
            FileExistsError: the directory holds other shard files.
        """
        if self._open:
            return self
        tf.io.gfile.makedirs(self._output_dir)
        ours = {path for paths in self._paths.values() for path in paths}
        stale = sorted(
            path
            for split in SPLITS
            for path in tf.io.gfile.glob(
                os.path.join(self._output_dir, f"{split}-*{TFRECORD_SUFFIX}*")
            )
            if path not in ours
        )
        if stale:
            raise FileExistsError(
                f"{self._output_dir} already holds {len(stale)} other shard files, such as "
                f"{stale[0]}, which would be read with the new ones; remove them or "
                "choose another output directory"
            )
        if self.spills:
            spill_dir = os.path.join(self._output_dir, SPILL_SUBDIR)
            if tf.io.gfile.exists(spill_dir):  # Left by a conversion that crashed.
                tf.io.gfile.rmtree(spill_dir)
            tf.io.gfile.makedirs(spill_dir)
            self._buffers = {split: [[] for _ in paths] for split, paths in self._paths.items()}
            self._parts = {split: [[] for _ in paths] for split, paths in self._paths.items()}
        else:
            self._writers = {
                split: [tf.io.TFRecordWriter(path, self._options()) for path in paths]
                for split, paths in self._paths.items()
            }
        self._open = True
        return self

    def _options(self) -> tf.io.TFRecordOptions:
        return record_options(self._compression)

    def write(self, doc: Document) -> str:
        """Writes one document to its shard.

        Args:
            doc: The document.

        Returns:
            The split it went to.

        Raises:
            RuntimeError: If the writer is not open.
        """
        if not self._open:
            raise RuntimeError("ShardedWriter.write called before open() or after close()")
        chosen, shard = self._assignment.assign(doc.source, doc.line, doc.text)
        split = SPLITS[chosen]
        text = doc.text.encode("utf-8")
        record = serialize(text, doc)
        if self._writers is not None:
            self._writers[split][shard].write(record)
        else:
            self._buffers[split][shard].append(record)
            self._buffered += len(record)
            if self._buffered >= self._spill_bytes:
                self._spill()
        self._records[chosen] += 1
        self._bytes[chosen] += len(text)
        return split

    def _spill(self) -> None:
        for split, buffers in self._buffers.items():
            for shard, records in enumerate(buffers):
                if not records:
                    continue
                name = os.path.basename(self._paths[split][shard])
                part = os.path.join(
                    self._output_dir, SPILL_SUBDIR, f"{name}.part-{self._spills:06d}"
                )
                with tf.io.TFRecordWriter(part) as writer:
                    for record in records:
                        writer.write(record)
                self._parts[split][shard].append(part)
                records.clear()
        self._spills += 1
        self._buffered = 0

    def close(self) -> None:
        """Writes out and closes every shard file; safe to call twice."""
        if not self._open:
            return
        self._open = False
        if self._writers is not None:
            writers, self._writers = self._writers, None
            for split_writers in writers.values():
                for writer in split_writers:
                    writer.close()
            return
        buffers, self._buffers = self._buffers, None
        for split, paths in self._paths.items():
            for shard, path in enumerate(paths):
                with tf.io.TFRecordWriter(path, self._options()) as writer:
                    parts = self._parts[split][shard]
                    if parts:
                        for batch in tf.data.TFRecordDataset(parts).batch(1024):
                            for record in batch.numpy():
                                writer.write(record)
                    for record in buffers[split][shard]:
                        writer.write(record)
                buffers[split][shard] = []
        self._discard_parts()

    def _discard_parts(self) -> None:
        spill_dir = os.path.join(self._output_dir, SPILL_SUBDIR)
        if tf.io.gfile.exists(spill_dir):
            tf.io.gfile.rmtree(spill_dir)
        self._parts = {}

    def abort(self) -> None:
        """Closes without assembling buffered shards (the output is abandoned)."""
        if self._writers is not None or not self._open:
            self.close()
            return
        self._open = False
        self._buffers = None
        self._discard_parts()

    def split_stats(self) -> dict[str, dict[str, int]]:
        """Returns `{split: {"records", "bytes", "shards"}}`; bytes of text."""
        return {
            split: {
                "records": self._records[i],
                "bytes": self._bytes[i],
                "shards": self._shard_counts[split],
            }
            for i, split in enumerate(SPLITS)
        }

    def __enter__(self) -> "ShardedWriter":
        return self.open()

    def __exit__(self, exc_type: Any, *exc_info: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _default_max_open_files() -> int:
    try:
        import resource  # pylint: disable=g-import-not-at-top (POSIX only)
    except ImportError:
        return _DEFAULT_MAX_OPEN_FILES
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 16
    return max(1, soft // _OPEN_FILES_SHARE)
