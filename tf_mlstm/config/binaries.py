"""The configs of the binaries that apply a trained model or bring one in.

`tf-mlstm-classify`, `-classify-beam`, `-export`, `-generate`, `-visualize`
and `-import-openai` each build one of these from their flags (the field
names are the flags'); the values are checked here, the paths by the
binary's `check_before_work` (`tf_mlstm.preflight`).
"""

import dataclasses
import glob
import math
import os
import re

from tf_mlstm import errors
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
    """The local files a comma-separated input spec names (globs expanded, no TensorFlow)."""
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


def refuse_output_over_input(output_flag, output, input_flag, input_spec):
    """Refuses an output file that is one of the input files, before any work is done.

    Writing the output would replace the user's input (a CSV of texts
    replaced by their scores). Symbolic and hard links to an input count as
    the input.

    Args:
      output_flag: the output's name, for the message (`setting_name("output")`).
      output: the output file's path, or a callable that tells whether a path
        is among the outputs (a folder of named outputs); "-" is stdout.
      input_flag: the input's name (`setting_name("input")`).
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
    """What to import where. Field names match the flags."""

    weights_dir: str
    model_dir: str

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        if not self.weights_dir or not self.model_dir:
            raise errors.InvalidValueError(
                f"{_name('weights_dir')} and {_name('model_dir')} must not be empty."
            )
        return self


# === GenerateConfig (`tf-mlstm-generate`) ===


@dataclasses.dataclass(frozen=True)
class GenerateConfig:
    """What to sample. Field names match the flags."""

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

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
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
    """What to export. Field names match the flags."""

    model_dir: str
    export_dir: str
    classifier: str = ""
    window: int = 256
    # The same as tf_mlstm.export.saved_model.DEFAULT_MAX_* (not imported here:
    # TensorFlow loads only after the flags parsed).
    max_text_bytes: int = 65536
    max_generate_length: int = 4096
    precision: str | None = None  # None: the classifier's (float32 without one)
    allow_other_model: bool = False

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        for name in ("window", "max_text_bytes", "max_generate_length"):
            value = getattr(self, name)
            if value <= 0:
                raise errors.InvalidValueError(f"{_name(name)} must be positive, got {value}")
        return self


# === ClassifyConfig (`tf-mlstm-classify`) ===


@dataclasses.dataclass(frozen=True)
class ClassifyConfig:
    """What to classify. Field names match the flags."""

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
    def text_keys(self):
        """The `text_key` list as a tuple, blanks left out."""
        return split_keys(self.text_key)

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
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
    """What to draw. Field names match the flags."""

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

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
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
        """Whether `path` is (or may be, the unit not known yet) a file this run writes."""
        folder, name = os.path.split(os.path.realpath(path))
        return (
            os.path.isfile(path)
            and folder == os.path.realpath(self.output_dir)
            and VISUALIZE_OUTPUT_NAME.fullmatch(name) is not None
        )


# === ClassifyBeamConfig (`tf-mlstm-classify-beam`) ===


@dataclasses.dataclass(frozen=True)
class ClassifyBeamConfig:
    """One batch-inference pipeline. Field names match the flags."""

    saved_model: str
    input: str
    output: str
    runner: str
    signature: str = "classify"
    text_key: tuple = TEXT_KEYS
    batch_size: int = 64
    num_output_shards: int = 0
    pipeline_args: tuple = ()
