"""tf-mlstm-finetune: exact padding, learning toy tasks (binary, K classes, multi-label),
the MLP head and its dropout, precisions, resume, and serving a fine-tuned run."""

import dataclasses
import io
import json
import math
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
import types

import _forkserver
import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_mlstm
from _models import run_without_tf_mlstm
from _models import tiny_trained_model_dir
from _models import write_untrained_model_dir
from tf_mlstm import rundir
from tf_mlstm.cli import classify as classify_cli
from tf_mlstm.cli import export as export_cli
from tf_mlstm.data import framing
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models import featurize
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.classifier import frame_left_padded
from tf_mlstm.models.classifier import lm_loss_per_text
from tf_mlstm.models.classifier import predict_features
from tf_mlstm.models.classifier import predict_probabilities
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.models.kinds import SEQUENCE_KINDS
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.rundir import FINETUNE_CONFIG_FILE
from tf_mlstm.rundir import check_resumed_config
from tf_mlstm.rundir import read_config
from tf_mlstm.serving import saved_model
from tf_mlstm.tasks import finetune as finetune_task
from tf_mlstm.tasks.language_model import LanguageModelTask
from tf_mlstm.train.runner import Runner
from tf_mlstm.transfer import finetune
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer import predict
from tf_mlstm.transfer.probe import fit as fit_lib

_WORDS = ("the", "movie", "was", "plot", "acting", "it", "really", "quite", "and", "story")

LAUNCHER = pathlib.Path(__file__).resolve().parent.parent / "tools" / "launch_local_workers.py"


def _write_task(path, count, seed):
    """Texts ending in "good" (label 1) or "bad" (0); `long` = more than 6 words."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            positive = rng.random() < 0.5
            words = [rng.choice(_WORDS) for _ in range(rng.randint(2, 8))]
            words.append("good" if positive else "bad")
            record = {"text": " ".join(words), "label": int(positive), "long": int(len(words) > 6)}
            f.write(json.dumps(record) + "\n")
    return str(path)


def _write_three_class(path, count, seed):
    """Texts ending in "good" (stars 4-5), "okay" (3) or "bad" (1-2); `good` is 0/1."""
    rng = random.Random(seed)
    endings = {"good": (4, 5), "okay": (3,), "bad": (1, 2)}
    with open(path, "w") as f:
        for _ in range(count):
            ending = rng.choice(sorted(endings))
            words = [rng.choice(_WORDS) for _ in range(rng.randint(2, 6))] + [ending]
            record = {
                "text": " ".join(words),
                "stars": rng.choice(endings[ending]),
                "good": int(ending == "good"),
            }
            f.write(json.dumps(record) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """The tiny trained model and the toy task's files."""
    folder = tmp_path_factory.mktemp("finetune_task")
    return {
        "init": str(tiny_trained_model_dir(tmp_path_factory)),
        "train": _write_task(folder / "train.jsonl", 320, 0),
        "validation": _write_task(folder / "validation.jsonl", 80, 1),
    }


def _config(task, model_dir, **overrides):
    values = dict(
        init_model_dir=task["init"],
        train_data=task["train"],
        validation_data=task["validation"],
        model_dir=str(model_dir),
        batch_size=16,
        lr=1e-2,
        max_steps=30,
        log_every_steps=10,
    )
    values.update(overrides)
    return finetune.FinetuneConfig(**values).validate()


def _small_encoder():
    keras.utils.set_random_seed(0)
    encoder = MLSTMLanguageModel(hidden_size=12, embedding_size=6)
    encoder.build()
    return encoder


@pytest.mark.parametrize("feature", (*SEQUENCE_KINDS, "mean,max,min,std"))
def test_left_padding_gives_each_text_its_own_result(feature):
    model = MLSTMClassifier(_small_encoder(), 2, feature)
    texts = ["a much longer text than the others", "short", "mid length"]
    ids, _, lengths, _ = frame_left_padded(texts, 64)
    for training in (False, True):
        logits, hidden = model.forward(ids, lengths, training=training)
        lm = lm_loss_per_text(model, hidden, ids, lengths)
        for row, text in enumerate(texts):
            one_ids, _, one_lengths, _ = frame_left_padded([text], 64)
            one_logits, one_hidden = model.forward(one_ids, one_lengths, training=training)
            one_lm = lm_loss_per_text(model, one_hidden, one_ids, one_lengths)
            np.testing.assert_allclose(logits[row], one_logits[0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(lm[row], one_lm[0], rtol=1e-5)


def test_head_features_are_the_served_features_and_differentiable():
    """Each kind equals `featurize_ids`'s (what a served head reads), in the order given,
    and a one-byte text (variance 0) still has a finite gradient."""
    encoder = _small_encoder()
    kinds = ("std", "cell", "max", "hidden", "min", "mean")
    model = MLSTMClassifier(encoder, 1, ",".join(kinds))
    texts = ["a much longer text than the others", "short", ""]
    ids, _, lengths, _ = frame_left_padded(texts, 64)
    features, _ = model.text_features(ids, lengths)
    right = framing.frame_ids_tf(tf.constant(texts), "right", max_length=64, pad_to_multiple=64)
    served = featurize.featurize_ids(encoder, right.ids, right.valid, window=64)
    want = np.concatenate([served[kind].numpy() for kind in kinds], axis=1)
    np.testing.assert_allclose(features.numpy(), want, atol=2e-6)
    with tf.GradientTape() as tape:
        features, _ = model.text_features(ids, lengths, training=True)
        total = tf.reduce_sum(features)
    gradients = tape.gradient(total, encoder.trainable_variables)
    assert all(np.isfinite(g.numpy()).all() for g in gradients if g is not None)


def test_long_texts_are_cut_to_max_length():
    ids, _, lengths, truncated = frame_left_padded(["abcdef", "ab"], 4)
    assert ids.dtype == np.uint8 and ids.tolist() == [[10, 97, 98, 99], [0, 10, 97, 98]]
    assert lengths.tolist() == [4, 3] and truncated.tolist() == [True, False]


@pytest.mark.slow
def test_fine_tuning_learns_good_versus_bad(task, tmp_path):
    model_dir = tmp_path / "run"
    results = tf_mlstm.finetune(_config(task, model_dir))
    assert results["validation"]["accuracy"] >= 0.95, results
    assert results["validation"]["f1"] >= 0.95
    assert results["history"][-1]["loss"] < results["history"][0]["loss"]
    saved = json.loads((model_dir / "results.json").read_text())
    assert saved["step"] == 30 and set(saved["thresholds"]) == {"label"}
    # The saved classifier reproduces the validation accuracy...
    tuned = finetune.load_finetuned_model(str(model_dir))
    assert tuned.model.head_spec.kind == "binary" and tuned.model.head_spec.classes == (0, 1)
    config = tuned.config
    validation = labeled.read_labeled(task["validation"], config.text_keys, config.label_keys)
    probabilities = tuned.predict_proba(validation.texts)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-6)
    predicted = tuned.predict(probabilities)
    assert np.mean(predicted == validation.labels) == pytest.approx(
        results["validation"]["accuracy"]
    )
    # ...and its encoder, changed by fine-tuning, loads like any trained model.
    tuned = MLSTMLanguageModel.from_run(str(model_dir))
    base = MLSTMLanguageModel.from_run(task["init"])
    assert not np.allclose(tuned.mlstm.cell.weights[0], base.mlstm.cell.weights[0])
    # A rerun with a larger budget resumes from the last checkpoint.
    config = _config(task, model_dir, max_steps=34)
    resumed = Runner(finetune_task.FinetuneTask(config), config)
    assert resumed.train()["step"] == 34
    assert int(resumed.step.numpy()) == 34
    assert sorted(p.name for p in (model_dir / "checkpoints").glob("*.index")) == [
        "ckpt-30.index",
        "ckpt-34.index",
    ]


@pytest.mark.slow
def test_multi_label_with_loss_scaling_and_lm_loss(task, tmp_path):
    config = _config(
        task,
        tmp_path / "run",
        label_key="label,long",
        precision="mixed_float16",
        allreduce_dtype="float16",
        lm_loss_weight=0.5,
        max_steps=10,
        features="mean",
        threshold_metric="f1",
    )
    job = finetune_task.FinetuneTask(config)
    tuner = Runner(job, config)
    assert isinstance(tuner.optimizer, keras.optimizers.LossScaleOptimizer)
    assert tuner.model.encoder.compute_dtype == "float16"
    results = tuner.train()
    assert all(np.isfinite([h["loss"], h["lm_loss"]]).all() for h in results["history"])
    # The trained encoder predicts the next byte better than a uniform guess.
    assert 0 < results["history"][-1]["lm_loss"] < math.log(256)
    assert set(results["validation"]["per_label"]) == {"label", "long"}
    assert {"exact_match", "macro_f1", "f1", "accuracy"} <= set(results["validation"])
    probabilities = predict_probabilities(tuner.model, job.splits["validation"], config.max_length)
    assert probabilities.shape == (80, 2)


def test_without_validation_data_a_stratified_share_is_held_out(tmp_path):
    train = _write_task(tmp_path / "train.jsonl", 200, 3)
    config = finetune.FinetuneConfig(
        init_model_dir="unused", train_data=train, model_dir=str(tmp_path / "run")
    ).validate()
    task = finetune_task.FinetuneTask(config)
    task._load_data()
    kept, held = task.splits["train"], task.splits["validation"]
    assert len(held.texts) == 20 and len(kept.texts) == 180
    assert held.indicator().shape == (20, 1)
    assert abs(held.labels.mean() - kept.labels.mean()) < 0.05
    assert task.train_ids.shape[0] == 180


def test_config_errors():
    base = dict(init_model_dir="m", train_data="t", model_dir="o")
    with pytest.raises(ValueError, match="features must name distinct kinds of cell,hidden,mean"):
        finetune.FinetuneConfig(**base, features="mean,cell_max").validate()
    with pytest.raises(ValueError, match="features must name distinct kinds of .* got 'max,max'"):
        finetune.FinetuneConfig(**base, features="max,max").validate()
    with pytest.raises(ValueError, match="head_init=probe starts a linear head; it cannot"):
        finetune.FinetuneConfig(**base, head_init="probe", head_hidden=4).validate()
    with pytest.raises(ValueError, match="head_init must be one of"):
        finetune.FinetuneConfig(**base, head_init="zeros").validate()
    with pytest.raises(ValueError, match="label_key must name distinct keys"):
        finetune.FinetuneConfig(**base, label_key="a,a").validate()
    with pytest.raises(ValueError, match="precision must be one of"):
        finetune.FinetuneConfig(**base, precision="float16").validate()
    with pytest.raises(ValueError, match="init_model_dir is required"):
        finetune.FinetuneConfig(train_data="t", model_dir="o").validate()
    with pytest.raises(ValueError, match="allreduce_dtype=float16 needs precision=mixed_fl"):
        finetune.FinetuneConfig(**base, precision="float32", allreduce_dtype="float16").validate()
    with pytest.raises(ValueError, match="max_minutes must be >= 0, got -1.0"):
        finetune.FinetuneConfig(**base, max_minutes=-1.0).validate()
    with pytest.raises(ValueError, match="max_nonfinite_steps must be positive, got 0"):
        finetune.FinetuneConfig(**base, max_nonfinite_steps=0).validate()
    with pytest.raises(ValueError, match="head_hidden must be >= 0, got -1"):
        finetune.FinetuneConfig(**base, head_hidden=-1).validate()
    with pytest.raises(ValueError, match=r"head_dropout must be in \[0, 1\), got 1.0"):
        finetune.FinetuneConfig(**base, head_dropout=1.0).validate()
    with pytest.raises(ValueError, match="label_map needs one label_key"):
        finetune.FinetuneConfig(**base, label_key="a,b", label_map="1:x,2:y").validate()


def test_a_resumed_run_keeps_its_head_and_classes(tmp_path):
    base = dict(init_model_dir="m", train_data="t", model_dir=str(tmp_path), head_hidden=8)
    (tmp_path / FINETUNE_CONFIG_FILE).write_text(finetune.FinetuneConfig(**base).to_json())
    for change, message in [
        (dict(head_hidden=16), ": head_hidden=16 .saved 8."),
        (dict(label_map="1:a,2:b"), ": label_map=1:a,2:b .saved ."),
    ]:
        config = finetune.FinetuneConfig(**dict(base, **change))
        with pytest.raises(ValueError, match=message):
            check_resumed_config(str(tmp_path), config, FINETUNE_CONFIG_FILE)
    # The dropout rate holds no variable: a rerun may change it.
    config = finetune.FinetuneConfig(**base, head_dropout=0.5)
    assert check_resumed_config(str(tmp_path), config, FINETUNE_CONFIG_FILE) == {
        "head_dropout": (0.0, 0.5)
    }


def test_a_config_saved_before_the_features_rename_reads_and_resumes(tmp_path):
    base = dict(init_model_dir="m", train_data="t", model_dir=str(tmp_path))
    saved = json.loads(finetune.FinetuneConfig(**base, features="mean,max").to_json())
    saved["feature"] = saved.pop("features")  # as runs of earlier releases wrote it
    (tmp_path / FINETUNE_CONFIG_FILE).write_text(json.dumps(saved))
    config = read_config(str(tmp_path), finetune.FinetuneConfig, FINETUNE_CONFIG_FILE)
    assert config.features == "mean,max" and config.feature_kinds == ("mean", "max")
    assert check_resumed_config(str(tmp_path), config, FINETUNE_CONFIG_FILE) == {}
    with pytest.raises(ValueError, match=r": features=cell \(saved mean,max\)"):
        check_resumed_config(str(tmp_path), finetune.FinetuneConfig(**base), FINETUNE_CONFIG_FILE)


def test_a_bad_label_map_or_a_single_class_is_one_clear_error(tmp_path):
    train = _write_three_class(tmp_path / "train.jsonl", 40, 0)
    base = dict(init_model_dir="unused", train_data=train, model_dir=str(tmp_path / "run"))
    for label_map, message in [
        ("1:neg,2", "label_map entry 2 .'2'. is not VALUE:CLASS"),
        ("1:neg,2:neg,3:pos", r"train.jsonl:\d+: 'stars' is [45], which label_map does not name"),
    ]:
        config = finetune.FinetuneConfig(**base, label_key="stars", label_map=label_map)
        with pytest.raises(ValueError, match=message):
            finetune_task.FinetuneTask(config.validate())._load_data()
    one = tmp_path / "one.jsonl"
    one.write_text('{"text": "a", "label": 1}\n{"text": "b", "label": 1}\n' * 10)
    config = finetune.FinetuneConfig(**dict(base, train_data=str(one))).validate()
    with pytest.raises(ValueError, match="every label is 1; a classifier needs two or more"):
        finetune_task.FinetuneTask(config)._load_data()


def test_a_label_map_makes_named_classes_and_integer_labels_beyond_0_1_are_k_classes(tmp_path):
    train = _write_three_class(tmp_path / "train.jsonl", 60, 0)
    base = dict(init_model_dir="unused", train_data=train, model_dir=str(tmp_path / "run"))
    mapped = finetune_task.FinetuneTask(
        finetune.FinetuneConfig(
            **base, label_key="stars", label_map="1:neg,2:neg,3:neutral,4:pos,5:pos"
        ).validate()
    )
    mapped._load_data()
    assert mapped.kind == "multiclass" and mapped.names == ("neg", "neutral", "pos")
    stars = mapped.splits["train"].labels
    assert mapped.targets["train"].tolist() == [("neg", "neutral", "pos").index(v) for v in stars]
    plain = finetune_task.FinetuneTask(
        finetune.FinetuneConfig(**base, label_key="stars").validate()
    )
    plain._load_data()
    assert plain.kind == "multiclass" and plain.names == (1, 2, 3, 4, 5)
    binary = finetune_task.FinetuneTask(
        finetune.FinetuneConfig(**base, label_key="good").validate()
    )
    binary._load_data()
    assert binary.kind == "binary" and binary.targets["train"].shape == (54, 1)


def test_head_dropout_is_seeded_and_only_in_training():
    model = MLSTMClassifier(_small_encoder(), 3, softmax=True, head_hidden=8, head_dropout=0.5)
    assert set(model.head_layers()) == {"classifier", "head_hidden"}
    features = np.ones((4, 12), np.float32)
    inference = model.head_logits(features)
    np.testing.assert_allclose(model.head_logits(features, training=False), inference)
    first = model.head_logits(features, training=True, dropout_seed=[3, 0])
    np.testing.assert_allclose(
        model.head_logits(features, training=True, dropout_seed=[3, 0]), first
    )
    assert not np.allclose(model.head_logits(features, training=True, dropout_seed=[4, 0]), first)
    assert not np.allclose(first, inference)
    probabilities = model.probabilities(inference)
    np.testing.assert_allclose(np.sum(probabilities, axis=1), 1.0, rtol=1e-6)
    restored = MLSTMClassifier.from_config(model.get_config())
    assert (restored.softmax, restored.head_hidden, restored.head_dropout) == (True, 8, 0.5)


@pytest.mark.parametrize("label_key", ["label", "label,long", "stars"])
def test_a_probe_head_starts_as_the_logistic_regression_on_the_starting_features(
    task, tmp_path, label_key
):
    """--head_init=probe: before any step, the head gives the probabilities of the
    logistic regression fitted on the starting model's features (binary, multi-label,
    K classes); its C and validation metrics are reported."""
    if label_key == "stars":
        config = _three_class_config(task, tmp_path, (160, 40, 0))
        config = dataclasses.replace(config, head_init="probe", features="mean,max")
    else:
        config = _config(task, tmp_path / "run", label_key=label_key, features="mean,max")
        config = dataclasses.replace(config, head_init="probe", precision="float32")
    job = finetune_task.FinetuneTask(dataclasses.replace(config, precision="float32"))
    job.prepare(types.SimpleNamespace(num_workers=1))
    encoder = MLSTMLanguageModel.from_run(task["init"])
    outputs = len(job.names)
    if job.kind == "binary":
        outputs = 1
    model = MLSTMClassifier(
        encoder, outputs, config.features, job.kind == "multiclass", head_init=job.head_init
    )
    x, y = {}, {}
    for name in ("train", "validation"):
        x[name] = predict_features(model, job.splits[name].texts, config.max_length)
        y[name] = job.targets[name].astype(np.int64)
        if job.kind == "binary":
            y[name] = y[name][:, 0]
    classes = {"binary": (0, 1), "multiclass": (0, 1, 2)}.get(job.kind, config.label_keys)
    regression, _ = fit_lib.fit_logistic(
        x["train"],
        y["train"],
        x["validation"],
        y["validation"],
        ("mean", "max"),
        encoder.hidden_size,
        penalty="l2",
        classes=classes,
    )
    assert job.probe["C"] == regression.report.C
    want = regression.predict_proba(x["validation"])
    if job.kind == "binary":
        want = want[:, 1:]
    got = predict_probabilities(model, job.splits["validation"], config.max_length)
    # float32 features through the standardization folded into a float32
    # kernel, against scikit-learn's float64: 1e-4 apart at most; a head that
    # were not the regression would be off by orders of magnitude more.
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert job.probe["validation"] == regression.metrics(x["validation"], y["validation"])
    # A probe that learned something: the toy labels are in the last word.
    assert job.probe["validation"]["accuracy"] > 0.6
    # A resumed run takes its head from the checkpoint and fits no probe.
    checkpoints = os.path.join(config.model_dir, "checkpoints")
    os.makedirs(checkpoints, exist_ok=True)
    tf.train.Checkpoint(step=tf.Variable(1)).save(os.path.join(checkpoints, "ckpt"))
    resumed = finetune_task.FinetuneTask(dataclasses.replace(config, precision="float32"))
    resumed.prepare(types.SimpleNamespace(num_workers=1))
    assert resumed.head_init is None and resumed.probe is None


def _three_class_config(task, tmp_path, counts, **overrides):
    """A K=3 config (stars mapped to neg/neutral/pos) on new files of `counts` texts.

    `counts` = (train, validation, test); a test count of 0 writes no test split.
    The run goes to `tmp_path / "run"`.
    """
    folder = tmp_path / "data"
    folder.mkdir()
    splits = {}
    for seed, (name, count) in enumerate(zip(("train", "validation", "test"), counts)):
        if count:
            splits[f"{name}_data"] = _write_three_class(folder / f"{name}.jsonl", count, seed)
    return _config(
        task,
        tmp_path / "run",
        label_key="stars",
        label_map="1:neg,2:neg,3:neutral,4:pos,5:pos",
        **splits,
        **overrides,
    )


@pytest.mark.slow
def test_three_classes_with_a_label_map_and_an_mlp_head_learn_and_load(task, tmp_path):
    model_dir = tmp_path / "run"
    config = _three_class_config(
        task,
        tmp_path,
        (360, 90, 60),
        head_hidden=16,
        head_dropout=0.1,
        max_steps=40,
        jit_compile="false",
    )
    results = tf_mlstm.finetune(config)
    assert results["kind"] == "multiclass" and results["classes"] == ["neg", "neutral", "pos"]
    assert "thresholds" not in results
    for split in ("validation", "test"):
        # Chance is at most 0.4 (the largest class).
        assert results[split]["accuracy"] >= 0.9, results[split]
        assert set(results[split]["per_class"]) == {"neg", "neutral", "pos"}
        assert results[split]["macro_f1"] >= 0.85
    tuned = finetune.load_finetuned_model(str(model_dir))
    spec = tuned.model.head_spec
    assert spec.kind == "multiclass" and spec.classes == ("neg", "neutral", "pos")
    validation = labeled.read_labeled(
        config.validation_data, config.text_keys, "stars", label_map=config.label_map
    )
    probabilities = tuned.predict_proba(validation.texts)
    assert probabilities.shape == (90, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    assert np.mean(tuned.predict(probabilities) == validation.labels) == pytest.approx(
        results["validation"]["accuracy"]
    )


@pytest.mark.slow
def test_an_mlp_head_with_dropout_resumes_exactly(task, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    # A constant rate: a 4-step run then follows the 8-step run's schedule.
    head = ("--head_hidden=8", "--head_dropout=0.3", "--checkpoint_every_steps=4")
    head += ("--lr_decay=constant",)

    def run(name, steps):
        done = _forkserver.run(
            _finetune_cmd(task, tmp_path / name, f"--max_steps={steps}", *head),
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return _printed_results(done.stdout), done.stderr

    whole = _uninterrupted(
        task, tmp_path / "whole", max_steps=8, head_hidden=8, head_dropout=0.3, lr_decay="constant"
    )
    assert run("resumed", 4)[0]["step"] == 4
    resumed, log = run("resumed", 8)
    assert "Resumed from" in log and "input restarts" not in log
    # Head weights, optimizer slots, input position and dropout draws all came back.
    assert resumed["step"] == 8 and resumed["weights_sha256"] == whole["weights_sha256"]
    assert resumed["validation"] == whole["validation"]


@pytest.mark.slow
def test_finetune_two_workers_on_loopback(task, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    command = [
        sys.executable,
        str(LAUNCHER),
        "--num_workers=2",
        "--",
        sys.executable,
        "-m",
        "tf_mlstm.cli.finetune",
        f"--init_model_dir={task['init']}",
        f"--model_dir={tmp_path / 'run'}",
        f"--train_data={task['train']}",
        "--distribution_strategy=multi_worker",
        "--batch_size=16",
        "--lr=1e-2",
        "--max_steps=20",
        "--log_every_steps=5",
    ]
    done = _forkserver.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [
        json.loads(line.split("] ", 1)[1])
        for line in done.stdout.splitlines()
        if line.startswith("[worker ")
    ]
    assert len(results) == 2
    for result in results:
        result.pop("train_minutes")
    assert results[0] == results[1]  # both workers trained the same model
    assert results[0]["validation"]["accuracy"] >= 0.95
    # No --validation_data: 10% of the 320 training texts were held out.
    assert results[0]["train_examples"] == 288 and results[0]["validation"]["examples"] == 32
    losses = re.findall(r"\[worker (\d)\].*step (\d+)/20  loss ([0-9.]+)", done.stderr)
    by_worker = [sorted((s, v) for w, s, v in losses if w == k) for k in "01"]
    assert len(by_worker[0]) == 4 and by_worker[0] == by_worker[1]
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["step"] == 20


def _finetune_cmd(task, model_dir, *extra):
    return [
        sys.executable,
        "-m",
        "tf_mlstm.cli.finetune",
        f"--init_model_dir={task['init']}",
        f"--model_dir={model_dir}",
        f"--train_data={task['train']}",
        f"--validation_data={task['validation']}",
        "--batch_size=16",
        "--lr=1e-2",
        "--log_every_steps=1",
        "--checkpoint_every_steps=4",
        "--jit_compile=false",
        *extra,
    ]


def _printed_results(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def _uninterrupted(task, model_dir, **overrides):
    """The results of `_finetune_cmd`'s run, fine-tuned in this process (no TensorFlow
    start-up to pay): the reference a stopped and resumed run must end equal to."""
    values = dict(log_every_steps=1, checkpoint_every_steps=4, jit_compile="false")
    return tf_mlstm.finetune(_config(task, model_dir, **values, **overrides))


@pytest.mark.slow
def test_finetune_resumes_after_sigkill_with_the_weights_of_an_uninterrupted_run(task, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    reference = _uninterrupted(task, tmp_path / "whole", max_steps=16)
    assert reference["step"] == 16 and reference["stopped_by"] == "max_steps"
    assert list((tmp_path / "whole" / "train").glob("events.out.tfevents.*"))

    killed_dir = tmp_path / "killed"
    proc = _forkserver.Popen(
        _finetune_cmd(task, killed_dir, "--max_steps=16"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while time.time() < deadline and not (killed_dir / "checkpoints" / "ckpt-8.index").exists():
        assert proc.poll() is None, "fine-tuning ended before the kill"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed_dir / "results.json").exists(), "the kill came too late"
    resumed = _forkserver.run(
        _finetune_cmd(task, killed_dir, "--max_steps=16"),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Resumed from" in resumed.stderr and "input restarts" not in resumed.stderr
    steps = [int(s) for s in re.findall(r"step (\d+)/16  loss", resumed.stderr)]
    assert steps and min(steps) > 8 and max(steps) == 16
    # Same input position, same optimizer state: bit-identical weights.
    assert _printed_results(resumed.stdout)["weights_sha256"] == reference["weights_sha256"]


@pytest.mark.slow
def test_finetune_time_budget_stops_cleanly_and_reports(task, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = _forkserver.run(
        _finetune_cmd(task, tmp_path / "run", "--max_steps=100000", "--max_minutes=0.1"),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["stopped_by"] == "time" and 0 < results["step"] < 100000
    assert "Time budget of 0.1 minutes reached at step" in proc.stderr
    assert results["skipped_steps"] == 0 and "thresholds" in results
    latest = (tmp_path / "run" / "checkpoints" / "checkpoint").read_text()
    assert f'"ckpt-{results["step"]}"' in latest


# === Serving a fine-tuned run ===

# (An empty text has nothing to classify: the classify signature refuses it, test_serving.py.)
_SERVING_TEXTS = [
    "A wonderful, moving film that stays with you for days.",
    "the plot was really bad",
    "okay",
    "!",
]


@pytest.mark.parametrize(
    "kind, classes, feature, head_hidden",
    [
        ("binary", (0, 1), "cell", 0),
        ("multiclass", ("neg", "neutral", "pos"), "mean", 6),
        ("multilabel", ("label", "long"), "mean", 0),
        ("binary", (0, 1), "hidden,max,min,std", 0),
        ("multiclass", ("neg", "neutral", "pos"), "cell,mean", 6),
    ],
)
def test_the_classify_signature_computes_the_fine_tuned_head(kind, classes, feature, head_hidden):
    outputs = 1 if kind == "binary" else len(classes)
    thresholds = () if kind == "multiclass" else tuple(np.linspace(0.3, 0.6, outputs).tolist())
    model = MLSTMClassifier(
        _small_encoder(),
        outputs,
        feature,
        kind == "multiclass",
        head_hidden,
        head_dropout=0.5,
        head_spec=HeadSpec(kind, classes, thresholds),
    )
    rng = np.random.default_rng(0)
    for variable in model.classifier.weights:  # biases away from 0 too
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    config = finetune.FinetuneConfig(features=feature, head_hidden=head_hidden, max_length=20)
    tuned = finetune.FinetunedClassifier(model, config)
    head = tuned.head
    assert head.head_spec is model.head_spec  # the model's, not a copy rebuilt from its parts
    module = saved_model.ServingModule(model.encoder, classifier=head)
    served = module.classify(tf.constant(_SERVING_TEXTS))
    texts = [normalize_text(t) for t in _SERVING_TEXTS]
    want = tuned.predict_proba(texts)
    np.testing.assert_allclose(served["probabilities"].numpy(), want, atol=1e-5)
    predicted = tuned.predict(want)
    if kind == "multilabel":
        np.testing.assert_array_equal(served["labels"].numpy(), predicted)
    else:
        got = served["label"].numpy().tolist()
        assert [g.decode() if isinstance(g, bytes) else g for g in got] == predicted.tolist()
    if kind == "binary":
        assert "neuron" not in served


_SERVE_CLASSIFY = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    loaded = tf.saved_model.load(sys.argv[1])
    out = loaded.signatures["classify"](text=tf.constant(json.loads(sys.argv[2])))
    print(json.dumps({
        "imported_tf_mlstm": any(m.startswith("tf_mlstm") for m in sys.modules),
        "probabilities": out["probabilities"].numpy().tolist(),
        "classes": [c.decode() for c in out["classes"].numpy()[0]],
        "label": [c.decode() for c in out["label"].numpy()],
    }))
""")


@pytest.mark.slow
def test_a_fine_tuned_run_classifies_and_exports(task, tmp_path, monkeypatch):
    model_dir = tmp_path / "run"
    config = _three_class_config(
        task,
        tmp_path,
        (120, 30, 0),
        features="mean",
        head_hidden=8,
        head_dropout=0.2,
        max_length=24,
        max_steps=6,
        jit_compile="false",
    )
    tf_mlstm.finetune(config)
    tuned = finetune.load_finetuned_model(str(model_dir))
    want = tuned.predict_proba([normalize_text(t) for t in _SERVING_TEXTS])

    # tf-mlstm-classify without --classifier: the fine-tuned head.
    stdin = io.BytesIO("\n".join(_SERVING_TEXTS[:3]).encode("utf-8"))
    lines, probabilities, labels, classes = classify_cli.classify(
        classify_cli.ClassifyConfig(str(model_dir), "", "-", "-"), stdin=stdin
    )
    assert lines == [1, 2, 3] and classes == ("neg", "neutral", "pos")
    np.testing.assert_allclose(probabilities, want[:3], atol=1e-6)
    out = io.StringIO()
    predict.write_predictions_csv(out, lines, probabilities, labels, classes)
    header = out.getvalue().splitlines()[0]
    assert header == "index,line,label,probability_neg,probability_neutral,probability_pos"
    with pytest.raises(ValueError, match="is not a finished tf-mlstm-finetune run"):
        classify_cli.classify(classify_cli.ClassifyConfig(task["init"], "", "-", "-"))
    # The run folder is not a classifier file: the message says how to give it.
    with pytest.raises(ValueError, match="is a folder, not a classifier file .a tf-mlstm-finetune"):
        classify_cli.classify(classify_cli.ClassifyConfig(str(model_dir), str(model_dir), "-", "-"))

    # tf-mlstm-export: classify served from a process that never imports tf_mlstm. The run
    # is loaded once (encoder and head from one checkpoint), and its encoder is exported.
    restored = []
    restore_model = rundir.restore_model
    monkeypatch.setattr(
        rundir, "restore_model", lambda *args: restored.append(args[1]) or restore_model(*args)
    )
    done = export_cli.export(export_cli.ExportConfig(str(model_dir), str(tmp_path / "export")))
    assert restored == [str(model_dir)]
    monkeypatch.undo()
    assert "classify" in done["signatures"]
    meta_path = os.path.join(done["export_dir"], "assets.extra", "meta.json")
    with open(meta_path) as f:
        meta = json.load(f)["classifier"]
    assert meta["fine_tuned"] and meta["task"] == "multiclass" and meta["head_hidden"] == 8
    result = run_without_tf_mlstm(
        _SERVE_CLASSIFY, [done["export_dir"], json.dumps(_SERVING_TEXTS)], tmp_path
    )
    assert not result["imported_tf_mlstm"]
    np.testing.assert_allclose(result["probabilities"], want, atol=1e-5)
    assert result["classes"] == ["neg", "neutral", "pos"]
    assert result["label"] == tuned.predict(want).tolist()

    # The same run as a Keras model of raw texts: the exported signature's numbers.
    keras_model = MLSTMClassifier.from_run(str(model_dir))
    texts = tf.data.Dataset.from_tensor_slices(_SERVING_TEXTS).batch(2)
    np.testing.assert_allclose(
        keras_model.predict(texts, verbose=0), result["probabilities"], atol=1e-5
    )
    assert keras_model.head_spec == tuned.model.head_spec == tuned.head.head_spec
    with pytest.raises(ValueError, match="a fine-tuned multiclass classifier of 3 classes, not"):
        MLSTMClassifier.from_run(str(model_dir), num_classes=2)


# === auto precision and XLA: timed at fine-tuning's own shape ===


def _auto_config(tmp_path, name, **overrides):
    """A tiny fine-tuning config on an untrained 16-unit model, precision and XLA auto."""
    base = tmp_path / "base"
    if not base.exists():
        write_untrained_model_dir(base, hidden_size=16, embedding_size=8)
        _write_task(tmp_path / "train.jsonl", 40, 5)
        _write_task(tmp_path / "validation.jsonl", 16, 6)
    values = dict(
        init_model_dir=str(base),
        train_data=str(tmp_path / "train.jsonl"),
        validation_data=str(tmp_path / "validation.jsonl"),
        model_dir=str(tmp_path / name),
        batch_size=4,
        max_length=24,
        max_steps=2,
        # A budget the two steps never reach: measuring is allowed.
        max_minutes=300,
        checkpoint_every_steps=2,
        log_every_steps=1,
    )
    values.update(overrides)
    return finetune.FinetuneConfig(**values).validate()


def test_auto_times_fine_tunings_own_step_the_fastest_wins_and_the_cache_serves(
    tmp_path, monkeypatch
):
    from test_autotune import FakeClock  # pylint: disable=g-import-not-at-top
    from test_hardware import AVX512_BF16_EPYC  # pylint: disable=g-import-not-at-top
    from test_hardware import _machine  # pylint: disable=g-import-not-at-top

    from tf_mlstm.auto import hardware  # pylint: disable=g-import-not-at-top
    from tf_mlstm.auto import measure  # pylint: disable=g-import-not-at-top

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # A CPU with bfloat16 instructions: four candidates, whose step costs are known.
    monkeypatch.setattr(hardware, "detect", lambda *args, **kwargs: _machine(AVX512_BF16_EPYC))
    clock = FakeClock()
    real_choose = measure.choose
    monkeypatch.setattr(
        measure, "choose", lambda *args, **kwargs: real_choose(*args, **{**kwargs, "clock": clock})
    )
    costs = {
        "float32/xla_on": 0.4,
        "float32/xla_off": 0.5,
        "mixed_bfloat16/xla_off": 0.2,
        "mixed_bfloat16/xla_on": 0.8,
    }
    built = []

    def candidate_step(runner, config, candidate, probe, scratch, use_gpus):
        del runner, config, scratch, use_gpus
        built.append((candidate.name, probe))

        def step():
            clock.now += costs[candidate.name]

        return step

    monkeypatch.setattr(Runner, "_candidate_step", candidate_step)
    config = _auto_config(tmp_path, "a", label_key="label,long")
    job = finetune_task.FinetuneTask(config)
    tuner = Runner(job, config)
    assert sorted(name for name, _ in built) == sorted(costs)
    shape = built[0][1].shape
    assert shape["task"] == "finetune" and shape["hidden_size"] == 16
    assert (shape["max_length"], shape["rows"], shape["outputs"]) == (24, 4, 2)
    assert built[0][1].units_per_step == 4 * 24
    # The fastest measured setting is the run's, in its model and its config file.
    assert (tuner.config.precision, tuner.config.jit_compile) == ("mixed_bfloat16", "false")
    assert job.config is tuner.config and tuner.model.encoder.compute_dtype == "bfloat16"
    assert tuner.auto.precision.how == "measured"
    assert tuner.auto.precision.rates["mixed_bfloat16/xla_off"] == pytest.approx(4 * 24 / 0.2)
    tuner.train()
    record = json.loads((tmp_path / "a" / FINETUNE_CONFIG_FILE).read_text())
    assert record["precision"] == "mixed_bfloat16" and record["jit_compile"] == "false"
    assert record["autotune"]["how"] == "measured"
    assert "autotune" not in json.loads((tmp_path / "a" / "config.json").read_text())

    # The same shape again: from the cache, nothing built or timed.
    again = _auto_config(tmp_path, "b", label_key="label,long")
    assert Runner(finetune_task.FinetuneTask(again), again).auto.precision.how == "cached"
    assert len(built) == 4
    # The cache key names the task: the language model's step of the same sizes is another
    # entry, never served fine-tuning's rates.
    entries = json.loads((tmp_path / "cache" / "tf_mlstm" / "autotune.json").read_text())
    assert [json.loads(key)["task"] for key in entries] == ["finetune"]
    lm = LanguageModelTask(read_config(str(tmp_path / "base")), [], []).measurement(4)
    machine = _machine(AVX512_BF16_EPYC)
    lm_key = measure.cache_key(machine, True, {**lm.shape, "replicas": 1})
    assert lm_key not in entries and len(entries) == 1


@pytest.mark.parametrize(
    "overrides, kind, outputs",
    [
        (dict(), "binary", 1),
        (dict(label_key="label,long", head_hidden=4, head_dropout=0.5), "multilabel", 2),
        (dict(label_map="0:bad,1:good,2:okay", lm_loss_weight=0.5), "multiclass", 3),
    ],
)
def test_the_timed_fine_tuning_step_is_the_real_step_on_synthetic_rows(
    tmp_path, overrides, kind, outputs
):
    config = _auto_config(tmp_path, "run", precision="float32", jit_compile="false", **overrides)
    probe = finetune_task.FinetuneTask(config).measurement(4)
    assert probe.shape["outputs"] == outputs and probe.shape["softmax"] == (kind == "multiclass")
    scratch = dataclasses.replace(config, model_dir=str(tmp_path / "probe"), max_minutes=0.0)
    task = probe.make_task(scratch)
    runner = Runner(task, scratch, strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
    assert task.kind == kind and runner.model.classifier.units == outputs
    losses = [runner.train_step()[0][0] for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[0] > 0
    # Nothing is written to the real run's folder, nor beside the inputs.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "train.jsonl", "validation.jsonl"]


def test_the_input_layout_names_the_keys_alike_however_they_are_spelled(task, tmp_path):
    """A run started by the binary (list flags) resumes exactly from Python (strings)."""
    config = _config(task, tmp_path / "run")
    layouts = []
    for spell in (",".join, list):
        job = finetune_task.FinetuneTask(
            dataclasses.replace(
                config, label_key=spell(config.label_keys), text_key=spell(config.text_keys)
            )
        )
        job.prepare(types.SimpleNamespace(num_workers=1))
        layouts.append(job.input_layout())
    assert layouts[0] == layouts[1]
    assert layouts[0]["label_key"] == ["label"]
