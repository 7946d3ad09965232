"""The text fields every binary reads, in one order, and other TensorFlow-free names."""

# Tried in order, the first present one wins: Amazon reviews (`reviewText`),
# IMDB and most JSON/CSV sets (`text`), SST (`sentence`). One order for every
# binary, so one record reads the same everywhere.
TEXT_KEYS = ("reviewText", "text", "sentence")

NGRAM_KIND = "tfidf"
"""The feature kind of word n-gram TF-IDF features (`tf_mlstm.data.words`)."""

SPLITS = ("train", "validation", "test")
"""The splits a TFRecord folder holds (`tf_mlstm.data.tfrecord`)."""

# How plain-text files are read: a document per line, or per file.
TEXT_MODES = ("line", "file")

STATS_FILE = "stats.json"
"""A data folder's record and byte counts per split, written last by a conversion."""

INCOMPLETE_MARKER = "_CONVERSION_INCOMPLETE"
"""File present in a data folder from the start to the end of a conversion (`tfrecord`)."""

DEFAULT_MAX_DOCUMENT_BYTES = 1 << 20
"""Longest record read (1 MiB); reviews are a few KiB, the longest Amazon ones ~32 KiB."""


def split_keys(value) -> tuple[str, ...]:
    """Field names from a flag: a list, or one comma-separated string; blanks left out.

    Args:
      value: e.g. ["reviewText", "text"] (a list flag) or "anger,joy" (older saved configs).

    Returns:
      The names, stripped, in order, as a tuple.
    """
    pieces = value.split(",") if isinstance(value, str) else value
    return tuple(piece.strip() for piece in pieces if piece.strip())
