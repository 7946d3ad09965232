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

from absl import flags
from absl import logging

from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config import EvalConfig
from tf_mlstm.data import fields


def define_eval_flags():
    flags.DEFINE_string("model_dir", None, _flags.field_help(EvalConfig, "model_dir"))
    flags.DEFINE_string("data", None, _flags.field_help(EvalConfig, "data"))
    _flags.define_text_key(_flags.field_help(EvalConfig, "text_key"))
    flags.DEFINE_enum(
        "text_mode",
        "line",
        list(fields.TEXT_MODES),
        _flags.field_help(EvalConfig, "text_mode"),
    )
    flags.DEFINE_enum("split", "test", list(fields.SPLITS), _flags.field_help(EvalConfig, "split"))
    flags.DEFINE_integer(
        "batch_size", 32, _flags.field_help(EvalConfig, "batch_size"), lower_bound=1
    )
    flags.DEFINE_integer(
        "seq_length", 256, _flags.field_help(EvalConfig, "seq_length"), lower_bound=1
    )
    flags.DEFINE_integer(
        "max_batches", 0, _flags.field_help(EvalConfig, "max_batches"), lower_bound=0
    )


def check_before_work(flag_values):
    """The model and the data, before TensorFlow starts (`preflight`)."""
    preflight.check_trained_model(flag_values.model_dir)
    preflight.check_input_files("data", flag_values.data, folders=True)


def main(config):
    """Scores the data; returns the final line's object."""
    from tf_mlstm.train import evaluation  # pylint: disable=g-import-not-at-top

    result = evaluation.evaluate_config(config)
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
