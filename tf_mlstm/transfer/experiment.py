"""The transfer experiment behind `tf-mlstm-transfer`.

`run_transfer` featurizes labeled splits, chooses feature kinds and C, fits the logistic
regression, finds the neurons, and writes `results.json`, `classifier.json` and the plots.
The labels decide the task: binary, K classes, or several keys (one regression per label).
"""

import dataclasses
import os
import time

import numpy as np
from absl import logging

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm import rundir
from tf_mlstm.config import TransferConfig
from tf_mlstm.models import language_model
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.transfer import feature_cache
from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer import ngrams as ngrams_lib
from tf_mlstm.transfer import plots
from tf_mlstm.transfer.probe import fit as fit_lib
from tf_mlstm.transfer.probe import logistic
from tf_mlstm.transfer.probe import selection as selection_lib
from tf_mlstm.transfer.probe import threshold as threshold_lib

RESULTS_FILE = rundir.RESULTS_FILE
CLASSIFIER_FILE = "classifier.json"
NEURON_PLOT = "neuron_histogram.png"
CURVE_PLOT = "accuracy_vs_labeled.png"
ALL = 0
"""`num_labeled` value meaning every training example."""


def parse_num_labeled(spec: str) -> tuple[int, ...]:
    """Parses a `--num_labeled` list such as "10,100,1000,all".

    Args:
      spec: comma-separated positive counts and/or "all"; "" for none.

    Returns:
      A sorted tuple of distinct counts, `ALL` (0) standing for "all" last.

    Raises:
      ValueError: an entry that is neither a positive integer nor "all".
    """
    counts = set()
    for piece in (p.strip().lower() for p in spec.split(",")):
        if not piece:
            continue
        if piece == "all":
            counts.add(ALL)
        elif piece.isdigit() and int(piece) >= 2:
            counts.add(int(piece))
        else:
            raise errors.InvalidValueError(
                f"{errors.setting_name('num_labeled')} entries must be integers >= 2 or 'all', "
                f"got {piece!r}"
            )
    return tuple(sorted(counts - {ALL})) + ((ALL,) if ALL in counts else ())


# === Steps ===


@dataclasses.dataclass
class _Data:
    """The labeled splits of one run: `splits` "train" (the fit rows), "val", maybe "test"."""

    train: labeled.LabeledData  # all training rows read (after max_train_examples)
    splits: dict
    classes: tuple  # the training classes (single-label), or the label keys
    val_held_out: bool


def _read(config, spec, limit):
    return labeled.read_labeled(
        spec,
        config.text_keys,
        config.label_keys,
        config.label_threshold,
        config.label_map,
        limit=limit,
        seed=config.seed,
    )


def _read_data(config):
    """Reads and subsamples the splits, holds out validation, checks the labels."""
    train = _read(config, config.train_data, config.max_train_examples)
    splits = {
        name: _read(config, spec, config.max_eval_examples)
        for name, spec in (("val", config.validation_data), ("test", config.test_data))
        if spec
    }
    held_out = "val" not in splits
    fit = train
    if held_out:
        fit, splits["val"] = labeled.split_off(train, config.validation_fraction, config.seed)
        logging.info(
            "No %s: validating on %d rows held out of the training data",
            errors.setting_name("validation_data"),
            len(splits["val"]),
        )
    return make_data(config, train, {"train": fit, **splits}, held_out)


def make_data(config, train, splits, held_out) -> _Data:
    """The `_Data` of splits already read (dict "train", "val", maybe "test"), classes checked."""
    return _Data(train, splits, _training_classes(config, splits), held_out)


def _training_classes(config, splits):
    """The classes of the fit rows (or the label keys), checked before featurizing."""
    fit = splits["train"]
    if fit.multilabel:
        for key, column in zip(fit.label_keys, fit.labels.T):
            if len(np.unique(column)) < 2:
                raise errors.InvalidValueError(
                    f"{config.train_data}: label {key!r} is {int(column[0])} on every training "
                    "row; each label needs both 0 and 1"
                )
        return fit.label_keys
    classes = fit.classes()
    if len(classes) < 2:
        raise errors.InvalidValueError(
            f"{config.train_data}: a classifier needs two or more classes, found {list(classes)}"
        )
    missing = [c for c in fit.class_order or () if c not in classes]
    if missing:
        logging.warning(
            "Classes %s of %s have no training example: left out",
            missing,
            errors.setting_name("label_map"),
        )
    for name in ("val", "test"):
        if name in splits:
            labeled.encode_classes(splits[name], classes)
    return classes


def featurize(
    config, model, data, fingerprint=None
) -> tuple[dict, dict, ngrams_lib.NgramVocabulary | None]:
    """Features of every split: (dict split -> dict kind -> [N, H], timings, vocabulary).

    The n-gram vocabulary sees train's fit rows alone; each split's features are cached at once.
    """
    computed, with_ngrams = features_lib.kinds_to_compute(
        features_lib.parse_feature_kinds(config.features)
    )
    featurizer = None
    if computed:
        featurizer = features_lib.TextFeaturizer(model, config.batch_size, config.window, computed)
    cache = None
    if computed and config.feature_cache and fingerprint is not None:
        cache = feature_cache.FeatureCache.for_model(
            model, fingerprint, config.precision, config.window
        )
    features, timings, vocabulary = {}, {}, None
    if with_ngrams:
        start = time.monotonic()
        vocabulary, fitted = ngrams_lib.fit_vocabulary(data.splits["train"].texts)
        features = {
            name: {
                ngrams_lib.NGRAM_KIND: fitted if name == "train" else vocabulary.transform(s.texts)
            }
            for name, s in data.splits.items()
        }
        timings[ngrams_lib.NGRAM_KIND] = {
            "seconds": round(time.monotonic() - start, 3),
            "terms": len(vocabulary),
        }
        logging.info(
            "TF-IDF of %d word n-grams (of %d training texts) in %.1f s",
            len(vocabulary),
            len(data.splits["train"]),
            timings[ngrams_lib.NGRAM_KIND]["seconds"],
        )
    for name, split in data.splits.items():
        features.setdefault(name, {})
        if featurizer is None:
            continue
        start = time.monotonic()
        cached = cache.get(split.texts, computed, name) if cache else None
        if cached is not None:
            features[name].update(cached)
            timings[name] = {"seconds": round(time.monotonic() - start, 3), "cached": True}
            continue
        computed_features = featurizer(split.texts, progress=config.progress)
        features[name].update(computed_features)
        seconds = time.monotonic() - start
        if cache:
            cache.put(split.texts, computed_features, name)
        chars = int(features_lib.text_lengths(split.texts).sum())
        timings[name] = {
            "seconds": round(seconds, 3),
            "chars_per_second": round(chars / max(seconds, 1e-9)),
        }
        logging.info(
            "Featurized %d %s texts (%d chars) in %.1f s", len(split.texts), name, chars, seconds
        )
    return features, timings, vocabulary


def c_grid_of(config, kinds) -> tuple[float, ...]:
    """The C grid for `kinds`: `--c_grid`; by default, for the word n-grams alone, a longer one."""
    if tuple(kinds) == features_lib.NGRAM_GROUP and config.c_grid == fit_lib.DEFAULT_C_GRID:
        return fit_lib.WORDS_C_GRID
    return config.c_grid


def _fit_kwargs(config, data, vocabulary=None, kinds=()):
    return {
        "ngrams": vocabulary,
        "c_grid": c_grid_of(config, kinds),
        "penalty": config.penalty,
        "solver": config.solver,
        "seed": config.seed,
        "classes": data.classes,
        "threshold_metric": config.threshold_metric,
        "progress": config.progress,
    }


def choice_folds(config, data) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The cross-validation folds that choose features and C, or None: validation chooses.

    Folds below `selection_lib.CV_MAX_VALIDATION` validation rows; the fit uses fit rows alone.
    """
    rows = len(data.splits["val"])
    if config.cv_folds < 2 or rows >= selection_lib.CV_MAX_VALIDATION:
        return None
    labels = np.concatenate(
        [np.asarray(data.splits["train"].labels), np.asarray(data.splits["val"].labels)]
    )
    folds = selection_lib.cross_validation_folds(labels, config.cv_folds, config.seed)
    if folds is None:
        logging.info("Too few rows of some class for cross-validation: validation chooses")
    return folds


def _choose_kinds(config, features, data, hidden, vocabulary, folds=None):
    """The feature kinds: `--features`, or chosen on validation (or `folds`) for `auto`."""
    spec = features_lib.parse_feature_kinds(config.features)
    if spec not in (features_lib.AUTO, features_lib.AUTO_NGRAMS):
        return spec, None
    groups = features_lib.FEATURE_GROUPS
    if spec == features_lib.AUTO_NGRAMS:
        groups += (features_lib.NGRAM_GROUP,)
    kinds, trials = selection_lib.select_feature_kinds(
        features["train"],
        data.splits["train"].labels,
        features["val"],
        data.splits["val"].labels,
        hidden,
        groups=groups,
        folds=folds,
        c_grid_of=lambda kinds: c_grid_of(config, kinds),
        **_fit_kwargs(config, data, vocabulary),
    )
    how = "on validation" if folds is None else f"by {len(folds)}-fold cross-validation"
    logging.info("Chose features %s %s", ",".join(kinds), how)
    return kinds, {"chosen": list(kinds), "trials": trials}


def _choose_c(config, features, data, hidden, vocabulary, kinds, selection, folds):
    """(c_grid of the final fit, record of the C cross-validation chose or None)."""
    if folds is None:
        return c_grid_of(config, kinds), None
    trial = None
    if selection is not None:
        trial = next(t for t in selection["trials"] if tuple(t["kinds"]) == tuple(kinds))
    if trial is not None:
        checked = {
            "score": trial.get("cv_accuracy", trial.get("cv_jaccard")),
            "C": trial["C"],
            **({"positive_rate": trial["positive_rate"]} if "positive_rate" in trial else {}),
            "per_C": trial["per_C"],
            "not_converged": [],  # the selection's trial warns already
        }
    else:
        checked = selection_lib.cross_validate(
            selection_lib.pool_rows(features["train"], features["val"]),
            np.concatenate(
                [np.asarray(data.splits["train"].labels), np.asarray(data.splits["val"].labels)]
            ),
            kinds,
            hidden,
            folds,
            **_fit_kwargs(config, data, vocabulary, kinds),
        )
    record = {
        "by": "cross_validation",
        "folds": len(folds),
        "rows": int(sum(len(held) for _, held in folds)),
        **checked,
    }
    if checked["C"] is None:
        return c_grid_of(config, kinds), record
    if isinstance(checked["C"], tuple):  # multi-label: a C per label
        logging.info(
            "C per label %s by %d-fold cross-validation (held-out Jaccard %.4f)",
            checked["C"],
            len(folds),
            checked["score"],
        )
        return tuple(sorted(set(checked["C"]))), record
    logging.info(
        "C=%g by %d-fold cross-validation (held-out score %.4f)",
        checked["C"],
        len(folds),
        checked["score"],
    )
    return (checked["C"],), record


def fit_features(config, features, data, hidden, vocabulary=None) -> tuple:
    """Chooses the feature kinds (`--features`, or on validation) and fits the classifier.

    Args:
      config, data: the `TransferConfig`, and the `_Data` of the splits.
      features: dict split -> dict kind -> features (`featurize`).
      hidden, vocabulary: the model's units, and the `tfidf` kind's `NgramVocabulary` or None.

    Returns:
      (kinds, selection, c_choice, splits, classifier, sweep, seconds): selection
      and c_choice may be None; splits maps split -> (x, labels).
    """
    folds = choice_folds(config, data)
    kinds, selection = _choose_kinds(config, features, data, hidden, vocabulary, folds)
    c_grid, c_choice = _choose_c(
        config, features, data, hidden, vocabulary, kinds, selection, folds
    )
    if selection is not None:
        selection["by"] = "validation" if folds is None else "cross_validation"
    splits = {
        name: (features_lib.concat_features(features[name], kinds), split.labels)
        for name, split in data.splits.items()
    }
    started = time.monotonic()
    label_c = c_choice["C"] if c_choice and isinstance(c_choice["C"], tuple) else None
    label_rate = c_choice.get("positive_rate") if label_c is not None else None
    classifier, sweep = fit_lib.fit_logistic(
        *splits["train"],
        *splits["val"],
        kinds,
        hidden,
        label_c=label_c,
        label_rate=label_rate,
        **dict(_fit_kwargs(config, data, vocabulary), c_grid=c_grid),
    )
    return kinds, selection, c_choice, splits, classifier, sweep, time.monotonic() - started


def _labeled_curve(config, full, splits, data, hidden):
    """Refits on subsamples of train, one per `num_labeled` entry."""
    x, labels = splits["train"]
    metric = full.score_name
    curve = []
    for requested in config.num_labeled:
        if requested == ALL or requested >= len(labels):
            classifier, rows = full, len(labels)
        else:
            if full.head.head_spec.kind == MULTILABEL:
                subset = labeled.random_subsample(len(labels), requested, config.seed)
                if any(len(np.unique(column)) < 2 for column in labels[subset].T):
                    logging.warning("%d labeled examples miss a label's 0 or 1: skipped", requested)
                    continue
            else:
                subset = labeled.balanced_subsample(labels, requested, config.seed)
            classifier, sweep = fit_lib.fit_logistic(
                x[subset],
                labels[subset],
                *splits["val"],
                full.head.feature_kinds,
                hidden,
                title=f"{len(subset)} labeled examples ({','.join(full.head.feature_kinds)})",
                **_fit_kwargs(config, data, full.ngrams, full.head.feature_kinds),
            )
            rows = len(subset)
        if curve and curve[-1]["num_labeled"] == rows:
            continue
        row = {
            "num_labeled": rows,
            "C": classifier.report.C,
            "nonzero_weights": classifier.nonzero_weights,
        }
        if classifier is not full:
            row["not_converged"] = sorted({r["C"] for r in sweep if not r["converged"]})
        for name, (split_x, split_y) in splits.items():
            if name != "train":
                row[f"{name}_{metric}"] = classifier.score(split_x, split_y)
        curve.append(row)
        logging.info("%d labeled examples: %s", rows, row)
    return curve


def _write_outputs(config, classifier, splits, curve, staged):
    """Writes classifier.json and the plots into `staged`; returns their final paths by name."""
    files = {"classifier": os.path.join(config.output_dir, CLASSIFIER_FILE)}
    classifier.save(staged.path(files["classifier"]))
    files.update(_write_plots(config, classifier, splits, curve, staged))
    return files


def _write_plots(config, classifier, splits, curve, staged):
    """Draws the neuron histograms (test, else val) and the labeled-examples curve."""
    split = "test" if "test" in splits else "val"
    x, labels = splits[split]
    files = {}
    neurons, spec = classifier.report.neurons, classifier.head.head_spec
    if neurons:  # none on word n-grams alone (results.json's no_neuron)
        files["neuron_histogram"] = os.path.join(config.output_dir, NEURON_PLOT)
        path = staged.path(files["neuron_histogram"])
    if spec.kind == BINARY and neurons:
        neuron = classifier.neuron
        kind, unit = classifier.describe(neuron.index)
        plots.neuron_histogram(
            path,
            threshold_lib.column(x, neuron.index),
            labels,
            spec.classes,
            neuron.threshold,
            title=f"unit {unit} ({kind}), {split} accuracy "
            f"{classifier.neuron_accuracy(x, labels):.3f}",
        )
    elif neurons:
        targets = classifier.targets(labels)
        panels = []
        for k, (name, neuron) in enumerate(zip(classifier.output_names, neurons)):
            kind, unit = classifier.describe(neuron.index)
            title = f"{name}: unit {unit} ({kind})"
            panels.append(
                (title, threshold_lib.column(x, neuron.index), targets[:, k], neuron.threshold)
            )
        plots.one_against_rest(path, panels, split)
    if curve:
        metric = f"{split}_{classifier.score_name}"
        files["accuracy_vs_labeled"] = os.path.join(config.output_dir, CURVE_PLOT)
        plots.accuracy_curve(
            staged.path(files["accuracy_vs_labeled"]),
            [row["num_labeled"] for row in curve],
            [row[metric] for row in curve],
            ylabel=metric.replace("_", " "),
        )
    return files


def _results(data, classifier, splits):
    """The results.json fields that describe the fitted classifier and its scores."""
    spec, neurons = classifier.head.head_spec, classifier.report.neurons
    results = {
        "task": spec.kind,
        ("labels" if spec.kind == MULTILABEL else "classes"): list(spec.classes),
        "C": classifier.report.C,
        "metrics": {name: classifier.metrics(x, y) for name, (x, y) in splits.items()},
        "nonzero_weights": classifier.nonzero_weights,
        "features": classifier.num_features,
        "top_units": classifier.top_units(10),
        "neurons": classifier.neuron_report(splits),
    }
    for name in ("train", "val", "test"):
        results[f"{name}_accuracy"] = classifier.accuracy(*splits[name]) if name in splits else None
    if spec.kind == MULTILABEL:
        results["thresholds"] = dict(zip(spec.classes, spec.thresholds))
    if not neurons:
        results["no_neuron"] = classifier.no_neuron
        logging.info("%s.", classifier.no_neuron.capitalize())
    if spec.kind == BINARY:
        results["neuron"] = None
    if spec.kind == BINARY and neurons:
        neuron = {
            key: value
            for key, value in results["neurons"][0].items()
            if key != "class" and not key.endswith("_balanced_accuracy")
        }
        for name in ("train", "val", "test"):
            neuron[f"{name}_accuracy"] = (
                classifier.neuron_accuracy(*splits[name]) if name in splits else None
            )
        results["neuron"] = neuron
    fit_rows = len(data.splits["train"])
    results["data"] = {
        "train": {**data.train.summary(), "fit_examples": fit_rows},
        "val": {"held_out_of_train": data.val_held_out, "examples": len(data.splits["val"])},
        **{
            name: split.summary()
            for name, split in data.splits.items()
            if name != "train" and not (name == "val" and data.val_held_out)
        },
    }
    return results


def _warnings(sweep, selection, curve, majority, c_choice=None):
    """What results.json must not let pass silently, each logged once as a warning."""
    found = []
    if not majority["better"]:
        found.append(
            f"the classifier is no better than always predicting the majority "
            f"({majority['majority_prediction']}) on validation: {majority['metric']} "
            f"{majority['classifier']:.4f} against {majority['majority']:.4f}"
        )
    unconverged = sorted({row["C"] for row in sweep if not row["converged"]})
    if unconverged:
        found.append(
            f"the fit stopped at the iteration cap before converging for C in {unconverged} "
            "(c_sweep)"
        )
    for trial in (selection or {}).get("trials", ()):
        if trial["not_converged"]:
            found.append(
                f"feature selection: {','.join(trial['kinds'])} did not converge for C in "
                f"{trial['not_converged']}"
            )
    if c_choice and c_choice["not_converged"]:
        found.append(f"cross-validation: did not converge for C in {c_choice['not_converged']}")
    for row in curve:
        if row.get("not_converged"):
            found.append(
                f"num_labeled {row['num_labeled']}: did not converge for C in "
                f"{row['not_converged']}"
            )
    for line in found:
        logging.warning("%s", line)
    return found


def run_transfer(config: TransferConfig) -> dict:
    """Runs the experiment `config` describes and writes its outputs.

    Args:
      config: a `TransferConfig`.

    Returns:
      The results dict (also written to `output_dir/results.json`).

    Raises:
      FileNotFoundError: a missing model or input file.
      ValueError: a bad setting, or data without usable labeled records.
    """
    config.validate()
    rundir.check_not_run_dir(config.output_dir, "output_dir")
    started = time.monotonic()
    model = language_model.MLSTMLanguageModel.from_run(config.model_dir, precision=config.precision)
    # The model features come from, for the feature cache, classify and export.
    fingerprint = rundir.weights_checksum(model.weights)
    data = _read_data(config)
    features, timings, vocabulary = featurize(config, model, data, fingerprint)
    kinds, selection, c_choice, splits, classifier, sweep, fit_seconds = fit_features(
        config, features, data, model.hidden_size, vocabulary
    )
    majority = logistic.majority_baseline(classifier, splits["train"][1], *splits["val"])
    classifier = classifier.fitted_on(fingerprint, config.precision)
    curve = _labeled_curve(config, classifier, splits, data, model.hidden_size)
    # All outputs are renamed in together at the end: a failure leaves earlier ones as they were.
    with fileio.Staged() as staged:
        files = _write_outputs(config, classifier, splits, curve, staged)
        results = {
            "model_dir": config.model_dir,
            "hidden_size": model.hidden_size,
            "weights_sha256": classifier.head.weights_sha256,
            "config": {
                k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(config).items()
            },
            "feature_kinds": list(kinds),
            "feature_selection": selection,
            "c_choice": c_choice,
            "c_sweep": sweep,
            **_results(data, classifier, splits),
            "majority_baseline": majority,
            "num_labeled": curve,
            "featurize": timings,
            "fit_seconds": round(fit_seconds, 2),
            "seconds": round(time.monotonic() - started, 1),
            "files": files,
            "warnings": _warnings(sweep, selection, curve, majority, c_choice),
        }
        fileio.write_json_atomic(
            staged.path(os.path.join(config.output_dir, RESULTS_FILE)), results
        )
    return results
