"""The language model's configs: training (`TrainConfig`) and scoring (`EvalConfig`)."""

import dataclasses

from tf_mlstm import errors
from tf_mlstm.config.base import CheckedFields
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

    Runtime, optimization and budget settings are the shared groups' (above);
    the fields here are the language model's own.
    """

    # Data.
    train_data: str = ""  # TFRecord folder or glob; "" = embedded demo corpus.
    validation_data: str = ""  # "" = the validation split beside train_data.
    model_dir: str = "tf_mlstm_demo"
    shuffle_buffer: int = 1024
    source_repeats: str = ""  # PATTERN=COUNT,... over the records' source files.
    # Model.
    hidden_size: int = 256
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

    def validate(self):
        """Raises ValueError with one clear line for an inconsistent config."""
        validate_runner_settings(self)
        self.check_positive(("hidden_size", "embedding_size", "seq_length", "lr_base_batch"))
        self.check_choices({"lr_scaling": SCALINGS})
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
    def schedule_steps(self):
        return self.total_steps or self.max_steps


@dataclasses.dataclass(frozen=True)
class EvalConfig(CheckedFields):
    """What `tf-mlstm-eval` scores. Field names match its flags."""

    model_dir: str
    data: str  # a TFRecord folder (its `split` shards) or glob, or raw corpus files/globs
    text_key: tuple = TEXT_KEYS
    text_mode: str = "line"
    split: str = "test"
    batch_size: int = 32
    seq_length: int = 256
    max_batches: int = 0

    @property
    def text_keys(self):
        """The keys tried in order, blanks left out."""
        return split_keys(self.text_key)

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        if not self.text_keys:
            raise errors.InvalidValueError(f"{_name('text_key')} must name at least one key")
        return self
