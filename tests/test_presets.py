"""Presets (tf_mlstm/models/preset.py): a run's model in keras-hub's layout, loaded without it.

A preset of a language model, of a linear probe and of a fine-tuned classifier each predicts
exactly what its run folder does, in this process and in a fresh one with the run gone; its
metadata records the versions, the data and the run's weights_sha256; a wrong folder, a damaged
preset and an existing output are one clear error; tf-mlstm-preset writes one from a run folder.
"""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import tf_mlstm
from _models import run
from tf_mlstm import rundir
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models import preset as preset_lib
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.transfer import features
from tf_mlstm.transfer.probe import fit as fit_lib

TEXTS = ["A wonderful, moving film.", "Boring and far too long.", "Café au lait: très bon!"]
LAYOUT = {"config.json", "preprocessor.json", "model.weights.h5", "metadata.json"}


def _write_labeled(path):
    with open(path, "w", encoding="utf-8") as f:
        for i in range(48):
            good = i % 2 == 0
            text = "a great, moving film" if good else "dull and far too long"
            f.write(json.dumps({"text": f"{text} {i}", "label": int(good)}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained language model, a linear probe fitted on it and a fine-tuned run."""
    root = tmp_path_factory.mktemp("presets")
    lm = str(root / "lm")
    tiny = dict(hidden_size=16, embedding_size=8, precision="float32", jit_compile="false")
    tf_mlstm.pretrain(
        tf_mlstm.TrainConfig(
            model_dir=lm,
            seq_length=16,
            batch_size=4,
            max_steps=3,
            eval_every_steps=0,
            sample_every_steps=0,
            export=False,
            **tiny,
        )
    )
    model = MLSTMLanguageModel.from_run(lm)
    normalized = [normalize_text(text) for text in TEXTS] * 4
    x = features.concat_features(features.TextFeaturizer(model)(normalized), ("cell",))
    labels = np.array([1, 0, 1] * 4)
    fitted, _ = fit_lib.fit_logistic(x, labels, x, labels, ("cell",), model.hidden_size)
    probe = str(root / "classifier.json")
    fitted.fitted_on(rundir.weights_checksum(model.weights)).save(probe)
    tuned = str(root / "tuned")
    tf_mlstm.finetune(
        tf_mlstm.FinetuneConfig(
            init_model_dir=lm,
            model_dir=tuned,
            train_data=_write_labeled(root / "labeled.jsonl"),
            features="mean",
            max_length=32,
            batch_size=8,
            max_steps=2,
            precision="float32",
            jit_compile="false",
        )
    )
    return {"lm": lm, "probe": probe, "tuned": tuned, "root": root}


def _predictions(trained, classify=False):
    out = {
        "score": trained.score(TEXTS),
        "features": trained.featurize(TEXTS),
        "generate": trained.generate("This movie", length=24, seed=7, stop_at_end=False),
    }
    if classify:
        classified = trained.classify(TEXTS)
        out["classify"] = (classified.probabilities, classified.labels, classified.classes)
    return out


def _assert_same(got, want):
    np.testing.assert_array_equal(got["score"], want["score"])
    assert sorted(got["features"]) == sorted(want["features"])
    for kind, value in want["features"].items():
        np.testing.assert_array_equal(got["features"][kind], value, err_msg=kind)
    assert got["generate"] == want["generate"]
    if "classify" in want:
        np.testing.assert_array_equal(got["classify"][0], want["classify"][0])
        np.testing.assert_array_equal(got["classify"][1], want["classify"][1])
        assert tuple(got["classify"][2]) == tuple(want["classify"][2])


def test_a_language_model_s_preset_predicts_exactly_what_its_run_does(runs, tmp_path):
    preset = str(tmp_path / "lm_preset")
    from_run = tf_mlstm.load(runs["lm"])
    written = from_run.save_to_preset(preset)
    assert set(os.listdir(preset)) == LAYOUT
    loaded = tf_mlstm.load(preset)
    _assert_same(_predictions(loaded), _predictions(from_run))

    results = rundir.read_results(runs["lm"])
    metadata = json.loads(pathlib.Path(preset, "metadata.json").read_text())
    assert metadata == written == loaded.metadata
    assert metadata["weights_sha256"] == results["weights_sha256"]
    assert metadata["kind"] == "language model" and metadata["class_name"] == "MLSTMLanguageModel"
    assert metadata["tf_mlstm_version"] == tf_mlstm.__version__
    assert metadata["tensorflow_version"] == tf.__version__
    assert metadata["keras_version"] == __import__("keras").version()
    assert metadata["source"] == {"run": "lm", "checkpoint": "ckpt-3", "step": 3}
    training = metadata["training"]
    assert training["data"] == preset_lib.DEMO_CORPUS and training["steps"] == 3
    assert training["records"] > 0 and training["bytes"] > 0
    assert training["trained_bytes"] == 3 * 4 * 16
    assert training["validation_bits_per_char"] == results["validation_bits_per_char"]
    assert metadata["train_config"]["model_dir"] == "lm"  # a name, not a place
    assert loaded.config.hidden_size == 16 and loaded.checkpoint.endswith("model.weights.h5")

    # The Keras way: the model itself, in any policy, and the preprocessor of its texts.
    mixed = MLSTMLanguageModel.from_preset(preset, precision="mixed_bfloat16")
    assert mixed.dtype_policy.name == "mixed_bfloat16"
    assert rundir.weights_checksum(mixed.weights) == results["weights_sha256"]
    preprocessor = preset_lib.load_preprocessor(preset)
    assert preprocessor.normalize and preprocessor.frame(["Ok"]).ids.shape == (1, 256)
    # A preset of a preset keeps the run's record.
    again = MLSTMLanguageModel.from_preset(preset).save_to_preset(str(tmp_path / "again"))
    assert {k: again[k] for k in ("source", "training", "weights_sha256")} == {
        k: metadata[k] for k in ("source", "training", "weights_sha256")
    }


def test_a_linear_probe_s_preset_classifies_as_its_run_and_classifier_do(runs, tmp_path):
    preset = str(tmp_path / "probe_preset")
    from_run = tf_mlstm.load(runs["lm"], classifier=runs["probe"])
    written = from_run.save_to_preset(preset)
    assert set(os.listdir(preset)) == LAYOUT | {"classifier.json"}
    assert pathlib.Path(preset, "classifier.json").read_bytes() == (
        pathlib.Path(runs["probe"]).read_bytes()
    )
    assert written["kind"] == "linear probe"
    assert written["classifier"]["feature_kinds"] == ["cell"]
    loaded = tf_mlstm.load(preset)
    _assert_same(_predictions(loaded, classify=True), _predictions(from_run, classify=True))
    # Its model is the language model's, as a language model's preset holds it.
    assert written["weights_sha256"] == rundir.read_results(runs["lm"])["weights_sha256"]
    new_head = MLSTMClassifier.from_preset(preset, num_classes=2, feature="mean")
    assert new_head.head_spec.kind == "binary"
    assert new_head.predict(TEXTS, verbose=0).shape == (3, 2)
    with pytest.raises(ValueError, match=r"probe_preset is a language model: give num_classes"):
        MLSTMClassifier.from_preset(preset)


def test_a_fine_tuned_classifier_s_preset_classifies_as_its_run_does(runs, tmp_path):
    preset = str(tmp_path / "tuned_preset")
    from_run = tf_mlstm.load(runs["tuned"])
    written = from_run.save_to_preset(preset)
    assert set(os.listdir(preset)) == LAYOUT
    loaded = tf_mlstm.load(preset)
    _assert_same(_predictions(loaded, classify=True), _predictions(from_run, classify=True))
    results = rundir.read_results(runs["tuned"])
    assert written["kind"] == "fine-tuned classifier"
    assert written["class_name"] == "MLSTMClassifier"
    assert written["weights_sha256"] == results["weights_sha256"]
    assert written["fine_tuning"]["data"] == "labeled.jsonl"
    assert written["fine_tuning"]["validation"] == results["validation"]
    # The language model's own run is still there: its held-out bits/char come along.
    held_out = rundir.read_results(runs["lm"])["validation_bits_per_char"]
    assert written["training"]["validation_bits_per_char"] == held_out

    keras_model = MLSTMClassifier.from_preset(preset)
    want = MLSTMClassifier.from_run(runs["tuned"]).predict(TEXTS, verbose=0)
    np.testing.assert_array_equal(keras_model.predict(TEXTS, verbose=0), want)
    assert keras_model.head_spec.kind == "binary" and keras_model.max_length == 32
    encoder = MLSTMLanguageModel.from_preset(preset)
    tuned_encoder = MLSTMLanguageModel.from_run(runs["tuned"])
    assert rundir.weights_checksum(encoder.weights) == (
        rundir.weights_checksum(tuned_encoder.weights)
    )
    with pytest.raises(ValueError, match=r"a fine-tuned binary classifier of 2 classes, not num"):
        MLSTMClassifier.from_preset(preset, num_classes=3)


_FRESH = textwrap.dedent(
    """
    import json, sys
    import tf_mlstm
    loaded = tf_mlstm.load(sys.argv[1])
    texts = json.loads(sys.argv[2])
    classified = loaded.classify(texts)
    print(json.dumps({
        "score": loaded.score(texts).tolist(),
        "mean": loaded.featurize(texts, kinds=("mean",))["mean"].tolist(),
        "generate": loaded.generate("This movie", length=24, seed=7, stop_at_end=False),
        "probabilities": classified.probabilities.tolist(),
        "labels": classified.labels.tolist(),
    }))
    """
)


def test_a_preset_loads_in_a_fresh_process_with_its_run_deleted(runs, tmp_path):
    model_dir = tmp_path / "copy"
    shutil.copytree(runs["lm"], model_dir)
    preset = tmp_path / "preset"
    from_run = tf_mlstm.load(str(model_dir), classifier=runs["probe"])
    from_run.save_to_preset(str(preset))
    want = _predictions(from_run, classify=True)
    shutil.rmtree(model_dir)
    done = run([sys.executable, "-c", _FRESH, str(preset), json.dumps(TEXTS)], timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # JSON keeps a float64 exactly, and float32 values widen to float64 exactly.
    np.testing.assert_array_equal(np.array(got["score"]), want["score"])
    np.testing.assert_array_equal(np.array(got["mean"], np.float32), want["features"]["mean"])
    assert got["generate"] == want["generate"]
    np.testing.assert_array_equal(np.array(got["probabilities"]), want["classify"][0])
    np.testing.assert_array_equal(np.array(got["labels"]), want["classify"][1])


@pytest.fixture(scope="module")
def lm_preset(runs, tmp_path_factory):
    preset = str(tmp_path_factory.mktemp("lm_preset") / "preset")
    tf_mlstm.load(runs["lm"]).save_to_preset(preset)
    return preset


def test_a_folder_that_is_no_preset_is_one_line_saying_what_it_is(runs, lm_preset, tmp_path):
    missing = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match=r"^preset='.*missing' does not exist$"):
        MLSTMLanguageModel.from_preset(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        tf_mlstm.UserError, match=r"^preset='.*empty' holds no metadata.json: not a tf_mlstm pr"
    ):
        MLSTMClassifier.from_preset(str(tmp_path / "empty"))
    with pytest.raises(tf_mlstm.UserError, match=r"or tf_mlstm.finetune \(nor a preset: no meta"):
        tf_mlstm.load(str(tmp_path / "empty"))
    lm = runs["lm"]
    with pytest.raises(
        tf_mlstm.UserError,
        match=rf"^preset='{re.escape(lm)}' is a language-model run \(it holds config.json\), not "
        rf"a preset: tf_mlstm.load\('{re.escape(lm)}'\) and from_run load it; tf-mlstm-preset "
        rf"--model_dir={re.escape(lm)} --preset_dir=PRESET_DIR writes its preset$",
    ):
        MLSTMLanguageModel.from_preset(lm)
    # And the other way round: a preset where a run folder goes.
    with pytest.raises(
        tf_mlstm.UserError,
        match=rf"^{re.escape(lm_preset)} is a tf_mlstm preset \(it holds metadata.json\), not a "
        rf"run folder: in Python, tf_mlstm.load\('{re.escape(lm_preset)}'\) loads it$",
    ):
        MLSTMLanguageModel.from_run(lm_preset)
    with pytest.raises(tf_mlstm.UserError, match=r"^--model_dir=.* is a tf_mlstm preset"):
        with tf_mlstm.errors.naming_flags():
            tf_mlstm.preflight.check_trained_model(lm_preset)
    # tf_mlstm.load names its own argument.
    with pytest.raises(tf_mlstm.UserError, match=r"^model_dir='.*missing' does not exist"):
        tf_mlstm.load(missing)


def test_a_preset_s_metadata_reads_without_tensorflow(lm_preset):
    code = (
        "import json, sys; from tf_mlstm.models import preset; "
        "kind = preset.read_metadata(sys.argv[1])['kind']; "
        "print(json.dumps([kind, 'tensorflow' in sys.modules]))"
    )
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parent.parent))
    done = subprocess.run(
        [sys.executable, "-c", code, lm_preset], capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["language model", False]


def _copy(preset, tmp_path, name):
    copy = tmp_path / name
    shutil.copytree(preset, copy)
    return copy


def test_a_damaged_or_foreign_preset_is_refused_before_it_predicts(lm_preset, tmp_path):
    other = _copy(lm_preset, tmp_path, "other")
    metadata = json.loads((other / "metadata.json").read_text())
    (other / "metadata.json").write_text(json.dumps({**metadata, "format": "keras_hub"}))
    with pytest.raises(tf_mlstm.UserError, match=r"metadata.json: not the metadata of a tf_mlstm"):
        tf_mlstm.load(str(other))
    newer = _copy(lm_preset, tmp_path, "newer")
    (newer / "metadata.json").write_text(json.dumps({**metadata, "format_version": 2}))
    with pytest.raises(tf_mlstm.UserError, match=r"format_version 2, and this tf_mlstm .* reads 1"):
        MLSTMLanguageModel.from_preset(str(newer))
    mixed = _copy(lm_preset, tmp_path, "mixed")
    (mixed / "metadata.json").write_text(json.dumps({**metadata, "weights_sha256": "0" * 16}))
    with pytest.raises(
        tf_mlstm.UserError,
        match=r"model.weights.h5 holds other weights \(sha256 [0-9a-f]{16}\) than metadata.json "
        r"records \(0000000000000000\): the preset is damaged or mixed",
    ):
        tf_mlstm.load(str(mixed))
    cut = _copy(lm_preset, tmp_path, "cut")
    (cut / "model.weights.h5").write_bytes((cut / "model.weights.h5").read_bytes()[:500])
    with pytest.raises(tf_mlstm.UserError, match=r"model.weights.h5: cannot be read .*damaged"):
        tf_mlstm.load(str(cut))
    gone = _copy(lm_preset, tmp_path, "gone")
    (gone / "model.weights.h5").unlink()
    with pytest.raises(FileNotFoundError, match=r"gone: no model.weights.h5: the preset is inc"):
        tf_mlstm.load(str(gone))
    foreign = _copy(lm_preset, tmp_path, "foreign")
    config = json.loads((foreign / "config.json").read_text())
    config.update(module="builtins", registered_name="Functional")
    (foreign / "config.json").write_text(json.dumps(config))
    with pytest.raises(tf_mlstm.UserError, match=r"config.json: a 'Functional' model, not one of"):
        MLSTMLanguageModel.from_preset(str(foreign))


def test_an_existing_output_is_kept_unless_overwrite_and_never_a_run(runs, lm_preset, tmp_path):
    model = MLSTMLanguageModel.from_run(runs["lm"])
    target = tmp_path / "preset"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(
        tf_mlstm.UserError,
        match=r"^preset_dir='.*preset' already holds notes.txt: pass overwrite=True to replace",
    ):
        model.save_to_preset(str(target))
    assert os.listdir(target) == ["notes.txt"]
    model.save_to_preset(str(target), overwrite=True)
    assert set(os.listdir(target)) == LAYOUT
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # no staging left
    with pytest.raises(tf_mlstm.UserError, match=r"is a language-model run \(it holds config.js"):
        model.save_to_preset(runs["lm"], overwrite=True)
    assert rundir.read_results(runs["lm"])  # the run is as it was
    outer = tmp_path / "outer"
    shutil.copytree(runs["lm"], outer / "lm")
    with pytest.raises(tf_mlstm.UserError, match=r"^preset_dir='.*outer' holds the run .* it is"):
        MLSTMLanguageModel.from_run(str(outer / "lm")).save_to_preset(str(outer), overwrite=True)
    assert rundir.read_results(str(outer / "lm"))
    other = MLSTMLanguageModel(hidden_size=16, embedding_size=8)
    other.build()
    with pytest.raises(tf_mlstm.UserError, match=r"classifier.json was fitted on other model"):
        other.save_to_preset(str(tmp_path / "probe"), classifier=runs["probe"])


def test_a_write_that_fails_midway_leaves_the_earlier_preset_as_it_was(
    lm_preset, tmp_path, monkeypatch
):
    target = _copy(lm_preset, tmp_path, "target")
    before = {name: (target / name).read_bytes() for name in LAYOUT}
    smaller = MLSTMLanguageModel(hidden_size=8, embedding_size=4)
    smaller.build()

    def disk_full(self, path, *args, **kwargs):
        pathlib.Path(path).write_bytes(b"part of the weights")
        raise OSError(28, "No space left on device", path)

    monkeypatch.setattr(MLSTMLanguageModel, "save_weights", disk_full)
    with pytest.raises(tf_mlstm.UserError, match=r"^cannot write to .*target: .*No space left"):
        smaller.save_to_preset(str(target), overwrite=True)
    assert {name: (target / name).read_bytes() for name in os.listdir(target)} == before
    assert os.listdir(tmp_path) == ["target"]  # nothing staged is left beside it


def test_the_binary_writes_a_preset_from_a_run_folder(runs, tmp_path):
    preset = tmp_path / "from_binary"
    command = [sys.executable, "-m", "tf_mlstm.cli.preset", f"--model_dir={runs['tuned']}"]
    done = run([*command, f"--preset_dir={preset}"], timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed["preset_dir"] == str(preset) and printed["kind"] == "fine-tuned classifier"
    assert printed["weights_sha256"] == rundir.read_results(runs["tuned"])["weights_sha256"]
    assert set(os.listdir(preset)) == LAYOUT
    # Again: refused before TensorFlow starts, the preset as it was.
    before = (preset / "metadata.json").read_text()
    done = run([*command, f"--preset_dir={preset}"], timeout=150)
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        f"--preset_dir={preset} already holds 4 entries, such as config.json: pass --overwrite "
        "to replace it, or choose another"
    ), done.stderr
    assert (preset / "metadata.json").read_text() == before
