"""The corpus converter as a Beam pipeline: `tf-mlstm-make-tfrecords --runner=...`.

`tf_mlstm.data.convert`'s conversion over a runner's workers, one input file a unit of work.
Records go per shard into sorted runs on disk; one worker per shard merges its runs, so a
shard's bytes do not depend on the runner (docs/distributed.md, "Converting with Apache Beam").
"""

import heapq
import os
import struct
import time
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm.beam import options as beam_options
from tf_mlstm.config import ConvertConfig
from tf_mlstm.data import convert
from tf_mlstm.data import readers
from tf_mlstm.data import tfrecord

_INPUT_COUNTS_SUBDIR = "_input_counts"
_RUNS_SUBDIR = "_sorted_runs"
# Records a reader holds before it writes them out as sorted runs.
_RUN_BYTES = 64 << 20
_KEY_BYTES = 16
# A run file: entries (document key + record), each after its length.
_LENGTH = struct.Struct("<I")
_READ_BYTES = 1 << 20
# Errors of a whole file that the single-process converter reports as one line.
_FILE_ERRORS = (readers.InputError, FileNotFoundError)


class _ReadFile(beam.DoFn):
    """One input file -> sorted runs of its records per shard (names shuffled); counts to a file."""

    def __init__(self, config: ConvertConfig, staging: str):
        self._config = config
        self._staging = staging

    def setup(self):
        self._assignment = tfrecord.ShardAssignment(self._config.num_shards, self._config.split)

    def process(self, element: tuple[int, str]) -> Iterator[tuple[tuple[int, int], str]]:
        index, path = element
        skip_log = readers.SkipLog()
        read_stats = readers.ReadStats()
        splits = [[0, 0] for _ in tfrecord.SPLITS]
        buffers: dict[tuple[int, int], list[bytes]] = {}
        buffered = runs = 0
        error = None
        try:
            for doc in convert.read_documents(self._config, [path], skip_log, read_stats):
                key = tfrecord.document_key(doc.source, doc.line)
                split, shard = self._assignment.assign_key(key)
                text = doc.text.encode("utf-8")
                splits[split][0] += 1
                splits[split][1] += len(text)
                entry = key + tfrecord.serialize(text, doc)
                buffers.setdefault((split, shard), []).append(entry)
                buffered += len(entry)
                if buffered >= _RUN_BYTES:
                    yield from self._write_runs(buffers, index, runs)
                    buffers, buffered, runs = {}, 0, runs + 1
            yield from self._write_runs(buffers, index, runs)
        except _FILE_ERRORS as e:
            error = {"type": type(e).__name__, "message": errors.one_line(e)}
        counts = {
            "path": path,
            "input_bytes": read_stats.input_bytes,
            "splits": splits,
            "skipped": skip_log.to_dict(),
            "error": error,
        }
        # Written again, whole, if the runner retries the file (so are the runs).
        counts_path = os.path.join(self._staging, _INPUT_COUNTS_SUBDIR, f"{index:08d}.json")
        fileio.write_json_atomic(counts_path, counts)

    def _write_runs(self, buffers, index, run):
        for (split, shard), entries in sorted(buffers.items()):
            path = os.path.join(
                self._staging, _RUNS_SUBDIR, f"{split}-{shard:05d}-{index:08d}-{run:06d}"
            )
            # Ties (two inputs of one base name) are ordered by the record itself.
            entries.sort()
            with tf.io.gfile.GFile(path, "wb") as f:
                f.write(b"".join(_LENGTH.pack(len(entry)) + entry for entry in entries))
            yield (split, shard), path


class _WriteShard(beam.DoFn):
    """((split, shard), run files) -> the shard file, by key; memory holds one record per run."""

    def __init__(self, staging: str, shard_counts: dict[str, int], compression: str | None):
        self._staging = staging
        self._shard_counts = shard_counts
        self._compression = compression

    def process(self, element: tuple[tuple[int, int], Any]) -> Iterator[str]:
        (split, shard), runs = element
        name = tfrecord.SPLITS[split]
        path = os.path.join(
            self._staging,
            tfrecord.shard_name(name, shard, self._shard_counts[name], self._compression),
        )
        sources = [_run_entries(run) for run in sorted(set(runs))]
        with tf.io.TFRecordWriter(path, tfrecord.record_options(self._compression)) as writer:
            for entry in heapq.merge(*sources):
                writer.write(entry[_KEY_BYTES:])
        yield path


def _run_entries(path: str) -> Iterator[bytes]:
    """The entries (key + record) of a run file, in order, read in 1 MiB pieces."""
    with tf.io.gfile.GFile(path, "rb") as f:
        data, at = b"", 0
        while True:
            if len(data) - at >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(data, at)
                end = at + _LENGTH.size + length
                if end <= len(data):
                    yield data[at + _LENGTH.size : end]
                    at = end
                    continue
            more = f.read(_READ_BYTES)
            if not more:
                return
            data, at = data[at:] + more, 0


def convert_with_beam(
    config: ConvertConfig, runner: str, pipeline_args: Sequence[str] = ()
) -> dict[str, Any]:
    """Converts the corpus of `config` as a Beam pipeline.

    Args:
        config: What to read and where to write, as for `convert.convert`;
            `max_documents` must be 0 and `interleave` is not used.
        runner: The Beam runner ("DirectRunner", "DataflowRunner", ...).
        pipeline_args: Further Beam pipeline options, as command-line flags.

    Returns:
        The stats written to `config.stats_path`, as `convert.convert`'s.

    Raises:
        ValueError: `max_documents` is set, or an argument is no pipeline option.
        FileNotFoundError, readers.InputError, convert.NoDocumentsError,
        FileExistsError: As `convert.convert`.
    """
    if config.max_documents:
        raise errors.InvalidValueError(
            f"{errors.setting_name('max_documents')} cannot be used with "
            f"{errors.setting_name('runner')}: a Beam pipeline has no stream order to cut it at; "
            "convert a part of the input instead"
        )
    options = beam_options.pipeline_options(runner, pipeline_args)
    start = time.monotonic()
    paths = readers.expand_inputs(config.input)
    compression = "GZIP" if config.gzip else None
    shard_counts = tfrecord.split_shard_counts(config.num_shards, config.split)

    def write(staging, skip_log, read_stats):
        counts_dir = os.path.join(staging, _INPUT_COUNTS_SUBDIR)
        tf.io.gfile.makedirs(counts_dir)
        tf.io.gfile.makedirs(os.path.join(staging, _RUNS_SUBDIR))
        logging.info("Running the conversion on %s", runner)
        with beam.Pipeline(options=options) as pipeline:
            _ = (
                pipeline
                | "Inputs" >> beam.Create(list(enumerate(paths)))
                | "Spread" >> beam.Reshuffle()
                | "Read" >> beam.ParDo(_ReadFile(config, staging))
                | "ByShard" >> beam.GroupByKey()
                | "Write" >> beam.ParDo(_WriteShard(staging, shard_counts, compression))
            )
        splits = _add_counts(counts_dir, len(paths), shard_counts, skip_log, read_stats)
        tf.io.gfile.rmtree(counts_dir)
        tf.io.gfile.rmtree(os.path.join(staging, _RUNS_SUBDIR))
        shard_paths = {
            split: [
                os.path.join(staging, tfrecord.shard_name(split, i, count, compression))
                for i in range(count)
            ]
            for split, count in shard_counts.items()
        }
        for path in (path for paths in shard_paths.values() for path in paths):
            if not tf.io.gfile.exists(path):  # No document went there.
                tf.io.TFRecordWriter(path, tfrecord.record_options(compression)).close()
        return sum(split["records"] for split in splits.values()), splits, shard_paths

    return convert.run_staged(config, paths, start, write)


def _add_counts(
    counts_dir: str,
    files: int,
    shard_counts: dict[str, int],
    skip_log: readers.SkipLog,
    read_stats: readers.ReadStats,
) -> dict[str, dict[str, int]]:
    """Adds the per-file counts in input order into `{split: {"records", "bytes", "shards"}}`."""
    splits = {
        split: {"records": 0, "bytes": 0, "shards": shard_counts[split]}
        for split in tfrecord.SPLITS
    }
    for index in range(files):
        counts = fileio.read_json(os.path.join(counts_dir, f"{index:08d}.json"))
        if counts["error"]:
            error = counts["error"]
            kind = FileNotFoundError if error["type"] == "FileNotFoundError" else readers.InputError
            raise kind(error["message"])
        read_stats.input_bytes += counts["input_bytes"]
        read_stats.files_read += 1
        skip_log.merge(counts["skipped"])
        for split, (records, size) in zip(tfrecord.SPLITS, counts["splits"]):
            splits[split]["records"] += records
            splits[split]["bytes"] += size
    return splits
