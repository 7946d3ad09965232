"""Corpus to sharded TFRecords: the library behind `tf-mlstm-make-tfrecords`.

`convert(ConvertConfig(...))` streams documents from the input files through
`read_documents` into a `ShardedWriter`, shows a progress line when stderr is
a terminal, and writes a JSON stats file: record and byte counts per split,
throughput, and every skipped record counted by reason with examples.
"""

import contextlib
import dataclasses
import json
import os
import sys
import time
from typing import Any, TextIO

from absl import logging
import tensorflow as tf

from tf_mlstm.data import readers
from tf_mlstm.data import tfrecord

_MB = 1e6
_PROGRESS_INTERVAL_S = 0.25


class NoDocumentsError(readers.InputError):
    """The inputs held no usable document."""


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    """Everything one conversion needs.

    Attributes:
        inputs: Comma-separated input paths and globs (see
            `readers.expand_inputs`).
        output_dir: Directory for the shards and, by default, the stats file.
        text_keys: JSON keys / CSV columns of the text, first present wins.
        label_key: Key of an integer label; None for no labels.
        rating_key: Key of a rating; None reads "overall" or "rating" if present.
        text_mode: Plain-text files: "line" (a document per line) or "file".
        num_shards: Number of train shards.
        split_weights: Positive weights (train, validation, test).
        gzip: Write GZIP-compressed shards.
        max_documents: Stop after this many documents; 0 for all.
        interleave: Spread every input file over the whole output (see
            `readers.read_documents`) rather than one file after another.
        stats_file: Where to write the JSON stats; None for
            `<output_dir>/stats.json`.

    Raises:
        ValueError: If a field is out of range.
    """

    inputs: str
    output_dir: str
    text_keys: tuple[str, ...] = ("reviewText", "text", "sentence")
    label_key: str | None = None
    rating_key: str | None = None
    text_mode: str = "line"
    num_shards: int = 100
    split_weights: tuple[int, int, int] = (1000, 1, 1)
    gzip: bool = False
    max_documents: int = 0
    interleave: bool = True
    stats_file: str | None = None

    def __post_init__(self):
        if not self.inputs.strip(" ,"):
            raise ValueError("inputs must name at least one file or glob")
        if not self.output_dir:
            raise ValueError("output_dir must not be empty")
        if not self.text_keys or not all(self.text_keys):
            raise ValueError(f"text_keys must be non-empty names, got {self.text_keys}")
        if self.text_mode not in readers.TEXT_MODES:
            raise ValueError(
                f"text_mode must be one of {readers.TEXT_MODES}, got {self.text_mode!r}"
            )
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards}")
        if len(self.split_weights) != 3 or not all(w > 0 for w in self.split_weights):
            raise ValueError(
                f"split_weights must be three positive integers (train, validation, test), "
                f"got {self.split_weights}"
            )
        if self.max_documents < 0:
            raise ValueError(f"max_documents must be >= 0, got {self.max_documents}")

    @property
    def stats_path(self) -> str:
        """The stats file to write."""
        return self.stats_file or os.path.join(self.output_dir, "stats.json")


class _Progress:
    """A single self-overwriting status line, refreshed at most 4 times a second."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._start = time.monotonic()
        self._last = 0.0

    def update(self, records: int, input_bytes: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < _PROGRESS_INTERVAL_S:
            return
        self._last = now
        elapsed = max(now - self._start, 1e-9)
        self._stream.write(
            f"\r{records:,} records, {input_bytes / _MB:,.1f} MB read, "
            f"{input_bytes / _MB / elapsed:,.1f} MB/s  " + ("\n" if final else "")
        )
        self._stream.flush()


def convert(config: ConvertConfig) -> dict[str, Any]:
    """Converts the input corpus into sharded TFRecords and writes stats.

    Args:
        config: What to read and where to write.

    Returns:
        The stats written to `config.stats_path`: `records`, `bytes` (of
        normalized text), `input_bytes` (uncompressed input read), `seconds`,
        `input_mb_per_second`, `splits` (`{split: {records, bytes, shards}}`),
        `skipped` (`{total, by_reason, examples}`), `inputs` (the files),
        `output_dir`, `compression` and `warnings`.

    Raises:
        FileNotFoundError: If an input file or glob matches nothing.
        readers.InputError: If an input file as a whole is unreadable.
        NoDocumentsError: If no document was written (the stats file is
            still written, to show what was skipped).
        FileExistsError: If `output_dir` holds shards of another layout.
    """
    start = time.monotonic()
    paths = readers.expand_inputs(config.inputs)
    skip_log = readers.SkipLog()
    read_stats = readers.ReadStats()
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    logging.info("Converting %d input files into %s", len(paths), config.output_dir)

    writer = tfrecord.ShardedWriter(
        config.output_dir,
        num_train_shards=config.num_shards,
        split_weights=config.split_weights,
        compression="GZIP" if config.gzip else None,
    )
    documents = readers.read_documents(
        paths,
        text_keys=config.text_keys,
        label_key=config.label_key,
        rating_key=config.rating_key,
        text_mode=config.text_mode,
        skip_log=skip_log,
        read_stats=read_stats,
        interleave=config.interleave,
    )
    records = 0
    try:
        with writer, contextlib.closing(documents):
            for doc in documents:
                writer.write(doc)
                records += 1
                if progress:
                    progress.update(records, read_stats.input_bytes)
                if records == config.max_documents:
                    break
    finally:
        if progress:
            # Ends the status line, so that an error message starts on its own.
            progress.update(records, read_stats.input_bytes, final=True)
    seconds = time.monotonic() - start

    splits = writer.split_stats()
    warnings = [
        f"the {split} split received no documents ({records} in all, split weights "
        f"{config.split_weights})"
        for split in tfrecord.SPLITS
        if records and not splits[split]["records"]
    ]
    stats = {
        "records": records,
        "bytes": sum(split["bytes"] for split in splits.values()),
        "input_bytes": read_stats.input_bytes,
        "seconds": round(seconds, 3),
        "input_mb_per_second": round(read_stats.input_bytes / _MB / max(seconds, 1e-9), 2),
        "splits": splits,
        "skipped": skip_log.to_dict(),
        "inputs": paths,
        "output_dir": config.output_dir,
        "compression": "GZIP" if config.gzip else None,
        "warnings": warnings,
    }
    tf.io.gfile.makedirs(os.path.dirname(config.stats_path) or ".")
    with tf.io.gfile.GFile(config.stats_path, "w") as f:
        f.write(json.dumps(stats, indent=2) + "\n")

    skip_log.log_summary()
    for warning in warnings:
        logging.warning("%s", warning)
    logging.info(
        "Wrote %d documents (%.1f MB of text) from %.1f MB of input in %.1f s (%.1f MB/s); "
        "stats in %s",
        records,
        stats["bytes"] / _MB,
        read_stats.input_bytes / _MB,
        seconds,
        stats["input_mb_per_second"],
        config.stats_path,
    )
    if not records:
        raise NoDocumentsError(
            f"no documents written from {len(paths)} input files: {skip_log.total} records "
            f"skipped {skip_log.counts}; see {config.stats_path}"
        )
    return stats
