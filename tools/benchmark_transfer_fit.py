"""Times the logistic-regression sweep of `tf-mlstm-transfer` on synthetic features.

What `--features=auto` costs after featurization: the greedy selection over
the feature groups, each a sweep over the C grid, on features shaped like a
real model's (`--hidden` units per kind, every kind of the groups), for a
K-class task of `--texts` texts (10% held out for validation, as without
`--val`). The features have the structure of a small model's: every kind is
a noisy mix of a few shared latent factors, so the columns are strongly
correlated, and the classes differ a little along a few of the factors.

  python tools/benchmark_transfer_fit.py --texts=3000 --classes=6 --hidden=768

Prints one JSON line per selection trial as it ends (kinds, validation
accuracy, wall and CPU seconds, Cs that did not converge), then a summary
line with the totals (CPU seconds count every thread: on a shared machine
they are the steadier number). Extra settings go to `fit_logistic` (`--penalty`, `--solver`).
"""

import json
import time

import numpy as np
from absl import app
from absl import flags

from tf_mlstm.transfer import features as features_lib
from tf_mlstm.transfer import logistic

FLAGS = flags.FLAGS


def define_flags():
    """This tool's flags."""
    flags.DEFINE_integer("texts", 3000, "Labeled texts (10% of them validation).")
    flags.DEFINE_integer("classes", 6, "Classes.")
    flags.DEFINE_integer("hidden", 768, "Units per feature kind.")
    flags.DEFINE_integer("factors", 24, "Shared latent factors behind every kind.")
    flags.DEFINE_enum("penalty", "l2", list(logistic.PENALTIES), "Penalty.")
    flags.DEFINE_enum("solver", "auto", list(logistic.SOLVERS), "Solver.")
    flags.DEFINE_integer("seed", 0, "Seed of the synthetic data.")


def synthetic_features(texts, classes, hidden, factors, seed):
    """(features: dict kind -> float32 [texts, hidden], labels [texts])."""
    rng = np.random.default_rng(seed)
    labels = np.arange(texts) % classes
    rng.shuffle(labels)
    centers = rng.normal(scale=0.35, size=(classes, factors))
    latent = rng.normal(size=(texts, factors)) + centers[labels]
    out = {}
    for kind in features_lib.FEATURE_KINDS:
        mix = rng.normal(size=(factors, hidden)) / np.sqrt(factors)
        noise = rng.normal(scale=0.8, size=(texts, hidden))
        offset = rng.normal(size=hidden)
        out[kind] = (np.tanh(latent @ mix + noise) * rng.uniform(0.2, 2.0, hidden) + offset).astype(
            np.float32
        )
    return out, labels


def main(argv):
    del argv
    data, labels = synthetic_features(
        FLAGS.texts, FLAGS.classes, FLAGS.hidden, FLAGS.factors, FLAGS.seed
    )
    cut = FLAGS.texts - FLAGS.texts // 10
    train = {kind: values[:cut] for kind, values in data.items()}
    val = {kind: values[cut:] for kind, values in data.items()}
    started = time.monotonic()
    cpu_started = time.process_time()
    trial_start = [started, cpu_started]
    original = logistic.fit_logistic

    def timed(*args, **kwargs):
        classifier, sweep = original(*args, **kwargs)
        now, cpu_now = time.monotonic(), time.process_time()
        row = {
            "kinds": list(classifier.feature_kinds),
            "width": classifier.num_features,
            "val_accuracy": round(max(r["val_accuracy"] for r in sweep), 4),
            "seconds": round(now - trial_start[0], 2),
            "cpu_seconds": round(cpu_now - trial_start[1], 2),
            "not_converged": [r["C"] for r in sweep if not r["converged"]],
        }
        if "iterations" in sweep[0]:
            row["iterations"] = [r["iterations"] for r in sweep]
        print(json.dumps(row), flush=True)
        trial_start[:] = [now, cpu_now]
        return classifier, sweep

    logistic.fit_logistic = timed
    try:
        kinds, trials = logistic.select_feature_kinds(
            train,
            labels[:cut],
            val,
            labels[cut:],
            FLAGS.hidden,
            penalty=FLAGS.penalty,
            solver=FLAGS.solver,
        )
    finally:
        logistic.fit_logistic = original
    summary = {
        "texts": FLAGS.texts,
        "classes": FLAGS.classes,
        "hidden": FLAGS.hidden,
        "penalty": FLAGS.penalty,
        "solver": FLAGS.solver,
        "chosen": list(kinds),
        "trials": len(trials),
        "total_seconds": round(time.monotonic() - started, 1),
        "total_cpu_seconds": round(time.process_time() - cpu_started, 1),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    define_flags()
    app.run(main)
