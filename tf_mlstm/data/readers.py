"""Streaming corpus readers: JSON lines, CSV/TSV and plain text, optionally gzip.

`read_documents` turns input files into a stream of `Document`s, file by
file and line by line, in bounded memory, so it reads the 40 GB Amazon dump
as easily as a test file. Files are opened through `tf.io.gfile`, so
`gs://...` and other TensorFlow file systems work like local paths.

The format comes from the file name, after an optional `.gz`:

- `.jsonl`, `.json`, `.ndjson`: one JSON object per line (the Amazon dump:
  `reviewText`, `summary`, `overall`, ...; IMDB: `text`, `label`, `rating`).
- `.csv` / `.tsv`: a header row, then records (quoted fields may span lines).
- anything else: plain text, one document per line or per file.

Every record is decoded as strict UTF-8 and its text normalized with
`normalize_text`, so every consumer sees identical text. A record that
cannot be used is skipped and counted in a `SkipLog` under a reason, with
the first examples kept as "path:line: message"; nothing is dropped
silently. Errors that concern a whole file (missing, corrupt gzip, CSV
without a text column) raise instead.
"""

import collections
import contextlib
import csv
import dataclasses
import gzip
import heapq
import json
import math
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO

from absl import logging
import tensorflow as tf

from tf_mlstm.data.text import normalize_text

# Skip reasons, as they appear in SkipLog counts and the stats file.
EMPTY_LINE = "empty_line"
EMPTY_TEXT = "empty_text"
INVALID_UTF8 = "invalid_utf8"
MALFORMED_JSON = "malformed_json"
NOT_JSON_OBJECT = "not_json_object"
MISSING_TEXT_KEY = "missing_text_key"
BAD_TEXT = "bad_text"
MISSING_LABEL = "missing_label"
BAD_LABEL = "bad_label"
MISSING_RATING = "missing_rating"
BAD_RATING = "bad_rating"
BAD_CSV_ROW = "bad_csv_row"

TEXT_MODES = ("line", "file")
AUTO_RATING_KEYS = ("overall", "rating")
"""Keys read as the rating when no rating key is given (Amazon, IMDB)."""

_JSON_EXTENSIONS = (".jsonl", ".json", ".ndjson")
_GLOB_CHARS = frozenset("*?[")
_CHUNK_BYTES = 1 << 20
# Files read at once when interleaving inputs.
_MAX_OPEN_FILES = 64
_UTF8_BOM = b"\xef\xbb\xbf"
_LABEL_NAMES = {"pos": 1, "positive": 1, "neg": 0, "negative": 0, "true": 1, "false": 0}


class InputError(ValueError):
    """An input file as a whole cannot be read (corrupt gzip, no text column)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Document:
    """One normalized document and where it came from.

    Attributes:
        text: The text after `normalize_text`; never empty.
        label: Integer class label (>= 0), or None when unknown.
        rating: Star or score rating, or None when unknown.
        source: Path of the file it was read from.
        line: 1-based line where the record starts in that file.
    """

    text: str
    label: int | None = None
    rating: float | None = None
    source: str = ""
    line: int = 0


@dataclasses.dataclass
class ReadStats:
    """Running totals that `read_documents` updates while it streams.

    Attributes:
        input_bytes: Uncompressed bytes read so far (grows in 1 MiB steps).
        files_read: Files opened so far.
    """

    input_bytes: int = 0
    files_read: int = 0


class SkipLog:
    """Counts skipped records per reason and keeps the first few examples.

    Args:
        max_examples: How many "path:line: message" examples to keep per
            reason.
    """

    def __init__(self, max_examples: int = 5):
        self._max_examples = max_examples
        self._counts: collections.Counter[str] = collections.Counter()
        self._examples: dict[str, list[str]] = collections.defaultdict(list)

    def add(self, reason: str, path: str, line: int, message: str) -> None:
        """Records one skipped record.

        Args:
            reason: Short machine-readable reason, e.g. "malformed_json".
            path: File the record came from.
            line: 1-based line of the record.
            message: What is wrong, for a human.
        """
        self._counts[reason] += 1
        examples = self._examples[reason]
        if len(examples) < self._max_examples:
            examples.append(f"{path}:{line}: {message}")

    @property
    def total(self) -> int:
        """Number of records skipped for any reason."""
        return sum(self._counts.values())

    @property
    def counts(self) -> dict[str, int]:
        """Skipped records per reason, sorted by reason."""
        return dict(sorted(self._counts.items()))

    @property
    def examples(self) -> dict[str, list[str]]:
        """The first examples per reason, as "path:line: message"."""
        return {reason: list(self._examples[reason]) for reason in sorted(self._counts)}

    def to_dict(self) -> dict[str, Any]:
        """Returns `{"total", "by_reason", "examples"}` for a JSON stats file."""
        return {"total": self.total, "by_reason": self.counts, "examples": self.examples}

    def log_summary(self) -> None:
        """Logs the counts and examples with absl logging."""
        if not self.total:
            logging.info("No records skipped.")
            return
        logging.warning(
            "Skipped %d records: %s",
            self.total,
            ", ".join(f"{reason}={count}" for reason, count in self.counts.items()),
        )
        for reason, examples in self.examples.items():
            for example in examples:
                logging.warning("  skipped (%s) %s", reason, example)


def expand_inputs(spec: str) -> list[str]:
    """Expands comma-separated paths and globs into a list of files.

    Each glob's matches are sorted; the pieces keep the order given, and a
    file named twice is kept once, at its first place. File names that
    contain commas cannot be given.

    Args:
        spec: For example "data/a.jsonl,data/more/*.jsonl.gz".

    Returns:
        The files, in order.

    Raises:
        ValueError: If `spec` names nothing.
        FileNotFoundError: If a path does not exist or a glob matches no file.
        IsADirectoryError: If a path names a directory.
    """
    pieces = [piece.strip() for piece in spec.split(",") if piece.strip()]
    if not pieces:
        raise ValueError(f"no input files given (input spec {spec!r})")
    files: dict[str, None] = {}  # An ordered set.
    for piece in pieces:
        if _GLOB_CHARS.intersection(piece):
            matches = [m for m in sorted(tf.io.gfile.glob(piece)) if not tf.io.gfile.isdir(m)]
            if not matches:
                raise FileNotFoundError(f"input pattern matches no files: {piece}")
            files.update(dict.fromkeys(matches))
        elif not tf.io.gfile.exists(piece):
            raise FileNotFoundError(f"input file not found: {piece}")
        elif tf.io.gfile.isdir(piece):
            raise IsADirectoryError(
                f"input is a directory: {piece} (give a glob such as {piece.rstrip('/')}/*.jsonl)"
            )
        else:
            files[piece] = None
    return list(files)


def parse_label(value: Any) -> int:
    """Parses a class label from a JSON or CSV value.

    Args:
        value: A bool, a non-negative integer (or integral float), or a string
            holding one, or "pos"/"positive"/"true" (1), "neg"/"negative"/
            "false" (0), in any case.

    Returns:
        The label, >= 0 (-1 is reserved for "unknown" in TFRecords).

    Raises:
        ValueError: If `value` is none of these.
    """
    if isinstance(value, bool):
        return int(value)
    label = None
    if isinstance(value, int):
        label = value
    elif isinstance(value, float) and value.is_integer():
        label = int(value)
    elif isinstance(value, str):
        name = value.strip().lower()
        if name in _LABEL_NAMES:
            return _LABEL_NAMES[name]
        if name.isdigit():
            label = int(name)
    if label is None or label < 0:
        raise ValueError(f"not a label (a non-negative integer, bool, pos or neg): {value!r}")
    return label


def parse_rating(value: Any) -> float:
    """Parses a rating (stars, score) from a JSON or CSV value.

    Args:
        value: An int, a float, or a string holding a number.

    Returns:
        The rating as a finite float.

    Raises:
        ValueError: If `value` is not a finite number.
    """
    rating = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        rating = float(value)
    elif isinstance(value, str):
        try:
            rating = float(value)
        except ValueError:
            pass
    if rating is None or not math.isfinite(rating):
        raise ValueError(f"not a finite number: {value!r}")
    return rating


def read_documents(
    paths: Iterable[str],
    text_keys: Sequence[str],
    label_key: str | None = None,
    rating_key: str | None = None,
    text_mode: str = "line",
    skip_log: SkipLog | None = None,
    read_stats: ReadStats | None = None,
    interleave: bool = False,
) -> Iterator[Document]:
    """Streams normalized documents from corpus files.

    Args:
        paths: Files to read, in order (see `expand_inputs`). All are checked
            for existence before the first document is produced.
        text_keys: JSON keys / CSV columns holding the text, tried in order;
            the first one present and not null (not empty, in CSV) wins, so
            ("reviewText", "text") reads Amazon and IMDB files in one run.
        label_key: Key of the class label (see `parse_label`); when given,
            records without a valid label are skipped. None: no labels.
        rating_key: Key of the rating (see `parse_rating`); when given,
            records without a valid rating are skipped. None: the rating is
            read from "overall" or "rating" when present.
        text_mode: For plain-text files: "line" (one document per line) or
            "file" (the whole file is one document).
        skip_log: Where skipped records are counted. None: a private log
            whose summary is logged when the stream ends.
        read_stats: Optional running totals (bytes read) to update.
        interleave: Spread every file over the whole stream (documents drawn
            from the file least far through, by size) instead of reading the
            files one after another.

    Returns:
        An iterator of `Document`s; their text is normalized and never empty.

    Raises:
        FileNotFoundError: If a file does not exist (raised by the call).
        ValueError: If `text_keys` is empty or `text_mode` is unknown (raised
            by the call).
        InputError: While iterating, if a gzip file is truncated or corrupt,
            or a CSV/TSV file has no header or no text column; the message
            names the file.
    """
    if isinstance(paths, str):
        paths = [paths]
    if isinstance(text_keys, str):
        text_keys = [text_keys]
    text_keys = tuple(text_keys)
    if not text_keys:
        raise ValueError("text_keys must name at least one key")
    if text_mode not in TEXT_MODES:
        raise ValueError(f"text_mode must be one of {TEXT_MODES}, got {text_mode!r}")
    paths = list(paths)
    for path in paths:
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"input file not found: {path}")
    log_at_end = skip_log is None
    skip_log = SkipLog() if skip_log is None else skip_log
    read_stats = ReadStats() if read_stats is None else read_stats
    fields = _RecordFields(text_keys, label_key, rating_key, skip_log)
    # A separate generator, so that bad arguments and missing files fail at
    # the call rather than at the first next(), possibly much later.
    return _stream_documents(paths, fields, text_mode, read_stats, log_at_end, interleave)


def _stream_documents(
    paths: list[str],
    fields: "_RecordFields",
    text_mode: str,
    read_stats: ReadStats,
    log_at_end: bool,
    interleave: bool = False,
) -> Iterator[Document]:
    files = [_file_documents(p, fields, text_mode, read_stats) for p in paths]
    if interleave and len(files) > 1:
        sizes = [max(tf.io.gfile.stat(p).length, 1) for p in paths]
        yield from _interleave_by_size(files, sizes)
    else:
        for documents in files:
            yield from documents
    if log_at_end:
        fields.skip_log.log_summary()


def _interleave_by_size(generators: list[Iterator[Document]], sizes: list[int]):
    """Merges document streams so each file is spread over the whole output.

    Corpora often come as one file per category (the Amazon dump has one per
    product type); read one after another, a training stream would see one
    category for hours. The next document is taken from the stream that is
    least far through its file, measured as documents read per byte of file
    size, so all files finish at about the same time. At most
    `_MAX_OPEN_FILES` files are open at once; beyond that, groups of files are
    interleaved one group after another.
    """
    for start in range(0, len(generators), _MAX_OPEN_FILES):
        group = list(range(start, min(start + _MAX_OPEN_FILES, len(generators))))
        heap = [(0.0, i) for i in group]
        counts = dict.fromkeys(group, 0)
        while heap:
            _, i = heapq.heappop(heap)
            doc = next(generators[i], None)
            if doc is None:
                continue
            yield doc
            counts[i] += 1
            heapq.heappush(heap, (counts[i] / sizes[i], i))


def _file_documents(
    path: str, fields: "_RecordFields", text_mode: str, read_stats: ReadStats
) -> Iterator[Document]:
    """The documents of one file; opens it at the first `next`."""
    kind = _file_kind(path)
    read_stats.files_read += 1
    with contextlib.ExitStack() as stack:
        gzipped = path.lower().endswith(".gz")
        stream: BinaryIO = stack.enter_context(tf.io.gfile.GFile(path, "rb"))
        if gzipped:
            stream = stack.enter_context(gzip.open(stream, "rb"))
        lines = _iter_lines(stream, path, read_stats, gzipped)
        if kind == "json":
            yield from _read_json_lines(lines, path, fields)
        elif kind in ("csv", "tsv"):
            yield from _read_delimited(lines, path, "\t" if kind == "tsv" else ",", fields)
        elif text_mode == "line":
            yield from _read_text_lines(lines, path, fields.skip_log)
        else:
            yield from _read_text_file(lines, path, fields.skip_log)


def _file_kind(path: str) -> str:
    """Returns "json", "csv", "tsv" or "text" from the file name."""
    name = path.lower()
    if name.endswith(".gz"):
        name = name[: -len(".gz")]
    if name.endswith(_JSON_EXTENSIONS):
        return "json"
    for kind in ("csv", "tsv"):
        if name.endswith("." + kind):
            return kind
    return "text"


def _iter_lines(
    stream: BinaryIO, path: str, read_stats: ReadStats, gzipped: bool
) -> Iterator[bytes]:
    """Yields the lines of a binary stream without their b"\\n".

    Reads 1 MiB chunks: GFile's own readline costs a Python call per line.
    A UTF-8 byte-order mark at the start is dropped.

    Raises:
        InputError: If a gzip stream is truncated or corrupt.
    """
    tail = b""
    first = True
    while True:
        try:
            chunk = stream.read(_CHUNK_BYTES)
        except (EOFError, OSError, zlib.error) as e:
            if not gzipped:
                raise
            # gzip.BadGzipFile is an OSError; a truncated file raises EOFError.
            raise InputError(f"{path}: truncated or corrupt gzip file ({e})") from e
        if not chunk:
            break
        read_stats.input_bytes += len(chunk)
        if first:
            first = False
            if chunk.startswith(_UTF8_BOM):
                chunk = chunk[len(_UTF8_BOM) :]
        lines = chunk.split(b"\n")
        lines[0] = tail + lines[0]
        tail = lines.pop()
        yield from lines
    if tail:
        yield tail


class _RecordFields:
    """Turns one JSON object or CSV row into a Document, or counts a skip."""

    def __init__(
        self,
        text_keys: tuple[str, ...],
        label_key: str | None,
        rating_key: str | None,
        skip_log: SkipLog,
    ):
        self.text_keys = text_keys
        self.label_key = label_key
        self.rating_key = rating_key
        self.skip_log = skip_log

    def document(
        self, record: Mapping[str, Any], path: str, line: int, empty_is_null: bool = False
    ) -> Document | None:
        """Builds the Document for `record`.

        Args:
            record: The parsed record.
            path: Its file, for skip examples.
            line: Its line, for skip examples.
            empty_is_null: Treat "" as absent (CSV has no null).

        Returns:
            The Document, or None after counting why the record was skipped.
        """
        skip = self.skip_log.add
        for key in self.text_keys:
            value = record.get(key)
            if value is not None and not (empty_is_null and value == ""):
                break
        else:
            skip(MISSING_TEXT_KEY, path, line, f"none of the text keys {list(self.text_keys)}")
            return None
        if not isinstance(value, str):
            skip(BAD_TEXT, path, line, f"{key!r} holds a {type(value).__name__}, not a string")
            return None
        text = normalize_text(value)
        if not text:
            skip(EMPTY_TEXT, path, line, f"{key!r} is empty after normalization")
            return None

        label = None
        if self.label_key is not None:
            value = record.get(self.label_key)
            if value is None or (empty_is_null and value == ""):
                skip(MISSING_LABEL, path, line, f"no label key {self.label_key!r}")
                return None
            try:
                label = parse_label(value)
            except ValueError as e:
                skip(BAD_LABEL, path, line, f"{self.label_key!r}: {e}")
                return None

        rating = None
        rating_keys = AUTO_RATING_KEYS if self.rating_key is None else (self.rating_key,)
        for key in rating_keys:
            value = record.get(key)
            if value is not None and not (empty_is_null and value == ""):
                try:
                    rating = parse_rating(value)
                except ValueError as e:
                    skip(BAD_RATING, path, line, f"{key!r}: {e}")
                    return None
                break
        else:
            if self.rating_key is not None:
                skip(MISSING_RATING, path, line, f"no rating key {self.rating_key!r}")
                return None
        return Document(text, label, rating, path, line)


def _read_json_lines(
    lines: Iterable[bytes], path: str, fields: _RecordFields
) -> Iterator[Document]:
    skip = fields.skip_log.add
    for line_number, raw in enumerate(lines, 1):
        if not raw or raw.isspace():
            skip(EMPTY_LINE, path, line_number, "blank line")
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            skip(INVALID_UTF8, path, line_number, f"invalid UTF-8 at byte {e.start}")
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as e:
            if isinstance(e, json.JSONDecodeError):
                message = f"malformed JSON: {e.msg} (column {e.colno})"
            else:
                message = f"malformed JSON: {e}"
            skip(MALFORMED_JSON, path, line_number, message)
            continue
        if not isinstance(record, dict):
            skip(
                NOT_JSON_OBJECT, path, line_number, f"a JSON {type(record).__name__}, not an object"
            )
            continue
        document = fields.document(record, path, line_number)
        if document is not None:
            yield document


def _read_delimited(
    lines: Iterable[bytes], path: str, delimiter: str, fields: _RecordFields
) -> Iterator[Document]:
    """Reads CSV/TSV records; quoted fields may span lines."""
    skip = fields.skip_log.add
    # surrogateescape keeps undecodable bytes as lone surrogates, so the csv
    # module can still find record boundaries; the record is then skipped.
    text_lines = (raw.decode("utf-8", "surrogateescape") + "\n" for raw in lines)
    reader = csv.reader(text_lines, delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}: empty file, expected a header row") from None
    except csv.Error as e:
        raise InputError(f"{path}:1: unreadable header row ({e})") from e
    header = [name.strip() for name in header]
    if not any(key in header for key in fields.text_keys):
        raise InputError(
            f"{path}: no text column: none of {list(fields.text_keys)} in its header, "
            f"which has the columns {header}"
        )
    end_line = reader.line_num
    while True:
        start_line = end_line + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            end_line = reader.line_num
            skip(BAD_CSV_ROW, path, start_line, f"unparsable row ({e})")
            continue
        end_line = reader.line_num
        if not row:
            skip(EMPTY_LINE, path, start_line, "blank line")
            continue
        if len(row) != len(header):
            skip(BAD_CSV_ROW, path, start_line, f"{len(row)} fields, the header has {len(header)}")
            continue
        try:
            delimiter.join(row).encode("utf-8")
        except UnicodeEncodeError:
            skip(INVALID_UTF8, path, start_line, "invalid UTF-8 bytes in the record")
            continue
        document = fields.document(dict(zip(header, row)), path, start_line, empty_is_null=True)
        if document is not None:
            yield document


def _read_text_lines(lines: Iterable[bytes], path: str, skip_log: SkipLog) -> Iterator[Document]:
    for line_number, raw in enumerate(lines, 1):
        if not raw or raw.isspace():
            skip_log.add(EMPTY_LINE, path, line_number, "blank line")
            continue
        try:
            text = normalize_text(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            skip_log.add(INVALID_UTF8, path, line_number, f"invalid UTF-8 at byte {e.start}")
            continue
        if not text:
            skip_log.add(EMPTY_TEXT, path, line_number, "empty after normalization")
            continue
        yield Document(text, None, None, path, line_number)


def _read_text_file(lines: Iterable[bytes], path: str, skip_log: SkipLog) -> Iterator[Document]:
    data = b"\n".join(lines)
    try:
        text = normalize_text(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        line_number = data.count(b"\n", 0, e.start) + 1
        skip_log.add(
            INVALID_UTF8, path, line_number, f"invalid UTF-8 at byte {e.start} of the file"
        )
        return
    if not text:
        skip_log.add(EMPTY_TEXT, path, 1, "file is empty after normalization")
        return
    yield Document(text, None, None, path, 1)
