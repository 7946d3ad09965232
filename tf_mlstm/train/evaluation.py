"""Bits per character of a language model over a finite batch stream.

The state is carried from batch to batch within each row (the rows are
document streams from `tf_mlstm.data.pipeline`) and reset at every document
start by the model itself, so the figure is the per-document one. On request
the progress is reported through `tf_mlstm.progress`, in characters scored.
"""

import time

import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm.data import tfrecord
from tf_mlstm.models.language_model import bits_per_char_from_logits
from tf_mlstm.progress import Progress


def make_eval_step(model, jit_compile=False):
    """A compiled step: (batch, state) -> (bits, chars, state)."""

    @tf.function(jit_compile=jit_compile, reduce_retracing=True)
    def step(batch, state):
        logits, state = model(batch["inputs"], initial_state=state, training=False)
        bits, chars = bits_per_char_from_logits(logits, batch["targets"], batch["weights"])
        return bits, chars, state

    return step


def expected_chars(files, split):
    """About how many characters an evaluation of TFRecord `files` scores.

    Every byte of text and every document's start marker is a target, except
    the first byte of each batch row.

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


def evaluate(model, dataset, max_batches=0, step_fn=None, expected=None, progress=False):
    """Scores every target of a finite dataset.

    Args:
      model: an `MLSTMLanguageModel`.
      dataset: finite dataset of batches from `pipeline.lm_dataset(...,
        training=False)`.
      max_batches: stop after this many batches (0 = all).
      step_fn: a step from `make_eval_step`, to reuse its compiled graph.
      expected: characters the dataset holds (see `expected_chars`); None if
        not known. Only the progress uses it.
      progress: report the progress (a bar on a terminal, else log lines).

    Returns:
      dict with `bits_per_char`, `chars`, `chars_per_s`.

    Raises:
      ValueError: the dataset held no characters to score.
    """
    step_fn = step_fn or make_eval_step(model)
    state = None
    total_bits, total_chars = 0.0, 0.0
    start = time.perf_counter()
    total = _progress_total(dataset, max_batches, expected)
    with Progress("Evaluating", total, "chars", enabled=progress) as report:
        for index, batch in enumerate(dataset):
            if max_batches and index >= max_batches:
                break
            if state is None:
                state = model.initial_state(batch["inputs"].shape[0])
            bits, chars, state = step_fn(batch, state)
            total_bits += float(bits)
            total_chars += float(chars)
            report.update(total_chars)
    if total_chars == 0:
        raise errors.InvalidValueError("evaluation data held no characters to score.")
    seconds = time.perf_counter() - start
    return {
        "bits_per_char": total_bits / total_chars,
        "chars": int(total_chars),
        "chars_per_s": total_chars / max(seconds, 1e-9),
    }


def _progress_total(dataset, max_batches, expected):
    """`expected`, or less where `max_batches` of the dataset's shape hold fewer targets."""
    shape = dataset.element_spec["targets"].shape
    if not max_batches or not shape.is_fully_defined():
        return expected
    most = max_batches * shape.num_elements()
    return most if expected is None else min(expected, most)
