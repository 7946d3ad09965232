r"""tf-mlstm-visualize: draw one cell-state unit's activation over text.

  tf-mlstm-visualize --model_dir=runs/r1 --neuron=2388 \
      --input="Terrible plot. But the acting was wonderful!" --output_dir=viz
  tf-mlstm-visualize --model_dir=runs/r1 --neuron=2388 \
      --input=imdb/test.jsonl --max_texts=5 --output_dir=viz
  tf-mlstm-visualize --model_dir=runs/r1 --classifier=runs/r1/sst/classifier.json \
      --input="Terrible plot. But the acting was wonderful!" --output_dir=viz

`--input` is literal text, or, when every comma-separated piece of it names
an existing file or a glob that matches files, corpus files read as
`tf-mlstm-make-tfrecords` reads them (JSON lines, CSV, plain text; gzip or
not). Writes `neuron_N.html` (each character colored red..green by the
unit's cell value after it), `neuron_N.png` (the same as a heat map) and
`neuron_N.json` (the values) into `--output_dir`, and prints their paths.

`--classifier` takes the unit from a tf-mlstm-transfer classifier.json (its
sentiment neuron: a cell unit, or a hidden unit when the classifier has no
cell-state feature) and its sign: with sign
-1 the colors are flipped so that green means positive. `--neuron` still
wins (a disagreement is logged); one of the two is needed.
"""

import dataclasses
import itertools
import os
import re

from absl import flags
from absl import logging

from tf_mlstm import errors
from tf_mlstm import outputs
from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main

FLAGS = flags.FLAGS


# The files it writes into --output_dir (others there are left alone).
_OUTPUT_NAME = re.compile(r"neuron_\d+\.(html|png|json)")


@dataclasses.dataclass(frozen=True)
class VisualizeConfig:
    """What to draw. Field names match the flags."""

    model_dir: str
    neuron: int | None
    input: str
    output_dir: str
    classifier: str = ""
    text_key: tuple = _flags.TEXT_KEYS
    text_mode: str = "line"
    max_texts: int = 10
    max_chars: int = 2000
    width: int = 64
    scale: float = 0.0
    overwrite: bool = False

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        if self.neuron is None and not self.classifier:
            raise errors.InvalidValueError(
                "give --neuron (a cell unit) or --classifier (its sentiment neuron)."
            )
        if self.neuron is not None and self.neuron < 0:
            raise errors.InvalidValueError(
                f"--neuron must be a unit index >= 0, got {self.neuron}."
            )
        if min(self.max_texts, self.max_chars, self.width) <= 0:
            raise errors.InvalidValueError("--max_texts, --max_chars and --width must be positive.")
        if self.scale < 0:
            raise errors.InvalidValueError(
                f"--scale must be >= 0 (0 = automatic), got {self.scale}."
            )
        if not self.input:
            raise errors.InvalidValueError("--input must be text or files, got an empty string.")
        _flags.refuse_output_over_input("--output_dir", self._is_an_output, "--input", self.input)
        return self

    def _is_an_output(self, path):
        """Whether `path` is (or may be, the unit not known yet) a file this run writes."""
        folder, name = os.path.split(os.path.realpath(path))
        return (
            os.path.isfile(path)
            and folder == os.path.realpath(self.output_dir)
            and _OUTPUT_NAME.fullmatch(name) is not None
        )


def define_visualize_flags():
    """Defines every tf-mlstm-visualize flag (all optional; `run` marks required ones)."""
    defaults = VisualizeConfig(model_dir="", neuron=0, input="", output_dir="")
    flags.DEFINE_string("model_dir", None, "A tf-mlstm-train (or tf-mlstm-finetune) --model_dir.")
    flags.DEFINE_integer(
        "neuron",
        None,
        "The unit to draw (overrides --classifier's neuron): of the cell state, or of the "
        "--classifier's neuron's state.",
    )
    flags.DEFINE_string(
        "classifier",
        defaults.classifier,
        "A tf-mlstm-transfer classifier.json: draw its sentiment neuron (a unit of the "
        "model), green meaning positive.",
    )
    flags.DEFINE_string(
        "input", None, "Literal text, or comma-separated corpus files/globs (see the module doc)."
    )
    flags.DEFINE_string("output_dir", None, "Where the HTML, PNG and JSON files go.")
    _flags.define_overwrite("--output_dir's neuron_N files")
    _flags.define_text_key("Corpus files: text keys/columns, first present wins.")
    flags.DEFINE_enum(
        "text_mode",
        defaults.text_mode,
        ["line", "file"],
        "Plain-text files: a text per line or per file.",
    )
    flags.DEFINE_integer("max_texts", defaults.max_texts, "Corpus files: texts drawn, at most.")
    flags.DEFINE_integer(
        "max_chars", defaults.max_chars, "Characters drawn per text; longer texts are cut."
    )
    flags.DEFINE_integer("width", defaults.width, "Heat-map characters per row.")
    flags.DEFINE_float(
        "scale", defaults.scale, "Value drawn as full red/green (0 = largest absolute value)."
    )


def check_before_work(flag_values):
    """The model, the classifier and the output folder, before TensorFlow starts (`preflight`).

    `--input` is literal text or files, told apart by what exists: not checked here.
    """
    preflight.check_trained_model(flag_values.model_dir)
    preflight.check_input_file("classifier", flag_values.classifier, "classifier file")
    preflight.check_output_dir("output_dir", flag_values.output_dir)
    # After the kind: a file is no earlier output that --overwrite would replace.
    outputs.refuse_existing(
        "--output_dir",
        flag_values.output_dir,
        flag_values.overwrite,
        is_output=_OUTPUT_NAME.fullmatch,
    )


def _names_files(spec):
    """Whether every comma-separated piece of `spec` is a file or a matching glob."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    pieces = [piece.strip() for piece in spec.split(",") if piece.strip()]
    return bool(pieces) and all(
        tf.io.gfile.exists(piece) or (set("*?[") & set(piece) and tf.io.gfile.glob(piece))
        for piece in pieces
    )


def read_texts(config):
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


def main(config):
    """Draws the unit over the texts; returns the written files."""
    from tf_mlstm.models import language_model  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import visualize  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer.probe import neuron as neuron_lib  # pylint: disable=g-import-not-at-top

    texts = read_texts(config)
    model, _ = language_model.load_trained_model(config.model_dir)
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


def run():
    """Entry point of `tf-mlstm-visualize`."""
    _main.run_binary(
        __name__,
        define_visualize_flags,
        main,
        VisualizeConfig,
        required=["model_dir", "input", "output_dir"],
    )


if __name__ == "__main__":
    run()
