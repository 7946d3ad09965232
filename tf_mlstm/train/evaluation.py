"""Per-document bits per character of a language model over a finite batch stream."""

import time
from collections.abc import Callable

import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm.data import pipeline
from tf_mlstm.data import readers
from tf_mlstm.data import tfrecord
from tf_mlstm.models import language_model
from tf_mlstm.models.language_model import bits_per_char_from_logits
from tf_mlstm.progress import Progress
from tf_mlstm.progress import byte_unit


def make_eval_step(model, jit_compile=False) -> Callable:
    """A compiled step: (batch, state) -> (bits, chars, state)."""

    @tf.function(jit_compile=jit_compile, reduce_retracing=True, autograph=False)
    def step(batch, state):
        logits, state = model(batch["inputs"], initial_state=state, training=False)
        bits, chars = bits_per_char_from_logits(logits, batch["targets"], batch["weights"])
        return bits, chars, state

    return step


def expected_chars(files, split) -> int | None:
    """About how many characters an evaluation of TFRecord `files` scores (all but rows' first).

    Args:
      files: shards of `split`.
      split: the split's name ("test", ...).

    Returns:
      The count from the shards' stats.json, or None if they have none.
    """
    try:
        counts = tfrecord.split_counts(files, split)
    except ValueError:
        return None
    return counts["bytes"] + counts["records"]


def evaluate(
    model, dataset, max_batches=0, step_fn=None, expected=None, progress=False, read=None
) -> dict:
    """Scores every target of a finite dataset.

    Args:
      model: an `MLSTMLanguageModel`.
      dataset: finite batches from `pipeline.lm_dataset(..., training=False)`.
      max_batches: stop after this many batches (0 = all).
      step_fn: a step from `make_eval_step`, to reuse its compiled graph.
      expected: characters the dataset holds (`expected_chars`), for the progress; or None.
      progress: report the progress (a bar on a terminal, else log lines).
      read: raw corpus files' (size in bytes, `readers.ReadStats`), for the progress.

    Returns:
      dict with `bits_per_char`, `chars`, `chars_per_s`.

    Raises:
      ValueError: the dataset held no characters to score.
    """
    step_fn = step_fn or make_eval_step(model)
    state = None
    total_bits, total_chars = 0.0, 0.0
    start = time.perf_counter()
    if read is not None and not max_batches:
        size, read_stats = read
        unit, scale = byte_unit(size)
        report = Progress("Evaluating", size, unit, scale=scale, enabled=progress)
    else:
        read_stats = None
        total = _progress_total(dataset, max_batches, expected)
        report = Progress("Evaluating", total, "chars", enabled=progress)
    with report:
        for index, batch in enumerate(dataset):
            if max_batches and index >= max_batches:
                break
            if state is None:
                state = model.initial_state(batch["inputs"].shape[0])
            bits, chars, state = step_fn(batch, state)
            total_bits += float(bits)
            total_chars += float(chars)
            if read_stats is None:
                report.update(total_chars)
            else:
                report.update(read_stats.stored_bytes, chars=int(total_chars))
        if read_stats is not None:  # All read: the final line says all of it.
            report.update(read_stats.stored_bytes, chars=int(total_chars))
    if total_chars == 0:
        raise errors.InvalidValueError("evaluation data held no characters to score.")
    seconds = time.perf_counter() - start
    return {
        "bits_per_char": total_bits / total_chars,
        "chars": int(total_chars),
        "chars_per_s": total_chars / max(seconds, 1e-9),
    }


def _progress_total(dataset, max_batches, expected):
    shape = dataset.element_spec["targets"].shape
    if not max_batches or not shape.is_fully_defined():
        return expected
    most = max_batches * shape.num_elements()
    return most if expected is None else min(expected, most)


def evaluate_data(
    model_dir,
    data,
    text_keys,
    text_mode="line",
    split="test",
    batch_size=32,
    seq_length=256,
    max_batches=0,
) -> dict:
    """Scores `data` (TFRecord folder or glob, or raw corpus files) under `model_dir`'s model.

    Returns:
      dict with `bits_per_char`, `chars`, `chars_per_s`.

    Raises:
      FileNotFoundError: no data or no model where the flags point.
      ValueError: nothing to score, an incomplete TFRecord folder, or an unreadable corpus file.
    """

    model = language_model.MLSTMLanguageModel.from_run(model_dir)
    read_errors = []  # A raw corpus file that could not be read ends its stream here.
    expected = None  # A raw corpus's size in characters is known only once read,
    read = None  # so its progress counts the bytes read against the files' size.
    if tfrecord.is_tfrecord_data(data):
        files = tfrecord.split_files(data, split)
        if not tfrecord.nonempty_files(files):
            raise errors.InvalidValueError(
                f"no records to score: the {len(files)} {split} shards of {data} are empty"
            )
        documents = pipeline.document_dataset(files)
        expected = expected_chars(files, split)
    else:
        paths = readers.expand_inputs(data)
        read = (sum(tf.io.gfile.stat(path).length for path in paths), readers.ReadStats())
        documents = pipeline.corpus_documents(
            paths, text_keys, text_mode, errors=read_errors, read_stats=read[1]
        )
    dataset = pipeline.window_dataset(documents, batch_size, seq_length, finite=True)
    try:
        result = evaluate(
            model, dataset.prefetch(2), max_batches, expected=expected, progress=True, read=read
        )
    except ValueError:
        if read_errors:  # The cause of "no characters to score".
            raise read_errors[0] from None
        raise
    if read_errors:
        raise read_errors[0]
    return result


def evaluate_config(config) -> dict:
    """`evaluate_data` of a `config.EvalConfig` (what `tf-mlstm-eval` runs)."""
    return evaluate_data(
        config.model_dir,
        config.data,
        config.text_keys,
        config.text_mode,
        config.split,
        config.batch_size,
        config.seq_length,
        config.max_batches,
    )
