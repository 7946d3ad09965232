"""Corpus to sharded TFRecords: the library behind `tf-mlstm-make-tfrecords`.

Shards are staged in a hidden folder and moved in when all are written; the stats file last.
"""

import contextlib
import os
import time
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import tensorflow as tf
from absl import logging

from tf_mlstm import fileio
from tf_mlstm.data import readers
from tf_mlstm.data import tfrecord
from tf_mlstm.data.fields import STATS_FILE
from tf_mlstm.errors import setting_name as _name
from tf_mlstm.progress import Progress
from tf_mlstm.progress import byte_unit

_MB = 1e6


class NoDocumentsError(readers.InputError):
    """The inputs held no usable document.

    Example:

    >>> from tf_mlstm import errors
    >>> from tf_mlstm.data.convert import NoDocumentsError
    >>> errors.is_user_error(NoDocumentsError("reviews.json: no usable document"))
    True
    """


def _marker(output_dir: str) -> str:
    return os.path.join(output_dir, tfrecord.INCOMPLETE_MARKER)


def _prepare_output_dir(config) -> None:
    """Refuses a non-empty output folder unless `overwrite`, then marks it incomplete."""
    output_dir = config.output_dir
    if tf.io.gfile.isdir(output_dir):
        entries = sorted(tf.io.gfile.listdir(output_dir))
        if entries and not config.overwrite:
            raise FileExistsError(
                f"output directory {output_dir} is not empty ({len(entries)} entries, such as "
                f"{entries[0].rstrip('/')}): pass {_name('overwrite')} to replace its data, or "
                "choose "
                "another directory"
            )
    elif tf.io.gfile.exists(output_dir):
        raise FileExistsError(f"output directory {output_dir} is a file")
    fileio.write_text_atomic(
        _marker(output_dir),
        "tf-mlstm-make-tfrecords is writing this folder, or stopped before the end; "
        "re-run it with --overwrite.\n",
    )


def _staging_dir(config) -> str:
    return os.path.join(config.output_dir, fileio.TMP_PREFIX + "conversion")


def _remove_old(config) -> None:
    output_dir = config.output_dir
    old = [config.stats_path, os.path.join(output_dir, STATS_FILE)]
    for split in tfrecord.SPLITS:
        old += tf.io.gfile.glob(os.path.join(output_dir, f"{split}-*{tfrecord.TFRECORD_SUFFIX}*"))
    removed = 0
    spill_dir = os.path.join(output_dir, tfrecord.SPILL_SUBDIR)
    if tf.io.gfile.isdir(spill_dir):
        tf.io.gfile.rmtree(spill_dir)
        removed += 1
    for path in dict.fromkeys(old):
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
            removed += 1
    if removed:
        logging.info(
            "%s: removed %d files of a former conversion in %s",
            _name("overwrite"),
            removed,
            output_dir,
        )


def _move_in(config, shard_paths: dict[str, list[str]]) -> None:
    for paths in shard_paths.values():
        for path in paths:
            final = os.path.join(config.output_dir, os.path.basename(path))
            tf.io.gfile.rename(path, final, overwrite=True)
    tf.io.gfile.rmtree(_staging_dir(config))


def _abandon(config, existed: bool, was_complete: bool) -> None:
    staging = _staging_dir(config)
    if tf.io.gfile.isdir(staging):
        tf.io.gfile.rmtree(staging)
    marker = _marker(config.output_dir)
    left = [
        name
        for name in tf.io.gfile.listdir(config.output_dir)
        if name != tfrecord.INCOMPLETE_MARKER
    ]
    if tf.io.gfile.exists(marker) and (was_complete or not left):
        tf.io.gfile.remove(marker)
    if not existed and not tf.io.gfile.listdir(config.output_dir):
        tf.io.gfile.rmtree(config.output_dir)


def convert(config) -> dict[str, Any]:
    """Converts the input corpus into sharded TFRecords and writes stats.

    Args:
        config: a `tf_mlstm.config.ConvertConfig`: what to read and where to write.

    Returns:
        The stats written to `config.stats_path`.

    Raises:
        FileNotFoundError: If an input file or glob matches nothing.
        readers.InputError: If an input file as a whole is unreadable.
        NoDocumentsError: If no document was written.
        FileExistsError: If `output_dir` is not empty and `overwrite` is not set.
    """
    start = time.monotonic()
    paths = readers.expand_inputs(config.input)

    def write(staging, skip_log, read_stats):
        progress = _progress(config, paths)
        writer = _open_writer(config, staging)
        documents = read_documents(config, paths, skip_log, read_stats)
        records = _write_documents(config, documents, writer, progress, read_stats)
        return records, writer.split_stats(), writer.paths

    return run_staged(config, paths, start, write)


WriteShards = Callable[
    [str, readers.SkipLog, readers.ReadStats],
    tuple[int, dict[str, dict[str, int]], dict[str, list[str]]],
]
"""`write(staging_dir, skip_log, read_stats)` -> (records, split stats, shard paths)."""


def run_staged(config, paths: list[str], start: float, write: WriteShards) -> dict[str, Any]:
    """A conversion's folder handling around `write`, which stages the shards.

    Args:
        config: a `tf_mlstm.config.ConvertConfig`.
        paths: The input files.
        start: `time.monotonic()` when the conversion began.
        write: Writes the shards (see `WriteShards`).

    Returns:
        The stats (see `convert`).

    Raises:
        NoDocumentsError, FileExistsError: As `convert`; and whatever `write` raises.
    """
    existed = tf.io.gfile.isdir(config.output_dir)
    was_complete = (
        existed
        and tf.io.gfile.exists(config.stats_path)
        and not tf.io.gfile.exists(_marker(config.output_dir))
    )
    _prepare_output_dir(config)
    logging.info("Converting %d input files into %s", len(paths), config.output_dir)
    skip_log = readers.SkipLog()
    read_stats = readers.ReadStats()
    try:
        staging = _staging_dir(config)
        if tf.io.gfile.isdir(staging):  # left by a killed conversion
            tf.io.gfile.rmtree(staging)
        records, splits, shard_paths = write(staging, skip_log, read_stats)
        if not records:
            skip_log.log_summary()
            examples = [e for reason in skip_log.examples.values() for e in reason][:1]
            raise NoDocumentsError(
                f"no documents written from {len(paths)} input files: {skip_log.total} records "
                f"skipped {skip_log.counts}"
                + (f", the first: {examples[0]}" if examples else "")
                + f"; {config.output_dir} is as it was"
            )
    except BaseException:
        _abandon(config, existed, was_complete)
        raise
    stats = _conversion_stats(config, paths, records, splits, read_stats, skip_log, start)
    if config.overwrite:
        _remove_old(config)
    _move_in(config, shard_paths)
    _finish(config, stats)
    _log_summary(config, stats, skip_log)
    return stats


def _open_writer(config, folder: str) -> tfrecord.ShardedWriter:
    return tfrecord.ShardedWriter(
        folder,
        num_train_shards=config.num_shards,
        split_weights=config.split,
        compression=_compression(config),
    )


def _compression(config) -> str | None:
    return "GZIP" if config.gzip else None


def read_documents(
    config,
    paths: list[str],
    skip_log: readers.SkipLog,
    read_stats: readers.ReadStats,
) -> Iterator[readers.Document]:
    """`readers.read_documents` of `paths` as `config` says (keys, text mode, limits)."""
    return readers.read_documents(
        paths,
        text_keys=config.text_keys,
        label_key=config.label_key,
        rating_key=config.rating_key,
        text_mode=config.text_mode,
        skip_log=skip_log,
        read_stats=read_stats,
        interleave=config.interleave_inputs,
        max_document_bytes=config.max_document_bytes,
    )


def _progress(config, paths: list[str]) -> Progress:
    if config.max_documents:
        total, unit, scale = config.max_documents, "records", 1.0
    else:
        total = sum(tf.io.gfile.stat(path).length for path in paths)
        unit, scale = byte_unit(total)
    return Progress(
        "Converting", total, unit, scale=scale, log_interval_s=config.progress_interval_s
    )


def _write_documents(
    config,
    documents: Iterator[readers.Document],
    writer: tfrecord.ShardedWriter,
    progress: Progress,
    read_stats: readers.ReadStats,
) -> int:
    records = 0
    # The progress closes first, on an error too, so the error starts on a line of its own.
    with writer, contextlib.closing(documents), progress:
        for doc in documents:
            writer.write(doc)
            records += 1
            if config.max_documents:
                progress.update(records)
            else:
                progress.update(read_stats.stored_bytes, records=records)
            if records == config.max_documents:
                break
    return records


def _conversion_stats(
    config,
    paths: list[str],
    records: int,
    splits: dict[str, dict[str, int]],
    read_stats: readers.ReadStats,
    skip_log: readers.SkipLog,
    start: float,
) -> dict[str, Any]:
    seconds = time.monotonic() - start
    warnings = [
        f"the {split} split received no documents ({records} in all, split weights {config.split})"
        for split in tfrecord.SPLITS
        if records and not splits[split]["records"]
    ]
    return {
        "records": records,
        "bytes": sum(split["bytes"] for split in splits.values()),
        "input_bytes": read_stats.input_bytes,
        "seconds": round(seconds, 3),
        "input_mb_per_second": round(read_stats.input_bytes / _MB / max(seconds, 1e-9), 2),
        "splits": splits,
        "skipped": skip_log.to_dict(),
        "inputs": paths,
        "output_dir": config.output_dir,
        "compression": _compression(config),
        "warnings": warnings,
    }


def _finish(config, stats: dict[str, Any]) -> None:
    # Last, and atomically: a stats file means every shard is complete.
    fileio.write_json_atomic(config.stats_path, stats)
    tf.io.gfile.remove(_marker(config.output_dir))


def _log_summary(config, stats: dict[str, Any], skip_log: readers.SkipLog) -> None:
    skip_log.log_summary()
    for warning in stats["warnings"]:
        logging.warning("%s", warning)
    logging.info(
        "Wrote %d documents (%.1f MB of text) from %.1f MB of input in %.1f s (%.1f MB/s); "
        "stats in %s",
        stats["records"],
        stats["bytes"] / _MB,
        stats["input_bytes"] / _MB,
        stats["seconds"],
        stats["input_mb_per_second"],
        config.stats_path,
    )
