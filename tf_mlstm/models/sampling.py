"""Sampling text from a language model, optionally with one unit held fixed.

A held unit (Radford et al.'s sentiment neuron) is overwritten after every byte, prompt included.
"""

import math
from collections.abc import Callable

import tensorflow as tf

from tf_mlstm import errors
from tf_mlstm.config import bounds
from tf_mlstm.data.text import DOC_START
from tf_mlstm.data.text import check_text
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models.preprocessor import BytePreprocessor

PAD_ID = -1
"""Fills `sample_ids` rows after the `DOC_START` that ended them."""


def _held(c, neuron, neuron_value):
    # one_hot(-1) is all zeros, so "no unit" needs no branch in the graph.
    clamp = tf.one_hot(neuron, tf.shape(c)[-1], dtype=c.dtype)
    return c * (1 - clamp) + clamp * tf.cast(neuron_value, c.dtype)


def _step(model, ids, h, c, neuron, neuron_value, hidden_state=False):
    outputs, (h, c) = model.encode(ids, [h, c], training=False)
    in_h = neuron if hidden_state else -1
    in_c = -1 if hidden_state else neuron
    last = _held(outputs[:, -1], in_h, neuron_value)
    return last, _held(h, in_h, neuron_value), _held(c, in_c, neuron_value)


def _unit_values(c, unit):
    values = tf.cast(tf.gather(c, tf.maximum(unit, 0), axis=1), tf.float32)
    return tf.where(unit >= 0, values, tf.zeros_like(values))


def feed_bytes(
    model, ids, unit=-1, neuron=-1, neuron_value=0.0, state=None, hidden_state=False
) -> tuple[tf.Tensor, list, tf.Tensor]:
    """Runs the model over `ids` one byte at a time, as sampling does (graph-friendly).

    Args:
      model: an `MLSTMLanguageModel`.
      ids: [N, T] int32 byte ids (T >= 1).
      unit: the unit whose value after every byte is traced (-1: none, zeros).
      neuron: a unit held at `neuron_value` after every step, or -1.
      neuron_value: the held value.
      state: optional initial [h, c] (default zeros).
      hidden_state: a Python bool: `unit` and `neuron` are hidden-state units.

    Returns:
      (last hidden state [N, H], [h, c], trace [N, T] float32).
    """
    ids = tf.cast(ids, tf.int32)
    batch = tf.shape(ids)[0]
    h, c = state if state is not None else model.initial_state(batch)
    columns = tf.transpose(ids)
    steps = tf.shape(columns)[0]
    trace = tf.TensorArray(tf.float32, size=steps)
    last = tf.zeros((batch, model.hidden_size), model.compute_dtype)

    def body(t, h, c, last, trace):
        last, h, c = _step(model, columns[t][:, None], h, c, neuron, neuron_value, hidden_state)
        return t + 1, h, c, last, trace.write(t, _unit_values(h if hidden_state else c, unit))

    _, h, c, last, trace = tf.while_loop(
        lambda t, *_: t < steps, body, (tf.constant(0), h, c, last, trace)
    )
    return last, [h, c], tf.reshape(tf.transpose(trace.stack()), [batch, steps])


def make_sampler(model, hidden_state=False) -> Callable:
    """A compiled sampling function for `model`, traced once for any prompt, length and seed.

    Args:
      model: an `MLSTMLanguageModel`.
      hidden_state: held and traced units are hidden-state ones (also an attribute).

    Returns:
      `sampler(prompt_ids, length, temperature, seed, neuron, neuron_value,
      stop_at_doc_end, trace_unit)` -> `(ids, trace)`, as `sample_ids` calls it.
    """

    scalar = lambda dtype: tf.TensorSpec([], dtype)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32),
            scalar(tf.int32),
            scalar(tf.float32),
            scalar(tf.int64),
            scalar(tf.int32),
            scalar(tf.float32),
            scalar(tf.bool),
            scalar(tf.int32),
        ],
        autograph=False,
    )
    def sampler(
        prompt_ids, length, temperature, seed, neuron, neuron_value, stop_at_doc_end, trace_unit
    ):
        last, (h, c), _ = feed_bytes(
            model, prompt_ids, neuron=neuron, neuron_value=neuron_value, hidden_state=hidden_state
        )
        batch = tf.shape(prompt_ids)[0]
        base_seed = tf.stack([tf.cast(seed, tf.int64), tf.constant(0, tf.int64)])
        ids = tf.TensorArray(tf.int32, size=length)
        trace = tf.TensorArray(tf.float32, size=length)
        done = tf.zeros((batch,), tf.bool)

        def keep_going(t, h, c, last, done, ids, trace):
            running = tf.logical_not(tf.logical_and(stop_at_doc_end, tf.reduce_all(done)))
            return tf.logical_and(t < length, running)

        def body(t, h, c, last, done, ids, trace):
            logits = tf.cast(model.head(last), tf.float32) / temperature
            step_seed = tf.random.experimental.stateless_fold_in(base_seed, t)
            byte = tf.random.stateless_categorical(logits, 1, step_seed, dtype=tf.int32)
            last, h, c = _step(model, byte, h, c, neuron, neuron_value, hidden_state)
            value = _unit_values(h if hidden_state else c, trace_unit)
            byte = byte[:, 0]
            ended = tf.logical_and(stop_at_doc_end, done)
            ids = ids.write(t, tf.where(ended, PAD_ID, byte))
            trace = trace.write(t, tf.where(ended, math.nan, value))
            done = tf.logical_or(done, tf.equal(byte, DOC_START))
            return t + 1, h, c, last, done, ids, trace

        t, *_, ids, trace = tf.while_loop(
            keep_going, body, (tf.constant(0), h, c, last, done, ids, trace)
        )
        # Steps never run (every row had ended) are padding. An empty array
        # cannot be stacked without a static batch size, hence the cond.
        ran = tf.range(length)[:, None] < t
        ids = tf.cond(length > 0, ids.stack, lambda: tf.zeros([0, batch], tf.int32))
        trace = tf.cond(length > 0, trace.stack, lambda: tf.zeros([0, batch], tf.float32))
        ids = tf.where(ran, ids, PAD_ID)
        trace = tf.where(ran, trace, math.nan)
        return tf.transpose(ids), tf.transpose(trace)

    sampler.hidden_state = bool(hidden_state)
    return sampler


def _check_unit(name, index, hidden_size, allow_none):
    low = -1 if allow_none else 0
    if not low <= index < hidden_size:
        raise errors.InvalidValueError(
            f"{name} must be in [{low}, {hidden_size - 1}] (the model has {hidden_size} "
            f"cell units), got {index}."
        )


def sample_ids(
    model,
    prompt_ids,
    length,
    temperature=1.0,
    seed=0,
    neuron=-1,
    neuron_value=0.0,
    stop_at_doc_end=False,
    trace_unit=None,
    sampler=None,
    hidden_state=False,
) -> tf.Tensor | tuple[tf.Tensor, tf.Tensor]:
    """Continues each prompt row by up to `length` sampled bytes.

    Args:
      model: an `MLSTMLanguageModel`.
      prompt_ids: [N, P] int32 prompt bytes, P >= 1, framed with `DOC_START`.
      length: bytes to generate.
      temperature: softmax temperature (> 0); small values approach argmax.
      seed: integer seed; the same seed gives the same text.
      neuron: a cell unit held at `neuron_value` after every step, or -1.
      neuron_value: the held value.
      stop_at_doc_end: end a row at its first generated `DOC_START` (then `PAD_ID`).
      trace_unit: a cell unit whose value after each generated byte is returned too.
      sampler: a `make_sampler(model)` to reuse (default: a new one).
      hidden_state: `neuron` and `trace_unit` are hidden-state units.

    Returns:
      [N, length] int32 bytes; with `trace_unit`, `(ids, trace)` (NaN after a row ended).

    Raises:
      ValueError: a bad temperature or length, an empty prompt, or a unit outside the model.
    """
    if not (temperature > 0 and math.isfinite(temperature)):
        raise errors.InvalidValueError(f"temperature must be a positive number, got {temperature}.")
    if length < 0:
        raise errors.InvalidValueError(f"length must be >= 0, got {length}.")
    bounds.check_sizes({"length": length})  # the loop's bound and the output's shape
    _check_unit("neuron", neuron, model.hidden_size, allow_none=True)
    if trace_unit is not None:
        _check_unit("trace_unit", trace_unit, model.hidden_size, allow_none=False)
    prompt_ids = tf.cast(prompt_ids, tf.int32)
    if prompt_ids.shape.rank != 2 or prompt_ids.shape[1] == 0:
        raise errors.InvalidValueError(
            f"prompt_ids must be [N, P] with P >= 1 (at least DOC_START), got shape "
            f"{prompt_ids.shape}."
        )
    if sampler is None or getattr(sampler, "hidden_state", False) != bool(hidden_state):
        sampler = make_sampler(model, hidden_state)
    ids, trace = sampler(
        prompt_ids,
        tf.constant(length, tf.int32),
        tf.constant(temperature, tf.float32),
        tf.constant(seed, tf.int64),
        tf.constant(neuron, tf.int32),
        tf.constant(neuron_value, tf.float32),
        tf.constant(stop_at_doc_end),
        tf.constant(-1 if trace_unit is None else trace_unit, tf.int32),
    )
    return ids if trace_unit is None else (ids, trace)


def ids_to_text(ids, strip_doc_end=False) -> str:
    """Decodes one row of sampled bytes, up to the first `PAD_ID`.

    Args:
      ids: [length] sampled byte ids (a `sample_ids` row).
      strip_doc_end: also end the text before its first `DOC_START`.

    Returns:
      The text as str (invalid UTF-8 replaced).
    """
    values = [int(i) for i in ids]
    ends = [PAD_ID, DOC_START] if strip_doc_end else [PAD_ID]
    for end in ends:
        if end in values:
            values = values[: values.index(end)]
    return bytes(values).decode("utf-8", errors="replace")


def sample_text(
    model,
    prompt,
    length,
    temperature=1.0,
    seed=0,
    neuron=-1,
    neuron_value=0.0,
    stop_at_doc_end=False,
    sampler=None,
) -> str:
    """Samples a continuation of a (normalized) prompt; returns a str (args as `sample_ids`)."""
    ids = BytePreprocessor.for_prompts()(tf.constant([prompt])).ids
    out = sample_ids(
        model,
        ids,
        length,
        temperature,
        seed,
        neuron,
        neuron_value,
        stop_at_doc_end=stop_at_doc_end,
        sampler=sampler,
    )
    return ids_to_text(out[0], strip_doc_end=stop_at_doc_end)


def generate_texts(
    model,
    prompt,
    length,
    num_samples=1,
    temperature=1.0,
    seed=0,
    neuron=-1,
    neuron_value=0.0,
    stop_at_end=True,
    sampler=None,
    hidden_state=False,
) -> list[str]:
    """Samples `num_samples` continuations of a raw prompt (`tf-mlstm-generate`'s samples).

    Args:
      model: an `MLSTMLanguageModel`.
      prompt: the text to continue (normalized; may be empty).
      length: bytes to generate per sample (at most, with `stop_at_end`).
      num_samples: samples drawn, in one batch.
      temperature, seed, neuron, neuron_value: as in `sample_ids`.
      stop_at_end: end a sample at the end of the review (not part of the text).
      sampler: a `make_sampler(model)` to reuse across calls.
      hidden_state: `neuron` is a hidden-state unit (default: a cell unit).

    Returns:
      A list of `num_samples` strs, each the normalized prompt and its continuation.

    Raises:
      ValueError: as `sample_ids`; also `num_samples` (x `length`) past its bound.
    """
    bounds.check_sizes({"num_samples": num_samples, "length": length})
    prompt = normalize_text(check_text(prompt, "prompt"))
    ids = BytePreprocessor.for_prompts()(tf.constant([prompt] * num_samples)).ids
    out = sample_ids(
        model,
        ids,
        length,
        temperature=temperature,
        seed=seed,
        neuron=neuron,
        neuron_value=neuron_value,
        stop_at_doc_end=stop_at_end,
        sampler=sampler,
        hidden_state=hidden_state,
    )
    return [prompt + ids_to_text(row, strip_doc_end=stop_at_end) for row in out.numpy()]
