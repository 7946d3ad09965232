r"""tf-mlstm-eval: bits per character of a trained model on held-out text.

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


def main(config):
    """Scores the data; returns the final line's object."""
    from tf_mlstm.train import evaluation  # pylint: disable=g-import-not-at-top

    result = evaluation.evaluate_data(
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
