"""The labeled-data module: reading, label maps, stratified splits, metrics, thresholds."""

import csv
import json

import numpy as np
import pytest
from sklearn import metrics as sk_metrics

from tf_mlstm import errors
from tf_mlstm.transfer import labeled


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


# === Reading ===


def test_reader_takes_csv_and_jsonl_with_several_label_keys(tmp_path):
    jsonl = _jsonl(
        tmp_path / "e.jsonl",
        [
            {"text": "one", "a": 1, "b": 0},
            {"text": "two", "a": 0},  # no b: skipped and counted
            {"text": "three", "a": 0, "b": "pos"},
            {"text": "four", "a": "many", "b": 1},  # not a label: skipped and counted
        ],
    )
    data = labeled.read_labeled(jsonl, ["text"], ["a", "b"])
    assert data.multilabel and data.label_keys == ("a", "b")
    assert data.texts == ["one", "three"]
    assert data.labels.tolist() == [[1, 0], [0, 1]] and data.labels.dtype == np.int64
    assert [line for _, line in data.places] == [1, 3]
    assert data.skipped["by_reason"] == {"bad_label": 1, "missing_label": 1}
    assert data.indicator().dtype == np.float32
    assert data.summary()["label_counts"] == {"a": 1, "b": 1}
    # The same in CSV, where an empty field is a missing label.
    table = _csv(
        tmp_path / "e.csv",
        ["ID", "Tweet", "a", "b"],
        [[1, "one", 1, 0], [2, "two", 0, ""], [3, "three", 0, 1]],
    )
    data = labeled.read_labeled(table, ["Tweet"], ["a", "b"])
    assert data.texts == ["one", "three"] and data.labels.tolist() == [[1, 0], [0, 1]]
    # One key: the classes as the data holds them, sorted.
    data = labeled.read_labeled(table, ["Tweet"], "ID")
    assert data.labels.tolist() == [1, 2, 3] and data.classes() == (1, 2, 3)
    assert not data.multilabel


def test_label_map_turns_star_values_into_named_classes(tmp_path):
    spec = "1:negative,2:negative,3:neutral,4:positive,5:positive"
    stars = _jsonl(
        tmp_path / "stars.jsonl",
        [
            {"reviewText": "Broke.", "overall": 1.0},
            {"reviewText": "Fine.", "overall": 3},
            {"reviewText": "Love it.", "overall": "5"},
            {"reviewText": "Nice.", "overall": 4.0},
        ],
    )
    data = labeled.read_labeled(stars, ["reviewText"], "overall", label_map=spec)
    assert data.labels.tolist() == ["negative", "neutral", "positive", "positive"]
    assert data.class_order == ("negative", "neutral", "positive")
    assert data.classes() == ("negative", "neutral", "positive")
    # Classes keep the map's order, and absent ones are left out.
    ordered = "5:top,4:top,3:mid,9:never,1:low"
    data = labeled.read_labeled(stars, ["reviewText"], "overall", label_map=ordered)
    assert data.classes() == ("top", "mid", "low")
    # A Python caller reads the argument's name; a binary's user, the flag's.
    with pytest.raises(ValueError, match=r"stars.jsonl:2: 'overall' is 3, which label_map"):
        labeled.read_labeled(stars, ["reviewText"], "overall", label_map="5:top,4:top,1:low")
    with errors.naming_flags(), pytest.raises(ValueError, match=r"is 3, which --label_map does"):
        labeled.read_labeled(stars, ["reviewText"], "overall", label_map="5:top,4:top,1:low")
    # Text values match case-insensitively; integer class names give integer classes.
    table = _csv(tmp_path / "t.csv", ["sentence", "mood"], [["a", "Pos"], ["b", "neg "]])
    data = labeled.read_labeled(table, ["sentence"], "mood", label_map="neg:0,pos:1")
    assert data.labels.tolist() == [1, 0] and data.classes() == (0, 1)
    assert data.indicator().tolist() == [[1.0], [0.0]]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("1:negative,5positive", r"label_map entry 2 \('5positive'\) is not VALUE:CLASS"),
        ("1:negative,:positive", r"label_map entry 2 \(':positive'\) is not VALUE:CLASS"),
        ("1:negative,5:", r"label_map entry 2 \('5:'\) is not VALUE:CLASS"),
        ("1:a,2:b,1.0:c", r"label_map names the value '1.0' twice \(entries 1 and 3\)"),
        ("1:same,2:same", r"label_map=1:same,2:same names one class"),
    ],
)
def test_bad_label_map_is_one_clear_error(spec, message):
    with pytest.raises(ValueError, match=message):
        labeled.parse_label_map(spec)


def test_labels_the_settings_do_not_allow_name_file_and_line(tmp_path):
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "one", "a": 1}, {"text": "two", "a": 2}])
    with pytest.raises(ValueError, match=r"d.jsonl:2: label 'a' is 2; each label key here takes"):
        labeled.read_labeled(data, ["text"], ["a"], binary=True)
    both = _jsonl(tmp_path / "m.jsonl", [{"t": "x", "a": 1, "b": 0}, {"t": "y", "a": 0, "b": 3}])
    with pytest.raises(ValueError, match=r"m.jsonl:2: label 'b' is 3; each label key here takes"):
        labeled.read_labeled(both, ["t"], ["a", "b"])
    # A class the training data does not have, in a validation or test file.
    test = labeled.read_labeled(data, ["text"], "a")
    with pytest.raises(ValueError, match=r"d.jsonl:2: label 2 is not among the training classes"):
        labeled.encode_classes(test, (0, 1))
    assert labeled.encode_classes(test, (2, 1)).tolist() == [1, 0]
    with pytest.raises(ValueError, match="label map and a label threshold cannot be combined"):
        labeled.read_labeled(data, ["text"], "a", threshold=1, label_map="1:x,2:y")
    with pytest.raises(ValueError, match=r"d.jsonl: no usable record with text \['text'\] and"):
        labeled.read_labeled(data, ["text"], "stars")


def test_threshold_cuts_each_label_key(tmp_path):
    data = _jsonl(
        tmp_path / "r.jsonl",
        [{"t": "a", "x": 1, "y": 9.5}, {"t": "b", "x": 7, "y": 2}, {"t": "c", "x": "?", "y": 3}],
    )
    both = labeled.read_labeled(data, ["t"], ["x", "y"], threshold=5)
    assert both.labels.tolist() == [[0, 1], [1, 0]]
    assert both.skipped["by_reason"] == {"bad_rating": 1}


# === Splits and subsamples ===


def test_stratified_split_keeps_class_proportions_and_is_seeded():
    labels = np.array(["a"] * 60 + ["b"] * 30 + ["c"] * 10, object)
    kept, held = labeled.stratified_split(labels, 0.2, seed=3)
    assert len(held) == 20 and sorted(np.concatenate([kept, held]).tolist()) == list(range(100))
    assert {c: int(np.sum(labels[held] == c)) for c in "abc"} == {"a": 12, "b": 6, "c": 2}
    np.testing.assert_array_equal(held, labeled.stratified_split(labels, 0.2, seed=3)[1])
    assert not np.array_equal(held, labeled.stratified_split(labels, 0.2, seed=4)[1])
    # Rows are allotted in proportion (scikit-learn's): a rare class stays in the kept rows.
    rare = np.array([0] * 98 + [1] * 2)
    kept, held = labeled.stratified_split(rare, 0.1, seed=0)
    assert len(held) == 10 and set(rare[kept]) == {0, 1}
    with pytest.raises(ValueError, match=r"must be in \(0, 1\)"):
        labeled.stratified_split(labels, 1.0, seed=0)
    with pytest.raises(ValueError, match="1 example is too few to hold out a validation"):
        labeled.stratified_split(np.array([1]), 0.5, seed=0)
    # A class of one row is pooled with the others for the split.
    kept, held = labeled.stratified_split(np.array([0, 1, 1, 1, 2, 2]), 0.5, seed=0)
    assert len(held) == 3 and len(kept) == 3


def test_multilabel_split_is_stratified_by_label_combination():
    rng = np.random.default_rng(0)
    labels = (rng.random((200, 3)) < [0.5, 0.2, 0.05]).astype(np.int64)
    labels[0] = [1, 1, 1]  # a combination with one row: pooled with the other rare ones
    kept, held = labeled.stratified_split(labels, 0.25, seed=1)
    assert len(held) == 50 and len(np.intersect1d(kept, held)) == 0
    np.testing.assert_allclose(labels[held].mean(axis=0), labels.mean(axis=0), atol=0.04)


def test_subsamples_are_seeded_and_balanced():
    labels = np.array([0] * 90 + [1] * 10)
    sub = labeled.balanced_subsample(labels, 10, seed=1)
    assert len(sub) == 10 and np.sum(labels[sub]) == 5
    assert np.sum(labels[labeled.balanced_subsample(labels, 30, seed=1)]) == 10
    assert len(labeled.balanced_subsample(labels, 1000, seed=1)) == 100
    np.testing.assert_array_equal(
        labeled.random_subsample(100, 7, seed=2), labeled.random_subsample(100, 7, seed=2)
    )
    assert len(labeled.random_subsample(100, 0, seed=2)) == 100


# === Metrics ===


def test_class_metrics_equal_scikit_learn():
    true = np.array([0, 0, 1, 1, 2, 2, 2, 1])
    predicted = np.array([0, 1, 1, 1, 2, 0, 2, 2])
    got = labeled.class_metrics(true, predicted, ("neg", "neu", "pos"))
    assert got["accuracy"] == pytest.approx(5 / 8)
    assert got["macro_f1"] == pytest.approx(sk_metrics.f1_score(true, predicted, average="macro"))
    per_class = sk_metrics.f1_score(true, predicted, average=None)
    assert [got["per_class"][c]["f1"] for c in ("neg", "neu", "pos")] == pytest.approx(per_class)
    assert got["per_class"]["pos"]["support"] == 3 and "f1" not in got
    binary = labeled.class_metrics(np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0]), (0, 1))
    assert binary["f1"] == pytest.approx(2 / 3)


def test_label_metrics_equal_scikit_learn():
    true = np.array([[0, 1], [1, 0], [1, 1], [1, 0], [0, 0]])
    predicted = np.array([[0, 1], [0, 0], [1, 1], [1, 1], [0, 0]])
    got = labeled.label_metrics(true, predicted, ["a", "b"], thresholds=[0.3, 0.5])
    assert got["jaccard"] == pytest.approx(
        sk_metrics.jaccard_score(true, predicted, average="samples", zero_division=1.0)
    )
    assert got["jaccard"] == pytest.approx((1 + 0 + 1 + 0.5 + 1) / 5)
    assert got["micro_f1"] == pytest.approx(sk_metrics.f1_score(true, predicted, average="micro"))
    assert got["macro_f1"] == pytest.approx(sk_metrics.f1_score(true, predicted, average="macro"))
    assert got["exact_match"] == pytest.approx(3 / 5)
    assert got["accuracy"] == pytest.approx(8 / 10)
    assert got["per_label"]["a"] == {
        "precision": 1.0,
        "recall": pytest.approx(2 / 3),
        "f1": pytest.approx(0.8),
        "accuracy": pytest.approx(0.8),
        "support": 3,
        "threshold": 0.3,
    }
    one = labeled.label_metrics(true[:, :1], predicted[:, :1], ["a"])
    assert one == {"examples": 5, "accuracy": pytest.approx(0.8), "f1": pytest.approx(0.8)}


# === Thresholds ===


def _best_by_brute_force(scores, labels, metric):
    """Every candidate cut tried one by one: the O(N^2) reference."""
    values = np.unique(scores)
    candidates = np.concatenate([[values[0] - 1], (values[1:] + values[:-1]) / 2, [values[-1]]])
    best = -1.0
    for cut in candidates:
        predicted = scores > cut
        if metric == "accuracy":
            value = np.mean(predicted == labels)
        else:
            value = sk_metrics.f1_score(labels, predicted, zero_division=0)
        best = max(best, value)
    return best


@pytest.mark.parametrize("metric", labeled.THRESHOLD_METRICS)
def test_chosen_threshold_is_the_best_cut(metric):
    rng = np.random.default_rng(7)
    for _ in range(5):
        labels = (rng.random(60) < 0.3).astype(np.int64)
        scores = np.round(np.clip(0.3 * labels + rng.random(60) * 0.7, 0, 1), 2)  # with ties
        threshold = labeled.choose_threshold(scores, labels, metric)
        predicted = scores > threshold
        if metric == "accuracy":
            value = np.mean(predicted == labels)
        else:
            value = sk_metrics.f1_score(labels, predicted)
        assert value == pytest.approx(_best_by_brute_force(scores, labels, metric))


def test_thresholds_prefer_half_and_midpoints():
    probabilities = np.array([[0.1, 0.9], [0.4, 0.2], [0.6, 0.7], [0.8, 0.3]])
    labels = np.array([[0, 1], [1, 0], [1, 1], [1, 0]])
    np.testing.assert_allclose(labeled.choose_thresholds(probabilities, labels), [0.25, 0.5])
    # One class only: predict it everywhere.
    assert labeled.choose_threshold([0.2, 0.7], [0, 0]) == 0.7
    assert labeled.choose_threshold([0.2, 0.7], [1, 1]) < 0.2
    with pytest.raises(ValueError, match="metric must be one of"):
        labeled.choose_threshold([0.2], [1], "auc")


def test_threshold_choice_scales_to_many_rows():
    # An N x N candidate matrix would need 8 * 300,000^2 bytes (720 GB).
    rng = np.random.default_rng(0)
    labels = (rng.random(300_000) < 0.5).astype(np.int64)
    scores = np.clip(0.2 * labels + 0.8 * rng.random(300_000), 0, 1)
    assert 0.1 < labeled.choose_threshold(scores, labels, "f1") < 0.9
