"""Choices and configurations of the transfer binaries, importable without TensorFlow.

The flag definitions of `tf-mlstm-finetune` and `tf-mlstm-transfer` read
their choices and defaults here, so `--help` and a bad flag answer before
TensorFlow loads; the code that uses them (`finetune.py`, `labeled.py`)
imports them from here too, so each is defined once.
"""

import dataclasses

from tf_mlstm import errors
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import split_keys
from tf_mlstm.train import config as train_config_lib

FEATURES = ("cell", "hidden", "mean", "max", "min", "std")
"""The feature kinds a fine-tuned head reads, as `models.featurize.FEATURE_KINDS`
names them: the final cell and hidden state, and statistics of the hidden
state over the text. Several are concatenated in the order given."""
HEAD_INITS = ("random", "probe")
"""How the head starts: random, or (`probe`, linear heads) the logistic
regression fitted on the starting model's features of the training texts
("linear probing, then fine-tuning")."""
THRESHOLD_METRICS = ("accuracy", "f1")
"""What a label's probability threshold maximizes on validation."""


# === Config ===


@dataclasses.dataclass(frozen=True)
class FinetuneConfig(train_config_lib.JsonConfig):
    """Fine-tuning settings. Field names match the `tf-mlstm-finetune` flags."""

    # Data.
    init_model_dir: str = ""
    train_data: str = ""
    validation_data: str = ""  # "" = a held-out share of train_data
    test_data: str = ""
    model_dir: str = ""
    text_key: tuple = TEXT_KEYS  # or one comma-separated string
    label_key: str = "label"  # several, comma-separated = multi-label
    label_map: str = ""  # "VALUE:CLASS,...": raw values -> classes (one label key)
    validation_fraction: float = 0.1
    max_train_examples: int = 0  # a seeded random subset of train (0 = all)
    max_eval_examples: int = 0  # the same for validation and test each
    max_length: int = 256  # bytes per text, DOC_START included; longer texts are cut
    # Model and loss.
    feature: str = "cell"  # one or several (comma-separated) of FEATURES
    head_init: str = "random"
    head_hidden: int = 0  # 0 = a linear head; N = one ReLU layer of N units first
    head_dropout: float = 0.0  # dropout before the output layer, in training
    lm_loss_weight: float = 0.0
    threshold_metric: str = "accuracy"
    # Optimization.
    batch_size: int = 32  # global
    lr: float = 1e-4
    warmup_steps: int = 0
    lr_decay: str = "linear"
    clip_norm: float = 1.0
    max_steps: int = 1000
    precision: str = "auto"
    allreduce_dtype: str = "float32"
    jit_compile: str = "auto"
    seed: int = 0
    # Budget and bookkeeping.
    max_minutes: float = 0.0  # 0 = no time budget
    schedule_length: str = "budget"  # with max_minutes: end the decay at the budget
    max_nonfinite_steps: int = 20  # non-finite steps in a row that end the run
    log_every_steps: int = 25
    profile_steps: str = ""  # "START,END": TensorBoard profile of those steps
    eval_every_steps: int = 0  # 0 = only at the end
    checkpoint_every_steps: int = 500
    keep_checkpoints: int = 2
    # Distribution.
    distribution_strategy: str = "default"
    all_reduce: str = "auto"
    cluster_resolver: str = "tf_config"
    num_gpus: int = -1
    collective_timeout_s: float = 1800.0  # 0 = wait forever for a stuck peer

    @property
    def label_keys(self):
        """The label keys, in order (one: binary or K classes; more: multi-label)."""
        return split_keys(self.label_key)

    @property
    def feature_kinds(self):
        """The head's feature kinds, in order."""
        return split_keys(self.feature)

    @property
    def text_keys(self):
        """The text keys, tried in order."""
        return split_keys(self.text_key)

    def validate(self):
        """Raises ValueError with one clear line for an inconsistent config; returns self."""
        self.check_numbers()
        for name in ("init_model_dir", "train_data", "model_dir"):
            if not getattr(self, name):
                raise errors.InvalidValueError(f"--{name} is required.")
        if not self.label_keys or len(set(self.label_keys)) != len(self.label_keys):
            raise errors.InvalidValueError(
                f"--label_key must name distinct keys, got {self.label_key!r}."
            )
        if not self.text_keys:
            raise errors.InvalidValueError("--text_key must name at least one key.")
        if self.label_map:
            if len(self.label_keys) > 1:
                raise errors.InvalidValueError(
                    "--label_map needs one --label_key (several keys are 0/1 labels each), got "
                    f"{self.label_key!r}."
                )
        kinds = self.feature_kinds
        unknown = [kind for kind in kinds if kind not in FEATURES]
        if not kinds or unknown or len(set(kinds)) != len(kinds):
            raise errors.InvalidValueError(
                f"--feature must name distinct kinds of {','.join(FEATURES)}, got {self.feature!r}."
            )
        if self.head_init == "probe" and self.head_hidden:
            raise errors.InvalidValueError(
                "--head_init=probe starts a linear head; it cannot start --head_hidden="
                f"{self.head_hidden}."
            )
        if self.head_hidden < 0:
            raise errors.InvalidValueError(
                f"--head_hidden must be >= 0 (0 = a linear head), got {self.head_hidden}."
            )
        if not 0 <= self.head_dropout < 1:
            raise errors.InvalidValueError(
                f"--head_dropout must be in [0, 1), got {self.head_dropout}."
            )
        self.check_positive(
            (
                "batch_size",
                "max_steps",
                "log_every_steps",
                "checkpoint_every_steps",
                "keep_checkpoints",
                "max_nonfinite_steps",
                "lr",
            )
        )
        if self.max_length < 2:
            raise errors.InvalidValueError(
                f"--max_length must be >= 2 bytes, got {self.max_length}."
            )
        self.check_choices(
            {
                "head_init": HEAD_INITS,
                "threshold_metric": THRESHOLD_METRICS,
                "lr_decay": train_config_lib.DECAYS,
                "precision": train_config_lib.PRECISION_CHOICES,
                "jit_compile": train_config_lib.JIT_CHOICES,
                "distribution_strategy": train_config_lib.STRATEGIES,
                "all_reduce": train_config_lib.ALL_REDUCE,
                "allreduce_dtype": train_config_lib.ALLREDUCE_DTYPES,
                "schedule_length": train_config_lib.SCHEDULE_LENGTHS,
            }
        )
        for name in (
            "lm_loss_weight",
            "clip_norm",
            "eval_every_steps",
            "max_minutes",
            "collective_timeout_s",
        ):
            if getattr(self, name) < 0:
                raise errors.InvalidValueError(f"--{name} must be >= 0, got {getattr(self, name)}.")
        train_config_lib.profile_bounds(self.profile_steps)
        if self.allreduce_dtype == "float16" and self.precision != "mixed_float16":
            raise errors.InvalidValueError(
                "--allreduce_dtype=float16 needs --precision=mixed_float16 (its loss scaling "
                "keeps float16 gradient sums finite)."
            )
        if not 0 < self.validation_fraction < 1:
            raise errors.InvalidValueError(
                f"--validation_fraction must be in (0, 1), got {self.validation_fraction}."
            )
        if not 0 <= self.warmup_steps <= self.max_steps:
            raise errors.InvalidValueError(
                f"--warmup_steps must be in [0, --max_steps={self.max_steps}], got "
                f"{self.warmup_steps}."
            )
        return self
