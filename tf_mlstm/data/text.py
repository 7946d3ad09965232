"""Text normalization for review corpora, and the document-start byte.

`DOC_START` (a newline, which normalized text never holds) starts every document.
"""

import functools
import html
import re
import sys
import unicodedata

import tensorflow as tf

from tf_mlstm import errors

DOC_START = 10
"""The byte that starts every document in a training stream (b"\\n")."""

DOC_START_BYTE = bytes([DOC_START])

# One pattern serves Python's `re` and RE2 (tf.strings.regex_replace): both
# accept a leading (?i) and the same literal classes. The class is spelled out
# rather than `\s` because `\s` means Unicode whitespace in Python and ASCII
# whitespace in RE2.
_BREAK_TAG_PATTERN = r"(?i)<br[ \t\n\r\f]*/?>|</?p>"
_BREAK_TAG_RE = re.compile(_BREAK_TAG_PATTERN)

# Whitespace is what `str.isspace()` accepts (and `str.split()` splits on):
# Unicode Zs/Zl/Zp plus the bidi separators \t \n \v \f \r \x1c-\x1f \x85.
# The RE2 class is the same set, so both normalizers collapse the same
# characters. _SPACE_RUN_RE serves text whose only whitespace is " ".
_SPACE_RUN_RE = re.compile("  +")
_WHITESPACE_RE2 = r"[\t\n\v\f\r\x{1c}-\x{1f}\x{85}\p{Z}]+"

# Cc minus the Cc characters that are whitespace (those collapse to a space
# instead of vanishing), plus all of Cf (none of which is whitespace).
_CONTROL_RE2 = r"[\x{0}-\x{8}\x{e}-\x{1b}\x{7f}-\x{84}\x{86}-\x{9f}\p{Cf}]"

# A Python str can hold lone surrogates (json.loads accepts "\ud800"); they
# cannot be encoded as UTF-8, so they become U+FFFD, which is also what the
# graph version produces for invalid UTF-8.
_SURROGATE_RE = re.compile("[\ud800-\udfff]")

# html.unescape knows every HTML5 entity; the graph version handles the ones
# that occur in review dumps. `&amp;` comes last so that "&amp;lt;" decodes
# once, to "&lt;", as html.unescape does.
_GRAPH_ENTITIES = (
    ("&lt;", "<"),
    ("&gt;", ">"),
    ("&quot;", '"'),
    ("&#0*39;|&#[xX]0*27;", "'"),
    ("&apos;", "'"),
    ("&nbsp;", "\u00a0"),
    ("&amp;", "&"),
)


@functools.cache
def _control_re() -> re.Pattern:
    ranges = []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) in ("Cc", "Cf") and not char.isspace():
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    body = "".join(
        re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}"
        for lo, hi in ranges
    )
    return re.compile(f"[{body}]")


def normalize_text(text: str) -> str:
    """Normalizes review text: HTML unescaped, NFKC, no control characters, spaces collapsed.

    Args:
        text: Raw text, for example a review as stored in a JSON dump.

    Returns:
        The normalized text, never with a newline; "" when nothing printable remains.

    Raises:
        TypeError: If `text` is not a `str`.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_text expects str, got {type(text).__name__}")
    text = html.unescape(text)
    text = _BREAK_TAG_RE.sub(" ", text)
    if not text.isascii():
        # ASCII is already NFKC and holds no surrogates; skipping these two
        # passes is most of the converter's per-document time on English text.
        text = _SURROGATE_RE.sub("\ufffd", text)
        text = unicodedata.normalize("NFKC", text)
    if text.isprintable():
        # No Cc/Cf character and no whitespace but " " (isprintable rejects
        # every Unicode "Other" and "Separator" except the ASCII space), so
        # only runs of spaces remain to collapse. This fast path is about 4x
        # cheaper than the general one and covers nearly all reviews.
        return _SPACE_RUN_RE.sub(" ", text).strip(" ")
    text = _control_re().sub("", text)
    # str.split() splits on exactly the characters Python's `\s` matches
    # (`str.isspace`), drops empty pieces, and so also strips.
    return " ".join(text.split())


def check_text(text, name="text") -> str:
    """A text a caller gave, as a `str`; bytes are read as UTF-8 (invalid bytes: U+FFFD).

    Args:
      text: the value given.
      name: how the caller named it, for the message (`prompt`, `texts[1]`).

    Returns:
      `text` as a `str`.

    Raises:
      errors.InvalidValueError: `text` is neither a `str` nor bytes.

    Example:

    >>> from tf_mlstm.data.text import check_text
    >>> check_text(b"caf\\xc3\\xa9")
    'café'
    """
    if isinstance(text, bytes):
        return text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        value = repr(text)
        value = value if len(value) <= 40 else value[:37] + "..."
        raise errors.InvalidValueError(f"{name} must be a str, got {type(text).__name__} ({value})")
    return text


def check_texts(texts, name="texts") -> list[str]:
    """Texts a caller gave, as a list of `str`, each checked by `check_text`.

    Args:
      texts: a sequence (or any iterable) of texts.
      name: the argument's name, for the message; an item is `name[index]`.

    Returns:
      The texts, as a list of `str`.

    Raises:
      errors.InvalidValueError: one text instead of several, not iterable, or a non-text item.

    Example:

    >>> from tf_mlstm.data.text import check_texts
    >>> check_texts(["fine", None])
    Traceback (most recent call last):
    ...
    tf_mlstm.errors.InvalidValueError: texts[1] must be a str, got NoneType (None)
    """
    if isinstance(texts, (str, bytes)):
        # One text is a sequence of characters: refused rather than read as many texts.
        raise errors.InvalidValueError(
            f"{name} must be a list of str, not one {type(texts).__name__}"
        )
    try:
        items = iter(texts)
    except TypeError:
        raise errors.InvalidValueError(
            f"{name} must be a list of str, got {type(texts).__name__}"
        ) from None
    return [check_text(text, f"{name}[{index}]") for index, text in enumerate(items)]


def normalize_text_tf(texts: tf.Tensor) -> tf.Tensor:
    """Normalizes a string tensor in the graph, matching `normalize_text` (but rare entities).

    Args:
        texts: A `tf.string` tensor of any shape.

    Returns:
        A `tf.string` tensor of the same shape with normalized UTF-8 text.

    Raises:
        TypeError: If `texts` is not a string tensor.
    """
    # Imported here so that the pure-Python path (readers, the converter)
    # does not load tensorflow_text's custom-op library.
    import tensorflow_text  # pylint: disable=import-outside-toplevel

    texts = tf.convert_to_tensor(texts)
    if texts.dtype != tf.string:
        raise TypeError(f"normalize_text_tf expects a tf.string tensor, got {texts.dtype}")
    texts = tf.strings.unicode_transcode(
        texts, input_encoding="UTF-8", output_encoding="UTF-8", errors="replace"
    )
    for pattern, replacement in _GRAPH_ENTITIES:
        texts = tf.strings.regex_replace(texts, pattern, replacement)
    texts = tf.strings.regex_replace(texts, _BREAK_TAG_PATTERN, " ")
    texts = tensorflow_text.normalize_utf8(texts, "NFKC")
    texts = tf.strings.regex_replace(texts, _CONTROL_RE2, "")
    texts = tf.strings.regex_replace(texts, _WHITESPACE_RE2, " ")
    return tf.strings.strip(texts)
