"""tf-mlstm-classify: class probabilities for new text with a fitted classifier.

  tf-mlstm-classify --model_dir=runs/r1 --classifier=runs/r1/sst/classifier.json \
      --input=reviews.jsonl --text_key=reviewText --output=scores.csv
  printf 'Great film.\nDull and long.\n' | tf-mlstm-classify --model_dir=runs/r1 \
      --classifier=runs/r1/sst/classifier.json --input=- --output=-
  tf-mlstm-classify --model_dir=runs/r1_sst --input=reviews.jsonl --output=scores.csv

With `--classifier`, a logistic regression of `tf-mlstm-transfer` classifies
features of the language model in `--model_dir` (a trained or a fine-tuned
one). Without it, `--model_dir` must be a finished `tf-mlstm-finetune` run,
and its fine-tuned encoder and head classify (texts cut to the run's
`--max_length`, as in fine-tuning; `--window` is not used), with the decision
thresholds chosen on its validation data.

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
"""

import csv
import dataclasses
import sys

import numpy as np
from absl import flags
from absl import logging

from tf_mlstm import errors
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class ClassifyConfig:
    """What to classify. Field names match the flags."""

    model_dir: str
    classifier: str  # "" = the fine-tuned head of model_dir
    input: str
    output: str
    text_key: tuple = _flags.TEXT_KEYS
    batch_size: int = 64
    window: int = 256

    @property
    def text_keys(self):
        """The `text_key` list as a tuple, blanks left out."""
        return _flags.text_keys(self.text_key)

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        if self.batch_size <= 0 or self.window <= 0:
            raise errors.InvalidValueError("--batch_size and --window must be positive")
        if not self.text_keys:
            raise errors.InvalidValueError("--text_key must name at least one key")
        return self


def define_classify_flags():
    """Defines every tf-mlstm-classify flag (all optional; `run` marks required ones)."""
    flags.DEFINE_string(
        "model_dir",
        None,
        "The --model_dir the classifier's features come from; without --classifier, a "
        "tf-mlstm-finetune --model_dir.",
    )
    flags.DEFINE_string(
        "classifier",
        "",
        "A classifier.json written by tf-mlstm-transfer; empty = the fine-tuned head of "
        "--model_dir.",
    )
    flags.DEFINE_string(
        "input", None, "Files/globs to classify (CSV, JSONL, text), or - for stdin."
    )
    flags.DEFINE_string("output", None, "The CSV to write, or - for stdout.")
    defaults = ClassifyConfig("", "", "", "")
    _flags.define_text_key()
    flags.DEFINE_integer("batch_size", defaults.batch_size, "Texts per model call.")
    flags.DEFINE_integer("window", defaults.window, "Bytes per model call.")


def read_texts(spec, text_keys, stdin=None):
    """The texts to classify and where each came from.

    Records that cannot be used are skipped and counted in a `readers.SkipLog`
    whose summary is logged (one line with the counts per reason, then the
    first examples as "path:line: message"); stdin is "<stdin>" there.

    Args:
      spec: files/globs for `readers.read_documents`, or "-" for stdin lines.
      text_keys: keys/columns holding the text.
      stdin: the stream read for "-" (default: the bytes of `sys.stdin`); a
        text stream is accepted too.

    Returns:
      (texts, lines): normalized texts and the line each starts at.

    Raises:
      FileNotFoundError: a file or glob names nothing.
      ValueError: nothing to classify.
    """
    from tf_mlstm.data import readers  # pylint: disable=g-import-not-at-top

    texts, lines = [], []
    if spec == "-":
        skip_log = readers.SkipLog()
        stream = stdin if stdin is not None else sys.stdin.buffer
        for number, line in enumerate(stream, 1):
            text = _stdin_text(line, number, skip_log)
            if text:
                texts.append(text)
                lines.append(number)
        skip_log.log_summary()
    else:
        for document in readers.read_documents(readers.expand_inputs(spec), text_keys):
            texts.append(document.text)
            lines.append(document.line)
    if not texts:
        raise errors.InvalidValueError(f"{'stdin' if spec == '-' else spec}: no text to classify")
    return texts, lines


def _stdin_text(line, number, skip_log):
    """One stdin line (bytes or str) -> normalized text, or None after counting a skip."""
    from tf_mlstm.data import readers  # pylint: disable=g-import-not-at-top
    from tf_mlstm.data.text import normalize_text  # pylint: disable=g-import-not-at-top

    if isinstance(line, bytes):
        try:
            # Strict: the locale's decoder would crash, or smuggle the bytes in as escapes.
            line = line.decode("utf-8")
        except UnicodeDecodeError as e:
            skip_log.add(
                readers.INVALID_UTF8, "<stdin>", number, f"invalid UTF-8 at byte {e.start}"
            )
            return None
    if not line.strip():
        skip_log.add(readers.EMPTY_LINE, "<stdin>", number, "blank line")
        return None
    text = normalize_text(line)
    if not text:
        skip_log.add(readers.EMPTY_TEXT, "<stdin>", number, "empty after normalization")
    return text or None


def classify(config, stdin=None):
    """Classifies the texts of `config.input`.

    Args:
      config: a validated `ClassifyConfig`.
      stdin: the stream read for `--input=-` (default `sys.stdin`).

    Returns:
      (lines, probabilities, labels, classes) for the texts in reading order:
      probabilities [N, K] (binary [N, 2]; multi-label [N, L]), labels the
      predicted classes [N] (multi-label: [N, L] 0/1), classes the K class
      values (or L label names) of the probability columns.

    Raises:
      FileNotFoundError: a missing model, classifier or input.
      ValueError: a classifier that does not fit the model, or no text.
    """
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import features  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import logistic  # pylint: disable=g-import-not-at-top

    if not config.classifier:
        return _classify_finetuned(config, stdin)
    classifier = logistic.LogisticClassifier.load(config.classifier)
    model, _ = rundir.load_trained_model(config.model_dir)
    if model.hidden_size != classifier.hidden_size:
        raise errors.InvalidValueError(
            f"{config.classifier}: fitted on a {classifier.hidden_size}-unit model, but "
            f"{config.model_dir} has {model.hidden_size} units"
        )
    texts, lines = read_texts(config.input, config.text_keys, stdin)
    featurizer = features.TextFeaturizer(
        model, config.batch_size, config.window, classifier.feature_kinds
    )
    x = features.concat_features(featurizer(texts), classifier.feature_kinds)
    return lines, classifier.predict_proba(x), classifier.predict(x), classifier.classes


def _classify_finetuned(config, stdin):
    """`classify` with the fine-tuned encoder and head of `config.model_dir`."""
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import finetune  # pylint: disable=g-import-not-at-top

    if not rundir.is_finetune_run(config.model_dir):
        raise errors.InvalidValueError(
            f"--model_dir={config.model_dir} is not a finished tf-mlstm-finetune run (no "
            f"{rundir.FINETUNE_CONFIG_FILE} and {rundir.RESULTS_FILE}); give "
            "--classifier=classifier.json for a tf-mlstm-transfer classifier"
        )
    tuned = finetune.load_finetuned_model(config.model_dir)
    texts, lines = read_texts(config.input, config.text_keys, stdin)
    probabilities = tuned.predict_proba(texts, config.batch_size)
    return lines, probabilities, tuned.predict(probabilities), tuned.classes


def write_csv(stream, lines, probabilities, labels, classes=(0, 1)):
    """Writes the predictions CSV to `stream` (columns: see the module doc).

    Args:
      stream: a text stream.
      lines, probabilities, labels, classes: as `classify` returns them.
    """
    writer = csv.writer(stream, lineterminator="\n")
    probabilities = np.asarray(probabilities)
    labels = np.asarray(labels)
    columns = [f"probability_{name}" for name in classes]
    if labels.ndim == 2:
        writer.writerow(["index", "line", "labels", *columns])
    elif len(classes) == 2:
        writer.writerow(["index", "line", "probability", "label"])
    else:
        writer.writerow(["index", "line", "label", *columns])
    for index, (line, row, label) in enumerate(zip(lines, probabilities, labels)):
        if labels.ndim == 2:
            names = ";".join(str(name) for name, on in zip(classes, label) if on)
            writer.writerow([index, line, names, *(f"{p:.6f}" for p in row)])
        elif len(classes) == 2:
            writer.writerow([index, line, f"{row[1]:.6f}", label])
        else:
            writer.writerow([index, line, label, *(f"{p:.6f}" for p in row)])


def main(config):
    """Classifies the input and writes the CSV."""
    lines, probabilities, labels, classes = classify(config)
    if config.output == "-":
        write_csv(sys.stdout, lines, probabilities, labels, classes)
    else:
        with open(config.output, "w", encoding="utf-8", newline="") as f:
            write_csv(f, lines, probabilities, labels, classes)
    logging.info("Classified %d texts -> %s", len(lines), config.output)


def run():
    """Entry point of `tf-mlstm-classify`."""
    _main.run_binary(
        __name__,
        define_classify_flags,
        main,
        ClassifyConfig,
        required=["model_dir", "input", "output"],
    )


if __name__ == "__main__":
    run()
