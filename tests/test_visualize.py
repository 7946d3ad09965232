"""tf-mlstm-visualize: activations equal the model's cell state; HTML and PNG files."""

import dataclasses
import json
import os
import sys

import _forkserver
import numpy as np
import pytest
import tensorflow as tf

from _models import write_untrained_model_dir
from tf_mlstm.cli import visualize as visualize_cli
from tf_mlstm.data import framing
from tf_mlstm.transfer import visualize

NEURON = 3


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """(model_dir, model) with random weights, 16 units."""
    return write_untrained_model_dir(tmp_path_factory.mktemp("visualize") / "model")


def _cell_after_each_byte(model, text, unit):
    """The unit's cell state after every byte of the framed text, by prefixes."""
    ids = tf.constant(framing.frame_ids([text]).ids)
    return np.array(
        [model.encode(ids[:, : t + 1], training=False)[1][1][0, unit] for t in range(ids.shape[1])]
    )


def test_values_are_the_cell_state_after_each_character(lm):
    _, model = lm
    texts = ["Loved it <3", "café ok"]  # "é" is two bytes
    values = visualize.unit_activations(model, texts, NEURON)
    ascii_want = _cell_after_each_byte(model, texts[0], NEURON)[1:]
    np.testing.assert_allclose(values[0], ascii_want, rtol=1e-5, atol=1e-6)
    per_byte = _cell_after_each_byte(model, texts[1], NEURON)
    last_byte_of_char = [1, 2, 3, 5, 6, 7, 8]  # c a f é(2 bytes) space o k
    assert len(values[1]) == len(texts[1])
    np.testing.assert_allclose(values[1], per_byte[last_byte_of_char], rtol=1e-5, atol=1e-6)


def test_files_are_written_and_html_is_escaped(lm, tmp_path):
    _, model = lm
    texts = ['A <b>bold</b> & "quoted" claim', "   ", "Fine."]
    written = visualize.write_visualization(model, texts, NEURON, str(tmp_path))
    page = (tmp_path / "neuron_3.html").read_text(encoding="utf-8")
    assert ">&lt;</span>" in page and ">&amp;</span>" in page and ">&quot;</span>" in page
    assert "<b>" not in page
    assert page.count('class="text"') == 2  # the blank text is skipped
    assert (tmp_path / "neuron_3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "neuron_3.json").read_text(encoding="utf-8"))
    assert [record["text"] for record in saved["texts"]] == [
        'A <b>bold</b> & "quoted" claim',
        "Fine.",
    ]
    np.testing.assert_allclose(saved["texts"][1]["values"], written["activations"][1], atol=1e-6)


def test_errors(lm, tmp_path):
    _, model = lm
    with pytest.raises(ValueError, match=r"neuron must be in \[0, 15\].*got 16"):
        visualize.unit_activations(model, ["x"], 16)
    with pytest.raises(ValueError, match="no text to visualize"):
        visualize.write_visualization(model, ["  "], 0, str(tmp_path))


def test_input_is_text_or_files(tmp_path):
    corpus = tmp_path / "reviews.jsonl"
    corpus.write_text('{"text": "one"}\n{"text": "two"}\n{"text": "three"}\n')
    config = visualize_cli.VisualizeConfig(
        model_dir="m", neuron=0, input=str(corpus), output_dir="o", max_texts=2, max_chars=2
    )
    assert visualize_cli.read_texts(config) == ["on", "tw"]
    literal = visualize_cli.VisualizeConfig(
        model_dir="m", neuron=0, input="Not a file", output_dir="o"
    )
    assert visualize_cli.read_texts(literal) == ["Not a file"]


@pytest.mark.slow
def test_visualize_binary(lm, tmp_path):
    model_dir, _ = lm
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    done = _forkserver.run(
        [
            sys.executable,
            "-m",
            "tf_mlstm.cli.visualize",
            f"--model_dir={model_dir}",
            "--neuron=2",
            "--input=Good <i>and</i> bad",
            f"--output_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    paths = json.loads(done.stdout.splitlines()[-1])
    assert all(os.path.exists(paths[kind]) for kind in ("html", "png", "json"))
    page = open(paths["html"], encoding="utf-8").read()
    assert ">&lt;</span>" in page and "<i>" not in page


def test_a_link_planted_at_an_output_name_is_replaced_not_written_through(lm, tmp_path):
    _, model = lm
    victim = tmp_path / "notes.txt"
    victim.write_text("the user's notes")
    out = tmp_path / "out"
    out.mkdir()
    for name in ("neuron_3.html", "neuron_3.png", "neuron_3.json"):
        (out / name).symlink_to(victim)
    visualize.write_visualization(model, ["Fine."], NEURON, str(out))
    assert victim.read_text() == "the user's notes"
    assert sorted(os.listdir(out)) == ["neuron_3.html", "neuron_3.json", "neuron_3.png"]
    assert not any((out / name).is_symlink() for name in os.listdir(out))
    assert (out / "neuron_3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_input_file_among_the_outputs_is_refused_before_any_work(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "neuron_7.json").write_text('{"text": "drawn before"}\n')
    # The folder in another spelling than the input's.
    config = visualize_cli.VisualizeConfig(
        model_dir="m", neuron=7, input=str(out / "neuron_7.json"), output_dir=f"{tmp_path}/./out/"
    )
    with pytest.raises(
        ValueError, match=r"output_dir would overwrite the input file .*neuron_7.json; "
    ):
        config.validate()
    elsewhere = dataclasses.replace(config, output_dir=str(tmp_path / "new"))
    assert elsewhere.validate() is elsewhere
