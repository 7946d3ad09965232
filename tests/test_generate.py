"""Sampling and tf-mlstm-generate: seeds, the held unit, the end of a review, errors."""

import os
import sys

import _forkserver
import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_mlstm
from _models import write_untrained_model_dir
from tf_mlstm.cli import generate
from tf_mlstm.config import bounds
from tf_mlstm.data.text import DOC_START
from tf_mlstm.errors import InvalidValueError
from tf_mlstm.models import sampling
from tf_mlstm.models.language_model import MLSTMLanguageModel

UNIT = 5


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """(model_dir, model, sampler): random weights, 16 units; one traced sampler."""
    model_dir, model = write_untrained_model_dir(tmp_path_factory.mktemp("generate") / "model")
    return model_dir, model, sampling.make_sampler(model)


def _prompt(text="I liked"):
    return tf.constant([[DOC_START, *text.encode()]], tf.int32)


def _cell_after_each_prefix(model, ids, unit):
    """The unit's cell state after every byte, from whole-sequence `encode` calls."""
    return np.array(
        [model.encode(ids[:, : t + 1], training=False)[1][1][0, unit] for t in range(ids.shape[1])]
    )


def test_same_seed_same_text_other_seed_other_text(lm):
    model_dir, model, sampler = lm
    config = generate.GenerateConfig(model_dir=str(model_dir), prompt="Great", length=40)
    first = generate.generate_texts(config, model, sampler)
    again = generate.generate_texts(config, model, sampler)
    other = generate.generate_texts(
        generate.GenerateConfig(**{**vars(config), "seed": 1}), model, sampler
    )
    assert first == again
    assert first != other
    assert first[0].startswith("Great")


def test_held_unit_equals_the_value_at_every_step(lm):
    _, model, sampler = lm
    prompt = _prompt()
    ids, trace = sampling.sample_ids(
        model,
        prompt,
        24,
        seed=3,
        neuron=UNIT,
        neuron_value=0.75,
        trace_unit=UNIT,
        sampler=sampler,
    )
    np.testing.assert_array_equal(trace.numpy(), np.full((1, 24), 0.75, np.float32))
    # Teacher-forcing the same bytes with the unit held reproduces the value
    # throughout, prompt included.
    full = tf.concat([prompt, ids], axis=1)
    _, _, forced = sampling.feed_bytes(model, full, unit=UNIT, neuron=UNIT, neuron_value=0.75)
    np.testing.assert_array_equal(forced.numpy(), np.full(full.shape, 0.75, np.float32))


def test_free_trace_is_the_models_cell_state(lm):
    _, model, sampler = lm
    prompt = _prompt()
    ids, trace = sampling.sample_ids(model, prompt, 12, seed=3, trace_unit=UNIT, sampler=sampler)
    full = tf.concat([prompt, ids], axis=1)
    want = _cell_after_each_prefix(model, full, UNIT)[prompt.shape[1] :]
    np.testing.assert_allclose(trace.numpy()[0], want, rtol=1e-5, atol=1e-6)
    assert np.ptp(want) > 1e-4  # not held: the unit moves


def test_stop_at_doc_end_pads_after_the_end():
    keras.utils.set_random_seed(0)
    model = MLSTMLanguageModel(hidden_size=8, embedding_size=4)
    model.build()
    bias = model.head.bias.numpy()
    bias[DOC_START] = 50.0  # the model ends every review at once
    model.head.bias.assign(bias)
    prompt = tf.tile(_prompt("Ok"), [2, 1])
    sampler = sampling.make_sampler(model)
    ids, trace = sampling.sample_ids(
        model, prompt, 6, stop_at_doc_end=True, trace_unit=0, sampler=sampler
    )
    assert ids.numpy().tolist() == [[DOC_START] + [sampling.PAD_ID] * 5] * 2
    assert np.isfinite(trace.numpy()[:, 0]).all() and np.isnan(trace.numpy()[:, 1:]).all()
    free = sampling.sample_ids(model, prompt, 6, sampler=sampler)
    assert (free.numpy() == DOC_START).all()  # without the stop, new documents begin
    assert sampling.sample_text(model, "Ok", 6, stop_at_doc_end=True, sampler=sampler) == ""
    assert sampling.sample_ids(model, prompt, 0, sampler=sampler).shape == (2, 0)


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan")])
def test_temperature_must_be_positive(lm, temperature):
    _, model, sampler = lm
    with pytest.raises(ValueError, match="temperature must be a positive number"):
        sampling.sample_ids(model, _prompt(), 5, temperature=temperature, sampler=sampler)
    with pytest.raises(ValueError, match="temperature must be a positive number"):
        generate.GenerateConfig(model_dir="m", temperature=temperature).validate()


def test_a_length_or_count_past_its_bound_is_one_line_naming_it(lm):
    """Through the Python API (`tf_mlstm.load(...).generate`), by the binaries' table."""
    model_dir, model, sampler = lm
    length, rows = bounds.LARGEST["length"], bounds.LARGEST["num_samples"]
    for past in (3_000_000_000, length + 1):  # past int32 too: the bound, never an overflow
        message = rf"^length must be at most {length}, got {past}\.$"
        with pytest.raises(InvalidValueError, match=message):
            sampling.sample_ids(model, _prompt(), past, sampler=sampler)
    with pytest.raises(InvalidValueError, match=rf"^num_samples must be at most {rows}, got"):
        sampling.generate_texts(model, "Ok", 5, num_samples=rows + 1, sampler=sampler)
    with pytest.raises(InvalidValueError, match=r"^num_samples x length must be at most 21474"):
        sampling.generate_texts(model, "Ok", length, num_samples=2048, sampler=sampler)
    trained = tf_mlstm.load(str(model_dir))
    with pytest.raises(InvalidValueError, match=rf"^length must be at most {length}, got"):
        trained.generate("Ok", length=3_000_000_000)
    for name in ("batch_size", "window"):
        largest = bounds.LARGEST[name]
        with pytest.raises(InvalidValueError, match=rf"^{name} must be at most {largest}, got"):
            tf_mlstm.load(str(model_dir), **{name: largest + 1})
    with pytest.raises(InvalidValueError, match=r"^batch_size x window must be at most 2147483647"):
        tf_mlstm.load(str(model_dir), batch_size=100_000, window=100_000)
    # At the bounds, alone and together.
    assert tf_mlstm.load(str(model_dir), batch_size=2**20, window=2047).window == 2047
    assert tf_mlstm.load(str(model_dir), batch_size=2, window=2**20).window == 2**20


def test_unit_outside_the_model_is_refused(lm):
    _, model, sampler = lm
    with pytest.raises(ValueError, match=r"neuron must be in \[-1, 15\].*got 16"):
        sampling.sample_ids(model, _prompt(), 5, neuron=16, sampler=sampler)


@pytest.mark.slow
def test_generate_binary(lm):
    model_dir = lm[0]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    command = [sys.executable, "-m", "tf_mlstm.cli.generate", f"--model_dir={model_dir}"]
    done = _forkserver.run(
        command
        + [
            "--prompt=Nice",
            "--length=20",
            "--num_samples=2",
            "--neuron=3",
            "--neuron_value=1.5",
            "--seed=7",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        errors="replace",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "=== sample 1 ===" and lines[1].startswith("Nice")
    assert "=== sample 2 ===" in lines
    bad = _forkserver.run(
        command + ["--temperature=0"], capture_output=True, text=True, env=env, timeout=300
    )
    assert bad.returncode != 0
    assert "--temperature must be a positive number, got 0.0." in bad.stderr
