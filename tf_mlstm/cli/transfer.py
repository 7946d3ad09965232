r"""tf-mlstm-transfer: sentiment classification from a trained model's features.

  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/sst \
      --train_data=../shared/data/sst/train.csv --validation_data=../shared/data/sst/val.csv \
      --test_data=../shared/data/sst/test.csv --text_key=sentence --label_key=label
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/imdb \
      --train_data=imdb/train.jsonl --test_data=imdb/test.jsonl --features=auto,tfidf
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/semeval \
      --train_data=semeval/train.csv --test_data=semeval/test.csv --text_key=Tweet \
      --label_key=anger,fear,joy,sadness --threshold_metric=f1

Reads labeled CSV / JSON lines (a class label, a score cut by
`--label_threshold`, values mapped by `--label_map`, or several `--label_key`s
for multi-label), featurizes every text (`--features`), fits a regularized
logistic regression with C chosen on validation, and finds the sentiment
neuron. Writes results.json, classifier.json (for tf-mlstm-classify and
tf-mlstm-export --classifier) and plots to `--output_dir`; the last line is
one JSON object with `test_accuracy` and the other headline numbers. More
recipes and details: docs/transfer.md.
"""

from absl import app
from absl import flags
from absl import logging

from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config import TransferConfig
from tf_mlstm.config import choices

FLAGS = flags.FLAGS


def define_transfer_flags() -> None:
    """Defines every tf-mlstm-transfer flag (all optional; `run` marks required ones)."""
    flags.DEFINE_string("model_dir", None, _flags.field_help(TransferConfig, "model_dir"))
    flags.DEFINE_string("train_data", None, _flags.field_help(TransferConfig, "train_data"))
    defaults = TransferConfig()
    _flags.define_fields(defaults, ("validation_data", "test_data"))
    _flags.define_text_key(_flags.field_help(TransferConfig, "text_key"))
    _flags.define_fields(
        defaults,
        ("label_key", "label_threshold", "label_map", "threshold_metric"),
        choices={"threshold_metric": choices.THRESHOLD_METRICS},
    )
    flags.DEFINE_string("output_dir", None, _flags.field_help(TransferConfig, "output_dir"))
    _flags.define_overwrite(
        "--output_dir", help_text=_flags.field_help(TransferConfig, "overwrite")
    )
    _flags.define_fields(defaults, ("features",))
    # A text here, parsed into the field's tuple of counts (`parse_num_labeled`).
    flags.DEFINE_string(
        "num_labeled",
        "10,100,1000,all",
        _flags.field_help(TransferConfig, "num_labeled"),
    )
    _flags.define_fields(defaults, ("batch_size", "window"))
    _flags.define_feature_precision(help_text=_flags.field_help(TransferConfig, "precision"))
    _flags.define_fields(
        defaults, ("max_train_examples", "max_eval_examples", "validation_fraction")
    )
    # Empty: the field's default grid.
    flags.DEFINE_list("c_grid", [], _flags.field_help(TransferConfig, "c_grid"))
    _flags.define_fields(
        defaults,
        ("penalty", "solver", "cv_folds", "seed", "feature_cache"),
        choices={"penalty": choices.PENALTIES, "solver": choices.SOLVERS},
    )
    for old, new in _RENAMED:
        _flags.define_deprecated_alias(old, new)


# Spellings of earlier releases, kept for now.
_RENAMED = (
    ("train", "train_data"),
    ("val", "validation_data"),
    ("test", "test_data"),
    ("val_fraction", "validation_fraction"),
)


def _floats(values, name):
    try:
        return tuple(float(piece) for piece in values if piece.strip())
    except ValueError:
        raise app.UsageError(
            f"--{name} must be comma-separated numbers, got {','.join(values)!r}"
        ) from None


def config_from_flags() -> TransferConfig:
    """One frozen, validated `TransferConfig` from FLAGS.

    Raises:
      app.UsageError: a flag value is invalid.
    """
    # Before TensorFlow and the model load (the precision is measured on it).
    preflight.refuse_existing("--output_dir", FLAGS.output_dir, FLAGS.overwrite)
    from tf_mlstm.transfer import experiment  # pylint: disable=g-import-not-at-top

    try:
        values = {
            "overwrite": FLAGS.overwrite,
            "model_dir": FLAGS.model_dir,
            "train_data": FLAGS.train_data,
            "output_dir": FLAGS.output_dir,
            "validation_data": FLAGS.validation_data,
            "test_data": FLAGS.test_data,
            "text_key": _flags.text_keys(FLAGS.text_key),
            "label_key": FLAGS.label_key,
            "label_threshold": FLAGS.label_threshold,
            "label_map": FLAGS.label_map,
            "threshold_metric": FLAGS.threshold_metric,
            "features": FLAGS.features,
            "num_labeled": experiment.parse_num_labeled(FLAGS.num_labeled),
            "batch_size": FLAGS.batch_size,
            "window": FLAGS.window,
            "precision": _flags.resolve_feature_precision(
                FLAGS.precision, FLAGS.model_dir, FLAGS.batch_size, FLAGS.window
            ),
            "max_train_examples": FLAGS.max_train_examples,
            "max_eval_examples": FLAGS.max_eval_examples,
            "validation_fraction": FLAGS.validation_fraction,
            "penalty": FLAGS.penalty,
            "solver": FLAGS.solver,
            "cv_folds": FLAGS.cv_folds,
            "seed": FLAGS.seed,
            "feature_cache": FLAGS.feature_cache,
        }
        if FLAGS.c_grid:
            values["c_grid"] = _floats(FLAGS.c_grid, "c_grid")
        config = experiment.TransferConfig(**values)
        config.validate()
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    return config


def headline(results) -> dict:
    """The one-line JSON summary printed last."""
    line = {
        "test_accuracy": results["test_accuracy"],
        "val_accuracy": results["val_accuracy"],
        "train_accuracy": results["train_accuracy"],
        "feature_kinds": results["feature_kinds"],
        "penalty": results["config"]["penalty"],
        "C": results["C"],
        "nonzero_weights": results["nonzero_weights"],
    }
    if results["task"] == "binary" and results.get("no_neuron"):
        line.update(neuron=None, no_neuron=results["no_neuron"])
    elif results["task"] == "binary":
        neuron = results["neuron"]
        line["neuron"] = {k: neuron[k] for k in ("index", "kind", "unit", "sign")}
        line["neuron_test_accuracy"] = neuron["test_accuracy"]
    else:
        split = "test" if "test" in results["metrics"] else "val"
        multilabel = results["task"] == "multilabel"
        names = ("jaccard", "micro_f1", "macro_f1") if multilabel else ("macro_f1",)
        line["task"] = results["task"]
        line.update({f"{split}_{name}": results["metrics"][split][name] for name in names})
    if results.get("warnings"):
        line["warnings"] = results["warnings"]
    line["output_dir"] = results["config"]["output_dir"]
    return line


def neuron_note(results, split) -> str:
    """The neuron's accuracy on `split` in parentheses, for a binary task's log line, else ""."""
    if results["task"] != "binary" or not results.get("neuron"):
        return ""
    return f" (sentiment neuron alone {results['neuron'][f'{split}_accuracy']:.4f})"


def check_before_work(flag_values) -> None:
    """The model, the data and the output folder, before TensorFlow starts (`preflight`).

    Before `--precision=auto` loads and measures the model while the config is built.
    """
    fv = flag_values
    preflight.check_trained_model(fv.model_dir)
    for name in ("train_data", "validation_data", "test_data"):
        preflight.check_input_files(name, fv[name].value)
    preflight.check_output_dir("output_dir", fv.output_dir)
    # The run's own folder: its results.json is not the transfer's to replace.
    preflight.check_not_run_dir(fv.output_dir, "output_dir")


def main(config) -> dict:
    """Fits and scores the classifier; returns the headline numbers."""
    from tf_mlstm.transfer import experiment  # pylint: disable=g-import-not-at-top

    results = experiment.run_transfer(config)
    for name in ("train", "val", "test"):
        if results.get(f"{name}_accuracy") is not None:
            logging.info(
                "%s accuracy %.4f%s", name, results[f"{name}_accuracy"], neuron_note(results, name)
            )
    return headline(results)


def run() -> None:
    """Entry point of `tf-mlstm-transfer`."""
    _main.run_binary(
        __name__,
        define_transfer_flags,
        main,
        config_from_flags,
        required=["model_dir", "train_data", "output_dir"],
    )


if __name__ == "__main__":
    run()
