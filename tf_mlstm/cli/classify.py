r"""tf-mlstm-classify: class probabilities for new text with a fitted classifier.

  tf-mlstm-classify --model_dir=runs/r1 --classifier=runs/r1/sst/classifier.json \
      --input=reviews.jsonl --text_key=reviewText --output=scores.csv
  printf 'Great film.\nDull and long.\n' | tf-mlstm-classify --model_dir=runs/r1 \
      --classifier=runs/r1/sst/classifier.json --input=- --output=-
  tf-mlstm-classify --model_dir=runs/r1_sst --input=reviews.jsonl --output=scores.csv

With `--classifier`, a logistic regression of `tf-mlstm-transfer` classifies
features of the language model in `--model_dir` (a trained or a fine-tuned
one). Without it, `--model_dir` must be a finished `tf-mlstm-finetune` run,
and its fine-tuned encoder and head classify in float32 (texts cut to the
run's `--max_length`, as in fine-tuning; `--window` and `--precision` are not
used), with the decision thresholds chosen on its validation data.

`--input` is CSV / JSON lines / plain text files (read and normalized as
training text is; records without text are skipped and counted in the log),
or `-` for one text per line on stdin (read as bytes: blank lines and lines
that are not valid UTF-8 are skipped and counted the same way). The output CSV (`-`: stdout) has one
row per classified text: `index` (0-based, in reading order), `line` (where
the record starts in its file), then for a binary classifier `probability`
(of the positive class) and `label` (the predicted class); for K classes
`label` and `probability_<class>` for each class (summing to 1); for
multi-label `labels` (the predicted label names, joined by ";") and
`probability_<label>` for each label. No text is written back.

The input streams through in chunks of `--chunk_texts` texts: each chunk is
read, featurized, classified and its rows written (and flushed) before the
next is read, so memory stays bounded for any input size; progress (texts
done, their rate) is logged as chunks finish. stdout gets the rows as they
come; an output file is written beside its name (a hidden `.tmp-` sibling)
and renamed in only when every text is classified, after the model, the
classifier and the first chunk of input were checked, so a failure at any
stage leaves an earlier file of that name as it was.

A classifier knows its model: classifier.json records the fingerprint of the
weights it was fitted on, and another model (even of the same size) is
refused in one line unless `--allow_other_model` (then a warning).
`--precision` sets the policy the features are computed in; unset, the one
the classifier was fitted in (as tf-mlstm-export serves it).
"""

import contextlib
import itertools
import sys
from collections.abc import Iterator

import numpy as np
from absl import flags
from absl import logging

from tf_mlstm import outputs
from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config import choices
from tf_mlstm.config.binaries import ClassifyConfig

FLAGS = flags.FLAGS


_REQUIRED = ("model_dir", "input", "output")
"""The flags without which the binary does not start."""


def define_classify_flags() -> None:
    """Defines every tf-mlstm-classify flag from `ClassifyConfig` (`run` marks required ones)."""
    defaults = ClassifyConfig(model_dir="", classifier="", input="", output="")
    _flags.define_fields(
        defaults, ("model_dir", "classifier", "input", "output"), no_default=_REQUIRED
    )
    _flags.define_text_key(_flags.field_help(ClassifyConfig, "text_key"))
    _flags.define_fields(
        defaults,
        ("batch_size", "window", "precision", "allow_other_model", "overwrite", "chunk_texts"),
        choices={"precision": choices.PRECISION_CHOICES},
    )


def check_before_work(flag_values) -> None:
    """The model, the classifier, the input and the output, before TensorFlow starts.

    (`preflight`.) A folder as `--output` would be met only when the
    classified rows are renamed in, after all the work.
    """
    fv = flag_values
    if fv.classifier:
        preflight.check_input_file("classifier", fv.classifier, "classifier file")
        preflight.check_trained_model(fv.model_dir)
    else:
        preflight.check_finetune_run(fv.model_dir)
    preflight.check_input_files("input", fv.input)
    preflight.check_output_file("output", fv.output)
    # After the kind: a folder is no earlier output that --overwrite would replace.
    outputs.refuse_existing("--output", fv.output, fv.overwrite)


def load_predictor(config) -> tuple:
    """The model and classifier of `config`, as one function of texts.

    Returns:
      (predict, classes): `predict(texts)` gives (probabilities [N, K]
      (binary [N, 2]; multi-label [N, L]), labels: the predicted classes [N]
      (multi-label: [N, L] 0/1)); classes are the K class values (or L label
      names) of the probability columns.

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: a classifier that does not fit the model.
    """
    from tf_mlstm.transfer import predict  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer.probe import logistic  # pylint: disable=g-import-not-at-top

    choice = config.precision
    if config.classifier and not choice:
        # As the classifier's features were fitted (float32 for files without the record).
        choice = logistic.LogisticClassifier.load(config.classifier).head.precision or "float32"
    precision = (
        _flags.resolve_feature_precision(choice, config.model_dir, config.batch_size, config.window)
        if config.classifier
        else None
    )
    return predict.load_predictor(
        config.model_dir,
        config.classifier,
        config.batch_size,
        config.window,
        precision or "float32",
        allow_other_model=config.allow_other_model,
    )


def classify_chunks(config, stdin=None) -> Iterator[tuple]:
    """`predict.classify_in_chunks` of `config`'s model, classifier and input.

    Yields:
      (lines, probabilities, labels, classes) of each chunk of
      `config.chunk_texts` texts, in reading order (see `load_predictor`).
    """
    from tf_mlstm.transfer import predict  # pylint: disable=g-import-not-at-top

    model_predict, classes = load_predictor(config)
    yield from predict.classify_in_chunks(
        model_predict, classes, config.input, config.text_keys, config.chunk_texts, stdin
    )


def classify(config, stdin=None) -> tuple:
    """Classifies all of `config.input` at once (see `classify_chunks`).

    Returns:
      (lines, probabilities, labels, classes) for the texts in reading order.
    """
    chunks = list(classify_chunks(config, stdin))
    lines = [line for chunk in chunks for line in chunk[0]]
    probabilities = np.concatenate([chunk[1] for chunk in chunks])
    labels = np.concatenate([chunk[2] for chunk in chunks])
    return lines, probabilities, labels, chunks[0][3]


def main(config) -> None:
    """Classifies the input a chunk at a time, writing each chunk's rows as it goes.

    The model, the classifier and the first chunk of the input are checked
    before any output exists; a file output is written beside its name and
    renamed in at the end, so a failure leaves an earlier one as it was.
    """
    from tf_mlstm import fileio  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import predict  # pylint: disable=g-import-not-at-top

    chunks = classify_chunks(config)
    first = next(chunks)
    with contextlib.ExitStack() as stack:
        if config.output == "-":
            stream = sys.stdout
        else:
            tmp = stack.enter_context(fileio.replacing(config.output))
            stream = stack.enter_context(open(tmp, "w", encoding="utf-8", newline=""))
        writer = None
        for lines, probabilities, labels, classes in itertools.chain([first], chunks):
            if writer is None:
                writer = predict.PredictionsCsv(stream, classes, np.asarray(labels).ndim == 2)
            writer.write(lines, probabilities, labels)
    logging.info("Classified %d texts -> %s", writer.rows, config.output)


def run() -> None:
    """Entry point of `tf-mlstm-classify`."""
    _main.run_binary(
        __name__,
        define_classify_flags,
        main,
        ClassifyConfig,
        required=list(_REQUIRED),
    )


if __name__ == "__main__":
    run()
