"""Streaming corpus readers: JSON lines, CSV/TSV and plain text, optionally gzip.

The format comes from the file name; an unusable record is skipped and counted in a `SkipLog`.
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
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any
from typing import BinaryIO

import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm.data import fields
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
RECORD_TOO_LONG = "record_too_long"
UNTERMINATED_QUOTE = "unterminated_quote"

DEFAULT_MAX_DOCUMENT_BYTES = fields.DEFAULT_MAX_DOCUMENT_BYTES
TEXT_MODES = fields.TEXT_MODES
AUTO_RATING_KEYS = ("overall", "rating")
"""Keys read as the rating when no rating key is given (Amazon, IMDB)."""

_JSON_EXTENSIONS = (".jsonl", ".json", ".ndjson")
_GLOB_CHARS = frozenset("*?[")
_CHUNK_BYTES = 1 << 20
# Files read at once when interleaving inputs.
_MAX_OPEN_FILES = 64
_UTF8_BOM = b"\xef\xbb\xbf"
_INT64_MAX = (1 << 63) - 1
_FLOAT32_MAX = 3.4028234663852886e38
_LABEL_NAMES = {"pos": 1, "positive": 1, "neg": 0, "negative": 0, "true": 1, "false": 0}


class InputError(errors.InvalidValueError):
    """An input file as a whole cannot be read (corrupt gzip, no text column).

    Example:

    >>> from tf_mlstm.data import readers
    >>> error = readers.InputError("reviews.csv: no column 'text'")
    >>> isinstance(error, ValueError)
    True
    """


@dataclasses.dataclass(frozen=True, slots=True)
class Document:
    """One normalized document and where it came from.

    Attributes:
        text: The text after `normalize_text`; never empty.
        label: Integer class label (>= 0), or None when unknown.
        rating: Star or score rating, or None when unknown.
        source: Path of the file it was read from.
        line: 1-based line where the record starts in that file.
        kept: Raw values of `read_documents`'s `keep_keys`, in order; None where absent.

    Example:

    >>> from tf_mlstm.data.readers import Document
    >>> doc = Document("Great phone.", label=1, source="reviews.json", line=3)
    >>> f"{doc.source}:{doc.line}", doc.label
    ('reviews.json:3', 1)
    """

    text: str
    label: int | None = None
    rating: float | None = None
    source: str = ""
    line: int = 0
    kept: tuple = ()


@dataclasses.dataclass(frozen=True, slots=True)
class _LongLine:
    length: int


@dataclasses.dataclass
class ReadStats:
    """Running totals that `read_documents` updates while it streams.

    Attributes:
        input_bytes: Uncompressed bytes read so far (grows in 1 MiB steps).
        stored_bytes: Bytes of the files as stored (compressed, for gzip) read so far.
        files_read: Files opened so far.

    Example:

    >>> from tf_mlstm.data.readers import ReadStats
    >>> stats = ReadStats()
    >>> stats.files_read += 1
    >>> stats
    ReadStats(input_bytes=0, stored_bytes=0, files_read=1)
    """

    input_bytes: int = 0
    stored_bytes: int = 0
    files_read: int = 0


class SkipLog:
    """Counts skipped records per reason and keeps the first few examples.

    Args:
        max_examples: How many "path:line: message" examples to keep per reason.

    Example:

    >>> from tf_mlstm.data.readers import SkipLog
    >>> skipped = SkipLog(max_examples=1)
    >>> skipped.add("malformed_json", "a.json", 3, "Expecting value")
    >>> skipped.add("malformed_json", "a.json", 9, "Expecting value")
    >>> skipped.total, skipped.counts
    (2, {'malformed_json': 2})
    >>> skipped.examples
    {'malformed_json': ['a.json:3: Expecting value']}
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

    def merge(self, skipped: Mapping[str, Any]) -> None:
        """Adds the skips of another log, given as its `to_dict()`.

        Args:
            skipped: `{"by_reason": {reason: count}, "examples": {reason: [...]}}`.
        """
        for reason, count in skipped["by_reason"].items():
            self._counts[reason] += count
            examples = self._examples[reason]
            room = self._max_examples - len(examples)
            examples.extend(skipped.get("examples", {}).get(reason, [])[: max(room, 0)])

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
    """Expands comma-separated paths and globs into a list of files, in order, without repeats.

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
        raise errors.InvalidValueError(f"no input files given (input spec {spec!r})")
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
        value: A bool, a non-negative integer (or its string), or pos/neg/true/false.

    Returns:
        The label, in [0, 2**63 - 1].

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
        raise errors.InvalidValueError(
            f"not a label (a non-negative integer, bool, pos or neg): {_shorten(value)}"
        )
    if label > _INT64_MAX:
        raise errors.InvalidValueError(
            f"label {_shorten(value)} is beyond the int64 range of TFRecords"
        )
    return label


def _shorten(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "a huge int"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_rating(value: Any) -> float:
    """Parses a rating (stars, score) from a JSON or CSV value.

    Args:
        value: An int, a float, or a string holding a number.

    Returns:
        The rating as a float, finite in float32.

    Raises:
        ValueError: If `value` is not a number within the float32 range.
    """
    rating = None
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            rating = float(value)
        except (ValueError, OverflowError):  # OverflowError: an int past float64.
            pass
    if rating is None or not math.isfinite(rating):
        raise errors.InvalidValueError(f"not a finite number: {_shorten(value)}")
    if abs(rating) > _FLOAT32_MAX:
        raise errors.InvalidValueError(
            f"rating {_shorten(value)} is beyond the float32 range of TFRecords"
        )
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
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    keep_keys: Sequence[str] = (),
) -> Iterator[Document]:
    """Streams normalized documents from corpus files.

    Args:
        paths: Files to read, in order.
        text_keys: JSON keys / CSV columns of the text; the first non-null wins.
        label_key: Key of the class label; records without one are skipped.
        rating_key: Key of the rating; None: "overall" or "rating" if present.
        text_mode: For plain-text files: "line" or "file".
        skip_log: Where skips are counted. None: a private log, summarized at the end.
        read_stats: Optional running totals to update.
        interleave: Spread every file over the whole stream.
        max_document_bytes: Longest record in input bytes; longer ones are skipped.
        keep_keys: Keys whose raw values each document carries in `kept`.

    Returns:
        An iterator of `Document`s with normalized, non-empty text.

    Raises:
        FileNotFoundError: If a file does not exist (raised by the call).
        ValueError: An empty `text_keys`, unknown `text_mode` or a non-positive limit.
        InputError: While iterating, a corrupt gzip file or a CSV/TSV file without text column.
    """
    if isinstance(paths, str):
        paths = [paths]
    if isinstance(text_keys, str):
        text_keys = [text_keys]
    text_keys = tuple(text_keys)
    if not text_keys:
        raise errors.InvalidValueError("text_keys must name at least one key")
    if text_mode not in TEXT_MODES:
        raise errors.InvalidValueError(f"text_mode must be one of {TEXT_MODES}, got {text_mode!r}")
    if max_document_bytes < 1:
        raise errors.InvalidValueError(f"max_document_bytes must be >= 1, got {max_document_bytes}")
    paths = list(paths)
    for path in paths:
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"input file not found: {path}")
    log_at_end = skip_log is None
    skip_log = SkipLog() if skip_log is None else skip_log
    read_stats = ReadStats() if read_stats is None else read_stats
    fields = _RecordFields(
        text_keys, label_key, rating_key, skip_log, max_document_bytes, tuple(keep_keys)
    )
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
    """Merges document streams so each file (often one category) is spread over the output."""
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
    kind = _file_kind(path)
    read_stats.files_read += 1
    with contextlib.ExitStack() as stack:
        stored: BinaryIO = stack.enter_context(tf.io.gfile.GFile(path, "rb"))
        compressed = stored if path.lower().endswith(".gz") else None
        stream = stack.enter_context(gzip.open(stored, "rb")) if compressed else stored
        lines = _iter_lines(stream, path, read_stats, fields.max_bytes, compressed)
        if kind == "json":
            yield from _read_json_lines(lines, path, fields)
        elif kind in ("csv", "tsv"):
            yield from _read_delimited(lines, path, "\t" if kind == "tsv" else ",", fields)
        elif text_mode == "line":
            yield from _read_text_lines(lines, path, fields)
        else:
            yield from _read_text_file(lines, path, fields)


def record_fields(path: str) -> tuple[str, ...] | None:
    """The field names of `path`'s first record (JSON keys, CSV/TSV header), for messages.

    Args:
        path: a raw corpus file, gzip or not.

    Returns:
        The names in file order; None for plain text or a first record that does not parse.
    """
    kind = _file_kind(path)
    if kind == "text":
        return None
    with tf.io.gfile.GFile(path, "rb") as stored:
        stream = gzip.open(stored, "rb") if path.lower().endswith(".gz") else stored
        try:
            first = next((line for line in stream if line.strip()), b"")
        except (OSError, EOFError):
            return None
    text = first.decode("utf-8", "replace")
    if kind == "json":
        try:
            record = json.loads(text)
        except ValueError:
            return None
        return tuple(record) if isinstance(record, dict) else None
    row = next(csv.reader([text], delimiter="\t" if kind == "tsv" else ","), [])
    return tuple(name.strip() for name in row)


def _file_kind(path: str) -> str:
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
    stream: BinaryIO,
    path: str,
    read_stats: ReadStats,
    max_bytes: int,
    compressed: BinaryIO | None = None,
) -> Iterator[bytes | _LongLine]:
    """Yields the lines of a binary stream; one over `max_bytes` comes as a `_LongLine`."""
    tail: list[bytes] = []  # The pieces of the line not yet complete.
    tail_bytes = 0
    first = True
    stored_position = 0
    while True:
        try:
            chunk = stream.read(_CHUNK_BYTES)
        except (EOFError, OSError, zlib.error) as e:
            if compressed is None:
                raise
            # gzip.BadGzipFile is an OSError; a truncated file raises EOFError.
            raise InputError(f"{path}: truncated or corrupt gzip file ({e})") from e
        if not chunk:
            break
        read_stats.input_bytes += len(chunk)
        if compressed is None:
            read_stats.stored_bytes += len(chunk)
        else:
            position = compressed.tell()
            read_stats.stored_bytes += position - stored_position
            stored_position = position
        if first:
            first = False
            if chunk.startswith(_UTF8_BOM):
                chunk = chunk[len(_UTF8_BOM) :]
        lines = chunk.split(b"\n")
        if len(lines) == 1:  # No line ends in this chunk.
            tail_bytes += len(chunk)
            if tail_bytes <= max_bytes:
                tail.append(chunk)
            else:
                tail = []  # Too long: only its length is kept from here on.
            continue
        tail_bytes += len(lines[0])
        yield b"".join(tail) + lines[0] if tail_bytes <= max_bytes else _LongLine(tail_bytes)
        last = lines.pop()
        middle = lines[1:]
        if middle and max(map(len, middle)) > max_bytes:
            middle = [line if len(line) <= max_bytes else _LongLine(len(line)) for line in middle]
        yield from middle
        tail_bytes = len(last)
        tail = [last] if tail_bytes <= max_bytes else []
    if tail_bytes:
        yield b"".join(tail) if tail_bytes <= max_bytes else _LongLine(tail_bytes)


class _RecordFields:
    """Turns one JSON object or CSV row into a Document, or counts a skip."""

    def __init__(
        self,
        text_keys: tuple[str, ...],
        label_key: str | None,
        rating_key: str | None,
        skip_log: SkipLog,
        max_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
        keep_keys: tuple[str, ...] = (),
    ):
        self.text_keys = text_keys
        self.label_key = label_key
        self.rating_key = rating_key
        self.skip_log = skip_log
        self.max_bytes = max_bytes
        self.keep_keys = keep_keys

    def skip_too_long(self, path: str, line: int, length: int, what: str = "line") -> None:
        self.skip_log.add(
            RECORD_TOO_LONG,
            path,
            line,
            f"{what} of {length:,} bytes is longer than "
            f"{errors.setting_name('max_document_bytes')}={self.max_bytes:,}",
        )

    def document(
        self, record: Mapping[str, Any], path: str, line: int, empty_is_null: bool = False
    ) -> Document | None:
        """The Document for `record`, or None after counting the skip; CSV's "" is null."""
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
        kept = tuple(record.get(key) for key in self.keep_keys)
        if empty_is_null:
            kept = tuple(None if value == "" else value for value in kept)
        return Document(text, label, rating, path, line, kept)


def _check_json_lines(first_line: bytes, path: str, line_number: int) -> None:
    """Refuses a whole-file JSON document (an array, an indented object) read as JSON lines."""
    start = first_line.lstrip(b"\xef\xbb\xbf").strip()
    if start.startswith(b"[") or start == b"{":
        what = "a JSON array" if start.startswith(b"[") else "one JSON object over many lines"
        raise InputError(
            f"{path}:{line_number}: the file is {what}, not JSON lines (one object per line); "
            "write one object per line, e.g. jq -c '.[]' (an array) or jq -c . (an object)"
        )


def _read_json_lines(
    lines: Iterable[bytes | _LongLine], path: str, fields: _RecordFields
) -> Iterator[Document]:
    skip = fields.skip_log.add
    first = True
    for line_number, raw in enumerate(lines, 1):
        if isinstance(raw, _LongLine):
            fields.skip_too_long(path, line_number, raw.length)
            continue
        if not raw or raw.isspace():
            skip(EMPTY_LINE, path, line_number, "blank line")
            continue
        if first:
            first = False
            _check_json_lines(raw, path, line_number)
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


class _BadRecord(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class _CsvLines:
    """CSV/TSV lines for `csv.reader`; an open quote loses only its first line (`restart`)."""

    def __init__(self, lines: Iterable[bytes | _LongLine], max_bytes: int):
        self._lines = enumerate(lines, 1)
        self._max_bytes = max_bytes
        self._pending: collections.deque[tuple[int, bytes | _LongLine]] = collections.deque()
        self._record: list[tuple[int, bytes | _LongLine]] = []
        self._bytes = 0

    def begin(self) -> None:
        self._record = []
        self._bytes = 0

    @property
    def start_line(self) -> int:
        return self._record[0][0] if self._record else 0

    @property
    def line_count(self) -> int:
        return len(self._record)

    def restart(self) -> None:
        self._pending.extendleft(reversed(self._record[1:]))
        self._record = []

    def __iter__(self) -> "_CsvLines":
        return self

    def __next__(self) -> str:
        if self._pending:
            number, raw = self._pending.popleft()
        else:
            try:
                number, raw = next(self._lines)
            except StopIteration:
                if self._record:  # csv.reader asked for more: a quote is open.
                    raise _BadRecord(
                        UNTERMINATED_QUOTE,
                        f"quoted field still open at the end of the file (after "
                        f"{len(self._record)} lines); the lines after it were read on",
                    ) from None
                raise
        self._record.append((number, raw))
        self._bytes += (raw.length if isinstance(raw, _LongLine) else len(raw)) + 1
        if isinstance(raw, _LongLine) or self._bytes > self._max_bytes:
            lines = len(self._record)
            raise _BadRecord(
                RECORD_TOO_LONG,
                "record longer than "
                f"{errors.setting_name('max_document_bytes')}={self._max_bytes:,}"
                + (
                    f" over {lines} lines (a quote left open?); the lines after its first "
                    "were read on"
                    if lines > 1
                    else ""
                ),
            )
        # surrogateescape keeps undecodable bytes as lone surrogates, so the
        # csv module can still find record boundaries; the record is then
        # skipped.
        return raw.decode("utf-8", "surrogateescape") + "\n"


def _read_delimited(
    lines: Iterable[bytes | _LongLine], path: str, delimiter: str, fields: _RecordFields
) -> Iterator[Document]:
    skip = fields.skip_log.add
    # The record limit is enforced by _CsvLines; the csv module's own field
    # limit (128 KiB by default, process-wide) must not cut below it.
    if csv.field_size_limit() < fields.max_bytes:
        csv.field_size_limit(fields.max_bytes)
    source = _CsvLines(lines, fields.max_bytes)
    reader = csv.reader(source, delimiter=delimiter)
    source.begin()
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(f"{path}: empty file, expected a header row") from None
    except (csv.Error, _BadRecord) as e:
        raise InputError(f"{path}:1: unreadable header row ({e})") from e
    header = [name.strip() for name in header]
    for number, name in enumerate(header):
        # A record would keep the last of the two values and drop the other
        # without a count.
        if name and name in header[:number]:
            raise InputError(
                f"{path}:1: the header names the column {name!r} twice (columns "
                f"{header.index(name) + 1} and {number + 1}); rename one"
            )
    if not any(key in header for key in fields.text_keys):
        raise InputError(
            f"{path}: no text column: none of {list(fields.text_keys)} in its header, "
            f"which has the columns {header}"
        )
    # A label column the header lacks would skip every row, one by one, as unlabeled.
    missing = [k for k in (fields.label_key, *fields.keep_keys) if k and k not in header]
    if missing:
        named = ", ".join(repr(key) for key in dict.fromkeys(missing))
        raise InputError(f"{path}: no column {named} in its header, which has the columns {header}")
    while True:
        source.begin()
        try:
            row = next(reader)
        except StopIteration:
            break
        except _BadRecord as e:
            skip(e.reason, path, source.start_line, str(e))
            source.restart()
            continue
        except csv.Error as e:
            skip(BAD_CSV_ROW, path, source.start_line, f"unparsable row ({e})")
            source.restart()
            continue
        start_line = source.start_line
        if not row:
            skip(EMPTY_LINE, path, start_line, "blank line")
            continue
        if len(row) != len(header):
            lines_read = source.line_count
            message = f"{len(row)} fields, the header has {len(header)}"
            if lines_read > 1:
                # Most likely a stray quote that joined the next lines to this
                # record: they are read again on their own.
                message += f" (over {lines_read} lines; the lines after its first were read on)"
            skip(BAD_CSV_ROW, path, start_line, message)
            source.restart()
            continue
        try:
            delimiter.join(row).encode("utf-8")
        except UnicodeEncodeError:
            skip(INVALID_UTF8, path, start_line, "invalid UTF-8 bytes in the record")
            continue
        document = fields.document(dict(zip(header, row)), path, start_line, empty_is_null=True)
        if document is not None:
            yield document


def _read_text_lines(
    lines: Iterable[bytes | _LongLine], path: str, fields: _RecordFields
) -> Iterator[Document]:
    skip_log = fields.skip_log
    for line_number, raw in enumerate(lines, 1):
        if isinstance(raw, _LongLine):
            fields.skip_too_long(path, line_number, raw.length)
            continue
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


def _read_text_file(
    lines: Iterable[bytes | _LongLine], path: str, fields: _RecordFields
) -> Iterator[Document]:
    skip_log = fields.skip_log
    pieces = []
    size = -1  # No newline before the first line.
    for raw in lines:
        size += 1 + (raw.length if isinstance(raw, _LongLine) else len(raw))
        if size > fields.max_bytes:
            # The rest of the file is not read: the document is lost anyway.
            fields.skip_too_long(path, 1, size, what="file (at least)")
            return
        pieces.append(raw)
    data = b"\n".join(pieces)
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
