r"""tf-mlstm-classify: class probabilities for new text with a fitted classifier.

  tf-mlstm-classify --model_dir=runs/r1 --classifier=runs/r1/sst/classifier.json \
      --input=reviews.jsonl --text_key=reviewText --output=scores.csv
  printf 'Great film.\nDull and long.\n' | tf-mlstm-classify --model_dir=runs/r1 \
      --classifier=runs/r1/sst/classifier.json --input=- --output=-
  tf-mlstm-classify --model_dir=runs/r1_sst --input=reviews.jsonl --output=scores.csv

With `--classifier`, a `tf-mlstm-transfer` classifier classifies features of
`--model_dir` (one fitted on other weights is refused unless
`--allow_other_model`); without it, `--model_dir` must be a finished
`tf-mlstm-finetune` run, whose own head classifies. `--input` is CSV / JSON
lines / text files, or `-` for one text per line on stdin. The CSV (`-`:
stdout) has a row per text: `index`, `line`, then the probabilities and
labels. It streams in chunks of `--chunk_texts`, and a file is renamed in
only when every text is classified. Columns and details: docs/transfer.md.
"""

import contextlib
import itertools
import sys
from collections.abc import Iterator

import numpy as np
from absl import flags
from absl import logging

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
    """The model, classifier, input and output, before TensorFlow starts (`preflight`)."""
    fv = flag_values
    if fv.classifier:
        preflight.check_input_file("classifier", fv.classifier, "classifier file")
        preflight.check_trained_model(fv.model_dir)
    else:
        preflight.check_finetune_run(fv.model_dir)
    preflight.check_input_files("input", fv.input)
    preflight.check_output_file("output", fv.output)
    # After the kind: a folder is no earlier output that --overwrite would replace.
    preflight.refuse_existing("--output", fv.output, fv.overwrite)


def load_predictor(config) -> tuple:
    """The model and classifier of `config`, as one function of texts.

    Returns:
      (predict, classes): `predict(texts)` gives (probabilities [N, K] (binary
      [N, 2]; multi-label [N, L]), predicted labels [N] (multi-label [N, L] 0/1));
      classes are the K class values (or L label names) of the columns.

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: a classifier that does not fit the model.
    """
    from tf_mlstm.transfer import features  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import predict  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer.probe import logistic  # pylint: disable=g-import-not-at-top

    precision = None
    if config.classifier:
        fitted = None if config.precision else logistic.LogisticClassifier.load(config.classifier)
        choice = features.classifier_precision(config.precision, fitted)
        precision = _flags.resolve_feature_precision(
            choice, config.model_dir, config.batch_size, config.window
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

    A file output is renamed in at the end, so a failure leaves an earlier one as it was.
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
