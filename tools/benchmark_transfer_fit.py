"""Times the logistic-regression fits of `tf-mlstm-transfer`, solver against solver.

Everything after featurization, on features shaped like a real model's:
synthetic ones (`--shapes`) or a file of real ones (`--features_file`).
Synthetic features have the structure of a small model's: every kind is a
noisy mix of a few shared latent factors, so the columns are strongly
correlated, and the classes (or labels) differ a little along a few of the
factors. The shapes:

  6class   3,000 texts (10% validation) of 6 classes, 1,000 test texts
  sst2     6,920 training, 872 validation, 1,821 test texts, 2 classes (SST-2)
  semeval  6,838 texts (10% validation), 886 test, 11 labels (SemEval E-c)

each with `--hidden` units per feature kind (768, the CPU recipe model's; 4096
the paper's).

Two modes, each run for every solver of `--solvers` (and penalty of
`--penalties`) in turn, in one process, so their numbers share the machine's
load:

* `--mode=transfer` (the default): what `tf-mlstm-transfer --features=auto`
  does after featurizing: the greedy selection over the feature groups (a
  sweep over the C grid each), the final sweep on the chosen kinds and the
  `--num_labeled` curve. One JSON line per sweep as it ends (what, kinds,
  width, validation score, wall and CPU seconds, Cs not converged,
  iterations), then a summary per solver.
* `--mode=sweep`: one sweep over the C grid on fixed `--kinds`
  (`cell,hidden`, the group the real 6-class set did not converge on), one
  line per solver: seconds, CPU seconds, best validation score, test score
  at that C, converged, iterations per C.

CPU seconds count every thread of the process: on a shared machine they are
the steadier number; compare solvers by the ratios of one run.

  python tools/benchmark_transfer_fit.py --shapes=6class --solvers=fista,lbfgs
  python tools/benchmark_transfer_fit.py --mode=sweep --shapes=6class,sst2,semeval \\
      --solvers=fista,lbfgs,liblinear,saga --penalties=l2,l1
"""

import json
import time

import numpy as np
from absl import app
from absl import flags

from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer.probe import fit as fit_lib
from tf_mlstm.transfer.probe import selection as selection_lib
from tf_mlstm.transfer.probe import solver as solver_lib

FLAGS = flags.FLAGS

SHAPES = {
    # name: (training texts, validation texts (0: 10% of train), test texts, classes, labels)
    "6class": (3000, 0, 1000, 6, 0),
    "sst2": (6920, 872, 1821, 2, 0),
    "semeval": (6838, 0, 886, 0, 11),
}


def define_flags():
    """This tool's flags."""
    flags.DEFINE_enum("mode", "transfer", ["transfer", "sweep"], "What to time (see above).")
    flags.DEFINE_list("shapes", ["6class"], f"Synthetic shapes, of {sorted(SHAPES)}.")
    flags.DEFINE_string("features_file", "", "An .npz of real features instead (see `load`).")
    flags.DEFINE_integer("texts", 0, "Training texts instead of the shape's (0: the shape's).")
    flags.DEFINE_integer("classes", 0, "Classes instead of the shape's (0: the shape's).")
    flags.DEFINE_integer("hidden", 768, "Units per feature kind.")
    flags.DEFINE_integer("factors", 24, "Shared latent factors behind every kind.")
    flags.DEFINE_list(
        "solvers",
        ["auto"],
        f"Solvers, of {list(fit_lib.SOLVERS)}; batch:METHOD the batch solver with one of its "
        "methods (batch:fista, batch:lbfgs).",
    )
    flags.DEFINE_list("penalties", ["l2"], "Penalties, of l2 and l1.")
    flags.DEFINE_list("kinds", ["cell", "hidden"], "--mode=sweep: the feature kinds.")
    flags.DEFINE_list("num_labeled", ["10", "100", "1000"], "--mode=transfer: the curve's sizes.")
    flags.DEFINE_integer("seed", 0, "Seed of the synthetic data.")


def synthetic_features(texts, classes, hidden, factors, seed, labels_count=0):
    """(features: dict kind -> float32 [texts, hidden], labels).

    Labels are [texts] classes, or with `labels_count` [texts, L] 0/1 labels,
    each a noisy cut of the latent factors at its own base rate (5-40%).
    """
    rng = np.random.default_rng(seed)
    if labels_count:
        centers = np.zeros((1, factors))
        labels = np.zeros(texts, np.int64)
    else:
        labels = np.arange(texts) % classes
        rng.shuffle(labels)
        centers = rng.normal(scale=0.35, size=(classes, factors))
    latent = rng.normal(size=(texts, factors)) + centers[labels]
    if labels_count:
        directions = rng.normal(size=(factors, labels_count)) / np.sqrt(factors)
        scores = latent @ directions + rng.normal(scale=1.0, size=(texts, labels_count))
        rates = rng.uniform(0.05, 0.4, labels_count)
        cuts = [np.quantile(scores[:, k], 1 - rate) for k, rate in enumerate(rates)]
        labels = (scores > np.array(cuts)).astype(np.int64)
    out = {}
    for kind in features_lib.FEATURE_KINDS:
        mix = rng.normal(size=(factors, hidden)) / np.sqrt(factors)
        noise = rng.normal(scale=0.8, size=(texts, hidden))
        offset = rng.normal(size=hidden)
        out[kind] = (np.tanh(latent @ mix + noise) * rng.uniform(0.2, 2.0, hidden) + offset).astype(
            np.float32
        )
    return out, labels


def synthetic_splits(shape, hidden, factors, seed, texts=0, classes=0):
    """{train, val, test: (dict kind -> [n, hidden], labels)} of a named shape."""
    train_n, val_n, test_n, shape_classes, labels_count = SHAPES[shape]
    train_n = texts or train_n
    classes = classes or shape_classes
    val_n = val_n or train_n // 10
    fit_n = train_n - (0 if SHAPES[shape][1] else val_n)
    total = fit_n + val_n + test_n
    data, labels = synthetic_features(total, classes, hidden, factors, seed, labels_count)
    cuts = {"train": (0, fit_n), "val": (fit_n, fit_n + val_n), "test": (fit_n + val_n, total)}
    return {
        name: ({kind: values[a:b] for kind, values in data.items()}, labels[a:b])
        for name, (a, b) in cuts.items()
    }


def load(path):
    """Real features: an .npz with `<split>/<kind>` [N, H] and `<split>/labels` arrays."""
    with np.load(path) as archive:
        arrays = dict(archive)
    splits = {}
    for name in ("train", "val", "test"):
        kinds = {
            key.split("/", 1)[1]: value
            for key, value in arrays.items()
            if key.startswith(f"{name}/") and key != f"{name}/labels"
        }
        if kinds:
            splits[name] = (kinds, arrays[f"{name}/labels"])
    return splits


class Clock:
    """Wall and CPU seconds since the last `lap`."""

    def __init__(self):
        self.start = self.last = (time.monotonic(), time.process_time())

    def lap(self):
        now = (time.monotonic(), time.process_time())
        lap = (now[0] - self.last[0], now[1] - self.last[1])
        self.last = now
        return round(lap[0], 2), round(lap[1], 2)

    def total(self):
        now = (time.monotonic(), time.process_time())
        return round(now[0] - self.start[0], 1), round(now[1] - self.start[1], 1)


def _summary(classifier, sweep):
    metric = next(key for key in sweep[0] if key.startswith("val_"))
    iterations = {}
    for row in sweep:  # multilabel: the most any label took at each C
        iterations[row["C"]] = max(iterations.get(row["C"], 0), row["iterations"])
    return {
        "kinds": list(classifier.head.feature_kinds),
        "width": classifier.num_features,
        "val": round(classifier_score(sweep, metric), 4),
        "not_converged": sorted({float(f"{r['C']:.3g}") for r in sweep if not r["converged"]}),
        "iterations": list(iterations.values()),
    }


def classifier_score(sweep, metric):
    """The best validation score of a sweep (multilabel: the mean over labels of each's best)."""
    if "label" not in sweep[0]:
        return max(r[metric] for r in sweep)
    best = {}
    for row in sweep:
        best[row["label"]] = max(best.get(row["label"], 0.0), row[metric])
    return float(np.mean(list(best.values())))


def run_transfer(splits, hidden, solver, penalty, sizes, tag):
    """Selection, final sweep and curve, as tf-mlstm-transfer after featurizing."""
    (train, train_y), (val, val_y) = splits["train"], splits["val"]
    clock = Clock()
    original = fit_lib.fit_logistic
    rows = []

    def timed(*args, **kwargs):
        classifier, sweep = original(*args, **kwargs)
        seconds, cpu = clock.lap()
        row = {**tag, "what": kwargs.get("title") or "final", **_summary(classifier, sweep)}
        row.update(seconds=seconds, cpu_seconds=cpu)
        rows.append(row)
        print(json.dumps(row), flush=True)
        return classifier, sweep

    fit_kwargs = {"solver": solver, "penalty": penalty, "progress": False}
    fit_lib.fit_logistic = timed
    try:
        kinds, _ = selection_lib.select_feature_kinds(
            train, train_y, val, val_y, hidden, **fit_kwargs
        )
    finally:
        fit_lib.fit_logistic = original
    split_x = {
        name: features_lib.concat_features(features, kinds)
        for name, (features, _) in splits.items()
    }
    classifier, _ = timed(
        split_x["train"], train_y, split_x["val"], val_y, kinds, hidden, **fit_kwargs
    )
    scores = {
        f"{name}_{classifier.score_name}": round(classifier.score(split_x[name], labels), 4)
        for name, (_, labels) in splits.items()
    }
    multilabel = np.ndim(train_y) == 2
    for size in sizes:
        if size >= len(train_y):
            continue
        if multilabel:
            subset = labeled.random_subsample(len(train_y), size, 0)
            if any(len(np.unique(column)) < 2 for column in train_y[subset].T):
                continue
        else:
            subset = labeled.balanced_subsample(train_y, size, 0)
        timed(
            split_x["train"][subset],
            train_y[subset],
            split_x["val"],
            val_y,
            kinds,
            hidden,
            title=f"{len(subset)} labeled",
            **fit_kwargs,
        )
    seconds, cpu = clock.total()
    summary = {
        **tag,
        "what": "total",
        "chosen": list(kinds),
        "C": classifier.report.C,
        **scores,
        "sweeps": len(rows),
        "not_converged_sweeps": sum(bool(r["not_converged"]) for r in rows),
        "seconds": seconds,
        "cpu_seconds": cpu,
    }
    print(json.dumps(summary), flush=True)
    return summary


def run_sweep(splits, hidden, solver, penalty, kinds, tag):
    """One sweep over the C grid on `kinds`."""
    split_x = {
        name: features_lib.concat_features(features, kinds)
        for name, (features, _) in splits.items()
    }
    (_, train_y), (_, val_y) = splits["train"], splits["val"]
    clock = Clock()
    classifier, sweep = fit_lib.fit_logistic(
        split_x["train"],
        train_y,
        split_x["val"],
        val_y,
        kinds,
        hidden,
        solver=solver,
        penalty=penalty,
        neurons=False,
        progress=False,
    )
    seconds, cpu = clock.lap()
    row = {**tag, **_summary(classifier, sweep), "seconds": seconds, "cpu_seconds": cpu}
    row["C"] = classifier.report.C
    for name, (_, labels) in splits.items():
        if name != "train":
            row[f"{name}_{classifier.score_name}"] = round(
                classifier.score(split_x[name], labels), 4
            )
    print(json.dumps(row), flush=True)
    return row


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.shapes) - set(SHAPES))
    if unknown and not FLAGS.features_file:
        raise app.UsageError(f"--shapes: unknown {unknown}; choose from {sorted(SHAPES)}")
    for solver in FLAGS.solvers:
        solver, _, method = solver.partition(":")
        if method and (solver != "batch" or method not in solver_lib.METHODS):
            raise app.UsageError(f"--solvers: batch:METHOD takes {sorted(solver_lib.METHODS)}")
        if solver not in fit_lib.SOLVERS:
            raise app.UsageError(f"--solvers: unknown {solver!r}; choose from {fit_lib.SOLVERS}")
    if FLAGS.features_file:
        datasets = {FLAGS.features_file: (load(FLAGS.features_file), None)}
    else:
        datasets = {
            shape: (
                synthetic_splits(
                    shape, FLAGS.hidden, FLAGS.factors, FLAGS.seed, FLAGS.texts, FLAGS.classes
                ),
                FLAGS.hidden,
            )
            for shape in FLAGS.shapes
        }
    for shape, (splits, hidden) in datasets.items():
        if hidden is None:
            hidden = next(iter(splits["train"][0].values())).shape[1]
        for penalty in FLAGS.penalties:
            for solver in FLAGS.solvers:
                labels = splits["train"][1]
                tag = {
                    "shape": shape,
                    "texts": len(labels),
                    "hidden": hidden,
                    "penalty": penalty,
                    "solver": solver,
                }
                name, _, method = solver.partition(":")
                if name == "liblinear" and np.ndim(labels) == 1 and len(np.unique(labels)) > 2:
                    continue  # liblinear fits two classes only
                if (name == "lbfgs" or method == "lbfgs") and penalty == "l1":
                    continue
                # batch:METHOD: the batch solver with another of its methods.
                methods = dict(solver_lib.DEFAULT_METHODS)
                if method:
                    solver_lib.DEFAULT_METHODS[penalty] = method
                try:
                    if FLAGS.mode == "transfer":
                        sizes = [int(size) for size in FLAGS.num_labeled]
                        run_transfer(splits, hidden, name, penalty, sizes, tag)
                    else:
                        run_sweep(splits, hidden, name, penalty, tuple(FLAGS.kinds), tag)
                finally:
                    solver_lib.DEFAULT_METHODS.update(methods)


if __name__ == "__main__":
    define_flags()
    app.run(main)
