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

from absl import logging

from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config import EvalConfig
from tf_mlstm.data import fields

_REQUIRED = ("model_dir", "data")
"""The flags without which the binary does not start."""


def define_eval_flags() -> None:
    """Defines every tf-mlstm-eval flag from `EvalConfig` (`run` marks required ones)."""
    defaults = EvalConfig(model_dir="", data="")
    _flags.define_fields(defaults, ("model_dir", "data"), no_default=_REQUIRED)
    _flags.define_text_key(_flags.field_help(EvalConfig, "text_key"))
    _flags.define_fields(
        defaults,
        ("text_mode", "split", "batch_size", "seq_length", "max_batches"),
        choices={"text_mode": fields.TEXT_MODES, "split": fields.SPLITS},
        lower_bounds={"batch_size": 1, "seq_length": 1, "max_batches": 0},
    )


def check_before_work(flag_values) -> None:
    """The model and the data, before TensorFlow starts (`preflight`)."""
    preflight.check_trained_model(flag_values.model_dir)
    preflight.check_input_files("data", flag_values.data, folders=True)


def main(config) -> dict:
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


def run() -> None:
    """Entry point of `tf-mlstm-eval`."""
    _main.run_binary(__name__, define_eval_flags, main, EvalConfig, required=list(_REQUIRED))


if __name__ == "__main__":
    run()
