"""The configs of the binaries that apply a trained model or bring one in."""

import dataclasses
import glob
import math
import os
import re
from typing import Self

from tf_mlstm import errors
from tf_mlstm.config.bounds import check_config_sizes
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import split_keys
from tf_mlstm.errors import setting_name as _name

VISUALIZE_OUTPUT_NAME = re.compile(r"neuron_\d+\.(html|png|json)")
"""The files `tf-mlstm-visualize` writes into its output folder (others there are left alone)."""


# === Outputs apart from inputs ===


def _same_file(a, b):
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    try:
        return os.path.samefile(a, b)  # also two names of one file (a link)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _input_files(spec):
    files = []
    for piece in (piece.strip() for piece in spec.split(",")):
        if not piece or piece == "-":
            continue
        if "://" in piece:
            files.append(piece)
        elif set("*?[") & set(piece):
            files += sorted(glob.glob(piece))
        else:
            files.append(piece)
    return files


def refuse_output_over_input(output_flag, output, input_flag, input_spec) -> None:
    """Refuses an output file that is one of the input files (links included), before any work.

    Args:
      output_flag: the output's name, for the message.
      output: the output's path, or a callable telling whether a path is an output; "-" is stdout.
      input_flag: the input's name.
      input_spec: comma-separated files or globs.

    Raises:
      errors.InvalidValueError: an input file is the output.
    """
    if output == "-" or not output:
        return
    for path in _input_files(input_spec):
        clash = output(path) if callable(output) else _same_file(path, output)
        if clash:
            raise errors.InvalidValueError(
                f"{output_flag} would overwrite the {input_flag} file {path}; "
                "write the output to another file"
            )


# === ImportConfig (`tf-mlstm-import-openai`) ===


@dataclasses.dataclass(frozen=True)
class ImportConfig:
    """What to import where. Field names match the flags.

    Attributes:
      weights_dir: The release's model/ folder, holding 0.npy .. 14.npy.
      model_dir: The run folder to create (must not hold a run).

    Example:

    >>> from tf_mlstm.config import ImportConfig
    >>> ImportConfig(weights_dir="model", model_dir="imported").validate().model_dir
    'imported'
    """

    weights_dir: str
    model_dir: str

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        if not self.weights_dir or not self.model_dir:
            raise errors.InvalidValueError(
                f"{_name('weights_dir')} and {_name('model_dir')} must not be empty."
            )
        return self


# === GenerateConfig (`tf-mlstm-generate`) ===


@dataclasses.dataclass(frozen=True)
class GenerateConfig:
    """What to sample. Field names match the flags.

    Attributes:
      model_dir: A tf-mlstm-train (or tf-mlstm-finetune) `model_dir`.
      prompt: Text the samples continue (may be empty).
      length: Bytes to generate per sample (at most).
      temperature: Softmax temperature (> 0; small is near argmax).
      seed: Random seed; the same seed gives the same text.
      neuron: Unit held at `neuron_value` (-1 = none). Unset: `classifier`'s neuron, or none.
      neuron_value: The value `neuron` is held at. Unset: from `classifier`, or 0.
      num_samples: Samples drawn (in one batch).
      stop_at_end: End a sample at the end of the review (the next document-start byte).
      classifier: A tf-mlstm-transfer classifier.json whose sentiment neuron is held.
      sentiment: With `classifier`: the side the neuron is held on (default positive).

    Example:

    >>> from tf_mlstm.config import GenerateConfig
    >>> config = GenerateConfig(model_dir="run", prompt="This phone", length=40).validate()
    >>> config.temperature, config.num_samples
    (1.0, 1)
    """

    model_dir: str
    prompt: str = ""
    length: int = 200
    temperature: float = 1.0
    seed: int = 0
    neuron: int | None = None  # None: the classifier's, else none (-1)
    neuron_value: float | None = None  # None: the classifier's, else 0.0
    num_samples: int = 1
    stop_at_end: bool = True
    classifier: str = ""
    sentiment: str | None = None  # None: positive (with a classifier)

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        check_config_sizes(self)
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise errors.InvalidValueError(
                f"{_name('temperature')} must be a positive number, got {self.temperature}."
            )
        if self.length <= 0 or self.num_samples <= 0:
            raise errors.InvalidValueError(
                f"{_name('length')} and {_name('num_samples')} must be positive, "
                f"got {self.length} and "
                f"{self.num_samples}."
            )
        if self.neuron is not None and self.neuron < -1:
            raise errors.InvalidValueError(
                f"{_name('neuron')} must be a unit index or -1 (none), got {self.neuron}."
            )
        if self.sentiment is not None and not self.classifier:
            raise errors.InvalidValueError(
                f"{_name('sentiment')} needs {_name('classifier')} "
                "(the neuron whose side it names)."
            )
        return self


# === ExportConfig (`tf-mlstm-export`) ===


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """What to export. Field names match the flags.

    Attributes:
      model_dir: A tf-mlstm-train (or tf-mlstm-finetune) `model_dir`.
      export_dir: The folder of SavedModel versions: the export goes to EXPORT_DIR/<step>.
      classifier: A tf-mlstm-transfer classifier.json; adds the classify signature.
      window: Bytes per model call inside the signatures.
      max_text_bytes: Longest text or prompt (UTF-8 bytes) a request may hold.
      max_generate_length: Largest length the generate signature accepts.
      precision: Policy the export computes in; auto: the fastest here. Unset: float32.
      allow_other_model: Apply a classifier fitted on other weights, with a warning.

    Example:

    >>> from tf_mlstm.config import ExportConfig
    >>> ExportConfig(model_dir="run", export_dir="serving/reviews").validate().window
    256
    """

    model_dir: str
    export_dir: str
    classifier: str = ""
    window: int = 256
    # The same as tf_mlstm.serving.saved_model.DEFAULT_MAX_* (not imported here:
    # TensorFlow loads only after the flags parsed).
    max_text_bytes: int = 65536
    max_generate_length: int = 4096
    precision: str | None = None  # None: float32, which every CPU runs at speed
    allow_other_model: bool = False

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        check_config_sizes(self)
        for name in ("window", "max_text_bytes", "max_generate_length"):
            value = getattr(self, name)
            if value <= 0:
                raise errors.InvalidValueError(f"{_name(name)} must be positive, got {value}")
        return self


# === PresetConfig (`tf-mlstm-preset`) ===


def holds_path(folder, path) -> bool:
    """Whether the local `path` is `folder` or inside it (links followed; a URL never is)."""
    if "://" in folder or "://" in path:
        return False
    inside = os.path.relpath(os.path.realpath(path), os.path.realpath(folder))
    return not inside.startswith(os.pardir)


@dataclasses.dataclass(frozen=True)
class PresetConfig:
    """What to write as a preset. Field names match the flags.

    Attributes:
      model_dir: A tf-mlstm-train (or tf-mlstm-finetune) `model_dir`; a fine-tuned run
        gives its classifier's preset.
      preset_dir: The preset folder to write (config.json, preprocessor.json,
        model.weights.h5, metadata.json); tf_mlstm.load(PRESET_DIR) loads it.
      classifier: A tf-mlstm-transfer classifier.json fitted on the model: the preset is
        that linear probe's.
      overwrite: Replace what `preset_dir` holds (an earlier preset) once the new one is all
        written; else it is refused. Never a run or another tool's folder.

    Example:

    >>> from tf_mlstm.config import PresetConfig
    >>> PresetConfig(model_dir="runs/r1", preset_dir="presets/r1").validate().classifier
    ''
    """

    model_dir: str
    preset_dir: str
    classifier: str = ""
    overwrite: bool = False

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        if not self.model_dir or not self.preset_dir:
            raise errors.InvalidValueError(
                f"{_name('model_dir')} and {_name('preset_dir')} must not be empty."
            )
        if holds_path(self.preset_dir, self.model_dir):
            raise errors.InvalidValueError(
                f"{_name('preset_dir')}={self.preset_dir} holds {_name('model_dir')}="
                f"{self.model_dir}: write the preset to a folder of its own"
            )
        return self


# === ClassifyConfig (`tf-mlstm-classify`) ===


@dataclasses.dataclass(frozen=True)
class ClassifyConfig:
    """What to classify. Field names match the flags.

    Attributes:
      model_dir: The model the classifier reads; without `classifier`, a tf-mlstm-finetune run.
      classifier: A tf-mlstm-transfer classifier.json; empty = the fine-tuned head of `model_dir`.
      input: Files/globs to classify (CSV, JSONL, text), or - for stdin.
      output: The CSV to write, or - for stdout.
      text_key: Keys/columns holding the text, tried in order.
      batch_size: Texts per model call.
      window: Bytes per model call.
      precision: Feature policy; auto: the fastest here. Unset: the classifier's.
      chunk_texts: Texts read, classified and written at a time (bounds the memory).
      allow_other_model: Apply a classifier fitted on other weights, with a warning.
      overwrite: Replace an existing `output` once the new one is written; else it is refused.

    Example:

    >>> from tf_mlstm.config import ClassifyConfig
    >>> config = ClassifyConfig(
    ...     model_dir="run", classifier="", input="reviews.csv", output="scores.csv"
    ... ).validate()
    >>> config.text_keys
    ('reviewText', 'text', 'sentence')
    """

    model_dir: str
    classifier: str  # "" = the fine-tuned head of model_dir
    input: str
    output: str
    text_key: tuple = TEXT_KEYS
    batch_size: int = 64
    window: int = 256
    precision: str | None = None  # None: as the classifier's features were fitted
    chunk_texts: int = 4096
    allow_other_model: bool = False
    overwrite: bool = False

    @property
    def text_keys(self) -> tuple[str, ...]:
        """The `text_key` list as a tuple, blanks left out."""
        return split_keys(self.text_key)

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        check_config_sizes(self)
        if min(self.batch_size, self.window, self.chunk_texts) <= 0:
            raise errors.InvalidValueError(
                f"{_name('batch_size')}, {_name('window')} and {_name('chunk_texts')} "
                "must be positive"
            )
        if not self.text_keys:
            raise errors.InvalidValueError(f"{_name('text_key')} must name at least one key")
        refuse_output_over_input(_name("output"), self.output, _name("input"), self.input)
        return self


# === VisualizeConfig (`tf-mlstm-visualize`) ===


@dataclasses.dataclass(frozen=True)
class VisualizeConfig:
    """What to draw. Field names match the flags.

    Attributes:
      model_dir: A tf-mlstm-train (or tf-mlstm-finetune) `model_dir`.
      neuron: The unit to draw, of the cell state or of `classifier`'s neuron's state (wins).
      input: Literal text, or comma-separated corpus files/globs.
      output_dir: Where the HTML, PNG and JSON files go.
      classifier: A tf-mlstm-transfer classifier.json: draw its sentiment neuron, green positive.
      text_key: Corpus files: text keys/columns, first present wins.
      text_mode: Plain-text files: a text per line or per file.
      max_texts: Corpus files: texts drawn, at most.
      max_chars: Characters drawn per text; longer texts are cut.
      width: Heat-map characters per row.
      scale: Value drawn as full red/green (0 = largest absolute value).
      overwrite: Replace existing neuron_N files once the new ones are written; else refused.

    Example:

    >>> from tf_mlstm.config import VisualizeConfig
    >>> config = VisualizeConfig(
    ...     model_dir="run", neuron=3, input="Great phone.", output_dir="neurons"
    ... ).validate()
    >>> config.width
    64
    """

    model_dir: str
    neuron: int | None
    input: str
    output_dir: str
    classifier: str = ""
    text_key: tuple = TEXT_KEYS
    text_mode: str = "line"
    max_texts: int = 10
    max_chars: int = 2000
    width: int = 64
    scale: float = 0.0
    overwrite: bool = False

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        check_config_sizes(self)
        if self.neuron is None and not self.classifier:
            raise errors.InvalidValueError(
                f"give {_name('neuron')} (a cell unit) or {_name('classifier')} "
                "(its sentiment neuron)."
            )
        if self.neuron is not None and self.neuron < 0:
            raise errors.InvalidValueError(
                f"{_name('neuron')} must be a unit index >= 0, got {self.neuron}."
            )
        if min(self.max_texts, self.max_chars, self.width) <= 0:
            raise errors.InvalidValueError(
                f"{_name('max_texts')}, {_name('max_chars')} and {_name('width')} must be positive."
            )
        if self.scale < 0:
            raise errors.InvalidValueError(
                f"{_name('scale')} must be >= 0 (0 = automatic), got {self.scale}."
            )
        if not self.input:
            raise errors.InvalidValueError(
                f"{_name('input')} must be text or files, got an empty string."
            )
        refuse_output_over_input(
            _name("output_dir"), self._is_an_output, _name("input"), self.input
        )
        return self

    def _is_an_output(self, path):
        folder, name = os.path.split(os.path.realpath(path))
        return (
            os.path.isfile(path)
            and folder == os.path.realpath(self.output_dir)
            and VISUALIZE_OUTPUT_NAME.fullmatch(name) is not None
        )


# === ClassifyBeamConfig (`tf-mlstm-classify-beam`) ===


@dataclasses.dataclass(frozen=True)
class ClassifyBeamConfig:
    """One batch-inference pipeline. Field names match the flags.

    Attributes:
      saved_model: The SavedModel folder (<export_dir>/<version>).
      input: Files/globs to read (CSV, JSONL, text).
      output: Prefix of the output files: <output>-SSSSS-of-NNNNN.jsonl.
      runner: The Beam runner (DirectRunner, DataflowRunner, FlinkRunner, SparkRunner, ...).
      signature: The signature to apply.
      text_key: Keys/columns holding the text, tried in order.
      batch_size: Most texts per model call.
      num_output_shards: Output files; 0 lets the runner choose.
      pipeline_args: The flags this binary does not define, passed to Beam as pipeline options.

    Example:

    >>> from tf_mlstm.config import ClassifyBeamConfig
    >>> config = ClassifyBeamConfig(
    ...     saved_model="serving/reviews/1", input="reviews.csv", output="scores",
    ...     runner="DirectRunner",
    ... )
    >>> config.signature
    'classify'
    """

    saved_model: str
    input: str
    output: str
    runner: str
    signature: str = "classify"
    text_key: tuple = TEXT_KEYS
    batch_size: int = 64
    num_output_shards: int = 0
    pipeline_args: tuple = ()

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        check_config_sizes(self)
        return self
