"""The Python API (`import tf_mlstm`): lazy, versioned, and equal to the binaries' numbers.

The examples of docs/python.md run too, in order, in a temporary folder.
"""

import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_mlstm
from _models import write_untrained_model_dir
from tf_mlstm import rundir
from tf_mlstm.cli import classify as classify_cli
from tf_mlstm.cli import export as export_cli
from tf_mlstm.cli import generate as generate_cli
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models import featurize
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.transfer import features
from tf_mlstm.transfer.probe import fit as fit_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
TEXTS = ["A wonderful, moving film.", "Boring and far too long.", "Café au lait: très bon!", "Ok"]


def _python(code, cwd=REPO, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env,
        timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


# === The package ===


def test_import_is_cheap_and_the_configs_come_without_tensorflow():
    out = _python(
        textwrap.dedent(
            """
            import sys
            import tf_mlstm
            assert "tensorflow" not in sys.modules, "import tf_mlstm imported tensorflow"
            names = ("TrainConfig", "EvalConfig", "FinetuneConfig", "ExportConfig", "UserError")
            for name in names:
                getattr(tf_mlstm, name)
            assert "tensorflow" not in sys.modules, "a config imported tensorflow"
            assert set(tf_mlstm.__all__) <= set(dir(tf_mlstm))
            print(tf_mlstm.__version__)
            """
        )
    )
    assert out.strip() == tf_mlstm.__version__


def test_the_version_has_one_home_that_setup_py_reads():
    setup = (REPO / "setup.py").read_text(encoding="utf-8")
    assert "version=_version()" in setup
    assert not re.search(r"version=\"\d", setup)
    out = subprocess.run(
        [sys.executable, "setup.py", "--version"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.stdout.strip().splitlines()[-1] == tf_mlstm.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", tf_mlstm.__version__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'tf_mlstm' has no attribute 'fit'"):
        tf_mlstm.fit  # noqa: B018
    # The entry points are functions, never shadowed by the subpackages: importing
    # a subpackage sets the package's attribute of its name.
    importlib.import_module("tf_mlstm.serving.saved_model")
    assert callable(tf_mlstm.pretrain) and callable(tf_mlstm.probe)
    assert callable(tf_mlstm.export) and tf_mlstm.export is tf_mlstm.api.export


# === A loaded model gives the binaries' numbers ===


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path, _ = write_untrained_model_dir(tmp_path_factory.mktemp("api") / "m")
    return path


@pytest.fixture(scope="module")
def loaded(model_dir):
    return tf_mlstm.load(str(model_dir), batch_size=3, window=8)


def test_featurize_equals_transfer_features_and_each_text_alone(loaded, model_dir):
    got = loaded.featurize(TEXTS)
    model = MLSTMLanguageModel.from_run(str(model_dir))
    normalized = [normalize_text(text) for text in TEXTS]
    want = features.TextFeaturizer(model, 64, 256)(normalized, progress=False)
    assert set(got) == set(featurize.FEATURE_KINDS)
    for kind in featurize.FEATURE_KINDS:
        assert got[kind].shape == (len(TEXTS), model.hidden_size)
        np.testing.assert_allclose(got[kind], want[kind], rtol=1e-5, atol=1e-6)
    cell = loaded.featurize(TEXTS[2:3], kinds=("cell",))
    assert list(cell) == ["cell"]
    np.testing.assert_allclose(cell["cell"][0], want["cell"][2], rtol=1e-5, atol=1e-6)


def test_score_equals_tf_mlstm_eval_of_each_text(loaded, model_dir, tmp_path):
    scores = loaded.score(TEXTS)
    for index, text in enumerate(TEXTS):
        path = tmp_path / f"text{index}.txt"
        path.write_text(text + "\n", encoding="utf-8")
        # What tf-mlstm-eval runs on its flags' config.
        result = tf_mlstm.evaluate(
            tf_mlstm.EvalConfig(model_dir=str(model_dir), data=str(path), batch_size=1)
        )
        assert result["chars"] == len(normalize_text(text).encode("utf-8"))
        np.testing.assert_allclose(scores[index], result["bits_per_char"], rtol=1e-5)


def test_generate_with_a_seed_is_deterministic_and_the_binary_s_sample(loaded, model_dir):
    first = loaded.generate("This movie", length=40, seed=7, stop_at_end=False)
    assert first == loaded.generate("This movie", length=40, seed=7, stop_at_end=False)
    assert first.startswith("This movie") and len(first.encode("utf-8")) >= len("This movie")
    assert first != loaded.generate("This movie", length=40, seed=8, stop_at_end=False)
    config = generate_cli.GenerateConfig(
        model_dir=str(model_dir), prompt="This movie", length=40, seed=7, stop_at_end=False
    ).validate()
    assert generate_cli.generate_texts(config) == [first]


def test_classify_with_a_fitted_classifier_equals_tf_mlstm_classify(model_dir, tmp_path):
    path = _fitted_classifier(model_dir, tmp_path / "classifier.json")

    out = tf_mlstm.load(str(model_dir), classifier=path).classify(TEXTS)
    assert out.classes == (0, 1) and out.probabilities.shape == (4, 2)
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    config = classify_cli.ClassifyConfig(
        model_dir=str(model_dir), classifier=path, input=str(tmp_path / "in.txt"), output="-"
    ).validate()
    _, probabilities, predicted, classes = classify_cli.classify(config)
    np.testing.assert_allclose(out.probabilities, probabilities, atol=1e-6)
    np.testing.assert_array_equal(out.labels, predicted)


def test_a_classifier_is_applied_in_the_precision_it_was_fitted_in_and_exported_in_float32(
    model_dir, tmp_path
):
    """classifier.json records the fit's policy: the API and the CLI apply it; the export
    computes in float32, which every server CPU runs at speed, unless asked otherwise."""
    path = _fitted_classifier(model_dir, tmp_path / "classifier.json")
    record = json.loads(pathlib.Path(path).read_text())
    record["precision"] = "mixed_bfloat16"
    pathlib.Path(path).write_text(json.dumps(record))
    loaded = tf_mlstm.load(str(model_dir), classifier=path)
    assert loaded.precision == "mixed_bfloat16"
    assert tf_mlstm.load(str(model_dir), classifier=path, precision="float32").precision == (
        "float32"
    )
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    config = classify_cli.ClassifyConfig(
        model_dir=str(model_dir), classifier=path, input=str(tmp_path / "in.txt"), output="-"
    ).validate()
    _, probabilities, _, _ = classify_cli.classify(config)
    np.testing.assert_allclose(loaded.classify(TEXTS).probabilities, probabilities, atol=1e-6)
    exported = tf_mlstm.export(
        tf_mlstm.ExportConfig(
            model_dir=str(model_dir), export_dir=str(tmp_path / "export"), classifier=path
        )
    )
    meta = pathlib.Path(exported["export_dir"]) / "assets.extra" / "meta.json"
    assert json.loads(meta.read_text())["precision"] == "float32"


def test_an_empty_text_is_neither_scored_nor_classified(model_dir, tmp_path):
    """One rule with the SavedModel's signatures (and the binaries, which skip such a line)."""
    loaded = tf_mlstm.load(
        str(model_dir), classifier=_fitted_classifier(model_dir, tmp_path / "classifier.json")
    )
    for method in ("score", "classify"):
        with pytest.raises(
            tf_mlstm.UserError,
            match=re.escape(f"texts[1] is empty after normalization: nothing to {method}"),
        ):
            getattr(loaded, method)([TEXTS[0], " \n\t "])
    assert loaded.featurize([""])["cell"].shape == (1, loaded.hidden_size)


def test_classify_without_a_classifier_needs_a_fine_tuned_run(loaded):
    with pytest.raises(ValueError, match="is not a fine-tuned run: give tf_mlstm.load"):
        loaded.classify(TEXTS)
    with pytest.raises(ValueError, match="texts must be a list of str, not one str"):
        loaded.score("one text")


# === User errors name Python arguments (one type: tf_mlstm.UserError) ===


def test_load_of_a_missing_folder_is_a_user_error_naming_model_dir(tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(tf_mlstm.UserError, match=r"model_dir='.*missing' does not exist") as e:
        tf_mlstm.load(missing)
    assert isinstance(e.value, FileNotFoundError) and "--" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(tf_mlstm.UserError, match=r"model_dir='.*empty' holds no config.json"):
        tf_mlstm.load(str(tmp_path / "empty"))
    # An export is no run folder: the error says what it is and how it loads.
    (tmp_path / "export" / "3").mkdir(parents=True)
    (tmp_path / "export" / "3" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(
        tf_mlstm.UserError,
        match=r"not a run folder .*; it is a SavedModel \(it holds saved_model.pb\): .*"
        r"tf.saved_model.load loads it after `import tensorflow_text`",
    ):
        tf_mlstm.load(str(tmp_path / "export" / "3"))


def test_a_config_refuses_a_value_of_the_wrong_type_when_constructed():
    match = r"hidden_size must be an int or 'auto', got '64'"
    with pytest.raises(tf_mlstm.InvalidValueError, match=match):
        tf_mlstm.TrainConfig(hidden_size="64")
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"lr must be a number, got"):
        tf_mlstm.TrainConfig(lr="0.1")
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"EvalConfig: batch_size must be an int"):
        tf_mlstm.EvalConfig(model_dir="m", data="d", batch_size=2.5)
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"TransferConfig: model_dir must be a s"):
        tf_mlstm.TransferConfig(model_dir=None)
    assert tf_mlstm.TrainConfig(lr=1).lr == 1  # an int is a number
    # A field of several types (label keys: one, comma-separated, or a list) is left to validate.
    assert tf_mlstm.TransferConfig(label_key=["a", "b"]).label_keys == ("a", "b")


def test_a_config_s_checks_name_its_fields_not_the_flags(tmp_path):
    config = tf_mlstm.TrainConfig(model_dir=str(tmp_path / "run"), lr=float("nan"))
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"^TrainConfig: lr must be a finite") as e:
        tf_mlstm.pretrain(config)
    assert "--" not in str(e.value)
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"^EvalConfig: text_key must name"):
        tf_mlstm.evaluate(tf_mlstm.EvalConfig(model_dir="m", data="d", text_key=()))


def _fitted_classifier(model_dir, path):
    model = MLSTMLanguageModel.from_run(str(model_dir))
    normalized = [normalize_text(text) for text in TEXTS] * 3
    x = features.concat_features(features.TextFeaturizer(model)(normalized), ("cell",))
    labels = np.array([1, 0, 1, 0] * 3)
    fitted, _ = fit_lib.fit_logistic(x, labels, x, labels, ("cell",), model.hidden_size)
    fingerprint = rundir.weights_checksum(model.weights)  # as tf_mlstm.probe records it
    fitted.fitted_on(fingerprint).save(str(path))
    return str(path)


def test_load_checks_the_classifier_at_load(model_dir, tmp_path):
    with pytest.raises(tf_mlstm.UserError, match=r"classifier='.*' is a folder, not a classi"):
        tf_mlstm.load(str(model_dir), classifier=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"classifier='.*nope.json' does not exist"):
        tf_mlstm.load(str(model_dir), classifier=str(tmp_path / "nope.json"))
    other, _ = write_untrained_model_dir(tmp_path / "other", seed=1)
    path = _fitted_classifier(other, tmp_path / "other.json")
    with pytest.raises(tf_mlstm.UserError, match=r"'.*other.json' was fitted on other") as e:
        tf_mlstm.load(str(model_dir), classifier=path)
    assert "--" not in str(e.value)
    wider, _ = write_untrained_model_dir(tmp_path / "wider", hidden_size=24)
    with pytest.raises(tf_mlstm.UserError, match=r"fitted on a 16-unit model, but model_dir="):
        tf_mlstm.load(str(wider), classifier=path)


@pytest.mark.slow  # two exports (each traces the signatures)
def test_export_writes_the_saved_model_tf_mlstm_export_writes(model_dir, tmp_path):
    path = _fitted_classifier(model_dir, tmp_path / "classifier.json")
    common = dict(model_dir=str(model_dir), classifier=path, window=8, max_text_bytes=512)
    done = tf_mlstm.export(tf_mlstm.ExportConfig(export_dir=str(tmp_path / "api"), **common))
    want = export_cli.export(export_cli.ExportConfig(export_dir=str(tmp_path / "cli"), **common))
    assert done["signatures"] == want["signatures"]
    assert "classify" in done["signatures"] and done["version"] == want["version"]
    meta = [
        json.loads((pathlib.Path(d["export_dir"]) / "assets.extra" / "meta.json").read_text())
        for d in (done, want)
    ]
    # The batching rates are timed at each export: the rest is the same.
    batching = [record.pop("batching") for record in meta]
    assert batching[0].keys() == batching[1].keys()
    assert meta[0] == meta[1] and meta[0]["classifier"]["source"] == os.path.basename(path)
    served, expected = (tf.saved_model.load(d["export_dir"]) for d in (done, want))
    texts = tf.constant(TEXTS)
    for name in ("featurize", "score", "classify"):
        got = served.signatures[name](text=texts)
        assert sorted(got) == sorted(expected.signatures[name](text=texts))
        for key, value in expected.signatures[name](text=texts).items():
            np.testing.assert_array_equal(got[key].numpy(), value.numpy(), err_msg=name + key)
    # Its errors name the arguments, not the binary's flags.
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"^export_dir=.*: holds 'checkpoints'"):
        tf_mlstm.export(tf_mlstm.ExportConfig(str(model_dir), str(model_dir)))
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"^ExportConfig: window must be pos"):
        tf_mlstm.export(tf_mlstm.ExportConfig(str(model_dir), str(tmp_path / "e"), window=0))


# Every entry point that takes texts, given a value that is not one, and the name (argument
# and index) its one error gives it.
_TEXT_TAKERS = {
    "TrainedModel.featurize": (lambda m, c: m.featurize(["fine", None, 3]), "texts[1]"),
    "TrainedModel.score": (lambda m, c: m.score(["fine", None]), "texts[1]"),
    "TrainedModel.classify": (lambda m, c: m.classify(["fine", None]), "texts[1]"),
    "TrainedModel.generate": (lambda m, c: m.generate(None, length=4), "prompt"),
    "MLSTMClassifier.fit": (lambda m, c: c.fit(["fine", None], [1, 0], verbose=0), "x[1]"),
    "MLSTMClassifier.evaluate": (lambda m, c: c.evaluate(["ok", None], [1, 0], verbose=0), "x[1]"),
    "MLSTMClassifier.predict": (lambda m, c: c.predict(np.array(["ok", None]), verbose=0), "x[1]"),
    "BytePreprocessor.frame": (
        lambda m, c: tf_mlstm.BytePreprocessor.for_windows(8, normalize=True).frame(["ok", None]),
        "texts[1]",
    ),
}


@pytest.fixture(scope="module")
def text_classifier(model_dir):
    classifier = tf_mlstm.MLSTMClassifier.from_run(
        str(model_dir), num_classes=2, feature="mean", max_length=16
    )
    classifier.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return classifier


@pytest.mark.parametrize("entry", sorted(_TEXT_TAKERS))
def test_a_text_that_is_not_a_str_is_a_user_error_naming_argument_and_index(
    loaded, text_classifier, entry
):
    call, name = _TEXT_TAKERS[entry]
    match = rf"^{re.escape(name)} must be a str, got NoneType \(None\)$"
    with pytest.raises(tf_mlstm.InvalidValueError, match=match):
        call(loaded, text_classifier)


def test_texts_given_as_bytes_are_read_as_utf8(loaded, text_classifier):
    np.testing.assert_array_equal(loaded.score(["Café ok"]), loaded.score(["Café ok".encode()]))
    want = text_classifier.predict(["Café ok"], verbose=0)
    np.testing.assert_array_equal(text_classifier.predict([b"Caf\xc3\xa9 ok"], verbose=0), want)


def test_classifier_fit_takes_plain_python_lists(model_dir):
    classifier = tf_mlstm.MLSTMClassifier.from_run(
        str(model_dir), num_classes=2, feature="mean", max_length=16
    )
    classifier.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    history = classifier.fit(["good", "bad", "fine", "dull"], [1, 0, 1, 0], epochs=1, verbose=0)
    assert len(history.history["loss"]) == 1
    assert classifier.evaluate(["good", "bad"], [1, 0], verbose=0) > 0


def test_probe_keeps_the_rerun_rule_before_loading_anything(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.json").write_text("{}", encoding="utf-8")
    config = tf_mlstm.TransferConfig(
        model_dir=str(tmp_path / "no_model"), output_dir=str(tmp_path / "out"), train_data="t"
    )
    with pytest.raises(
        tf_mlstm.InvalidValueError,
        match=r"output_dir='.*out' already holds results.json: pass overwrite=True to replace",
    ):
        tf_mlstm.probe(config)


# === docs/python.md ===


def python_blocks(markdown):
    """The ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```$", markdown, re.S | re.M)


# What a Python session must not print on a CPU machine: TensorFlow's GPU
# probe, its TFRecord reader on a CSV, its error and warning log lines, and
# Python warnings (Keras's on `fit` or `load_model`).
NOISE = re.compile(r"cuInit|cuda|DATA_LOSS|^[EW]\d{4} |Warning: ", re.M | re.I)
# Except one: on some AVX-512 CPUs (seen on a virtual Intel Xeon with AMX)
# TensorFlow's oneDNN build logs at error level, once per data type, that it
# falls back to its own kernels for an integer op. Nothing but hiding every
# error line (TF_CPP_MIN_LOG_LEVEL=3) or oneDNN itself silences it.
ONEDNN_FALLBACK = re.compile(r"oneDNN supports DT_\w+ only on platforms with AVX-512")


@pytest.mark.slow
def test_the_python_page_s_examples_run_in_order_and_quietly(tmp_path):
    """As a notebook runs the cells: one fresh process, TensorFlow's log level left unset."""
    blocks = python_blocks((REPO / "docs" / "python.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    assert any("keras.models.load_model" in block for block in blocks)
    # Each block ends with a marker.
    script = "\n".join(
        f"{block}\nprint('block {i} done', flush=True)" for i, block in enumerate(blocks)
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env,
        timeout=500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"block {len(blocks) - 1} done" in done.stdout
    noise = [
        line
        for line in done.stderr.splitlines()
        if NOISE.search(line) and not ONEDNN_FALLBACK.search(line)
    ]
    assert not noise, done.stderr[-3000:]
