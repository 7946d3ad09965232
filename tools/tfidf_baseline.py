r"""The supervised bag-of-words baseline beside every transfer result.

TF-IDF of word unigrams and bigrams (`tf_mlstm.transfer.ngrams`, the
vectorizer `tf-mlstm-transfer --features=tfidf` uses), then a logistic
regression with C chosen on validation: the reference a pretrained model's features and its
fine-tuning are compared with. It reads, splits and scores labeled data
through `tf_mlstm.transfer.labeled`, exactly as `tf-mlstm-transfer` and
`tf-mlstm-finetune` do, so the three see the same rows:

  python tools/tfidf_baseline.py --train_data=../shared/data/sst/train.csv \
      --validation_data=../shared/data/sst/val.csv --test_data=../shared/data/sst/test.csv \
      --text_key=sentence --label_key=label
  python tools/tfidf_baseline.py --train_data=semeval/train.csv --test_data=semeval/test.csv \
      --text_key=Tweet --label_key=anger,anticipation,disgust,fear,joy,love,optimism,\
pessimism,sadness,surprise,trust

One label key: one multinomial regression over the classes (two or more).
Several: one binary regression per label, each with its own C and a
probability threshold chosen on validation (`--threshold_metric`). Without
`--validation_data`, a stratified `--validation_fraction` of train is held out
(and without `--test_data`, first a `--test_fraction`, when given). The last
line printed is one JSON object with the validation and test metrics.

`--compare` sets the project's words side against the standard recipe on the
same rows: `reference` is scikit-learn's `TfidfVectorizer(ngram_range=(1, 2),
sublinear_tf=True)` (its own defaults otherwise: every n-gram of the training
texts, its tokenizer) and `LogisticRegression` with C chosen on validation over
`REFERENCE_C_GRID`; `project` is what `tf-mlstm-transfer --features=tfidf`
fits with its defaults (`tf_mlstm.transfer.experiment.fit_features`); the
last line then holds both and `difference`, the project's test metric minus
the reference's (accuracy; multi-label: Jaccard).
"""

import numpy as np
from absl import app
from absl import flags
from absl import logging
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from tf_mlstm import config as settings
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer import ngrams

FLAGS = flags.FLAGS
C_GRID = (0.25, 1.0, 4.0, 16.0, 64.0)
REFERENCE_C_GRID = tuple(float(c) for c in np.logspace(-1, 3, 9))
"""`--compare`'s grid for the reference: 0.1 to 1000 in half decades, the raw-TF-IDF
equivalent of transfer's default grid on its scaled n-grams."""


def define_flags():
    """Defines this tool's flags."""
    flags.DEFINE_string("train_data", None, "Labeled training files (comma-separated files/globs).")
    flags.DEFINE_string(
        "validation_data", "", "Labeled validation files; empty: hold out --validation_fraction."
    )
    flags.DEFINE_string("test_data", "", "Labeled test files; empty: no test metrics.")
    _flags.define_text_key()
    flags.DEFINE_list("label_key", ["label"], "Label key; several keys = multi-label (0/1 each).")
    flags.DEFINE_string(
        "label_map", "", f"Raw values -> classes, e.g. {labeled.LABEL_MAP_EXAMPLE}."
    )
    flags.DEFINE_float(
        "label_threshold", None, "Read the label as a score: positive when >= this value."
    )
    flags.DEFINE_float(
        "validation_fraction", 0.1, "Share of train held out without --validation_data."
    )
    flags.DEFINE_float(
        "test_fraction",
        0.0,
        "Without --test_data: a stratified share of train held out as test first (0 = none).",
    )
    flags.DEFINE_bool(
        "compare",
        False,
        "Fit scikit-learn's standard TF-IDF recipe and transfer's words-only fit on the same "
        "rows and print both.",
    )
    flags.DEFINE_integer(
        "max_train_examples",
        0,
        "A seeded random subset of this many training texts (0 = all): the rows "
        "tf-mlstm-transfer and tf-mlstm-finetune keep with the same value and --seed.",
    )
    flags.DEFINE_integer(
        "max_eval_examples", 0, "The same for --validation_data and --test_data each (0 = all)."
    )
    flags.DEFINE_enum(
        "threshold_metric",
        "accuracy",
        list(settings.THRESHOLD_METRICS),
        "Multi-label: what each label's threshold maximizes on validation.",
    )
    flags.DEFINE_list("c_grid", [str(c) for c in C_GRID], "Inverse regularization strengths.")
    flags.DEFINE_integer("seed", 0, "Seed of the held-out split and the solver.")
    for old, new in (
        ("train", "train_data"),
        ("val", "validation_data"),
        ("test", "test_data"),
        ("val_fraction", "validation_fraction"),
    ):
        _flags.define_deprecated_alias(old, new)  # the spellings of earlier releases


def read_splits(config):
    """(train, val, test-or-None) `LabeledData`, val held out of train when not given."""
    label_map = labeled.parse_label_map(config["label_map"])

    def read(spec, limit):
        return labeled.read_labeled(
            spec,
            config["text_keys"],
            config["label_keys"],
            config["label_threshold"],
            label_map,
            limit=limit,
            seed=config["seed"],
        )

    train = read(config["train_data"], config["max_train_examples"])
    test = read(config["test_data"], config["max_eval_examples"]) if config["test_data"] else None
    if test is None and config.get("test_fraction"):
        train, test = labeled.split_off(train, config["test_fraction"], config["seed"])
    if config["validation_data"]:
        val = read(config["validation_data"], config["max_eval_examples"])
    else:
        train, val = labeled.split_off(train, config["validation_fraction"], config["seed"])
    return train, val, test


def fit_classes(x_train, y_train, x_val, y_val, c_grid, seed):
    """The multinomial regression whose C scores best on validation, and that C."""
    best = None
    for c in c_grid:
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(x_train, y_train)
        accuracy = float(np.mean(model.predict(x_val) == y_val))
        logging.info("C=%g: validation accuracy %.4f", c, accuracy)
        if best is None or accuracy > best[0]:
            best = (accuracy, c, model)
    return best[2], best[1]


def single_label(train, val, test, vectorizer, config):
    """Metrics of one multinomial regression over the training classes."""
    classes = train.classes()
    y_train = labeled.encode_classes(train, classes)
    model, c = fit_classes(
        vectorizer.transform(train.texts),
        y_train,
        vectorizer.transform(val.texts),
        labeled.encode_classes(val, classes),
        config["c_grid"],
        config["seed"],
    )
    result = {"task": "multiclass" if len(classes) > 2 else "binary", "C": c}
    for name, data in (("val", val), ("test", test)):
        if data is not None:
            predicted = model.predict(vectorizer.transform(data.texts))
            true = labeled.encode_classes(data, classes)
            result[name] = labeled.class_metrics(true, predicted, classes)
    return result


def multi_label(train, val, test, vectorizer, config):
    """Metrics of one binary regression per label, thresholds chosen on validation."""
    x_train, x_val = vectorizer.transform(train.texts), vectorizer.transform(val.texts)
    models, cs = [], []
    for k, key in enumerate(train.label_keys):
        logging.info("label %s", key)
        model, c = fit_classes(
            x_train, train.labels[:, k], x_val, val.labels[:, k], config["c_grid"], config["seed"]
        )
        models.append(model)
        cs.append(c)

    def probabilities(x):
        return np.stack([model.predict_proba(x)[:, 1] for model in models], axis=1)

    thresholds = labeled.choose_thresholds(
        probabilities(x_val), val.labels, config["threshold_metric"]
    )
    result = {"task": "multilabel", "C": cs, "thresholds": thresholds.tolist()}
    for name, data in (("val", val), ("test", test)):
        if data is not None:
            predicted = probabilities(vectorizer.transform(data.texts)) > thresholds
            result[name] = labeled.label_metrics(
                data.labels, predicted, train.label_keys, thresholds
            )
    return result


def run_baseline(config):
    """Reads the splits, fits the vectorizer on train, and scores val and test."""
    train, val, test = read_splits(config)
    logging.info("train %d, val %d, test %d texts", len(train), len(val), len(test or ()))
    vectorizer, _ = ngrams.fit_vocabulary(train.texts)
    fit = multi_label if train.multilabel else single_label
    result = fit(train, val, test, vectorizer, config)
    result["features"] = len(vectorizer)
    result["examples"] = {"train": len(train), "val": len(val), "test": len(test or ())}
    return result


def reference_vectorizer(train_texts):
    """scikit-learn's standard TF-IDF: uni- and bigrams, sublinear tf, its other defaults."""
    return TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit(train_texts)


def run_reference(train, val, test, config):
    """scikit-learn's standard recipe on the splits: its vectorizer, C on validation."""
    vectorizer = reference_vectorizer(train.texts)
    fit = multi_label if train.multilabel else single_label
    result = fit(train, val, test, vectorizer, dict(config, c_grid=REFERENCE_C_GRID))
    result["features"] = len(vectorizer.vocabulary_)
    return result


def run_project_words(train, val, test, config):
    """What `tf-mlstm-transfer --features=tfidf` fits on the splits, with its defaults."""
    # pylint: disable=import-outside-toplevel
    from tf_mlstm.transfer import experiment

    transfer = experiment.TransferConfig(
        model_dir="-",
        output_dir="-",
        train_data=config["train_data"],
        label_key=tuple(config["label_keys"]),
        features=ngrams.NGRAM_KIND,
        threshold_metric=config["threshold_metric"],
        seed=config["seed"],
        **({"cv_folds": config["cv_folds"]} if "cv_folds" in config else {}),
    )
    splits = {"train": train, "val": val, **({"test": test} if test is not None else {})}
    data = experiment.make_data(transfer, train, splits, held_out=not config["validation_data"])
    features, _, vocabulary = experiment.featurize(transfer, None, data)
    kinds, _, c_choice, xy, classifier, sweep, seconds = experiment.fit_features(
        transfer, features, data, 0, vocabulary
    )
    result = {
        "task": classifier.head.head_spec.kind,
        "kinds": list(kinds),
        "C": classifier.report.C,
        "features": len(vocabulary),
        "C_by": "validation" if c_choice is None else f"{c_choice['folds']}-fold cross-validation",
        "fit_seconds": round(seconds, 2),
        "not_converged": sorted({row["C"] for row in sweep if not row["converged"]}),
    }
    for name in ("val", "test"):
        if name in xy:
            result[name] = classifier.metrics(*xy[name])
    return result


def run_compare(config):
    """The reference and the project's words side on the same splits, and their difference."""
    train, val, test = read_splits(config)
    logging.info("train %d, val %d, test %d texts", len(train), len(val), len(test or ()))
    result = {
        "reference": _headline(run_reference(train, val, test, config)),
        "project": _headline(run_project_words(train, val, test, config)),
        "examples": {"train": len(train), "val": len(val), "test": len(test or ())},
    }
    split = "test" if test is not None else "val"
    metric = "jaccard" if train.multilabel else "accuracy"
    result["difference"] = {
        "split": split,
        "metric": metric,
        "project_minus_reference": round(
            result["project"][split][metric] - result["reference"][split][metric], 4
        ),
    }
    return result


_LABELED_FLAGS = (
    "train_data",
    "validation_data",
    "test_data",
    "text_key",
    "label_key",
    "label_map",
    "validation_fraction",
    "max_train_examples",
    "max_eval_examples",
)


def _config():
    try:
        c_grid = tuple(float(c) for c in FLAGS.c_grid)
    except ValueError:
        raise app.UsageError(f"--c_grid must be numbers, got {FLAGS.c_grid}") from None
    if not c_grid or min(c_grid) <= 0:
        raise app.UsageError("--c_grid must hold positive numbers")
    if not 0 <= FLAGS.test_fraction < 1:
        raise app.UsageError(f"--test_fraction must be in [0, 1), got {FLAGS.test_fraction}")
    if FLAGS.test_fraction and FLAGS.test_data:
        raise app.UsageError("--test_fraction holds test rows out of train: not with --test_data")
    # The labeled-data flags are checked as transfer and fine-tuning check them.
    settings.LabeledDataFields(
        **{name: FLAGS[name].value for name in _LABELED_FLAGS}
    ).validate_labeled_data()
    return {
        "train_data": FLAGS.train_data,
        "validation_data": FLAGS.validation_data,
        "test_data": FLAGS.test_data,
        "text_keys": _flags.text_keys(FLAGS.text_key),
        "label_keys": _flags.text_keys(FLAGS.label_key),
        "label_map": FLAGS.label_map,
        "label_threshold": FLAGS.label_threshold,
        "validation_fraction": FLAGS.validation_fraction,
        "test_fraction": FLAGS.test_fraction,
        "compare": FLAGS.compare,
        "max_train_examples": FLAGS.max_train_examples,
        "max_eval_examples": FLAGS.max_eval_examples,
        "threshold_metric": FLAGS.threshold_metric,
        "c_grid": c_grid,
        "seed": FLAGS.seed,
    }


def _headline(result):
    """The final line: test (else validation) metrics that name the task."""
    keys = ("accuracy", "macro_f1", "f1", "jaccard", "micro_f1")
    fields = ("task", "kinds", "C", "C_by", "features", "examples")
    line = {field: result[field] for field in fields if field in result}
    for split in ("val", "test"):
        if split in result:
            line[split] = {k: result[split][k] for k in keys if k in result[split]}
    return line


def _body(config):
    return run_compare(config) if config["compare"] else _headline(run_baseline(config))


def run():
    """Entry point: defines the flags and runs the baseline."""
    _main.run_binary(
        __name__,
        define_flags,
        _body,
        _config,
        required=["train_data"],
    )


if __name__ == "__main__":
    run()
