"""Class probabilities of new text from a trained model: one function for both classifier kinds.

`load_predictor` turns a classifier.json or a fine-tuned run's head into one function of
texts; `classify_in_chunks` streams any input through it; `PredictionsCsv` writes rows.
"""

import csv
import itertools
from collections.abc import Callable
from collections.abc import Iterator

import numpy as np

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.data import readers
from tf_mlstm.data import text_input
from tf_mlstm.models import language_model
from tf_mlstm.models.classifier import predict_served_probabilities
from tf_mlstm.transfer import features
from tf_mlstm.transfer import finetune
from tf_mlstm.transfer.probe import logistic


def load_predictor(
    model_dir,
    classifier="",
    batch_size=features.DEFAULT_BATCH_SIZE,
    window=features.DEFAULT_WINDOW,
    precision="float32",
    model=None,
    allow_other_model=False,
) -> tuple[Callable, tuple]:
    """The model of `model_dir` and a classifier, as one function of texts.

    Args:
      model_dir: a trained or fine-tuned run folder.
      classifier: a classifier.json; "" = the fine-tuned head of `model_dir`.
      batch_size, window: texts and bytes per model call (window: a classifier.json's features).
      precision: the concrete policy a classifier.json's features are computed in.
      model: `model_dir`'s language model, already loaded in `precision` (classifier.json only).
      allow_other_model: apply a classifier fitted on other weights (with a warning).

    Returns:
      (predict, classes): `predict(texts)` -> (probabilities [N, K or L], labels
      [N] or [N, L] 0/1); classes name the probability columns.

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: a classifier that does not fit the model, or no classifier nor fine-tuned run.
    """
    if not classifier:
        return _finetuned_predictor(model_dir, batch_size)
    fitted = logistic.LogisticClassifier.load(classifier)
    head = fitted.head
    if model is None:
        model = language_model.MLSTMLanguageModel.from_run(model_dir, precision=precision)
    if model.hidden_size != fitted.report.hidden_size:
        raise errors.InvalidValueError(
            f"{classifier}: fitted on a {fitted.report.hidden_size}-unit model, but "
            f"{model_dir} has {model.hidden_size} units"
        )
    rundir.check_fitted_model(model, head.weights_sha256, classifier, model_dir, allow_other_model)
    # Callers that predict in chunks report progress for all of them, not each alone.
    featurizer = None
    if head.model_kinds:
        featurizer = features.TextFeaturizer(model, batch_size, window, head.model_kinds)
    ngrams = fitted.ngrams

    def predict(texts):
        computed = featurizer(texts, progress=False) if featurizer is not None else {}
        if ngrams is not None:
            # The n-grams come from the vocabulary stored with the classifier.
            computed[features.NGRAM_KIND] = ngrams.transform(texts)
        x = features.concat_features(computed, head.feature_kinds)
        logits = head.logits(x)
        probabilities = head.head_spec.probabilities(logits)
        return probabilities, head.head_spec.decide(probabilities, logits)

    return predict, head.head_spec.classes


def _finetuned_predictor(model_dir, batch_size):
    return classifier_predictor(finetune.load_finetuned_model(model_dir).model, batch_size)


def classifier_predictor(model, batch_size=features.DEFAULT_BATCH_SIZE) -> tuple[Callable, tuple]:
    """A fine-tuned `MLSTMClassifier` as `load_predictor`'s function of texts.

    Args:
      model: the classifier (texts cut to its `max_length`, as it was fine-tuned).
      batch_size: texts per model call.

    Returns:
      (predict, classes), as `load_predictor`.
    """

    def predict(texts):
        probabilities = predict_served_probabilities(model, texts, model.max_length, batch_size)
        return probabilities, model.head_spec.decide(probabilities)

    return predict, model.head_spec.classes


def classify_in_chunks(
    predict, classes, spec, text_keys, chunk_texts, stdin=None
) -> Iterator[tuple]:
    """Classifies the texts of `spec` `chunk_texts` at a time, so memory holds one chunk.

    Args:
      predict, classes: what `load_predictor` returns.
      spec: files/globs, or "-" for the lines of `stdin`.
      text_keys, chunk_texts: keys/columns holding the text; texts per chunk.
      stdin: the stream read for "-" (default `sys.stdin`).

    Yields:
      (lines, probabilities, labels, classes) of each chunk, in reading order.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tf_mlstm.progress import Progress  # pylint: disable=g-import-not-at-top
    from tf_mlstm.progress import byte_unit  # pylint: disable=g-import-not-at-top

    read_stats = readers.ReadStats()
    texts = text_input.iter_texts(spec, text_keys, stdin, read_stats)
    from_stdin = spec == text_input.STDIN
    if from_stdin:  # How much will come is not known.
        progress = Progress("Classifying", None, "texts")
    else:
        total = sum(tf.io.gfile.stat(path).length for path in readers.expand_inputs(spec))
        unit, scale = byte_unit(total)
        progress = Progress("Classifying", total, unit, scale=scale)
    done = 0
    with progress:
        while chunk := list(itertools.islice(texts, chunk_texts)):
            probabilities, labels = predict([text for _, text in chunk])
            done += len(chunk)
            if from_stdin:
                progress.update(done)
            else:  # The input read so far, as stored: the share of it classified.
                progress.update(read_stats.stored_bytes, texts=done)
            yield [line for line, _ in chunk], probabilities, labels, classes
        if not from_stdin:  # All read: the final line says all of it.
            progress.update(read_stats.stored_bytes, texts=done)


class PredictionsCsv:
    """Writes the predictions CSV a chunk at a time (columns: docs/transfer.md).

    Example:
    >>> import io
    >>> from tf_mlstm.transfer.predict import PredictionsCsv
    >>> out = io.StringIO()
    >>> writer = PredictionsCsv(out, classes=("negative", "positive"), multilabel=False)
    >>> writer.write(lines=[1, 2], probabilities=[[0.2, 0.8], [0.9, 0.1]],
    ...              labels=["positive", "negative"])
    >>> print(out.getvalue(), end="")
    index,line,probability,label
    0,1,0.800000,positive
    1,2,0.100000,negative
    """

    def __init__(self, stream, classes, multilabel):
        self._writer = csv.writer(stream, lineterminator="\n")
        self._stream = stream
        self._classes = tuple(classes)
        self._multilabel = multilabel
        self.rows = 0
        columns = [f"probability_{name}" for name in self._classes]
        if multilabel:
            self._writer.writerow(["index", "line", "labels", *columns])
        elif len(self._classes) == 2:
            self._writer.writerow(["index", "line", "probability", "label"])
        else:
            self._writer.writerow(["index", "line", "label", *columns])

    def write(self, lines, probabilities, labels) -> None:
        """Appends the rows of one chunk and flushes them."""
        for line, row, label in zip(lines, np.asarray(probabilities), np.asarray(labels)):
            if self._multilabel:
                names = ";".join(str(name) for name, on in zip(self._classes, label) if on)
                cells = [names, *(f"{p:.6f}" for p in row)]
            elif len(self._classes) == 2:
                cells = [f"{row[1]:.6f}", label]
            else:
                cells = [label, *(f"{p:.6f}" for p in row)]
            self._writer.writerow([self.rows, line, *cells])
            self.rows += 1
        self._stream.flush()


def write_predictions_csv(stream, lines, probabilities, labels, classes=(0, 1)) -> None:
    """Writes the whole predictions CSV to `stream` at once (see `PredictionsCsv`)."""
    writer = PredictionsCsv(stream, classes, np.asarray(labels).ndim == 2)
    writer.write(lines, probabilities, labels)
