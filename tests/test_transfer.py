"""Sentiment transfer: featurizer invariance, the L1 sweep, classifier files, the binaries."""

import csv
import dataclasses
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from _models import random_model
from _models import tiny_trained_model_dir
from _models import write_untrained_model_dir
from tf_mlstm.cli import classify as classify_cli
from tf_mlstm.models import featurize
from tf_mlstm.rundir import load_trained_model
from tf_mlstm.train import hardware
from tf_mlstm.transfer import experiment
from tf_mlstm.transfer import features
from tf_mlstm.transfer import logistic

# Lengths chosen to cross the 256-byte window and to mix short and long.
TEXTS = [
    "Great film.",
    "An utterly dull, overlong mess. " * 12,
    "",
    "caf\u00e9 cr\u00e8me \u2014 superb \U0001f600",
    "ok " * 150,
    "Bad.",
    "The plot meanders but the acting is first rate throughout. " * 3,
]


@pytest.fixture(scope="module")
def small_model():
    return random_model(seed=3)


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _synthetic(seed, rows=200, width=50, unit=17, noise=0.3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, width)).astype(np.float32) * rng.uniform(0.5, 3.0, size=width)
    labels = (x[:, unit] / np.std(x[:, unit]) + noise * rng.normal(size=rows) > 0).astype(np.int64)
    return x, labels


# === Features ===


def test_parse_feature_kinds():
    assert features.parse_feature_kinds("mean, cell") == ("cell", "mean")
    assert features.parse_feature_kinds("max,cell,max") == ("cell", "max")
    assert features.parse_feature_kinds("AUTO") == features.AUTO
    with pytest.raises(ValueError, match="unknown feature kinds \\['last'\\]"):
        features.parse_feature_kinds("cell,last")
    with pytest.raises(ValueError, match="'auto' cannot be combined"):
        features.parse_feature_kinds("auto,cell")
    with pytest.raises(ValueError, match="no feature kinds"):
        features.parse_feature_kinds(" , ")


@pytest.mark.slow
def test_features_do_not_depend_on_batch_or_order(small_model):
    alone = features.TextFeaturizer(small_model, batch_size=1)(TEXTS, progress=False)
    together = features.TextFeaturizer(small_model, batch_size=len(TEXTS))(TEXTS, progress=False)
    pairs = features.TextFeaturizer(small_model, batch_size=2)(TEXTS[::-1], progress=False)
    for kind in features.FEATURE_KINDS:
        assert alone[kind].shape == (len(TEXTS), 16)
        np.testing.assert_allclose(together[kind], alone[kind], atol=1e-5, err_msg=kind)
        np.testing.assert_allclose(pairs[kind][::-1], alone[kind], atol=1e-5, err_msg=kind)
    # The featurizer returns what featurize_ids gives one text on its own.
    ids, valid, _ = featurize.texts_to_ids(tf.constant([TEXTS[1]]), 256)
    direct = featurize.featurize_ids(small_model, ids, valid, 256)
    for kind in features.FEATURE_KINDS:
        np.testing.assert_allclose(alone[kind][1], direct[kind][0], atol=1e-6)
    # Different texts give different features (the order was restored, not lost).
    assert not np.allclose(alone["cell"][0], alone["cell"][5])


def test_mixed_precision_features_track_float32(tmp_path):
    model_dir, _ = write_untrained_model_dir(tmp_path / "m")
    exact, _ = load_trained_model(str(model_dir))
    fast, _ = load_trained_model(str(model_dir), precision="mixed_bfloat16")
    assert fast.compute_dtype == "bfloat16" and fast.mlstm.variable_dtype == "float32"
    want = features.TextFeaturizer(exact, batch_size=4)(TEXTS, progress=False)
    got = features.TextFeaturizer(fast, batch_size=4)(TEXTS, progress=False)
    for kind in features.FEATURE_KINDS:
        assert got[kind].dtype == np.float32, kind
        # bfloat16 keeps 8 bits of mantissa; the state drifts a little over the texts.
        np.testing.assert_allclose(got[kind], want[kind], atol=0.05, rtol=0.05, err_msg=kind)
    assert not np.array_equal(got["cell"], want["cell"])  # really computed in 16 bits


def test_featurizer_keeps_only_requested_kinds(small_model):
    out = features.TextFeaturizer(small_model, batch_size=4, kinds=("cell", "max"))(TEXTS[:3])
    assert sorted(out) == ["cell", "max"]
    both = features.concat_features(out, ("cell", "max"))
    assert both.shape == (3, 32)
    np.testing.assert_array_equal(both[:, 16:], out["max"])
    assert features.describe_feature(19, ("cell", "max"), 16) == ("max", 3)
    with pytest.raises(KeyError, match="were not computed"):
        features.concat_features(out, ("mean",))


def test_progress_bar_draws_on_request(capsys):
    bar = features.ProgressBar(3, 30, enabled=True, min_interval=0.0)
    bar.update(2, 20)
    bar.update(1, 10)
    bar.close()
    err = capsys.readouterr().err
    assert "3/3 texts" in err and err.endswith("\n")
    quiet = features.ProgressBar(3, 30, enabled=False)
    quiet.update(3, 30)
    quiet.close()
    assert capsys.readouterr().err == ""


# === Logistic regression ===


def test_fit_threshold_finds_the_cut_and_direction():
    values = np.array([0.1, 0.4, 0.35, 0.8, 0.9, 0.7])
    sign, threshold, accuracy = logistic.fit_threshold(values, np.array([0, 0, 0, 1, 1, 1]))
    assert (sign, accuracy) == (1, 1.0) and 0.4 < threshold < 0.7
    sign, threshold, accuracy = logistic.fit_threshold(values, np.array([1, 1, 1, 0, 0, 0]))
    assert (sign, accuracy) == (-1, 1.0) and 0.4 < threshold < 0.7
    # Equal values are never split.
    sign, threshold, accuracy = logistic.fit_threshold(np.ones(4), np.array([0, 1, 0, 1]))
    assert accuracy == 0.5 and not 0.999 < threshold < 1.001


def test_sweep_finds_the_informative_unit():
    x, labels = _synthetic(0)
    val_x, val_labels = _synthetic(1)
    test_x, test_labels = _synthetic(2)
    classifier, sweep = logistic.fit_logistic(
        x, labels, val_x, val_labels, ("cell",), 50, solver="liblinear", seed=0
    )
    assert [row["C"] for row in sweep] == sorted(logistic.DEFAULT_C_GRID)
    nonzero = [row["nonzero_weights"] for row in sweep]
    assert nonzero[0] == 0 and nonzero[-1] > 1
    assert classifier.top_units(3)[0]["index"] == 17
    assert classifier.neuron.index == 17 and classifier.neuron.sign == 1
    assert classifier.accuracy(test_x, test_labels) > 0.85
    assert classifier.neuron_accuracy(test_x, test_labels) > 0.85
    best = max(row["val_accuracy"] for row in sweep)
    assert classifier.C == min(row["C"] for row in sweep if row["val_accuracy"] == best)
    # saga agrees on the unit.
    saga, _ = logistic.fit_logistic(x, labels, val_x, val_labels, ("cell",), 50, solver="saga")
    assert saga.neuron.index == 17


def test_l2_penalty_keeps_every_weight_and_finds_the_unit():
    x, labels = _synthetic(0)
    val_x, val_labels = _synthetic(1)
    test_x, test_labels = _synthetic(2)
    dense, sweep = logistic.fit_logistic(x, labels, val_x, val_labels, ("cell",), 50, penalty="l2")
    assert all(row["nonzero_weights"] == 50 for row in sweep)
    assert dense.top_units(1)[0]["index"] == 17 and dense.neuron.index == 17
    assert dense.accuracy(test_x, test_labels) > 0.8  # 49 noise units share the weight
    # The default solver for l2 is lbfgs; liblinear fits the same model.
    assert logistic.resolve_solver("l2", "auto") == "lbfgs"
    assert logistic.resolve_solver("l1", "auto") == "liblinear"
    other, _ = logistic.fit_logistic(
        x, labels, val_x, val_labels, ("cell",), 50, penalty="l2", solver="liblinear"
    )
    assert other.C == dense.C
    np.testing.assert_allclose(other.weights, dense.weights, atol=0.02)
    with pytest.raises(ValueError, match="the lbfgs solver fits only the l2 penalty, not l1"):
        logistic.fit_logistic(x, labels, val_x, val_labels, ("cell",), 50, solver="lbfgs")
    with pytest.raises(ValueError, match="penalty must be one of"):
        logistic.fit_logistic(x, labels, val_x, val_labels, ("cell",), 50, penalty="l0")


def test_neuron_with_negative_sign_and_other_labels():
    x, labels = _synthetic(0)
    labels = np.where(labels == 1, 3, 7)  # unit 17 is high for label 3: the negative class
    classifier, _ = logistic.fit_logistic(x, labels, x, labels, ("hidden",), 50)
    assert classifier.classes == (3, 7)
    assert classifier.neuron.index == 17 and classifier.neuron.sign == -1
    assert set(classifier.predict(x)) <= {3, 7}
    assert classifier.accuracy(x, labels) > 0.9


def test_labels_must_be_binary_and_known():
    x, labels = _synthetic(0)
    with pytest.raises(ValueError, match="exactly two label values, found \\[0, 1, 2\\]"):
        logistic.fit_logistic(
            x, labels + (labels > 0) * np.arange(200) % 2, x, labels, ("cell",), 50
        )
    with pytest.raises(ValueError, match="val.csv: labels \\[5\\] are not among"):
        logistic.encode_labels([0, 5], (0, 1), what="val.csv")


def test_label_threshold_turns_scores_into_two_classes(tmp_path):
    path = tmp_path / "stars.jsonl"
    rows = [
        {"reviewText": "Broke in a week.", "overall": 1.0},
        {"reviewText": "Meh.", "overall": 3.0},
        {"reviewText": "Works well.", "overall": 4.0},
        {"reviewText": "Love it.", "overall": "5"},
        {"reviewText": "No stars here."},
        {"reviewText": "Odd stars.", "overall": "many"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = experiment.load_labeled(str(path), ("reviewText",), "overall", threshold=4)
    assert data.texts == ["Broke in a week.", "Meh.", "Works well.", "Love it."]
    assert data.labels.tolist() == [0, 0, 1, 1]
    assert data.skipped["total"] == 2
    assert data.skipped["by_reason"] == {"missing_rating": 1, "bad_rating": 1}
    # Without a threshold the stars are four classes, which the fit refuses.
    classes = experiment.load_labeled(str(path), ("reviewText",), "overall").labels
    with pytest.raises(ValueError, match="exactly two label values, found \\[1, 3, 4, 5\\]"):
        logistic.encode_labels(classes, what=str(path))
    with pytest.raises(ValueError, match="--label_threshold must be a finite number"):
        experiment.TransferConfig(
            model_dir="m", train=str(path), output_dir="o", label_threshold=float("nan")
        ).validate()


def _kinds_with_signal(rng, rows, signals):
    """Noise for every kind, with `signals` (kind -> [rows]) in unit 0."""
    out = {kind: rng.normal(size=(rows, 8)) for kind in features.FEATURE_KINDS}
    for kind, values in signals.items():
        out[kind][:, 0] = values
    return out


def test_select_feature_kinds_picks_the_informative_group():
    rng = np.random.default_rng(9)
    # The label is the sign of a + b: a (a hidden-state statistic) and b (a
    # cell-state statistic) each classify 3 texts in 4; together, all.
    a, b = rng.normal(size=(2, 600))
    labels = (a + b > 0).astype(np.int64)
    data = _kinds_with_signal(rng, 600, {"max": a, "cell_min": b})
    train = {kind: values[:400] for kind, values in data.items()}
    val = {kind: values[400:] for kind, values in data.items()}
    kinds, trials = logistic.select_feature_kinds(train, labels[:400], val, labels[400:], 8)
    assert kinds == ("mean", "max", "min", "std", "cell_mean", "cell_max", "cell_min")
    assert [t["kinds"] for t in trials[:3]] == [list(group) for group in features.FEATURE_GROUPS]
    # Adding the final states to the two statistics groups was tried, and did
    # not help: the choice scored best of every combination tried.
    assert trials[-1]["kinds"] == list(features.FEATURE_KINDS)
    chosen = [t["val_accuracy"] for t in trials if t["kinds"] == list(kinds)]
    assert chosen == [max(t["val_accuracy"] for t in trials)]
    # One informative group alone is chosen alone.
    data = _kinds_with_signal(rng, 600, {"cell": 2 * a})
    labels = (a > 0).astype(np.int64)
    train = {kind: values[:400] for kind, values in data.items()}
    val = {kind: values[400:] for kind, values in data.items()}
    kinds, _ = logistic.select_feature_kinds(
        train, labels[:400], val, labels[400:], 8, penalty="l2"
    )
    assert kinds == ("cell", "hidden")


def test_splits_and_subsamples_are_seeded_and_balanced():
    labels = np.array([0] * 90 + [1] * 10)
    kept, held = logistic.stratified_split(labels, 0.1, seed=4)
    assert len(held) == 10 and np.sum(labels[held]) == 1
    assert sorted(np.concatenate([kept, held]).tolist()) == list(range(100))
    np.testing.assert_array_equal(held, logistic.stratified_split(labels, 0.1, seed=4)[1])
    sub = logistic.balanced_subsample(labels, 10, seed=1)
    assert len(sub) == 10 and np.sum(labels[sub]) == 5
    assert np.sum(labels[logistic.balanced_subsample(labels, 30, seed=1)]) == 10
    assert len(logistic.balanced_subsample(labels, 1000, seed=1)) == 100
    assert experiment.parse_num_labeled("all, 100,10") == (10, 100, experiment.ALL)
    with pytest.raises(ValueError, match="integers >= 2 or 'all'"):
        experiment.parse_num_labeled("10,ten")


def test_classifier_file_round_trip(tmp_path):
    x, labels = _synthetic(0)
    classifier, _ = logistic.fit_logistic(x, labels, x, labels, ("cell", "max"), 25)
    path = str(tmp_path / "classifier.json")
    classifier.save(path)
    loaded = logistic.LogisticClassifier.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(x), classifier.predict_proba(x))
    assert loaded.neuron == classifier.neuron
    assert (loaded.feature_kinds, loaded.classes, loaded.C) == (
        ("cell", "max"),
        (0, 1),
        classifier.C,
    )
    record = json.loads(open(path, encoding="utf-8").read())
    assert record["neuron"]["kind"] == "cell" and record["neuron"]["unit"] == 17
    assert loaded.describe(30) == ("max", 5)


def test_classifier_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="classifier file not found: .*nope.json"):
        logistic.LogisticClassifier.load(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="bad.json: not a tf-mlstm-transfer classifier file"):
        logistic.LogisticClassifier.load(str(bad))
    x, labels = _synthetic(0)
    classifier, _ = logistic.fit_logistic(x, labels, x, labels, ("cell",), 50)
    record = json.loads(classifier.to_json())
    record["hidden_size"] = 40
    with pytest.raises(ValueError, match="short.json: classifier mean has shape \\(50,\\)"):
        logistic.LogisticClassifier.from_json(json.dumps(record), source="short.json")
    del record["weights"]
    with pytest.raises(ValueError, match="incomplete classifier file"):
        logistic.LogisticClassifier.from_json(json.dumps(record))


# === The binaries on the tiny trained model ===


def _write_reviews(path, rows, seed):
    """A small labeled CSV whose sentiment is easy: a positive or negative word."""
    rng = np.random.default_rng(seed)
    good = ["great", "wonderful", "superb", "lovely"]
    bad = ["awful", "terrible", "boring", "dreadful"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "sentence"])
        for i in range(rows):
            label = i % 2
            word = rng.choice(good if label else bad)
            writer.writerow(
                [label, f"The movie was {word}. {'Really ' * int(rng.integers(3))}{word}!"]
            )


@pytest.fixture(scope="module")
def review_csvs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reviews")
    paths = {}
    for split, rows, seed in (("train", 48, 0), ("val", 16, 1), ("test", 16, 2)):
        paths[split] = str(folder / f"{split}.csv")
        _write_reviews(paths[split], rows, seed)
    return paths


@pytest.mark.slow
def test_transfer_and_classify_binaries(tmp_path_factory, tmp_path, review_csvs):
    model_dir = tiny_trained_model_dir(tmp_path_factory)
    out = tmp_path / "sst"
    command = [
        sys.executable,
        "-m",
        "tf_mlstm.cli.transfer",
        f"--model_dir={model_dir}",
        f"--train={review_csvs['train']}",
        f"--val={review_csvs['val']}",
        f"--test={review_csvs['test']}",
        "--text_key=sentence",
        "--label_key=label",
        f"--output_dir={out}",
        "--features=cell,mean",
        "--num_labeled=10,all",
        "--batch_size=16",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    # One positive or negative word per review: at most one of the 16 test
    # reviews may be misread.
    assert summary["test_accuracy"] >= 15 / 16
    assert summary["feature_kinds"] == ["cell", "mean"]
    results = json.loads((out / "results.json").read_text())
    assert results["test_accuracy"] == summary["test_accuracy"]
    # --precision defaults to auto; the results record what this machine chose.
    auto, _ = hardware.resolve_precision("auto", hardware.detect())
    assert results["config"]["precision"] == auto
    assert [row["num_labeled"] for row in results["num_labeled"]] == [10, 48]
    assert results["data"]["train"]["examples"] == 48
    assert len(results["c_sweep"]) == len(logistic.DEFAULT_C_GRID)
    for name in ("classifier.json", "neuron_histogram.png", "accuracy_vs_labeled.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "neuron_histogram.png").read_bytes()[:4] == b"\x89PNG"

    # tf-mlstm-classify in-process on a JSONL file, and the CSV it writes.
    jsonl = tmp_path / "new.jsonl"
    jsonl.write_text('{"text": "A wonderful film."}\n{"other": 1}\n{"text": "Boring."}\n')
    config = classify_cli.ClassifyConfig(
        model_dir=str(model_dir),
        classifier=str(out / "classifier.json"),
        input=str(jsonl),
        output=str(tmp_path / "scores.csv"),
    ).validate()
    lines, probabilities, labels = classify_cli.classify(config)
    assert lines == [1, 3] and probabilities.shape == (2,)
    # The same texts through the transfer classifier directly.
    classifier = logistic.LogisticClassifier.load(str(out / "classifier.json"))
    model, _ = load_trained_model(str(model_dir))
    x = features.concat_features(
        features.TextFeaturizer(model)(["A wonderful film.", "Boring."]), classifier.feature_kinds
    )
    np.testing.assert_allclose(probabilities, classifier.predict_proba(x), atol=1e-6)
    assert labels.tolist() == classifier.predict(x).tolist()

    # Text lines on stdin (as --input=-), and the CSV written for them.
    stdin_config = dataclasses.replace(config, input="-")
    lines, again, labels_again = classify_cli.classify(
        stdin_config, stdin=io.StringIO("A wonderful film.\n\nBoring.\n")
    )
    assert lines == [1, 3]
    np.testing.assert_allclose(again, probabilities, atol=1e-6)
    out_csv = io.StringIO()
    classify_cli.write_csv(out_csv, lines, again, labels_again)
    rows = list(csv.DictReader(out_csv.getvalue().splitlines()))
    assert list(rows[0]) == ["index", "line", "probability", "label"]
    assert [row["index"] for row in rows] == ["0", "1"]
    np.testing.assert_allclose([float(r["probability"]) for r in rows], probabilities, atol=2e-6)
    assert [int(r["label"]) for r in rows] == labels.tolist()


def _error_lines(stderr):
    # absl's error lines; TensorFlow's C++ lines logged before absl starts read "E0000 00:00:...".
    return [line for line in stderr.splitlines() if line[:1] == "E" and line[:5] != "E0000"]


@pytest.mark.slow
def test_binaries_fail_with_one_line(tmp_path, review_csvs):
    model_dir, _ = write_untrained_model_dir(tmp_path / "m")
    transfer = [sys.executable, "-m", "tf_mlstm.cli.transfer", f"--model_dir={model_dir}"]
    transfer += [f"--output_dir={tmp_path / 'out'}", "--text_key=sentence", "--label_key=stars"]
    done = subprocess.run(
        transfer + [f"--train={review_csvs['train']}"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    errors = _error_lines(done.stderr)
    assert len(errors) == 1, done.stderr[-3000:]
    assert "train.csv: no usable record with text ['sentence'] and label 'stars'" in errors[0]
    assert "missing_label" in errors[0]

    classify = [sys.executable, "-m", "tf_mlstm.cli.classify", f"--model_dir={model_dir}"]
    classify += [f"--classifier={tmp_path / 'none.json'}", "--input=-", "--output=-"]
    done = subprocess.run(
        classify, input="Fine.\n", capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    errors = _error_lines(done.stderr)
    assert len(errors) == 1 and "classifier file not found: " in errors[0], done.stderr[-3000:]
    assert done.stdout == ""


def test_run_transfer_errors(tmp_path, review_csvs):
    model_dir, _ = write_untrained_model_dir(tmp_path / "m")
    config = experiment.TransferConfig(
        model_dir=str(model_dir),
        train=str(tmp_path / "missing.csv"),
        output_dir=str(tmp_path / "out"),
        text_keys=("sentence",),
    )
    with pytest.raises(FileNotFoundError, match="input file not found: .*missing.csv"):
        experiment.run_transfer(config)
    with pytest.raises(ValueError, match="--precision must be one of .* got 'float64'"):
        experiment.run_transfer(dataclasses.replace(config, precision="float64"))
    with pytest.raises(ValueError, match="--penalty must be one of .* got 'elasticnet'"):
        experiment.run_transfer(dataclasses.replace(config, penalty="elasticnet"))
    with pytest.raises(ValueError, match="--solver=lbfgs fits only --penalty=l2, not l1"):
        experiment.run_transfer(dataclasses.replace(config, solver="lbfgs"))
    with pytest.raises(ValueError, match="--val_fraction must be in \\(0, 1\\)"):
        experiment.run_transfer(
            experiment.TransferConfig(
                model_dir=str(model_dir), train=review_csvs["train"], output_dir="x", val_fraction=1
            )
        )
    # The training run's own folder: its results.json is not the transfer's to replace.
    (model_dir / "results.json").write_text('{"step": 20}')
    with pytest.raises(
        ValueError,
        match=r"--output_dir=.*/m is a model folder \(it holds config.json\); writing here "
        r"would replace the run's results.json: give a folder of its own, e.g. .*/m/transfer",
    ):
        experiment.run_transfer(
            dataclasses.replace(config, train=review_csvs["train"], output_dir=str(model_dir))
        )
    assert json.loads((model_dir / "results.json").read_text()) == {"step": 20}
    one_class = tmp_path / "one.csv"
    one_class.write_text("label,sentence\n1,good\n1,fine\n")
    with pytest.raises(ValueError, match="one.csv: binary classification needs exactly two"):
        experiment.run_transfer(
            experiment.TransferConfig(
                model_dir=str(model_dir),
                train=str(one_class),
                output_dir=str(tmp_path / "out"),
                text_keys=("sentence",),
            )
        )


@pytest.mark.slow
def test_run_transfer_without_val_holds_out_train(tmp_path, review_csvs):
    model_dir, _ = write_untrained_model_dir(tmp_path / "m")
    results = experiment.run_transfer(
        experiment.TransferConfig(
            model_dir=str(model_dir),
            train=review_csvs["train"],
            test=review_csvs["test"],
            output_dir=str(tmp_path / "out"),
            text_keys=("sentence",),
            features="auto",
            max_train_examples=40,
            max_eval_examples=10,
            precision="mixed_bfloat16",
            penalty="l2",
            progress=False,
        )
    )
    assert results["config"]["precision"] == "mixed_bfloat16"
    assert results["config"]["penalty"] == "l2" and results["config"]["solver"] == "auto"
    assert results["nonzero_weights"] == results["features"]  # l2 keeps every weight
    assert results["data"]["train"]["examples"] == 40
    assert results["data"]["train"]["fit_examples"] == 36
    assert results["data"]["val"] == {"held_out_of_train": True, "examples": 4}
    assert results["data"]["test"]["examples"] == 10
    assert results["feature_selection"]["chosen"] == results["feature_kinds"]
    assert results["num_labeled"] == []
    assert "accuracy_vs_labeled" not in results["files"]
    assert os.path.exists(results["files"]["neuron_histogram"])
