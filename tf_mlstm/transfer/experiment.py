"""The sentiment-transfer experiment behind `tf-mlstm-transfer`.

Reads labeled CSV/JSONL splits through `tf_mlstm.data.readers` (so the text
is normalized exactly as for training), featurizes them with a trained
model, fits the L1 (or L2) logistic regression (C chosen on validation: the given
validation split, or a seeded stratified share of train), finds the
sentiment neuron, repeats the fit on balanced subsamples of train for the
`num_labeled` curve, and writes `results.json`, `classifier.json` and the
plots to the output folder.
"""

import dataclasses
import math
import os
import time

import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import fileio
from tf_mlstm import rundir
from tf_mlstm.data import readers
from tf_mlstm.train.config import PRECISIONS
from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import logistic
from tf_mlstm.transfer import plots

RESULTS_FILE = rundir.RESULTS_FILE
CLASSIFIER_FILE = "classifier.json"
NEURON_PLOT = "neuron_histogram.png"
CURVE_PLOT = "accuracy_vs_labeled.png"
ALL = 0
"""`num_labeled` value meaning every training example."""


def parse_num_labeled(spec):
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
            raise ValueError(f"--num_labeled entries must be integers >= 2 or 'all', got {piece!r}")
    return tuple(sorted(counts - {ALL})) + ((ALL,) if ALL in counts else ())


@dataclasses.dataclass(frozen=True)
class TransferConfig:
    """Settings of one transfer run. Field names match the flags."""

    model_dir: str
    train: str
    output_dir: str
    val: str = ""  # "" = a held-out share of train
    test: str = ""  # "" = no test accuracy
    text_keys: tuple = ("text",)
    label_key: str = "label"
    label_threshold: float | None = None  # None: labels are classes; else value >= it is 1
    features: str = "cell"
    num_labeled: tuple = ()
    batch_size: int = features_lib.DEFAULT_BATCH_SIZE
    window: int = features_lib.DEFAULT_WINDOW
    precision: str = "float32"  # the policy features are computed in
    max_train_examples: int = 0
    max_eval_examples: int = 0
    val_fraction: float = 0.1
    c_grid: tuple = logistic.DEFAULT_C_GRID
    penalty: str = "l1"
    solver: str = "auto"  # liblinear for l1, lbfgs for l2
    seed: int = 0
    progress: bool | None = None  # None: a progress bar on a terminal only

    def validate(self):
        """Raises ValueError naming the first bad setting."""
        features_lib.parse_feature_kinds(self.features)
        if self.batch_size <= 0 or self.window <= 0:
            raise ValueError("--batch_size and --window must be positive")
        if self.max_train_examples < 0 or self.max_eval_examples < 0:
            raise ValueError("--max_train_examples and --max_eval_examples must be >= 0")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"--val_fraction must be in (0, 1), got {self.val_fraction}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"--precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.penalty not in logistic.PENALTIES:
            raise ValueError(f"--penalty must be one of {logistic.PENALTIES}, got {self.penalty!r}")
        if self.solver not in logistic.SOLVERS:
            raise ValueError(f"--solver must be one of {logistic.SOLVERS}, got {self.solver!r}")
        if self.solver == "lbfgs" and self.penalty != "l2":
            raise ValueError(f"--solver=lbfgs fits only --penalty=l2, not {self.penalty}")
        if not self.c_grid or min(self.c_grid) <= 0:
            raise ValueError(f"--c_grid must hold positive values, got {list(self.c_grid)}")
        if not self.text_keys:
            raise ValueError("--text_key must name at least one key")
        if self.label_threshold is not None and not math.isfinite(self.label_threshold):
            raise ValueError(
                f"--label_threshold must be a finite number, got {self.label_threshold}"
            )


@dataclasses.dataclass(frozen=True)
class LabeledTexts:
    """Normalized texts and their labels from one input spec."""

    source: str
    texts: list
    labels: np.ndarray
    skipped: dict

    def subset(self, rows):
        """The rows `rows` (indices), same source."""
        return LabeledTexts(
            self.source, [self.texts[i] for i in rows], self.labels[rows], self.skipped
        )

    def summary(self):
        """Counts for results.json."""
        values, counts = np.unique(self.labels, return_counts=True)
        return {
            "source": self.source,
            "examples": len(self.texts),
            "label_counts": {str(v): int(c) for v, c in zip(values, counts)},
            "skipped": self.skipped,
        }


def load_labeled(spec, text_keys, label_key, threshold=None):
    """Reads labeled texts from CSV/JSONL/... files.

    Args:
      spec: comma-separated files or globs (see `readers.expand_inputs`).
      text_keys: keys/columns holding the text, tried in order.
      label_key: key/column of the label.
      threshold: None: the label is a class (see `readers.parse_label`).
        A number: the label is a score (star rating, 1-10 rating) read as
        `readers.parse_rating` does, and it is 1 when >= threshold, else 0
        (e.g. Amazon's `overall` stars with threshold 4: 4-5 stars are
        positive, 1-3 negative).

    Returns:
      A `LabeledTexts`.

    Raises:
      FileNotFoundError: a file or glob names nothing.
      ValueError: no record with both a text and a label (the message gives
        the skip counts and the first skipped record).
    """
    paths = readers.expand_inputs(spec)
    skip_log = readers.SkipLog(max_examples=1)
    if threshold is None:
        keys = {"label_key": label_key}
    else:
        keys = {"rating_key": label_key}
    documents = list(readers.read_documents(paths, text_keys, skip_log=skip_log, **keys))
    skip_log.log_summary()
    if not documents:
        first = next(iter(skip_log.examples.values()), ["(empty)"])[0]
        raise ValueError(
            f"{spec}: no usable record with text {list(text_keys)} and label {label_key!r} "
            f"(skipped {skip_log.total}: {skip_log.counts}; first: {first})"
        )
    logging.info("Read %d labeled texts from %s", len(documents), spec)
    if threshold is None:
        labels = [d.label for d in documents]
    else:
        labels = [int(d.rating >= threshold) for d in documents]
    return LabeledTexts(
        spec, [d.text for d in documents], np.array(labels, np.int64), skip_log.to_dict()
    )


def _featurize(featurizer, data, what, timings, progress):
    start = time.monotonic()
    features = featurizer(data.texts, progress=progress)
    seconds = time.monotonic() - start
    chars = int(features_lib.text_lengths(data.texts).sum())
    timings[what] = {
        "seconds": round(seconds, 3),
        "chars_per_second": round(chars / max(seconds, 1e-9)),
    }
    logging.info(
        "Featurized %d %s texts (%d chars) in %.1f s", len(data.texts), what, chars, seconds
    )
    return features


def _read_splits(config):
    """The (subsampled) training data and the given val/test data, labels checked."""
    train = load_labeled(config.train, config.text_keys, config.label_key, config.label_threshold)
    train = train.subset(
        logistic.random_subsample(len(train.texts), config.max_train_examples, config.seed)
    )
    evaluation = {}
    for name, spec in (("val", config.val), ("test", config.test)):
        if spec:
            data = load_labeled(spec, config.text_keys, config.label_key, config.label_threshold)
            evaluation[name] = data.subset(
                logistic.random_subsample(len(data.texts), config.max_eval_examples, config.seed)
            )
    # Check the labels now rather than after the expensive featurization.
    _, classes = logistic.encode_labels(train.labels, what=config.train)
    for data in evaluation.values():
        logistic.encode_labels(data.labels, classes, what=data.source)
    return train, evaluation


def _fit_and_validation_features(config, train, train_features, evaluation, eval_features):
    """(fit features, fit labels, val features, val labels): `--val`, or held out of train."""
    if "val" in evaluation:
        return train_features, train.labels, eval_features["val"], evaluation["val"].labels
    fit_rows, held = logistic.stratified_split(train.labels, config.val_fraction, config.seed)
    logging.info("No --val: validating on %d rows held out of the training data", len(held))
    return (
        {kind: values[fit_rows] for kind, values in train_features.items()},
        train.labels[fit_rows],
        {kind: values[held] for kind, values in train_features.items()},
        train.labels[held],
    )


def _write_plots(config, classifier, splits, neuron_accuracy, curve):
    """Draws the neuron histogram (test, else val) and the labeled-examples curve."""
    split = "test" if "test" in splits else "val"
    kind, unit = classifier.describe(classifier.neuron.index)
    files = {
        "neuron_histogram": plots.neuron_histogram(
            os.path.join(config.output_dir, NEURON_PLOT),
            splits[split][0][:, classifier.neuron.index],
            splits[split][1],
            classifier.classes,
            classifier.neuron.threshold,
            title=f"unit {unit} ({kind}), {split} accuracy {neuron_accuracy[split]:.3f}",
        )
    }
    if curve:
        files["accuracy_vs_labeled"] = plots.accuracy_curve(
            os.path.join(config.output_dir, CURVE_PLOT),
            [row["num_labeled"] for row in curve],
            [row[f"{split}_accuracy"] for row in curve],
            ylabel=f"{split} accuracy",
        )
    return files


def run_transfer(config):
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
    model, _ = rundir.load_trained_model(config.model_dir, precision=config.precision)
    hidden = model.hidden_size
    train, evaluation = _read_splits(config)

    spec = features_lib.parse_feature_kinds(config.features)
    computed = features_lib.FEATURE_KINDS if spec == features_lib.AUTO else spec
    featurizer = features_lib.TextFeaturizer(model, config.batch_size, config.window, computed)
    timings = {}
    train_features = _featurize(featurizer, train, "train", timings, config.progress)
    eval_features = {
        name: _featurize(featurizer, data, name, timings, config.progress)
        for name, data in evaluation.items()
    }
    fit_features, fit_labels, val_features, val_labels = _fit_and_validation_features(
        config, train, train_features, evaluation, eval_features
    )
    fit_kwargs = {
        "c_grid": config.c_grid,
        "penalty": config.penalty,
        "solver": config.solver,
        "seed": config.seed,
    }
    selection = None
    kinds = spec
    if spec == features_lib.AUTO:
        kinds, trials = logistic.select_feature_kinds(
            fit_features, fit_labels, val_features, val_labels, hidden, **fit_kwargs
        )
        selection = {"chosen": list(kinds), "trials": trials}
        logging.info("Chose features %s on validation", ",".join(kinds))

    splits = {
        "train": (features_lib.concat_features(fit_features, kinds), fit_labels),
        "val": (features_lib.concat_features(val_features, kinds), val_labels),
    }
    if "test" in evaluation:
        test_x = features_lib.concat_features(eval_features["test"], kinds)
        splits["test"] = (test_x, evaluation["test"].labels)
    classifier, sweep = logistic.fit_logistic(
        *splits["train"], *splits["val"], kinds, hidden, **fit_kwargs
    )
    accuracy = {name: classifier.accuracy(x, y) for name, (x, y) in splits.items()}
    neuron_accuracy = {name: classifier.neuron_accuracy(x, y) for name, (x, y) in splits.items()}
    curve = _labeled_curve(config, classifier, splits, kinds, hidden, fit_kwargs)

    tf.io.gfile.makedirs(config.output_dir)
    files = {"classifier": os.path.join(config.output_dir, CLASSIFIER_FILE)}
    classifier.save(files["classifier"])
    files.update(_write_plots(config, classifier, splits, neuron_accuracy, curve))
    neuron_kind, neuron_unit = classifier.describe(classifier.neuron.index)
    results = {
        "model_dir": config.model_dir,
        "hidden_size": hidden,
        "config": {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()
        },
        "data": {
            "train": {**train.summary(), "fit_examples": len(fit_labels)},
            "val": {"held_out_of_train": "val" not in evaluation, "examples": len(val_labels)},
            **{name: data.summary() for name, data in evaluation.items()},
        },
        "classes": list(classifier.classes),
        "feature_kinds": list(kinds),
        "feature_selection": selection,
        "C": classifier.C,
        "c_sweep": sweep,
        "train_accuracy": accuracy["train"],
        "val_accuracy": accuracy["val"],
        "test_accuracy": accuracy.get("test"),
        "nonzero_weights": classifier.nonzero_weights,
        "features": int(classifier.weights.size),
        "top_units": classifier.top_units(10),
        "neuron": {
            "index": classifier.neuron.index,
            "kind": neuron_kind,
            "unit": neuron_unit,
            "sign": classifier.neuron.sign,
            "threshold": classifier.neuron.threshold,
            "weight": float(classifier.weights[classifier.neuron.index]),
            "train_accuracy": neuron_accuracy["train"],
            "val_accuracy": neuron_accuracy["val"],
            "test_accuracy": neuron_accuracy.get("test"),
        },
        "num_labeled": curve,
        "featurize": timings,
        "seconds": round(time.monotonic() - started, 1),
        "files": files,
    }
    fileio.write_json_atomic(os.path.join(config.output_dir, RESULTS_FILE), results)
    return results


def _labeled_curve(config, full, splits, kinds, hidden, fit_kwargs):
    """Refits on balanced subsamples of train, one per `num_labeled` entry."""
    x, labels = splits["train"]
    curve = []
    for requested in config.num_labeled:
        if requested == ALL or requested >= len(labels):
            classifier, rows = full, len(labels)
        else:
            subset = logistic.balanced_subsample(labels, requested, config.seed)
            classifier, _ = logistic.fit_logistic(
                x[subset], labels[subset], *splits["val"], kinds, hidden, **fit_kwargs
            )
            rows = len(subset)
        if curve and curve[-1]["num_labeled"] == rows:
            continue
        row = {
            "num_labeled": rows,
            "C": classifier.C,
            "nonzero_weights": classifier.nonzero_weights,
        }
        for name, (split_x, split_y) in splits.items():
            if name != "train":
                row[f"{name}_accuracy"] = classifier.accuracy(split_x, split_y)
        curve.append(row)
        logging.info("%d labeled examples: %s", rows, row)
    return curve
