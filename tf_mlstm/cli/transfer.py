"""tf-mlstm-transfer: sentiment classification from a trained model's features.

  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/sst \
      --train=../shared/data/sst/train.csv --val=../shared/data/sst/val.csv \
      --test=../shared/data/sst/test.csv --text_key=sentence --label_key=label
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/imdb \
      --train=imdb/train.jsonl --test=imdb/test.jsonl --features=auto
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/amazon \
      --train=amazon/books.jsonl --test=amazon/electronics.jsonl \
      --text_key=reviewText --label_key=overall --label_threshold=4

Reads labeled CSV / JSON lines (gzip or not) exactly as training text is
read and normalized (a class label, or with `--label_threshold` a score such
as star ratings split into negative and positive), featurizes every text
with the model (final cell state by default; `--features=cell,cell_mean`,
any combination, or `auto` to choose on validation), fits an L1- (or
`--penalty=l2`) regularized logistic regression with C chosen on validation
(`--val`, or a seeded stratified `--val_fraction` of train), and finds the
sentiment neuron. Writes to `--output_dir`: results.json, classifier.json
(for tf-mlstm-classify and tf-mlstm-export --classifier), neuron_histogram.png
and accuracy_vs_labeled.png. The last line printed is
one JSON object with `test_accuracy` and the other headline numbers.
"""

from absl import app
from absl import flags
from absl import logging

from tf_mlstm.cli import _main

FLAGS = flags.FLAGS


def define_transfer_flags():
    """Defines every tf-mlstm-transfer flag (all optional; `run` marks required ones)."""
    flags.DEFINE_string("model_dir", None, "A tf-mlstm-train (or tf-mlstm-finetune) --model_dir.")
    flags.DEFINE_string("train", None, "Labeled training files (comma-separated files/globs).")
    flags.DEFINE_string(
        "val", "", "Labeled validation files; empty: hold out --val_fraction of train."
    )
    flags.DEFINE_string("test", "", "Labeled test files; empty: no test accuracy.")
    flags.DEFINE_string(
        "text_key", "text,sentence,reviewText", "Keys/columns holding the text, tried in order."
    )
    flags.DEFINE_string("label_key", "label", "Key/column of the class label (two values).")
    flags.DEFINE_float(
        "label_threshold",
        None,
        "Read --label_key as a score (stars, a 1-10 rating) and label it positive when >= this "
        "value, negative below (e.g. --label_key=overall --label_threshold=4 for Amazon stars). "
        "Unset: the label is already a class.",
    )
    flags.DEFINE_string(
        "output_dir",
        None,
        "Where results, classifier and plots are written; not a model folder (its results.json "
        "belongs to the run).",
    )
    flags.DEFINE_string(
        "features",
        "cell",
        "Comma-separated of cell, hidden (final states), mean, max, min, std (of the hidden "
        "state), cell_mean, cell_max, cell_min (of the cell state), concatenated; or auto "
        "(choose among final / hidden statistics / cell statistics on validation).",
    )
    flags.DEFINE_string(
        "num_labeled",
        "10,100,1000,all",
        "Training-set sizes for the accuracy curve (balanced seeded subsamples); empty: none.",
    )
    flags.DEFINE_integer("batch_size", 64, "Texts per model call.")
    flags.DEFINE_integer("window", 256, "Bytes per model call (the state carries across).")
    flags.DEFINE_enum(
        "precision",
        "auto",
        ["auto", "float32", "mixed_bfloat16", "mixed_float16"],
        "Policy the features are computed in: a mixed one runs the products in 16 bits, the "
        "weights and features stay float32. auto: mixed_float16 on GPUs with tensor cores, "
        "mixed_bfloat16 on CPUs with AMX bfloat16 units, else float32 (results.json records "
        "the choice).",
    )
    flags.DEFINE_integer(
        "max_train_examples", 0, "Use a seeded random subset of this many training texts (0 = all)."
    )
    flags.DEFINE_integer(
        "max_eval_examples", 0, "Same for --val and --test each (0 = all); for quick checks."
    )
    flags.DEFINE_float("val_fraction", 0.1, "Share of train held out for validation without --val.")
    flags.DEFINE_string(
        "c_grid", "", "Comma-separated inverse regularization strengths; empty: 1e-4 .. 1."
    )
    flags.DEFINE_enum(
        "penalty",
        "l1",
        ["l1", "l2"],
        "l1: sparse weights (Radford et al.), the units that carry sentiment stand out; l2: "
        "dense weights, more accurate from the pooled features of small models.",
    )
    flags.DEFINE_enum(
        "solver",
        "auto",
        ["auto", "liblinear", "saga", "lbfgs"],
        "scikit-learn solver; auto: liblinear for l1, lbfgs for l2.",
    )
    flags.DEFINE_integer("seed", 0, "Seed of subsamples, the held-out split and the solver.")


def _floats(spec, name):
    try:
        return tuple(float(piece) for piece in spec.split(",") if piece.strip())
    except ValueError:
        raise app.UsageError(f"--{name} must be comma-separated numbers, got {spec!r}") from None


def _resolved_precision(choice):
    """`choice`, with `auto` decided from this machine's hardware (and logged)."""
    from tf_mlstm.train import hardware  # pylint: disable=g-import-not-at-top

    if choice != hardware.AUTO:
        return choice
    machine = hardware.detect()
    precision, reason = hardware.resolve_precision(choice, machine)
    logging.info("Features in %s (auto: %s); %s.", precision, reason, machine.describe())
    return precision


def config_from_flags():
    """One frozen, validated `TransferConfig` from FLAGS.

    Raises:
      app.UsageError: a flag value is invalid.
    """
    from tf_mlstm.transfer import experiment  # pylint: disable=g-import-not-at-top

    try:
        values = {
            "model_dir": FLAGS.model_dir,
            "train": FLAGS.train,
            "output_dir": FLAGS.output_dir,
            "val": FLAGS.val,
            "test": FLAGS.test,
            "text_keys": tuple(key.strip() for key in FLAGS.text_key.split(",") if key.strip()),
            "label_key": FLAGS.label_key,
            "label_threshold": FLAGS.label_threshold,
            "features": FLAGS.features,
            "num_labeled": experiment.parse_num_labeled(FLAGS.num_labeled),
            "batch_size": FLAGS.batch_size,
            "window": FLAGS.window,
            "precision": _resolved_precision(FLAGS.precision),
            "max_train_examples": FLAGS.max_train_examples,
            "max_eval_examples": FLAGS.max_eval_examples,
            "val_fraction": FLAGS.val_fraction,
            "penalty": FLAGS.penalty,
            "solver": FLAGS.solver,
            "seed": FLAGS.seed,
        }
        if FLAGS.c_grid:
            values["c_grid"] = _floats(FLAGS.c_grid, "c_grid")
        config = experiment.TransferConfig(**values)
        config.validate()
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    return config


def headline(results):
    """The one-line JSON summary printed last."""
    neuron = results["neuron"]
    return {
        "test_accuracy": results["test_accuracy"],
        "val_accuracy": results["val_accuracy"],
        "train_accuracy": results["train_accuracy"],
        "feature_kinds": results["feature_kinds"],
        "penalty": results["config"]["penalty"],
        "C": results["C"],
        "nonzero_weights": results["nonzero_weights"],
        "neuron": {k: neuron[k] for k in ("index", "kind", "unit", "sign")},
        "neuron_test_accuracy": neuron["test_accuracy"],
        "output_dir": results["config"]["output_dir"],
    }


def main(config):
    """Fits and scores the classifier; returns the headline numbers."""
    from tf_mlstm.transfer import experiment  # pylint: disable=g-import-not-at-top

    results = experiment.run_transfer(config)
    for name in ("train", "val", "test"):
        if results.get(f"{name}_accuracy") is not None:
            logging.info(
                "%s accuracy %.4f (sentiment neuron alone %.4f)",
                name,
                results[f"{name}_accuracy"],
                results["neuron"][f"{name}_accuracy"],
            )
    return headline(results)


def run():
    """Entry point of `tf-mlstm-transfer`."""
    _main.run_binary(
        __name__,
        define_transfer_flags,
        main,
        config_from_flags,
        required=["model_dir", "train", "output_dir"],
    )


if __name__ == "__main__":
    run()
