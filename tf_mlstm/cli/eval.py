"""tf-mlstm-eval: bits per character of a trained model on held-out text.

  tf-mlstm-eval --model_dir=runs/r1 --data=data/reviews            # test split
  tf-mlstm-eval --model_dir=runs/r1 --data=electronics.jsonl \
      --text_key=reviewText,text

`--data` is a TFRecord folder (its `--split` shards), a TFRecord glob, or
raw corpus files (JSON lines, CSV, text; gzip or not) read exactly as
`tf-mlstm-make-tfrecords` reads them. The state is carried within each
document and reset between documents, as in training. The last line printed
is one JSON object: {"bits_per_char": ..., "chars": ...}.
"""

import dataclasses

from absl import flags
from absl import logging

from tf_mlstm import errors
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What to score. Field names match the flags."""

    model_dir: str
    data: str
    text_key: tuple = _flags.TEXT_KEYS
    text_mode: str = "line"
    split: str = "test"
    batch_size: int = 32
    seq_length: int = 256
    max_batches: int = 0

    @property
    def text_keys(self):
        """The keys tried in order, blanks left out."""
        return _flags.text_keys(self.text_key)

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        if not self.text_keys:
            raise errors.InvalidValueError("--text_key must name at least one key")
        return self


def define_eval_flags():
    flags.DEFINE_string("model_dir", None, "A tf-mlstm-train --model_dir.")
    flags.DEFINE_string(
        "data", None, "TFRecord folder or glob, or comma-separated raw corpus files/globs."
    )
    _flags.define_text_key("Raw corpora: text keys/columns tried in order.")
    flags.DEFINE_enum(
        "text_mode", "line", ["line", "file"], "Raw plain text: document per line or per file."
    )
    flags.DEFINE_enum(
        "split", "test", ["train", "validation", "test"], "Split read from a TFRecord folder."
    )
    flags.DEFINE_integer("batch_size", 32, "Document streams scored in parallel.", lower_bound=1)
    flags.DEFINE_integer("seq_length", 256, "Characters per model call.", lower_bound=1)
    flags.DEFINE_integer("max_batches", 0, "Stop after this many batches (0 = all).", lower_bound=0)


def _is_tfrecords(spec):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return tf.io.gfile.isdir(spec) or ".tfrecord" in spec


def evaluate_data(
    model_dir,
    data,
    text_keys,
    text_mode="line",
    split="test",
    batch_size=32,
    seq_length=256,
    max_batches=0,
):
    """Scores `data` under the model of `model_dir`.

    Returns:
        dict with `bits_per_char`, `chars`, `chars_per_s`.

    Raises:
        FileNotFoundError: no data or no model where the flags point.
        ValueError: the data holds nothing to score, a TFRecord folder is
            incomplete, or a raw corpus file cannot be read as a whole
            (`readers.InputError`, naming the file).
    """
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top
    from tf_mlstm.data import pipeline  # pylint: disable=g-import-not-at-top
    from tf_mlstm.data import readers  # pylint: disable=g-import-not-at-top
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import evaluation  # pylint: disable=g-import-not-at-top

    model, _ = rundir.load_trained_model(model_dir)
    read_errors = []  # A raw corpus file that could not be read ends its stream here.
    expected = None  # A raw corpus's size in characters is known only once read.
    if _is_tfrecords(data):
        files = tfrecord.split_files(data, split)
        if not tfrecord.nonempty_files(files):
            raise errors.InvalidValueError(
                f"no records to score: the {len(files)} {split} shards of {data} are empty"
            )
        documents = pipeline.document_dataset(files)
        expected = evaluation.expected_chars(files, split)
    else:
        documents = pipeline.corpus_documents(
            readers.expand_inputs(data), text_keys, text_mode, errors=read_errors
        )
    dataset = pipeline.window_dataset(documents, batch_size, seq_length, finite=True)
    try:
        result = evaluation.evaluate(
            model, dataset.prefetch(2), max_batches, expected=expected, progress=True
        )
    except ValueError:
        if read_errors:  # The cause of "no characters to score".
            raise read_errors[0] from None
        raise
    if read_errors:
        raise read_errors[0]
    return result


def main(config):
    """Scores the data; returns the final line's object."""
    result = evaluate_data(
        config.model_dir,
        config.data,
        config.text_keys,
        config.text_mode,
        config.split,
        config.batch_size,
        config.seq_length,
        config.max_batches,
    )
    logging.info(
        "%.4f bits/char over %d chars (%.0f chars/s)",
        result["bits_per_char"],
        result["chars"],
        result["chars_per_s"],
    )
    return {"bits_per_char": result["bits_per_char"], "chars": result["chars"]}


def run():
    """Entry point of `tf-mlstm-eval`."""
    _main.run_binary(__name__, define_eval_flags, main, EvalConfig, required=["model_dir", "data"])


if __name__ == "__main__":
    run()
