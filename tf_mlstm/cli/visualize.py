r"""tf-mlstm-visualize: draw one cell-state unit's activation over text.

  tf-mlstm-visualize --model_dir=runs/r1 --neuron=2388 \
      --input="Terrible plot. But the acting was wonderful!" --output_dir=viz
  tf-mlstm-visualize --model_dir=runs/r1 --neuron=2388 \
      --input=imdb/test.jsonl --max_texts=5 --output_dir=viz
  tf-mlstm-visualize --model_dir=runs/r1 --classifier=runs/r1/sst/classifier.json \
      --input="Terrible plot. But the acting was wonderful!" --output_dir=viz

`--input` is literal text, or corpus files when every comma-separated piece
names an existing file or a matching glob. Writes `neuron_N.html` (each
character colored red..green by the unit's value after it), `neuron_N.png`
and `neuron_N.json` into `--output_dir`, and prints their paths.
`--classifier` takes the unit and its sign (green then means positive) from a
tf-mlstm-transfer classifier.json; `--neuron` still wins.
"""

import itertools

from absl import flags
from absl import logging

from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config.binaries import VISUALIZE_OUTPUT_NAME
from tf_mlstm.config.binaries import VisualizeConfig
from tf_mlstm.data.fields import TEXT_MODES

FLAGS = flags.FLAGS


_REQUIRED = ("model_dir", "input", "output_dir")
"""The flags without which the binary does not start."""


def define_visualize_flags() -> None:
    """Defines every tf-mlstm-visualize flag from `VisualizeConfig` (`run` marks required ones)."""
    defaults = VisualizeConfig(model_dir="", neuron=None, input="", output_dir="")
    _flags.define_fields(
        defaults,
        ("model_dir", "neuron", "classifier", "input", "output_dir", "overwrite"),
        no_default=_REQUIRED,
    )
    _flags.define_text_key(_flags.field_help(VisualizeConfig, "text_key"))
    _flags.define_fields(
        defaults,
        ("text_mode", "max_texts", "max_chars", "width", "scale"),
        choices={"text_mode": TEXT_MODES},
    )


def check_before_work(flag_values) -> None:
    """The model, the classifier and the output folder, before TensorFlow starts (`preflight`).

    `--input` is text or files, told apart by what exists: not checked here.
    """
    preflight.check_trained_model(flag_values.model_dir)
    preflight.check_input_file("classifier", flag_values.classifier, "classifier file")
    preflight.check_output_dir("output_dir", flag_values.output_dir)
    # After the kind: a file is no earlier output that --overwrite would replace.
    preflight.refuse_existing(
        "--output_dir",
        flag_values.output_dir,
        flag_values.overwrite,
        is_output=VISUALIZE_OUTPUT_NAME.fullmatch,
    )


def _names_files(spec):
    """Whether every comma-separated piece of `spec` is a file or a matching glob."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    pieces = [piece.strip() for piece in spec.split(",") if piece.strip()]
    return bool(pieces) and all(
        tf.io.gfile.exists(piece) or (set("*?[") & set(piece) and tf.io.gfile.glob(piece))
        for piece in pieces
    )


def read_texts(config) -> list[str]:
    """The raw texts `--input` names, cut to `max_chars` characters.

    Args:
      config: a validated `VisualizeConfig`.

    Returns:
      A list of strs.

    Raises:
      FileNotFoundError, ValueError, readers.InputError: unreadable files.
    """
    from tf_mlstm.data import readers  # pylint: disable=g-import-not-at-top

    if _names_files(config.input):
        keys = _flags.text_keys(config.text_key)
        documents = readers.read_documents(
            readers.expand_inputs(config.input), keys, text_mode=config.text_mode
        )
        texts = [doc.text for doc in itertools.islice(documents, config.max_texts)]
    else:
        texts = [config.input]
    cut = sum(len(text) > config.max_chars for text in texts)
    if cut:
        logging.info("Cut %d text(s) to their first %d characters.", cut, config.max_chars)
    return [text[: config.max_chars] for text in texts]


def main(config) -> dict:
    """Draws the unit over the texts; returns the written files."""
    from tf_mlstm.models import language_model  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import visualize  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer.probe import neuron as neuron_lib  # pylint: disable=g-import-not-at-top

    texts = read_texts(config)
    model = language_model.MLSTMLanguageModel.from_run(config.model_dir)
    unit, sign, neuron = neuron_lib.drawn_unit(
        config.classifier, model.hidden_size, config.neuron, tool="tf-mlstm-visualize"
    )
    written = visualize.write_visualization(
        model,
        texts,
        unit,
        config.output_dir,
        config.width,
        config.scale or None,
        sign=sign,
        source=neuron.describe() if neuron is not None and unit == neuron.unit else None,
        hidden_state=neuron is not None and neuron.hidden_state,
    )
    return {kind: written[kind] for kind in ("html", "png", "json")}


def run() -> None:
    """Entry point of `tf-mlstm-visualize`."""
    _main.run_binary(
        __name__,
        define_visualize_flags,
        main,
        VisualizeConfig,
        required=list(_REQUIRED),
    )


if __name__ == "__main__":
    run()
