r"""tf-mlstm-transfer: sentiment classification from a trained model's features.

  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/sst \
      --train_data=../shared/data/sst/train.csv --validation_data=../shared/data/sst/val.csv \
      --test_data=../shared/data/sst/test.csv --text_key=sentence --label_key=label
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/imdb \
      --train_data=imdb/train.jsonl --test_data=imdb/test.jsonl --features=auto,tfidf
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/amazon \
      --train_data=amazon/books.jsonl --test_data=amazon/electronics.jsonl \
      --text_key=reviewText --label_key=overall --label_threshold=4
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/sst5 \
      --train_data=sst5/train.csv --validation_data=sst5/val.csv --test_data=sst5/test.csv \
      --text_key=sentence
  tf-mlstm-transfer --model_dir=runs/r1 --output_dir=runs/r1/semeval \
      --train_data=semeval/train.csv --test_data=semeval/test.csv --text_key=Tweet \
      --label_key=anger,fear,joy,sadness --threshold_metric=f1

Reads labeled CSV / JSON lines (gzip or not) exactly as training text is
read and normalized: a class label (two classes or more), a score cut into
two classes with `--label_threshold`, raw values mapped to classes with
`--label_map` (e.g. `1:negative,2:negative,3:neutral,4:positive,5:positive`
for Amazon stars), or with several comma-separated `--label_key`s one 0/1
label each (multi-label). Featurizes every text with the model (by default
`--features=auto`: the final states, the hidden-state statistics and the
cell-state statistics, combined as validation prefers; or any combination
such as `--features=cell,cell_mean`; `tfidf` adds TF-IDF of word uni- and
bigrams fitted on the training texts, e.g. `--features=auto,tfidf`), fits an
L2- (or `--penalty=l1`) regularized logistic regression (two classes: the
paper's; more: multinomial;
multi-label: one per label, each with a threshold chosen on validation)
with C chosen on validation (`--validation_data`, or a seeded stratified
`--validation_fraction` of train), and finds the sentiment neuron (per class or
label: its top unit against the rest). Writes to `--output_dir`:
results.json, classifier.json (for tf-mlstm-classify and tf-mlstm-export
--classifier), neuron_histogram.png and accuracy_vs_labeled.png. The last
line printed is one JSON object with `test_accuracy` and the other headline
numbers.
"""

from absl import app
from absl import flags
from absl import logging

from tf_mlstm import outputs
from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main

FLAGS = flags.FLAGS


def define_transfer_flags():
    """Defines every tf-mlstm-transfer flag (all optional; `run` marks required ones)."""
    flags.DEFINE_string("model_dir", None, "A tf-mlstm-train (or tf-mlstm-finetune) --model_dir.")
    flags.DEFINE_string("train_data", None, "Labeled training files (comma-separated files/globs).")
    flags.DEFINE_string(
        "validation_data",
        "",
        "Labeled validation files; empty: hold out --validation_fraction of train.",
    )
    flags.DEFINE_string("test_data", "", "Labeled test files; empty: no test accuracy.")
    _flags.define_text_key()
    flags.DEFINE_list(
        "label_key",
        "label",
        "Key/column of the class label (two classes or more); several, comma-separated: one "
        "0/1 label each (multi-label, one classifier per label).",
    )
    flags.DEFINE_float(
        "label_threshold",
        None,
        "Read --label_key as a score (stars, a 1-10 rating) and label it positive when >= this "
        "value, negative below (e.g. --label_key=overall --label_threshold=4 for Amazon stars). "
        "Unset: the label is already a class.",
    )
    flags.DEFINE_string(
        "label_map",
        "",
        "Raw label values -> classes, as comma-separated VALUE:CLASS entries (e.g. "
        "1:negative,2:negative,3:neutral,4:positive,5:positive for Amazon stars); numbers match "
        "numerically (5.0 is 5), text case-insensitively; the classes keep the map's order. A "
        "value the map does not name is an error naming file and line.",
    )
    flags.DEFINE_enum(
        "threshold_metric",
        "accuracy",
        ["accuracy", "f1"],
        "Multi-label: what each label's probability threshold (and its C) maximizes on "
        "validation; f1 suits rare labels.",
    )
    flags.DEFINE_string(
        "output_dir",
        None,
        "Where results, classifier and plots are written; not a model folder (its results.json "
        "belongs to the run).",
    )
    _flags.define_overwrite("--output_dir")
    flags.DEFINE_string(
        "features",
        "auto",
        "Comma-separated of cell, hidden (final states), mean, max, min, std (of the hidden "
        "state), cell_mean, cell_max, cell_min (of the cell state), tfidf (TF-IDF of word uni- "
        "and bigrams, fitted on the training texts), concatenated; or auto (choose among final "
        "/ hidden statistics / cell statistics on validation); auto,tfidf: the n-grams are one "
        "more group to choose.",
    )
    flags.DEFINE_string(
        "num_labeled",
        "10,100,1000,all",
        "Training-set sizes for the accuracy curve (balanced seeded subsamples); empty: none.",
    )
    flags.DEFINE_integer("batch_size", 64, "Texts per model call.")
    flags.DEFINE_integer("window", 256, "Bytes per model call (the state carries across).")
    _flags.define_feature_precision()
    flags.DEFINE_integer(
        "max_train_examples", 0, "Use a seeded random subset of this many training texts (0 = all)."
    )
    flags.DEFINE_integer(
        "max_eval_examples",
        0,
        "Same for --validation_data and --test_data each (0 = all); for quick checks.",
    )
    flags.DEFINE_float(
        "validation_fraction",
        0.1,
        "Share of train held out for validation without --validation_data.",
    )
    flags.DEFINE_list(
        "c_grid", [], "Comma-separated inverse regularization strengths; empty: 1e-4 .. 1."
    )
    flags.DEFINE_enum(
        "penalty",
        "l2",
        ["l1", "l2"],
        "l2: dense weights, more accurate from the pooled features of small models; l1: sparse "
        "weights (Radford et al.), the units that carry sentiment stand out.",
    )
    flags.DEFINE_enum(
        "solver",
        "auto",
        ["auto", "batch", "liblinear", "saga", "lbfgs"],
        "auto: batch, this project's full-batch solver on float32 features (L-BFGS for l2, "
        "FISTA for l1); liblinear (two classes), saga and lbfgs (l2) are scikit-learn's.",
    )
    flags.DEFINE_integer(
        "cv_folds",
        5,
        "With a validation split under 2,000 rows, choose the features and C by this many "
        "folds of stratified cross-validation over train and validation together (the "
        "classifier is still fitted on train); 0: the validation split chooses.",
    )
    flags.DEFINE_integer("seed", 0, "Seed of subsamples, the held-out split and the solver.")
    flags.DEFINE_bool(
        "feature_cache",
        True,
        "Keep each split's model features in the user's cache folder "
        "($XDG_CACHE_HOME/tf_mlstm/features, ~/.cache without it; at most "
        "$TF_MLSTM_FEATURE_CACHE_MB megabytes, 4096 by default, least recently used "
        "first out), keyed by the weights, the texts, the kinds, --precision and --window, "
        "and read them back in any run that would compute the same; --nofeature_cache "
        "computes everything and keeps nothing.",
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


def config_from_flags():
    """One frozen, validated `TransferConfig` from FLAGS.

    Raises:
      app.UsageError: a flag value is invalid.
    """
    # Before TensorFlow and the model load (the precision is measured on it).
    outputs.refuse_existing("--output_dir", FLAGS.output_dir, FLAGS.overwrite)
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


def headline(results):
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


def neuron_note(results, split):
    """The sentiment neuron's accuracy on `split`, in parentheses, for a binary task's log line.

    Returns "" for other tasks, whose neurons are per class or label (results.json).
    """
    if results["task"] != "binary" or not results.get("neuron"):
        return ""
    return f" (sentiment neuron alone {results['neuron'][f'{split}_accuracy']:.4f})"


def check_before_work(flag_values):
    """The model, the data and the output folder, before TensorFlow starts (`preflight`).

    `--precision=auto` loads the model and measures it while the config is
    built, and the data is read after that: a missing file or a wrong folder
    is answered before either.
    """
    fv = flag_values
    preflight.check_trained_model(fv.model_dir)
    for name in ("train_data", "validation_data", "test_data"):
        preflight.check_input_files(name, fv[name].value)
    preflight.check_output_dir("output_dir", fv.output_dir)
    # The run's own folder: its results.json is not the transfer's to replace.
    preflight.check_not_run_dir(fv.output_dir, "output_dir")


def main(config):
    """Fits and scores the classifier; returns the headline numbers."""
    from tf_mlstm.transfer import experiment  # pylint: disable=g-import-not-at-top

    results = experiment.run_transfer(config)
    for name in ("train", "val", "test"):
        if results.get(f"{name}_accuracy") is not None:
            logging.info(
                "%s accuracy %.4f%s", name, results[f"{name}_accuracy"], neuron_note(results, name)
            )
    return headline(results)


def run():
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
