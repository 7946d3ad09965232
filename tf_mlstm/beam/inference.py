"""Batch classification and featurization as a Beam pipeline: `tf-mlstm-classify-beam`.

Beam's `RunInference` applies a SavedModel's `classify` or `featurize` signature to every text
of many files, each a JSON line (`input`, `line`, the outputs) in shards moved in at the end
(docs/distributed.md, "Batch classification").
"""

import itertools
import json
import os
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from absl import logging
from apache_beam.ml.inference import base as inference_base

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm.beam import options as beam_options
from tf_mlstm.data import fields
from tf_mlstm.data import readers

SIGNATURES = ("classify", "featurize")
_METRICS_NAMESPACE = "tf_mlstm"
_SKIPPED = "skipped_"
# Batches' worth of texts read, then put in order of length.
_SORT_BATCHES = 16
# The side output of `_ReadTexts`: the inputs that could not be read.
_FAILED = "failed"
_FAILED_SUBDIR = "_failed_inputs"


class _LoadedSignature:
    """A loaded SavedModel and one of its signatures (Beam shares models by weak reference)."""

    def __init__(self, loaded: Any, name: str):
        self.loaded = loaded  # Kept alive as long as its signature is used.
        self.signature = loaded.signatures[name]


class SavedModelHandler(inference_base.ModelHandler):
    """One string-in signature of an exported SavedModel, for `RunInference` (once per worker).

    Args:
        export_dir: The SavedModel folder (`<export base>/<version>`).
        signature: "classify" or "featurize".
        batch_size: Most texts per call (Beam batches up to this many).

    Example:
    >>> from tf_mlstm.beam.inference import SavedModelHandler
    >>> handler = SavedModelHandler("exports/model/1", signature="classify", batch_size=32)
    >>> handler.batch_elements_kwargs()
    {'min_batch_size': 32, 'max_batch_size': 32}
    """

    def __init__(self, export_dir: str, signature: str = "classify", batch_size: int = 64):
        super().__init__()
        if signature not in SIGNATURES:
            raise ValueError(f"signature must be one of {SIGNATURES}, got {signature!r}")
        self._export_dir = export_dir
        self._signature = signature
        self._batch_size = batch_size

    def load_model(self) -> Any:
        """Loads the signature (TensorFlow Text first: the graph normalizes with its op)."""
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        import tensorflow_text  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import

        loaded = tf.saved_model.load(self._export_dir)
        if self._signature not in loaded.signatures:
            raise ValueError(
                f"{self._export_dir} has no {self._signature!r} signature (it has "
                f"{sorted(loaded.signatures)}); export it with a classifier for 'classify'"
            )
        return _LoadedSignature(loaded, self._signature)

    def run_inference(
        self,
        batch: Sequence[str],
        model: Any,
        inference_args: dict[str, Any] | None = None,
    ) -> Iterable[inference_base.PredictionResult]:
        """The signature's outputs of each text, as {name: NumPy value}."""
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        called = model.signature(text=tf.constant(list(batch)))
        outputs = {name: value.numpy() for name, value in called.items()}
        return [
            inference_base.PredictionResult(
                text, {name: value[i] for name, value in outputs.items()}
            )
            for i, text in enumerate(batch)
        ]

    def batch_elements_kwargs(self) -> dict[str, int]:
        # Full batches from the start: a call of the recurrent model costs the
        # steps of its longest text whatever the batch, so Beam's adaptive
        # growth from single texts would cost dozens of times more.
        return {"min_batch_size": self._batch_size, "max_batch_size": self._batch_size}


class _ReadTexts(beam.DoFn):
    """One input file -> ((file, line), normalized text) per usable record; skips counted."""

    def __init__(self, text_keys: Sequence[str], max_document_bytes: int, sort_texts: int):
        self._text_keys = tuple(text_keys)
        self._max_document_bytes = max_document_bytes
        self._sort_texts = sort_texts

    def process(self, element: tuple[int, str]) -> Iterator[Any]:
        index, path = element
        skip_log = readers.SkipLog()
        texts = beam.metrics.Metrics.counter(_METRICS_NAMESPACE, "texts")
        try:
            documents = readers.read_documents(
                [path],
                self._text_keys,
                skip_log=skip_log,
                max_document_bytes=self._max_document_bytes,
            )
            while run := list(itertools.islice(documents, self._sort_texts)):
                texts.inc(len(run))
                for document in sorted(run, key=lambda document: len(document.text)):
                    yield (path, document.line), document.text
        except Exception as e:  # pylint: disable=broad-except
            if not errors.is_user_error(e):
                raise
            failure = {
                "index": index,
                "path": path,
                "type": type(e).__name__,
                "message": errors.one_line(e),
            }
            yield beam.pvalue.TaggedOutput(_FAILED, json.dumps(failure))
        for reason, count in skip_log.counts.items():
            beam.metrics.Metrics.counter(_METRICS_NAMESPACE, _SKIPPED + reason).inc(count)


def _json_value(value: Any) -> Any:
    """A NumPy output (scalar or vector; bytes for strings) as a JSON value."""
    value = np.asarray(value)
    if value.dtype.kind in "SO":
        return np.vectorize(lambda item: item.decode("utf-8"), otypes=[object])(value).tolist()
    return value.tolist()


def _row(element: tuple[tuple[str, int], inference_base.PredictionResult]) -> str:
    (path, line), result = element
    row = {"input": path, "line": line}
    row.update((name, _json_value(value)) for name, value in sorted(result.inference.items()))
    return json.dumps(row)


def check_saved_model(export_dir: str, signature: str) -> None:
    """Raises, in one line, unless `export_dir` is a SavedModel with `signature` (checked early).

    Args:
        export_dir, signature: The SavedModel folder, and the signature the pipeline will call.

    Raises:
        FileNotFoundError: No SavedModel is there.
        errors.InvalidValueError: Its `saved_model.pb` is unreadable or lacks `signature`.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top

    if not tf.saved_model.contains_saved_model(export_dir):
        raise FileNotFoundError(
            f"{export_dir}: no SavedModel there (no saved_model.pb); give the version folder "
            "that tf-mlstm-export wrote (<export_dir>/<version>)"
        )
    graph = os.path.join(export_dir, "saved_model.pb")
    if not tf.io.gfile.exists(graph):
        return  # A text SavedModel (saved_model.pbtxt): the worker's load checks it.
    saved = saved_model_pb2.SavedModel()
    try:
        with tf.io.gfile.GFile(graph, "rb") as f:
            saved.ParseFromString(f.read())
    except Exception as e:  # pylint: disable=broad-except
        if errors.is_user_error(e):
            raise
        raise errors.InvalidValueError(f"{graph}: not a readable SavedModel ({e})") from e
    names = sorted(
        {name for meta in saved.meta_graphs for name in meta.signature_def}
        - {"__saved_model_init_op"}
    )
    if signature not in names:
        raise errors.InvalidValueError(
            f"{export_dir}: has no {signature!r} signature (it has {names}); export it with "
            f"{errors.setting_name('classifier')} for 'classify'"
        )


def _failed_inputs(folder: str) -> list[dict[str, Any]]:
    """The failures `_ReadTexts` wrote (JSON lines under `folder`), in input order."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    failed = []
    for path in tf.io.gfile.glob(os.path.join(folder, "*")):
        with tf.io.gfile.GFile(path, "r") as f:
            failed += [json.loads(line) for line in f if line.strip()]
    return sorted(failed, key=lambda failure: failure["index"])


def _input_error(failed: Sequence[dict[str, Any]], files: int, output: str) -> Exception:
    """One user error for the failed inputs: the first one's file and cause, and how many."""
    first = failed[0]
    message = first["message"]
    if first["path"] not in message:
        message = f"{first['path']}: {message}"
    kind = (
        FileNotFoundError
        if first["type"] in ("FileNotFoundError", "NotFoundError")
        else readers.InputError
    )
    return kind(
        f"{message} ({len(failed)} of {files} input files could not be read; nothing was "
        f"written to {output}-*.jsonl)"
    )


def classify_with_beam(
    export_dir: str,
    inputs: str,
    output: str,
    runner: str,
    pipeline_args: Sequence[str] = (),
    signature: str = "classify",
    text_keys: Sequence[str] = fields.TEXT_KEYS,
    batch_size: int = 64,
    num_shards: int = 0,
    max_document_bytes: int = fields.DEFAULT_MAX_DOCUMENT_BYTES,
) -> dict[str, Any]:
    """Applies a SavedModel signature to every text of `inputs`.

    Args:
        export_dir, inputs: The SavedModel folder; comma-separated files and globs.
        output: Prefix of the output files (`<output>-SSSSS-of-NNNNN.jsonl`).
        runner, pipeline_args: The Beam runner, and further pipeline options as flags.
        signature: "classify" or "featurize".
        text_keys: Keys/columns holding the text, first present wins.
        batch_size, num_shards: Most texts per model call; output files (0: the runner's choice).
        max_document_bytes: Longest input record (longer ones are skipped).

    Returns:
        `{"texts", "skipped": {reason: count}, "outputs": [files], "signature"}`.

    Raises:
        FileNotFoundError: An input or glob matches nothing, or no SavedModel is at `export_dir`.
        readers.InputError: An input file cannot be read (the first named, and how many).
        ValueError: A bad argument or pipeline option, or no `signature`.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    options = beam_options.pipeline_options(runner, pipeline_args)
    folder, base = os.path.split(output)
    if not base:
        raise errors.InvalidValueError(
            f"{errors.setting_name('output')} {output!r} names a folder; give a prefix of file "
            "names in it "
            f"(e.g. {os.path.join(output, 'part')})"
        )
    paths = readers.expand_inputs(inputs)
    check_saved_model(export_dir, signature)
    handler = inference_base.KeyedModelHandler(SavedModelHandler(export_dir, signature, batch_size))
    logging.info(
        "Applying %s of %s to %d input files on %s", signature, export_dir, len(paths), runner
    )
    # Hidden beside the outputs (and on the same file system): the shards are
    # renamed from there only once every input was read. Named as `fileio.Staged`
    # names its outputs, so the rerun removes what a killed run left.
    fileio.clean_leftovers(output)
    staging = fileio.staging_name(output)
    try:
        pipeline = beam.Pipeline(options=options)
        read = (
            pipeline
            | "Inputs" >> beam.Create(list(enumerate(paths)))
            | "Spread" >> beam.Reshuffle()
            | "Read"
            >> beam.ParDo(
                _ReadTexts(text_keys, max_document_bytes, _SORT_BATCHES * batch_size)
            ).with_outputs(_FAILED, main="texts")
        )
        _ = (
            read.texts
            | "Apply" >> inference_base.RunInference(handler)
            | "Rows" >> beam.Map(_row)
            | "Write"
            >> beam.io.WriteToText(
                os.path.join(staging, base), file_name_suffix=".jsonl", num_shards=num_shards
            )
        )
        _ = read[_FAILED] | "Failed" >> beam.io.WriteToText(
            os.path.join(staging, _FAILED_SUBDIR, "part"), file_name_suffix=".jsonl"
        )
        result = pipeline.run()
        result.wait_until_finish()
        failed = _failed_inputs(os.path.join(staging, _FAILED_SUBDIR))
        if failed:
            raise _input_error(failed, len(paths), output)
        outputs = []
        for path in sorted(tf.io.gfile.glob(os.path.join(staging, f"{base}-*-of-*.jsonl"))):
            final = os.path.join(folder, os.path.basename(path))
            tf.io.gfile.rename(path, final, overwrite=True)
            outputs.append(final)
    finally:
        if tf.io.gfile.exists(staging):
            tf.io.gfile.rmtree(staging)
    counters = {
        metric.key.metric.name: metric.committed
        for metric in result.metrics()
        .query(beam.metrics.MetricsFilter().with_namespace(_METRICS_NAMESPACE))
        .get("counters", [])
    }
    skipped = {
        name[len(_SKIPPED) :]: count
        for name, count in sorted(counters.items())
        if name.startswith(_SKIPPED)
    }
    done = {
        "signature": signature,
        "texts": counters.get("texts", 0),
        "skipped": skipped,
        "outputs": outputs,
    }
    if skipped:
        logging.warning(
            "Skipped %d records: %s",
            sum(skipped.values()),
            ", ".join(f"{reason}={count}" for reason, count in skipped.items()),
        )
    logging.info("Wrote %d rows into %d files %s-*.jsonl", done["texts"], len(outputs), output)
    return done
