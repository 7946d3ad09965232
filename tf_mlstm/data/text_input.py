"""The texts a trained model is applied to: files/globs or stdin lines, in reading order."""

import sys
from collections.abc import Iterator

from tf_mlstm import errors
from tf_mlstm.data import readers
from tf_mlstm.data.text import normalize_text

STDIN = "-"


def iter_texts(spec, text_keys, stdin=None, read_stats=None) -> Iterator[tuple[int, str]]:
    """Streams the texts to classify, with the line each starts at, in reading order.

    Args:
      spec: files/globs for `readers.read_documents`, or "-" for stdin lines.
      text_keys: keys/columns holding the text.
      stdin: the stream read for "-" (default: `sys.stdin`'s bytes).
      read_stats: a `readers.ReadStats` the file reader keeps up to date, or None.

    Yields:
      (line, text): a normalized text and the line it starts at.

    Raises:
      FileNotFoundError: a file or glob names nothing (before the first text).
      ValueError: nothing to classify (once the input is read).
    """
    count = 0
    if spec == STDIN:
        skip_log = readers.SkipLog()
        stream = stdin if stdin is not None else sys.stdin.buffer
        for number, line in enumerate(stream, 1):
            text = _stdin_text(line, number, skip_log)
            if text:
                count += 1
                yield number, text
        skip_log.log_summary()
    else:
        paths = readers.expand_inputs(spec)
        for document in readers.read_documents(paths, text_keys, read_stats=read_stats):
            count += 1
            yield document.line, document.text
    if not count:
        raise errors.InvalidValueError(f"{'stdin' if spec == STDIN else spec}: no text to classify")


def read_texts(spec, text_keys, stdin=None) -> tuple[list[str], list[int]]:
    """All of `iter_texts` as lists: (texts, lines)."""
    pairs = list(iter_texts(spec, text_keys, stdin))
    return [text for _, text in pairs], [line for line, _ in pairs]


def _stdin_text(line, number, skip_log):
    if isinstance(line, bytes):
        try:
            # Strict: the locale's decoder would crash, or smuggle the bytes in as escapes.
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            skip_log.add(
                readers.INVALID_UTF8, "<stdin>", number, f"invalid UTF-8 at byte {e.start}"
            )
            return None
    if not line.strip():
        skip_log.add(readers.EMPTY_LINE, "<stdin>", number, "blank line")
        return None
    text = normalize_text(line)
    if not text:
        skip_log.add(readers.EMPTY_TEXT, "<stdin>", number, "empty after normalization")
    return text or None
