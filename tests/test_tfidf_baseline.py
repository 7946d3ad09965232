"""tools/tfidf_baseline.py: the bag-of-words reference reads, splits and scores like transfer."""

import csv
import json
import pathlib
import sys

import _forkserver
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import tfidf_baseline  # noqa: E402

_WORDS = {0: ["dull", "awful", "boring"], 1: ["fine", "okay", "average"], 2: ["great", "superb"]}


def _write(path, rows, header):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def _three_classes(path, n, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        label = int(rng.integers(3))
        words = list(rng.choice(_WORDS[label], 2)) + list(rng.choice(["the", "film", "was"], 3))
        rows.append([label, " ".join(rng.permutation(words))])
    return _write(path, rows, ["label", "sentence"])


def _config(**overrides):
    config = {
        "train_data": "",
        "validation_data": "",
        "test_data": "",
        "text_keys": ("sentence",),
        "label_keys": ("label",),
        "label_map": "",
        "label_threshold": None,
        "validation_fraction": 0.2,
        "max_train_examples": 0,
        "max_eval_examples": 0,
        "threshold_metric": "accuracy",
        "c_grid": (1.0, 16.0),
        "seed": 0,
    }
    config.update(overrides)
    return config


def test_three_classes_are_learned_and_scored_with_the_shared_metrics(tmp_path):
    result = tfidf_baseline.run_baseline(
        _config(
            train_data=_three_classes(tmp_path / "train.csv", 300, 0),
            test_data=_three_classes(tmp_path / "test.csv", 90, 1),
        )
    )
    assert result["task"] == "multiclass"
    assert result["examples"] == {"train": 240, "val": 60, "test": 90}  # stratified 20% held out
    assert result["test"]["accuracy"] == 1.0  # each class has words no other class uses
    assert set(result["test"]["per_class"]) == {"0", "1", "2"}


def test_a_label_map_merges_classes(tmp_path):
    result = tfidf_baseline.run_baseline(
        _config(
            train_data=_three_classes(tmp_path / "train.csv", 300, 0),
            test_data=_three_classes(tmp_path / "test.csv", 90, 1),
            label_map="0:neg,1:neg,2:pos",
        )
    )
    assert result["task"] == "binary"
    assert set(result["test"]["per_class"]) == {"neg", "pos"}
    assert result["test"]["accuracy"] == 1.0


def test_several_labels_get_a_regression_and_a_threshold_each(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(400):
        a, b = (int(x) for x in rng.integers(2, size=2))
        words = ["angry"] * a + ["happy"] * b + list(rng.choice(["it", "was", "so"], 3))
        rows.append([a, b, " ".join(rng.permutation(words))])
    train = _write(tmp_path / "train.csv", rows, ["anger", "joy", "Tweet"])
    result = tfidf_baseline.run_baseline(
        _config(
            train_data=train, test_data=train, text_keys=("Tweet",), label_keys=("anger", "joy")
        )
    )
    assert result["task"] == "multilabel"
    assert len(result["C"]) == len(result["thresholds"]) == 2
    assert result["test"]["jaccard"] == 1.0 and result["test"]["micro_f1"] == 1.0


def test_the_binary_prints_one_json_line_and_refuses_bad_flags(tmp_path):
    train = _three_classes(tmp_path / "train.csv", 200, 0)
    tool = [sys.executable, str(REPO / "tools" / "tfidf_baseline.py"), f"--train_data={train}"]
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    done = _forkserver.run(
        [*tool, "--text_key=sentence"], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["val"]["accuracy"] == 1.0
    done = _forkserver.run(
        [*tool, "--label_map=0:a"], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "0:a" in done.stderr


@pytest.mark.parametrize(
    "flag,named",
    [
        ("--c_grid=x", "--c_grid"),
        ("--c_grid=0,1", "--c_grid"),
        ("--test_fraction=1", "--test_fraction"),
        ("--test_fraction=0.4 --test_data=TRAIN", "--test_fraction"),
    ],
)
def test_a_bad_flag_is_a_usage_error(flag, named, tmp_path):
    train = _three_classes(tmp_path / "train.csv", 20, 0)
    done = _forkserver.run(
        [
            sys.executable,
            str(REPO / "tools" / "tfidf_baseline.py"),
            f"--train_data={train}",
            *flag.replace("TRAIN", train).split(),
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert done.returncode == 1
    assert named in done.stderr and "Traceback" not in done.stderr


def test_compare_fits_the_reference_and_the_project_words_on_the_same_rows(tmp_path):
    """--compare: scikit-learn's standard recipe and transfer's words-only fit, same splits."""
    config = _config(
        train_data=_three_classes(tmp_path / "train.csv", 400, 0),
        test_fraction=0.25,
        validation_fraction=0.2,
    )
    result = tfidf_baseline.run_compare(config)
    assert result["examples"] == {"train": 240, "val": 60, "test": 100}
    reference, project = result["reference"], result["project"]
    assert reference["C"] in tfidf_baseline.REFERENCE_C_GRID
    assert project["kinds"] == ["tfidf"] and project["task"] == "multiclass"
    # 60 validation rows: transfer chose C by cross-validation over train + validation.
    assert project["C_by"] == "5-fold cross-validation"
    assert reference["test"]["accuracy"] == project["test"]["accuracy"] == 1.0
    assert result["difference"] == {
        "split": "test",
        "metric": "accuracy",
        "project_minus_reference": 0.0,
    }
    # The held-out test rows are the same for every seed-0 reader of these flags.
    train, val, test = tfidf_baseline.read_splits(config)
    assert (len(train), len(val), len(test)) == (240, 60, 100)
    assert not set(test.places) & set(train.places + val.places)


def test_the_three_tools_keep_the_same_subsample_and_held_out_rows(tmp_path):
    """--max_train_examples / --max_eval_examples with one --seed: the baseline, transfer and
    fine-tuning read the same rows, so their numbers are on the same splits."""
    from tf_mlstm.tasks import finetune as finetune_task
    from tf_mlstm.transfer import experiment
    from tf_mlstm.transfer import finetune

    train = _three_classes(tmp_path / "train.csv", 300, 0)
    test = _three_classes(tmp_path / "test.csv", 200, 1)
    limits = dict(max_train_examples=120, max_eval_examples=50)
    base_train, base_val, base_test = tfidf_baseline.read_splits(
        _config(train_data=train, test_data=test, validation_fraction=0.1, seed=3, **limits)
    )
    assert (len(base_train), len(base_val), len(base_test)) == (108, 12, 50)
    transfer = experiment._read_data(
        experiment.TransferConfig(
            model_dir="m",
            train_data=train,
            test_data=test,
            output_dir="o",
            text_key=("sentence",),
            seed=3,
            **limits,
        )
    ).splits
    tune = finetune_task.FinetuneTask(
        finetune.FinetuneConfig(
            init_model_dir="m",
            model_dir="o",
            train_data=train,
            test_data=test,
            text_key="sentence",
            seed=3,
            **limits,
        ).validate()
    )
    tune._load_data()
    for name, rows in (("train", base_train), ("val", base_val), ("test", base_test)):
        assert transfer[name].texts == rows.texts
        assert tune.splits["validation" if name == "val" else name].texts == rows.texts
    # The subset is seeded, in file order, and another seed keeps other rows.
    lines = [line for _, line in base_test.places]
    assert lines == sorted(set(lines)) and len(lines) == 50
    other = tfidf_baseline.read_splits(_config(train_data=train, test_data=test, seed=4, **limits))[
        2
    ]
    assert other.texts != base_test.texts
