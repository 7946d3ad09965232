"""The choice of features and C: cross-validation where the validation split is small.

A validation split of a few hundred rows is a noisy judge: among several
feature sets and nine Cs it picks whatever happened to fit its rows. Below
`selection_lib.CV_MAX_VALIDATION` validation rows, `tf-mlstm-transfer` chooses by
stratified K-fold cross-validation over train and validation together and
still fits the classifier on train.
"""

import dataclasses

import numpy as np
import pytest

from tf_mlstm.transfer import experiment
from tf_mlstm.transfer import features
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer.probe import fit as fit_lib
from tf_mlstm.transfer.probe import selection as selection_lib


def _labeled(labels):
    labels = np.asarray(labels)
    return labeled.LabeledData(
        source="synthetic",
        texts=[f"text {i}" for i in range(len(labels))],
        labels=labels,
        label_keys=("label",),
        places=[("synthetic", i + 1) for i in range(len(labels))],
        skipped={},
    )


def _misleading(seed=4, rows=320, held=24):
    """Features where unit 0 of `cell` carries the label, and a validation split that lies.

    The held-out rows are ones the informative unit gets wrong (label noise),
    so on them alone the noise features score better.
    """
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=rows)
    labels = (signal + 0.7 * rng.normal(size=rows) > 0).astype(np.int64)
    data = {kind: rng.normal(size=(rows, 8)) for kind in features.FEATURE_KINDS}
    data["cell"][:, 0] = signal
    wrong = np.flatnonzero((signal > 0) != labels)
    val_rows = np.sort(
        np.concatenate(
            [
                rng.choice(wrong[labels[wrong] == 0], held // 2, replace=False),
                rng.choice(wrong[labels[wrong] == 1], held // 2, replace=False),
            ]
        )
    )
    train_rows = np.setdiff1d(np.arange(rows), val_rows)
    feats = {
        "train": {k: v[train_rows] for k, v in data.items()},
        "val": {k: v[val_rows] for k, v in data.items()},
    }
    return feats, labels[train_rows], labels[val_rows]


def test_folds_are_stratified_and_every_fit_part_has_every_class():
    labels = np.array([0] * 30 + [1] * 12 + [2] * 3)
    folds = selection_lib.cross_validation_folds(labels, 5, seed=0)
    assert len(folds) == 3  # the rarest class has 3 rows
    held = np.concatenate([h for _, h in folds])
    assert sorted(held.tolist()) == list(range(len(labels)))  # every row held out once
    for fit_rows, held_rows in folds:
        assert set(labels[fit_rows]) == {0, 1, 2}
        assert np.intersect1d(fit_rows, held_rows).size == 0
    assert selection_lib.cross_validation_folds(np.array([0] * 9 + [1]), 5) is None
    several = np.array([[1, 0], [0, 1], [1, 1], [0, 0]] * 5)
    assert len(selection_lib.cross_validation_folds(several, 5)) == 5


def test_cross_validation_chooses_what_a_small_lying_validation_split_would_not():
    feats, train_y, val_y = _misleading()
    kinds, trials = selection_lib.select_feature_kinds(
        feats["train"], train_y, feats["val"], val_y, 8, penalty="l2"
    )
    assert kinds != ("cell", "hidden")  # the validation rows alone chose noise
    pooled_y = np.concatenate([train_y, val_y])
    folds = selection_lib.cross_validation_folds(pooled_y, 5, seed=0)
    kinds, trials = selection_lib.select_feature_kinds(
        feats["train"], train_y, feats["val"], val_y, 8, folds=folds, penalty="l2"
    )
    assert kinds == ("cell", "hidden")
    first = trials[0]
    assert first["kinds"] == ["cell", "hidden"] and first["folds"] == 5
    assert first["cv_accuracy"] > 0.7 and first["C"] in fit_lib.DEFAULT_C_GRID
    assert first["cv_accuracy"] == max(first["per_C"].values())
    assert all(t["cv_accuracy"] < first["cv_accuracy"] for t in trials[1:])


def _config(**overrides):
    return experiment.TransferConfig(
        model_dir="m", output_dir="o", train_data="t.csv", features="auto", **overrides
    )


def test_transfer_chooses_by_cross_validation_below_the_validation_size_and_fits_on_train():
    feats, train_y, val_y = _misleading()
    data = experiment.make_data(
        _config(), None, {"train": _labeled(train_y), "val": _labeled(val_y)}, held_out=False
    )
    kinds, selection, c_choice, splits, classifier, sweep, _ = experiment.fit_features(
        _config(), feats, data, 8
    )
    assert kinds == ("cell", "hidden") and selection["by"] == "cross_validation"
    assert c_choice["folds"] == 5 and c_choice["rows"] == len(train_y) + len(val_y)
    assert [row["C"] for row in sweep] == [c_choice["C"]] == [classifier.report.C]
    # The classifier is fitted on the training rows alone.
    assert splits["train"][0].shape[0] == len(train_y)
    # --cv_folds=0: the validation split alone chooses (here, wrongly).
    kinds, selection, c_choice, *_ = experiment.fit_features(_config(cv_folds=0), feats, data, 8)
    assert kinds != ("cell", "hidden") and selection["by"] == "validation" and c_choice is None


def test_a_large_validation_split_chooses_alone(monkeypatch):
    feats, train_y, val_y = _misleading()
    monkeypatch.setattr(selection_lib, "CV_MAX_VALIDATION", len(val_y))
    data = experiment.make_data(
        _config(), None, {"train": _labeled(train_y), "val": _labeled(val_y)}, held_out=False
    )
    assert experiment.choice_folds(_config(), data) is None
    monkeypatch.setattr(selection_lib, "CV_MAX_VALIDATION", len(val_y) + 1)
    assert len(experiment.choice_folds(_config(), data)) == 5


@pytest.mark.parametrize("folds", [-1, 1])
def test_cv_folds_must_be_0_or_2_or_more(folds):
    with pytest.raises(ValueError, match="cv_folds must be 0"):
        dataclasses.replace(_config(), cv_folds=folds).validate()


def test_the_words_alone_sweep_further_up_than_model_features():
    config = _config()
    assert experiment.c_grid_of(config, ("tfidf",)) == fit_lib.WORDS_C_GRID
    assert max(fit_lib.WORDS_C_GRID) == 10 * max(fit_lib.DEFAULT_C_GRID)
    assert fit_lib.WORDS_C_GRID[: len(fit_lib.DEFAULT_C_GRID)] == fit_lib.DEFAULT_C_GRID
    assert experiment.c_grid_of(config, ("cell", "tfidf")) == fit_lib.DEFAULT_C_GRID
    assert experiment.c_grid_of(config, ("cell",)) == fit_lib.DEFAULT_C_GRID
    given = _config(c_grid=(0.5, 2.0))  # the user's grid is the user's
    assert experiment.c_grid_of(given, ("tfidf",)) == (0.5, 2.0)


@pytest.mark.slow
def test_the_ngrams_are_scikit_learns_standard_tfidf_token_for_token(shared_data):
    """`ngrams.fit_vocabulary` on SST-2's training sentences gives what
    `TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)` gives: every n-gram, same values."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from tf_mlstm.transfer import ngrams

    train = labeled.read_labeled(str(shared_data / "sst" / "train.csv"), ("sentence",), "label")
    test = labeled.read_labeled(str(shared_data / "sst" / "test.csv"), ("sentence",), "label")
    vocabulary, fitted = ngrams.fit_vocabulary(train.texts)
    standard = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(train.texts)
    assert vocabulary.terms == tuple(standard.get_feature_names_out())
    assert len(vocabulary) > 80_000  # every n-gram, those of one text too
    np.testing.assert_allclose(vocabulary.idf, standard.idf_, rtol=1e-12)
    for ours, texts in ((fitted, train.texts), (vocabulary.transform(test.texts), test.texts)):
        difference = ours - standard.transform(texts)
        assert abs(difference).max() < 1e-12


def test_a_multi_label_task_chooses_each_labels_c_by_cross_validation_on_small_validation():
    rng = np.random.default_rng(7)
    rows = 240
    signal = rng.normal(size=(rows, 2))
    labels = np.stack(
        [signal[:, 0] + 0.3 * rng.normal(size=rows) > 0, signal[:, 1] + rng.normal(size=rows) > 0],
        axis=1,
    ).astype(np.int64)
    cell = rng.normal(size=(rows, 8))
    cell[:, :2] = signal
    train, val = slice(0, 200), slice(200, rows)
    feats = {"train": {"cell": cell[train]}, "val": {"cell": cell[val]}}

    def split(part):
        return dataclasses.replace(_labeled(labels[part]), label_keys=("a", "b"))

    config = dataclasses.replace(_config(label_key=("a", "b")), features="cell")
    data = experiment.make_data(
        config, split(train), {"train": split(train), "val": split(val)}, held_out=False
    )
    kinds, selection, c_choice, _, classifier, sweep, _ = experiment.fit_features(
        config, feats, data, 8
    )
    assert selection is None and c_choice["by"] == "cross_validation"
    assert c_choice["folds"] == 5 and c_choice["rows"] == rows
    # Each label's C is its best mean over the held-out folds, and the classifier's.
    assert set(c_choice["per_C"]) == {"a", "b"} and len(c_choice["C"]) == 2
    for name, c in zip(("a", "b"), c_choice["C"]):
        per_c = c_choice["per_C"][name]
        assert c == max(per_c, key=per_c.get) and set(per_c) == set(fit_lib.DEFAULT_C_GRID)
    assert classifier.report.C == c_choice["C"]
    assert {row["C"] for row in sweep} == set(c_choice["C"])
    # --cv_folds=0: validation chooses each label's C.
    *_, c_choice, _, classifier, _, _ = experiment.fit_features(
        dataclasses.replace(config, cv_folds=0), feats, data, 8
    )
    assert c_choice is None and set(classifier.report.C) <= set(fit_lib.DEFAULT_C_GRID)


def _multilabel(labels, keys=("a", "b")):
    labels = np.asarray(labels)
    return labeled.LabeledData(
        source="synthetic",
        texts=[f"text {i}" for i in range(len(labels))],
        labels=labels,
        label_keys=keys,
        places=[("synthetic", i + 1) for i in range(len(labels))],
        skipped={},
    )


def test_multilabel_folds_pool_rare_label_combinations():
    # Two common combinations, one of two rows, one of one row: stratified by
    # combination alone, two folds at most (SemEval's case); pooled, five.
    labels = np.array([[1, 0]] * 40 + [[0, 1]] * 30 + [[1, 1]] * 2 + [[0, 0]] * 1)
    folds = selection_lib.cross_validation_folds(labels, 5, seed=0)
    assert len(folds) == 5
    held = np.concatenate([h for _, h in folds])
    assert sorted(held.tolist()) == list(range(len(labels)))
    for fit_rows, held_rows in folds:
        assert all(set(column) == {0, 1} for column in labels[fit_rows].T)
        # The common combinations are still stratified: about 8 and 6 held out per fold.
        assert np.sum(held_rows < 40) in (7, 8, 9)
        assert np.sum((held_rows >= 40) & (held_rows < 70)) == 6
    # Single-label folds still follow the rarest class (every class in every fit part).
    assert len(selection_lib.cross_validation_folds(np.array([0] * 30 + [1] * 2), 5)) == 2


def test_threshold_at_rate_calls_that_share_positive():
    scores = np.array([0.9, 0.1, 0.5, 0.7, 0.3])
    for rate, count in ((0.0, 0), (0.4, 2), (0.5, 2), (0.61, 3), (1.0, 5)):
        assert np.sum(scores > labeled.threshold_at_rate(scores, rate)) == count


def test_multilabel_thresholds_call_the_cross_validated_share_positive():
    """A small validation split's F1-best cut moves from draw to draw; the share of
    rows called positive, measured on every fold's held-out rows, is what the
    final fit keeps (docs/transfer.md: SemEval E-c)."""
    rng = np.random.default_rng(3)
    rows, held = 400, 60
    signal = rng.normal(size=(rows, 2))
    labels = (signal + rng.normal(size=(rows, 2)) > [0.6, 1.0]).astype(np.int64)
    feats = {kind: rng.normal(size=(rows, 8)) for kind in ("cell",)}
    feats["cell"][:, :2] = signal
    split = {
        "train": {"cell": feats["cell"][held:]},
        "val": {"cell": feats["cell"][:held]},
    }
    config = dataclasses.replace(
        _config(label_key=("a", "b"), threshold_metric="f1"), features="cell"
    )
    data = experiment.make_data(
        config,
        None,
        {"train": _multilabel(labels[held:]), "val": _multilabel(labels[:held])},
        held_out=False,
    )
    kinds, _, c_choice, splits, classifier, sweep, _ = experiment.fit_features(
        config, split, data, 8
    )
    assert c_choice["folds"] == 5 and len(c_choice["positive_rate"]) == 2
    val_x, val_y = splits["val"]
    probabilities = classifier.predict_proba(val_x)
    called = probabilities > np.asarray(classifier.head.head_spec.thresholds)
    for k, rate in enumerate(c_choice["positive_rate"]):
        assert 0 < rate < 1
        assert np.sum(called[:, k]) == int(round(rate * held))
        row = next(r for r in sweep if r["label"] == "ab"[k] and r["C"] == classifier.report.C[k])
        assert row["threshold"] == classifier.head.head_spec.thresholds[k]
        # Not the F1-best cut of the 60 validation rows, which calls another share.
        best = labeled.choose_threshold(probabilities[:, k], val_y[:, k], "f1")
        assert np.sum(probabilities[:, k] > best) != np.sum(called[:, k])
