"""Choices and configurations of the transfer binaries, importable without TensorFlow.

The flag definitions of `tf-mlstm-finetune` and `tf-mlstm-transfer` read
their choices and defaults here, so `--help` and a bad flag answer before
TensorFlow loads; the code that uses them (`finetune.py`, `labeled.py`)
imports them from here too, so each is defined once.
"""

import dataclasses

from tf_mlstm import config as train_config_lib
from tf_mlstm import errors
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import split_keys
from tf_mlstm.models.kinds import SEQUENCE_KINDS

HEAD_INITS = ("random", "probe")
"""How the head starts: random, or (`probe`, linear heads) the logistic
regression fitted on the starting model's features of the training texts
("linear probing, then fine-tuning")."""
THRESHOLD_METRICS = ("accuracy", "f1")
"""What a label's probability threshold maximizes on validation."""


# === Config ===


@dataclasses.dataclass(frozen=True)
class LabeledDataFields(train_config_lib.CheckedFields):
    """Labeled text for transfer and fine-tuning: splits, keys, labels, subsampling.

    `tf-mlstm-transfer`, `tf-mlstm-finetune` and `tools/tfidf_baseline.py`
    read the same fields under the same flag names, checked by
    `validate_labeled_data` once.
    """

    train_data: str = ""
    validation_data: str = ""  # "" = a held-out share of train_data
    test_data: str = ""  # "" = no test metrics
    text_key: tuple = TEXT_KEYS  # or one comma-separated string
    label_key: str | tuple | list = "label"  # several (a list, or comma-separated) = multi-label
    label_map: str = ""  # "VALUE:CLASS,...": raw values -> classes (one label key)
    validation_fraction: float = 0.1
    max_train_examples: int = 0  # a seeded random subset of train (0 = all)
    max_eval_examples: int = 0  # the same for validation and test each

    @property
    def label_keys(self):
        """The label keys, in order (one: binary or K classes; more: multi-label)."""
        return split_keys(self.label_key)

    @property
    def text_keys(self):
        """The text keys, tried in order."""
        return split_keys(self.text_key)

    @property
    def labeled_data(self):
        """This config's labeled-data settings alone, as a `LabeledDataFields`."""
        return LabeledDataFields(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(LabeledDataFields)}
        )

    def validate_labeled_data(self):
        """Raises ValueError naming the first bad labeled-data setting."""
        if not self.train_data:
            raise errors.InvalidValueError("--train_data is required.")
        if not self.text_keys:
            raise errors.InvalidValueError("--text_key must name at least one key.")
        if not self.label_keys or len(set(self.label_keys)) != len(self.label_keys):
            raise errors.InvalidValueError(
                f"--label_key must name distinct keys, got {self.label_key!r}."
            )
        if self.label_map and len(self.label_keys) > 1:
            raise errors.InvalidValueError(
                "--label_map needs one --label_key (several keys are 0/1 labels each), got "
                f"{self.label_key!r}."
            )
        if not 0 < self.validation_fraction < 1:
            raise errors.InvalidValueError(
                f"--validation_fraction must be in (0, 1), got {self.validation_fraction}."
            )
        for name in ("max_train_examples", "max_eval_examples"):
            if getattr(self, name) < 0:
                raise errors.InvalidValueError(
                    f"--{name} must be >= 0 (0 = all), got {getattr(self, name)}."
                )


@dataclasses.dataclass(frozen=True)
class FinetuneConfig(
    LabeledDataFields,
    train_config_lib.RuntimeFields,
    train_config_lib.OptimizationFields,
    train_config_lib.BudgetFields,
):
    """Fine-tuning settings. Field names match the `tf-mlstm-finetune` flags.

    Composed of the labeled-data group (above) and the runner's runtime,
    optimization and budget groups (`tf_mlstm.config`); the fields here are
    fine-tuning's own, and the shared ones whose default differs.
    """

    # Files config.json predates the plural flag name with.
    RENAMED_FIELDS = {"feature": "features"}

    init_model_dir: str = ""
    model_dir: str = ""
    max_length: int = 256  # bytes per text, DOC_START included; longer texts are cut
    # Model and loss.
    features: str | tuple | list = "cell"  # one or several (comma-separated) of SEQUENCE_KINDS
    head_init: str = "random"
    head_hidden: int = 0  # 0 = a linear head; N = one ReLU layer of N units first
    head_dropout: float = 0.0  # dropout before the output layer, in training
    lm_loss_weight: float = 0.0
    threshold_metric: str = "accuracy"
    # Shared settings with fine-tuning's own defaults.
    lr: float = 1e-4
    max_steps: int = 1000
    eval_every_steps: int = 0  # 0 = only at the end
    checkpoint_every_steps: int = 500
    keep_checkpoints: int = 2

    @property
    def feature_kinds(self):
        """The head's feature kinds, in order."""
        return split_keys(self.features)

    def validate(self):
        """Raises ValueError with one clear line for an inconsistent config; returns self."""
        for name in ("init_model_dir", "model_dir"):
            if not getattr(self, name):
                raise errors.InvalidValueError(f"--{name} is required.")
        self.validate_labeled_data()
        train_config_lib.validate_runner_settings(self)
        kinds = self.feature_kinds
        unknown = [kind for kind in kinds if kind not in SEQUENCE_KINDS]
        if not kinds or unknown or len(set(kinds)) != len(kinds):
            raise errors.InvalidValueError(
                f"--features must name distinct kinds of {','.join(SEQUENCE_KINDS)}, got "
                f"{self.features!r}."
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
        if self.max_length < 2:
            raise errors.InvalidValueError(
                f"--max_length must be >= 2 bytes, got {self.max_length}."
            )
        self.check_choices({"head_init": HEAD_INITS, "threshold_metric": THRESHOLD_METRICS})
        if self.lm_loss_weight < 0:
            raise errors.InvalidValueError(
                f"--lm_loss_weight must be >= 0, got {self.lm_loss_weight}."
            )
        return self
