"""The language model's configs: training (`TrainConfig`) and scoring (`EvalConfig`)."""

import dataclasses
import numbers
from typing import Self

from tf_mlstm import errors
from tf_mlstm.config import bounds
from tf_mlstm.config.base import CheckedFields
from tf_mlstm.config.choices import AUTO
from tf_mlstm.config.choices import OPTIMIZE_FOR
from tf_mlstm.config.choices import SCALINGS
from tf_mlstm.config.runner import BudgetFields
from tf_mlstm.config.runner import OptimizationFields
from tf_mlstm.config.runner import RuntimeFields
from tf_mlstm.config.runner import validate_runner_settings
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import split_keys
from tf_mlstm.data.repeats import parse_source_repeats
from tf_mlstm.errors import setting_name as _name


@dataclasses.dataclass(frozen=True)
class TrainConfig(RuntimeFields, OptimizationFields, BudgetFields):
    """Training settings. Field names match the `tf-mlstm-train` flags.

    Attributes:
      train_data: TFRecord folder or glob of shards. Empty: the embedded demo corpus.
      validation_data: Validation shards. Empty: the validation-* shards beside `train_data`.
      model_dir: Checkpoints, events, config, results and the SavedModel; a rerun resumes.
      shuffle_buffer: Documents in the training shuffle buffer (0 = off).
      source_repeats: Oversample by source file: PATTERN=COUNT rules, e.g. '*/amazon/*=8'.
      hidden_size: mLSTM units (the paper: 4096), or auto: the best predicted for the budget.
      size_candidates: The sizes `hidden_size`=auto chooses among: comma-separated mLSTM units.
      optimize_for: bits: the lowest predicted bits/char; transfer: the widest within 0.15 of it.
      scaling_law: The law `hidden_size`=auto plans with (a fit.json). Empty: the built-in one.
      embedding_size: Byte embedding width (the paper: 64).
      weight_norm: Weight-normalized mLSTM kernels.
      seq_length: Truncated BPTT length in bytes (the paper: 256).
      lr_scaling: Scale `lr` by global batch / `lr_base_batch`.
      lr_base_batch: The batch at which `lr` was tuned.
      max_lr: Cap on the scaled rate (0 = none).
      total_steps: Schedule length in steps (0 = `max_steps`).
      epochs: Instead of `max_steps`: passes over the training shards (from stats.json).
      eval_batches: Batches per periodic validation (the final one scores the whole split).
      sample_every_steps: Generated-text sample interval (0 = off).
      sample_length: Bytes per generated sample.
      export: Export the final SavedModel into MODEL_DIR/export when training ends.

    Example:

    >>> from tf_mlstm.config import TrainConfig
    >>> config = TrainConfig(model_dir="run", hidden_size=64, seq_length=32).validate()
    >>> config.schedule_steps == config.max_steps
    True
    """

    # Data.
    train_data: str = ""  # TFRecord folder or glob; "" = embedded demo corpus.
    validation_data: str = ""  # "" = the validation split beside train_data.
    model_dir: str = "tf_mlstm_demo"
    shuffle_buffer: int = 1024
    source_repeats: str = ""  # PATTERN=COUNT,... over the records' source files.
    # Model.
    hidden_size: int | str = 256  # or "auto": chosen for the budget (`tf_mlstm.auto.size`)
    size_candidates: str = "256,384,512,768,1024"
    optimize_for: str = "bits"
    scaling_law: str = ""  # "" = tf_mlstm.auto.law.REVIEWS_LAW
    embedding_size: int = 64
    weight_norm: bool = True
    # Optimization beyond the shared group.
    seq_length: int = 128
    lr_scaling: str = "none"
    lr_base_batch: int = 128
    max_lr: float = 0.0
    total_steps: int = 0  # 0 = max_steps
    # Budget and bookkeeping beyond the shared group.
    epochs: float = 0.0  # > 0: max_steps from the converted corpus's byte count
    eval_batches: int = 20
    sample_every_steps: int = 200
    sample_length: int = 200
    export: bool = True  # the SavedModel of the final step, when training ends

    def __post_init__(self):
        super().__post_init__()
        size = self.hidden_size
        if not (size == AUTO or (isinstance(size, numbers.Integral) and size is not True)):
            raise errors.InvalidValueError(
                f"{type(self).__name__}: hidden_size must be an int or {AUTO!r}, got {size!r}."
            )

    def validate(self) -> Self:
        """Raises ValueError with one clear line for an inconsistent config; returns self."""
        validate_runner_settings(self)
        if self.hidden_size != AUTO and self.hidden_size <= 0:
            raise errors.InvalidValueError(
                f"{_name('hidden_size')} must be positive, got {self.hidden_size}."
            )
        self.size_candidate_units  # noqa: B018 (raises for a bad list)
        self.check_positive(("embedding_size", "seq_length", "lr_base_batch"))
        self.check_choices({"lr_scaling": SCALINGS, "optimize_for": OPTIMIZE_FOR})
        for name in ("max_lr", "epochs"):
            if getattr(self, name) < 0:
                raise errors.InvalidValueError(
                    f"{_name(name)} must be >= 0, got {getattr(self, name)}."
                )
        try:
            parse_source_repeats(self.source_repeats)
        except ValueError as error:
            # The parser's message starts with the setting's name.
            message = str(error).removeprefix("source_repeats")
            raise errors.InvalidValueError(f"{_name('source_repeats')}{message}") from None
        return self

    @property
    def schedule_steps(self) -> int:
        """Steps the learning-rate schedule spans: `total_steps`, else `max_steps`."""
        return self.total_steps or self.max_steps

    @property
    def size_candidate_units(self) -> tuple[int, ...]:
        """`size_candidates` as sorted, distinct units.

        Raises:
          errors.InvalidValueError: an entry that is no positive integer or too wide.
        """
        units = set()
        for piece in (p.strip() for p in self.size_candidates.split(",")):
            if not piece.isdigit() or int(piece) <= 0:
                raise errors.InvalidValueError(
                    f"{_name('size_candidates')} must be comma-separated positive numbers of "
                    f"units (e.g. 256,512,768), got {self.size_candidates!r}."
                )
            bounds.check_at_most("size_candidates", int(piece), bounds.LARGEST["hidden_size"])
            units.add(int(piece))
        return tuple(sorted(units))


@dataclasses.dataclass(frozen=True)
class EvalConfig(CheckedFields):
    """What `tf-mlstm-eval` scores. Field names match its flags.

    Attributes:
      model_dir: A tf-mlstm-train `model_dir`.
      data: TFRecord folder or glob, or comma-separated raw corpus files/globs.
      text_key: Raw corpora: text keys/columns tried in order.
      text_mode: Raw plain text: document per line or per file.
      split: Split read from a TFRecord folder.
      batch_size: Document streams scored in parallel.
      seq_length: Characters per model call.
      max_batches: Stop after this many batches (0 = all).

    Example:

    >>> from tf_mlstm.config import EvalConfig
    >>> config = EvalConfig(model_dir="run", data="reviews.jsonl", text_key="body,text")
    >>> config.validate().text_keys
    ('body', 'text')
    """

    model_dir: str
    data: str  # a TFRecord folder (its `split` shards) or glob, or raw corpus files/globs
    text_key: tuple = TEXT_KEYS
    text_mode: str = "line"
    split: str = "test"
    batch_size: int = 32
    seq_length: int = 256
    max_batches: int = 0

    @property
    def text_keys(self) -> tuple[str, ...]:
        """The keys tried in order, blanks left out."""
        return split_keys(self.text_key)

    def validate(self) -> Self:
        """Raises ValueError with one clear line for a bad value; returns self."""
        bounds.check_config_sizes(self)
        if not self.text_keys:
            raise errors.InvalidValueError(f"{_name('text_key')} must name at least one key")
        return self
