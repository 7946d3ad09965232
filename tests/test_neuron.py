"""The sentiment neuron from classifier.json in tf-mlstm-generate and tf-mlstm-visualize.

The classifier files are fitted by the real `fit_logistic` on synthetic
features in which one unit carries the label, and written by the real
`LogisticClassifier.save`; the binaries run as subprocesses.
"""

import json
import os
import re
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from _commands import run_in_one_process
from _models import write_untrained_model_dir
from tf_mlstm import errors
from tf_mlstm.cli import generate
from tf_mlstm.cli import visualize as visualize_cli
from tf_mlstm.models import sampling
from tf_mlstm.transfer import ngrams
from tf_mlstm.transfer import visualize
from tf_mlstm.transfer.probe import fit as fit_lib
from tf_mlstm.transfer.probe import logistic
from tf_mlstm.transfer.probe import neuron as neuron_lib

HIDDEN = 16
UNIT = 5


def _fit_classifier(path, kinds, column, sign, spread=3.0, seed=0):
    """Fits and saves a classifier whose best single feature is `column`.

    Column `column` is `sign * spread * (label - 0.5)` plus a little noise, so
    it separates the classes perfectly in the direction `sign`; every other
    column is noise.

    Returns:
      The fitted `LogisticClassifier` (also saved at `path`).
    """
    rng = np.random.default_rng(seed)
    labels = np.tile([0, 1], 40)
    x = rng.normal(size=(len(labels), HIDDEN * len(kinds)))
    x[:, column] = sign * spread * (labels - 0.5) + 0.1 * rng.normal(size=len(labels))
    classifier, _ = fit_lib.fit_logistic(
        x[:60], labels[:60], x[60:], labels[60:], kinds, HIDDEN, c_grid=(0.1, 1.0)
    )
    assert classifier.neuron.index == column and classifier.neuron.sign == sign
    classifier.save(str(path))
    return classifier


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(model_dir, model, {name: classifier path}) for a random 16-unit model."""
    root = tmp_path_factory.mktemp("neuron")
    model_dir, model = write_untrained_model_dir(root / "model", hidden_size=HIDDEN)
    specs = {
        # The neuron is the mean cell state of UNIT; large values are positive.
        "plus": (("cell_mean",), UNIT, 1),
        # Second block of two kinds: the cell max of UNIT; large values are negative.
        "minus": (("hidden", "cell_max"), HIDDEN + UNIT, -1),
        # The hidden-state mean: both tools hold and draw hidden unit UNIT.
        "hidden": (("mean",), UNIT, 1),
        # The hidden state's spread: no held value gives it.
        "spread": (("std",), UNIT, 1),
    }
    paths = {}
    for name, (kinds, column, sign) in specs.items():
        paths[name] = root / f"{name}.json"
        _fit_classifier(paths[name], kinds, column, sign)
    return model_dir, model, {name: str(path) for name, path in paths.items()}


def test_neuron_unit_sign_kind_and_held_value(setup):
    _, _, paths = setup
    plus = neuron_lib.neuron_from_classifier(paths["plus"], "tool", HIDDEN)
    minus = neuron_lib.neuron_from_classifier(paths["minus"], "tool", HIDDEN)
    assert (plus.kind, plus.unit, plus.sign) == ("cell_mean", UNIT, 1)
    assert (minus.kind, minus.unit, minus.sign) == ("cell_max", UNIT, -1)
    loaded = logistic.LogisticClassifier.load(paths["minus"])
    assert minus.threshold == loaded.neuron.threshold
    assert minus.spread == loaded.head.scale[HIDDEN + UNIT] > 1.0
    for neuron, path in ((plus, paths["plus"]), (minus, paths["minus"])):
        classifier = logistic.LogisticClassifier.load(path)
        for sentiment, want in (("positive", 1), ("negative", 0)):
            value = neuron.value_for(sentiment)
            assert abs(value - neuron.threshold) == pytest.approx(2 * neuron.spread)
            # A text whose feature has the held value is on `sentiment`'s side.
            row = np.zeros((1, len(classifier.head.mean)))
            row[0, classifier.neuron.index] = value
            assert classifier.neuron.predict01(row)[0] == want
    assert minus.value_for("positive") < minus.threshold < minus.value_for("negative")


def test_flags_override_and_conflicts_are_logged(setup, caplog):
    _, _, paths = setup
    neuron = neuron_lib.neuron_from_classifier(paths["plus"], "tool")
    caplog.set_level("INFO")
    assert neuron_lib.held_unit(paths["plus"], HIDDEN, None, None, None, "t") == (
        UNIT,
        neuron.value_for("positive"),
        False,
    )
    assert neuron_lib.held_unit(paths["plus"], HIDDEN, None, None, "negative", "t") == (
        UNIT,
        neuron.value_for("negative"),
        False,
    )
    assert "Holding cell unit 5 at" in caplog.text and "cell_mean of cell unit 5" in caplog.text
    caplog.clear()
    assert neuron_lib.held_unit(paths["plus"], HIDDEN, UNIT, 0.5, None, "t") == (UNIT, 0.5, False)
    # A Python caller reads the arguments' names; a binary's user (below), the flags'.
    assert "neuron_value=0.5 overrides" in caplog.text and "--neuron_value" not in caplog.text
    caplog.clear()
    assert neuron_lib.held_unit(paths["plus"], HIDDEN, 2, None, None, "t") == (2, 0.0, False)
    assert " neuron=2 overrides unit 5" in caplog.text
    assert neuron_lib.held_unit(paths["plus"], HIDDEN, -1, None, None, "t") == (-1, 0.0, False)
    assert neuron_lib.held_unit("", HIDDEN, None, None, None, "t") == (-1, 0.0, False)
    assert neuron_lib.drawn_unit(paths["minus"], HIDDEN, None, "t")[:2] == (UNIT, -1)
    assert neuron_lib.drawn_unit(paths["minus"], HIDDEN, 3, "t")[:2] == (3, 1)
    with pytest.raises(ValueError, match=r"^no unit to draw: give neuron or classifier\.$"):
        neuron_lib.drawn_unit("", HIDDEN, None, "t")
    with errors.naming_flags(), pytest.raises(ValueError, match=r"give --neuron or --classifier"):
        neuron_lib.drawn_unit("", HIDDEN, None, "t")


def test_bad_classifier_files(setup, tmp_path):
    _, _, paths = setup
    with pytest.raises(FileNotFoundError, match="classifier file not found: .*nothing.json"):
        neuron_lib.neuron_from_classifier(str(tmp_path / "nothing.json"), "tool")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "tf_mlstm.logistic')
    with pytest.raises(ValueError, match=r"broken.json: not JSON"):
        neuron_lib.neuron_from_classifier(str(broken), "tool")
    other = tmp_path / "other.json"
    other.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="other.json: not a tf-mlstm-transfer classifier file"):
        neuron_lib.neuron_from_classifier(str(other), "tool")
    with pytest.raises(
        ValueError,
        match=r"spread.json: the sentiment neuron is feature 5, the 'std' feature of unit 5, "
        r"the spread of the hidden state, which no held value gives; tf-mlstm-visualize works "
        r"on the kinds cell, ",
    ):
        neuron_lib.neuron_from_classifier(paths["spread"], "tf-mlstm-visualize")
    with pytest.raises(
        ValueError, match="plus.json: fitted on a 16-unit model, but the model has 32"
    ):
        neuron_lib.neuron_from_classifier(paths["plus"], "tool", hidden_size=32)
    with pytest.raises(ValueError, match="sentiment needs classifier"):
        generate.GenerateConfig(model_dir="m", sentiment="positive").validate()


def test_generate_texts_hold_the_classifiers_neuron(setup):
    model_dir, model, paths = setup
    neuron = neuron_lib.neuron_from_classifier(paths["minus"], "tool")
    base = dict(model_dir=str(model_dir), prompt="The film", length=40, seed=3)
    # The model loaded from model_dir by the first call; the others share one sampler.
    by_file = generate.generate_texts(generate.GenerateConfig(**base, classifier=paths["minus"]))
    sampler = sampling.make_sampler(model)
    explicit = generate.generate_texts(
        generate.GenerateConfig(**base, neuron=UNIT, neuron_value=neuron.value_for("positive")),
        model,
        sampler,
    )
    negative = generate.generate_texts(
        generate.GenerateConfig(**base, classifier=paths["minus"], sentiment="negative"),
        model,
        sampler,
    )
    free = generate.generate_texts(generate.GenerateConfig(**base), model, sampler)
    assert by_file == explicit
    assert by_file != negative and by_file != free


# === The binaries ===

_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


def _run_in_one_process(folder, *commands):
    """Each (binary, *flags) of `commands` in turn, in one fresh process (`_commands`)."""
    return run_in_one_process(
        [[sys.executable, "-m", f"tf_mlstm.cli.{module}", *args] for module, *args in commands],
        folder,
        timeout=300,
        env=_ENV,
    )


def _error_lines(stderr):
    """The error lines the binary logged (absl's Python log, not TensorFlow's C++ one)."""
    return [line for line in stderr.splitlines() if re.match(r"E\d{4} .* \w+\.py:\d+\] ", line)]


@pytest.mark.slow
def test_generate_binary_with_classifier(setup, tmp_path):
    model_dir, model, paths = setup
    neuron = neuron_lib.neuron_from_classifier(paths["minus"], "tool")
    common = [f"--model_dir={model_dir}", "--prompt=The film", "--length=40", "--seed=3"]
    done, override, bad = _run_in_one_process(
        tmp_path,
        ("generate", *common, f"--classifier={paths['minus']}", "--sentiment=negative"),
        ("generate", *common, f"--classifier={paths['minus']}", "--neuron=2"),
        ("generate", *common, f"--classifier={paths['spread']}"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    held = re.search(r"Holding cell unit (\d+) at (\S+) \(the sentiment neuron of", done.stderr)
    assert held, done.stderr[-3000:]
    assert int(held.group(1)) == UNIT
    want = neuron.value_for("negative")
    assert want > neuron.threshold  # sign -1: the negative side is above the threshold
    assert float(held.group(2)) == pytest.approx(want, rel=1e-5)
    # The printed text is the one sampled with that unit held at that value.
    expected = generate.generate_texts(
        generate.GenerateConfig(
            model_dir=str(model_dir),
            prompt="The film",
            length=40,
            seed=3,
            neuron=UNIT,
            neuron_value=want,
        ),
        model,
    )
    assert done.stdout.splitlines() == expected[0].splitlines()

    assert override.returncode == 0, override.stderr[-3000:]
    assert "--neuron=2 overrides unit 5, the sentiment neuron of" in override.stderr
    assert "Holding cell unit 2 at 0 (--neuron)" in override.stderr

    assert bad.returncode == 1
    errors = _error_lines(bad.stderr)
    assert len(errors) == 1, bad.stderr[-3000:]
    assert "the 'std' feature of unit 5, the spread of the hidden state" in errors[0]


@pytest.mark.slow
def test_visualize_binary_with_classifier(setup, tmp_path):
    model_dir, model, paths = setup
    text = "Awful start, great end."
    common = [f"--model_dir={model_dir}", f"--input={text}"]
    done, bad = _run_in_one_process(
        tmp_path / "commands",
        ("visualize", *common, f"--classifier={paths['minus']}", f"--output_dir={tmp_path}"),
        ("visualize", *common, f"--classifier={paths['spread']}", f"--output_dir={tmp_path / 'b'}"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads(done.stdout.splitlines()[-1])
    assert written["json"].endswith(f"neuron_{UNIT}.json")
    record = json.loads(open(written["json"], encoding="utf-8").read())
    assert record["neuron"] == UNIT and record["sign"] == -1
    assert "cell_max of cell unit 5" in record["source"]
    values = np.array(record["texts"][0]["values"])
    np.testing.assert_allclose(
        values, visualize.unit_activations(model, [text], UNIT)[0], atol=1e-6
    )
    # The colors are those of -value: green where the unit says positive.
    page = open(written["html"], encoding="utf-8").read()
    colors = re.findall(r'rgb\((\d+), (\d+), (\d+)\)" title="([^"]+)"', page)
    assert len(colors) == len(text)
    scale = visualize.color_scale([values])
    want = visualize._rgb(-values, scale)  # pylint: disable=protected-access
    assert np.array([c[:3] for c in colors], int).tolist() == want.tolist()
    assert "colors flipped" in page

    assert bad.returncode == 1
    errors = _error_lines(bad.stderr)
    assert len(errors) == 1 and "tf-mlstm-visualize works on the kinds cell, " in errors[0]
    with pytest.raises(ValueError, match="give neuron .* or classifier"):
        visualize_cli.VisualizeConfig(
            model_dir="m", neuron=None, input="x", output_dir="o"
        ).validate()


# === Which feature is the neuron ===


def _separating(kinds, columns, rows=80, seed=0):
    """Noise features of `kinds` in which each of `columns` carries the label.

    The columns are given with their noise: (column, noise); the one with the
    least noise separates best.
    """
    rng = np.random.default_rng(seed)
    labels = np.tile([0, 1], rows // 2)
    x = rng.normal(size=(rows, HIDDEN * len(kinds)))
    for column, noise in columns:
        x[:, column] = 3.0 * (labels - 0.5) + noise * rng.normal(size=rows)
    return x, labels


def test_the_neuron_is_a_cell_unit_when_the_features_have_one():
    # The final hidden state of unit 2 separates perfectly, the cell state of
    # UNIT a little less: the neuron is still the cell unit, the one
    # tf-mlstm-generate and tf-mlstm-visualize hold and draw.
    kinds = ("hidden", "mean", "cell_min")
    x, labels = _separating(kinds, [(2, 0.0), (2 * HIDDEN + UNIT, 0.6)])
    classifier, _ = fit_lib.fit_logistic(
        x[:60], labels[:60], x[60:], labels[60:], kinds, HIDDEN, c_grid=(0.1, 1.0)
    )
    assert classifier.describe(classifier.neuron.index) == ("cell_min", UNIT)
    # Without a cell-state kind it is the model's best unit, never an n-gram.
    x, labels = _separating(("mean",), [(UNIT, 0.6)])
    terms = sp.csr_matrix(np.stack([labels, 1 - labels], axis=1).astype(np.float64))
    vocabulary = ngrams.NgramVocabulary(terms=("good", "bad"), idf=np.ones(2))
    both = sp.hstack([sp.csr_matrix(x), terms], format="csr")
    classifier, _ = fit_lib.fit_logistic(
        both[:60],
        labels[:60],
        both[60:],
        labels[60:],
        ("mean", "tfidf"),
        HIDDEN,
        c_grid=(0.1, 1.0),
        ngrams=vocabulary,
    )
    assert classifier.describe(classifier.neuron.index) == ("mean", UNIT)
    assert neuron_lib.neuron_columns(("tfidf",), HIDDEN) is None
    assert neuron_lib.neuron_columns(("cell", "std", "cell_max", "tfidf"), 2).tolist() == [
        0,
        1,
        4,
        5,
    ]


def _words_alone(rows=80, classes=2):
    """TF-IDF columns alone, where the word of each class names it perfectly."""
    labels = np.arange(rows) % classes
    terms = tuple(f"word{k}" for k in range(classes)) + ("the",)
    x = np.zeros((rows, len(terms)))
    x[np.arange(rows), labels] = 1.0
    x[:, -1] = 0.5
    vocabulary = ngrams.NgramVocabulary(terms=terms, idf=np.ones(len(terms)))
    return sp.csr_matrix(x), labels, vocabulary


@pytest.mark.parametrize("classes", [2, 3])
def test_words_alone_store_no_neuron_and_say_so(tmp_path, classes):
    """A classifier on TF-IDF alone has no unit of the model: it stores no neuron
    (never an n-gram), says so, and generation refuses it in one line."""
    x, labels, vocabulary = _words_alone(classes=classes)
    classifier, _ = fit_lib.fit_logistic(
        x, labels, x, labels, ("tfidf",), HIDDEN, c_grid=(1.0,), ngrams=vocabulary
    )
    assert classifier.report.neurons == () and classifier.score(x, labels) == 1.0
    assert classifier.neuron_report({"train": (x, labels)}) == []
    assert "no unit of the model" in classifier.no_neuron
    assert classifier.head.neuron == -1
    path = str(tmp_path / "classifier.json")
    classifier.save(path)
    record = json.loads(open(path, encoding="utf-8").read())
    if classes == 2:
        assert record["neuron"] is None
        with pytest.raises(ValueError, match="no sentiment neuron: the features"):
            classifier.neuron  # noqa: B018
    else:
        assert record["neurons"] == []
    loaded = logistic.LogisticClassifier.load(path)
    assert loaded.report.neurons == () and loaded.head.neuron == -1
    np.testing.assert_array_equal(loaded.predict(x), classifier.predict(x))
    if classes == 2:
        with pytest.raises(
            ValueError,
            match=r"classifier.json: no sentiment neuron: the features \(tfidf\) hold no unit "
            r"of the model, only word n-grams; tf-mlstm-generate works on units of the model; "
            r"choose a unit with --neuron",
        ):
            neuron_lib.neuron_from_classifier(path, "tf-mlstm-generate")
    else:  # a neuron per class, none of them one sentiment neuron
        with pytest.raises(
            ValueError,
            match=r"classifier.json: a multiclass classifier of 3 classes has one neuron per "
            r"class, not one sentiment neuron; tf-mlstm-generate takes a two-class classifier's",
        ):
            neuron_lib.neuron_from_classifier(path, "tf-mlstm-generate")


def test_transfer_results_of_words_alone_state_the_missing_neuron(tmp_path):
    from tf_mlstm import fileio  # pylint: disable=import-outside-toplevel
    from tf_mlstm.cli import transfer as transfer_cli  # pylint: disable=import-outside-toplevel
    from tf_mlstm.transfer import experiment  # pylint: disable=import-outside-toplevel
    from tf_mlstm.transfer import labeled  # pylint: disable=import-outside-toplevel

    x, labels, vocabulary = _words_alone()
    classifier, _ = fit_lib.fit_logistic(
        x, labels, x, labels, ("tfidf",), HIDDEN, c_grid=(1.0,), ngrams=vocabulary
    )
    split = labeled.LabeledData(
        source="synthetic",
        texts=[f"word{k}" for k in labels],
        labels=labels,
        label_keys=("label",),
        places=[("synthetic", i + 1) for i in range(len(labels))],
        skipped={},
    )
    config = experiment.TransferConfig(
        model_dir="m", output_dir=str(tmp_path / "out"), train_data="t.csv", features="tfidf"
    )
    data = experiment.make_data(config, split, {"train": split, "val": split}, held_out=False)
    splits = {"train": (x, labels), "val": (x, labels)}
    results = experiment._results(data, classifier, splits)
    assert results["neuron"] is None and results["neurons"] == []
    assert results["no_neuron"] == classifier.no_neuron
    with fileio.Staged() as staged:
        files = experiment._write_plots(config, classifier, splits, [], staged)
    assert "neuron_histogram" not in files
    line = transfer_cli.headline(
        {
            **results,
            "feature_kinds": ["tfidf"],
            "config": {"penalty": "l2", "output_dir": "o"},
            "warnings": [],
        }
    )
    assert line["neuron"] is None and line["no_neuron"] == classifier.no_neuron
    assert transfer_cli.neuron_note(results, "val") == ""


def test_a_hidden_state_neuron_is_held_and_drawn_in_the_hidden_state(setup, tmp_path):
    """A classifier without a cell-state kind has a hidden-state neuron: generation holds
    that hidden unit (every step reads it) and the heat map draws its hidden value."""
    model_dir, model, paths = setup
    neuron = neuron_lib.neuron_from_classifier(paths["hidden"], "tool")
    assert (neuron.kind, neuron.unit, neuron.hidden_state) == ("mean", UNIT, True)
    unit, value, hidden_state = neuron_lib.held_unit(paths["hidden"], HIDDEN, None, None, None, "t")
    assert (unit, value, hidden_state) == (UNIT, neuron.value_for("positive"), True)
    ids = np.array([[0, 72, 105, 33, 32, 79]], np.int32)
    _, (h, c), trace = sampling.feed_bytes(
        model, ids, unit=UNIT, neuron=UNIT, neuron_value=value, hidden_state=True
    )
    np.testing.assert_allclose(trace.numpy(), value, rtol=1e-6)
    assert h.numpy()[0, UNIT] == pytest.approx(value) and c.numpy()[0, UNIT] != pytest.approx(value)
    base = dict(model_dir=str(model_dir), prompt="The film", length=30, seed=3)
    by_file = generate.generate_texts(generate.GenerateConfig(**base, classifier=paths["hidden"]))
    sampler = sampling.make_sampler(model)  # a cell-state sampler: not the one to reuse
    as_cell = generate.generate_texts(
        generate.GenerateConfig(**base, neuron=UNIT, neuron_value=value), model, sampler
    )
    assert by_file != as_cell
    assert by_file == sampling.generate_texts(
        model, "The film", 30, seed=3, neuron=UNIT, neuron_value=value, hidden_state=True
    )
    written = visualize_cli.main(
        visualize_cli.VisualizeConfig(
            model_dir=str(model_dir),
            neuron=None,
            input="Awful start, great end.",
            output_dir=str(tmp_path),
            classifier=paths["hidden"],
        )
    )
    record = json.loads(open(written["json"], encoding="utf-8").read())
    assert record["neuron"] == UNIT and record["state"] == "hidden"
    values = np.array(record["texts"][0]["values"])
    hidden_values = visualize.unit_activations(model, ["Awful start, great end."], UNIT, True)[0]
    np.testing.assert_allclose(values, hidden_values, atol=1e-6)
    assert "Hidden unit 5" in open(written["html"], encoding="utf-8").read()
