"""tf.data pipelines from documents to batches of contiguous byte windows.

Row j of batch k+1 continues row j of batch k, so the model carries its state across batches.
"""

import re

import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm.data import framing
from tf_mlstm.data import readers
from tf_mlstm.data import tfrecord
from tf_mlstm.data.repeats import parse_source_repeats  # noqa: F401 (one import path)


def _source_regex(pattern):
    parts = {"*": ".*", "?": "."}
    return "(?s)" + "".join(parts.get(char) or re.escape(char) for char in pattern)


def source_copies(sources, rules) -> tf.Tensor:
    """Copies of each document under `rules`: the first matching rule's count, else 1.

    Args:
      sources: tf.string tensor of source paths.
      rules: `parse_source_repeats` output.

    Returns:
      int64 tensor shaped like `sources`.
    """
    copies = tf.ones_like(sources, dtype=tf.int64)
    for pattern, count in reversed(rules):
        match = tf.strings.regex_full_match(sources, _source_regex(pattern))
        copies = tf.where(match, tf.constant(count, tf.int64), copies)
    return copies


def source_census(files, rules, records=1000) -> tuple[int, list, list]:
    """How many of the first `records` records of `files[0]` each rule matches (for the log).

    Returns:
      (records read, records with a source, {pattern: matches}).
    """
    compression = tfrecord.compression_type(files)
    parsed = tf.data.TFRecordDataset(files[:1], compression_type=compression).take(records)
    sources = [tfrecord.parse_example(r)[tfrecord.SOURCE_FEATURE].numpy() for r in parsed]
    sources = tf.constant(sources, tf.string) if sources else tf.zeros([0], tf.string)
    matches = {
        pattern: int(
            tf.reduce_sum(
                tf.cast(tf.strings.regex_full_match(sources, _source_regex(pattern)), tf.int32)
            )
        )
        for pattern, _ in rules
    }
    named = int(tf.reduce_sum(tf.cast(tf.strings.length(sources) > 0, tf.int32)))
    return int(sources.shape[0]), named, matches


def document_dataset(
    files,
    input_context=None,
    shuffle=False,
    seed=0,
    shuffle_buffer=0,
    repeat=False,
    cycle_length=4,
    source_repeats=(),
) -> tf.data.Dataset:
    """Normalized document texts (tf.string scalars) from TFRecord shards.

    Args:
      files: shard file paths (all gzip or all uncompressed).
      input_context: a `tf.distribute.InputContext`: read `files[pipeline_id::num_pipelines]`.
      shuffle: shuffle shard order each epoch (seeded).
      seed: shuffle seed.
      shuffle_buffer: documents in the shuffle buffer (0 = no shuffling).
      repeat: cycle through the shards forever (or end at once if they hold no record).
      cycle_length: shards read in parallel.
      source_repeats: `parse_source_repeats` rules, applied before the shuffle.

    Returns:
      A dataset of document texts.

    Raises:
      ValueError: no files, mixed compression, or fewer shards than pipelines.
    """
    files = sorted(files)
    if not files:
        raise errors.InvalidValueError("document_dataset: no TFRecord files given.")
    compression = tfrecord.compression_type(files)
    if input_context is not None and input_context.num_input_pipelines > 1:
        n, i = input_context.num_input_pipelines, input_context.input_pipeline_id
        if len(files) < n:
            raise errors.InvalidValueError(
                f"{len(files)} shard files cannot feed {n} input pipelines (one "
                f"per worker): convert the corpus with {errors.setting_name('num_shards')} >= the "
                "number of workers."
            )
        files = files[i::n]
    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type=compression),
        cycle_length=min(cycle_length, len(files)),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if repeat:
        # Each epoch reshuffles the shards; an epoch with no record at all
        # ends the dataset instead of repeating forever.
        ds = ds.repeat()
    fields = (tfrecord.TEXT_FEATURE, tfrecord.SOURCE_FEATURE)
    ds = ds.map(
        lambda record: tuple(tfrecord.parse_example(record)[k] for k in fields),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if source_repeats:
        ds = ds.flat_map(
            lambda text, source: tf.data.Dataset.from_tensors(text).repeat(
                source_copies(source, source_repeats)
            )
        )
    else:
        ds = ds.map(lambda text, source: text)
    if shuffle_buffer:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return ds


def corpus_documents(
    paths,
    text_keys,
    text_mode="line",
    max_document_bytes=readers.DEFAULT_MAX_DOCUMENT_BYTES,
    errors=None,
    read_stats=None,
) -> tf.data.Dataset:
    """Normalized texts of raw corpus files (JSONL, CSV, text) as a dataset, via `readers`.

    Args:
        paths: corpus files.
        text_keys: keys/columns tried in order for the text.
        text_mode: plain-text files: "line" or "file".
        max_document_bytes: longest record read.
        errors: a list that receives a `readers.InputError`; None: raised inside tf.data.
        read_stats: a `readers.ReadStats` kept up to date, or None.

    Returns:
        A dataset of tf.string document texts.

    Raises:
        FileNotFoundError: a file does not exist.
    """
    paths = list(paths)

    def read(stats=None):
        return readers.read_documents(
            paths,
            text_keys,
            text_mode=text_mode,
            max_document_bytes=max_document_bytes,
            read_stats=stats,
        )

    read()  # Fail fast on missing files and bad arguments.

    def generate():
        try:
            for doc in read(read_stats):
                yield doc.text.encode("utf-8")
        except (readers.InputError, OSError, tf.errors.OpError) as e:
            if errors is None:
                raise
            if not isinstance(e, readers.InputError):
                message = getattr(e, "message", None) or str(e)
                e = readers.InputError(f"cannot read the corpus: {message.strip()[:300]}")
            errors.append(e)

    return tf.data.Dataset.from_generator(generate, output_signature=tf.TensorSpec((), tf.string))


def window_dataset(documents, rows, seq_length, finite=False) -> tf.data.Dataset:
    """Turns document texts into [rows, seq_length + 1] byte windows.

    Args:
      documents: dataset of normalized texts (tf.string scalars, unframed).
      rows: batch rows (streams).
      seq_length: window length in characters (targets per row).
      finite: flush and pad the rows when the documents end (evaluation).

    Returns:
      A dataset of dicts: `inputs`, `targets` [rows, seq_length] uint8 and
      `weights` [rows, seq_length] float32 (1 for real targets).
    """
    width = seq_length + 1
    framed = documents.map(lambda t: (framing.frame_bytes_tf(t), False))
    if finite:
        # One sentinel element tells the scan to flush the buffers.
        framed = framed.concatenate(tf.data.Dataset.from_tensors((tf.constant(""), True)))

    def scan(buffers, element):
        doc, flush = element
        lengths = tf.strings.length(buffers)
        row = tf.argmin(lengths, output_type=tf.int32)
        buffers = tf.tensor_scatter_nd_update(
            buffers, [[row]], [tf.strings.join([buffers[row], doc])]
        )
        lengths = tf.strings.length(buffers)
        shortest = tf.reduce_min(lengths)
        full = tf.maximum(shortest - 1, 0) // seq_length
        longest = tf.reduce_max(lengths)
        flushed = tf.maximum(longest - 1 + seq_length - 1, 0) // seq_length
        count = tf.where(flush, flushed, full)
        starts = tf.range(count) * seq_length
        # Clamped: at a flush, short rows have no bytes left (weights are 0).
        positions = tf.minimum(starts[:, None], lengths[None, :])
        windows = tf.strings.substr(
            tf.broadcast_to(buffers[None, :], (count, rows)),
            positions,
            tf.fill((count, rows), width),
        )
        # Real targets in each window: bytes after its first, up to the end.
        valid = tf.clip_by_value(lengths[None, :] - 1 - starts[:, None], 0, seq_length)
        consumed = count * seq_length
        buffers = tf.strings.substr(
            buffers, tf.minimum(consumed, lengths), tf.maximum(lengths - consumed, 0)
        )
        return buffers, (windows, valid)

    initial = tf.fill((rows,), "")
    ds = framed.scan(initial, scan)
    ds = ds.flat_map(lambda w, v: tf.data.Dataset.from_tensor_slices((w, v)))

    def to_arrays(windows, valid):
        ids = tf.io.decode_raw(windows, tf.uint8, fixed_length=width)
        ids = tf.reshape(ids, (rows, width))
        weights = tf.cast(tf.range(seq_length)[None, :] < valid[:, None], tf.float32)
        return {"inputs": ids[:, :-1], "targets": ids[:, 1:], "weights": weights}

    return ds.map(to_arrays, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def lm_dataset(
    files,
    batch_size,
    seq_length,
    input_context=None,
    training=True,
    seed=0,
    shuffle_buffer=1024,
    source_repeats=(),
) -> tf.data.Dataset:
    """Training or evaluation batches for one input pipeline.

    Args:
      files: TFRecord shard paths.
      batch_size: rows (streams) per batch of this pipeline.
      seq_length: characters per row per batch.
      input_context: the `tf.distribute.InputContext`, if distributed.
      training: repeat forever and shuffle (else one finite padded pass).
      seed: shuffle seed.
      shuffle_buffer: documents in the shuffle buffer when training.
      source_repeats: oversampling rules (see `document_dataset`), training only.

    Returns:
      A dataset of batches (dicts, see `window_dataset`).
    """
    docs = document_dataset(
        files,
        input_context,
        shuffle=training,
        seed=seed,
        shuffle_buffer=shuffle_buffer if training else 0,
        repeat=training,
        source_repeats=source_repeats if training else (),
    )
    ds = window_dataset(docs, batch_size, seq_length, finite=not training)
    return ds.prefetch(tf.data.AUTOTUNE)
