"""The configs of transfer: labeled data, fine-tuning and the linear probe."""

import dataclasses
import math
import os
from typing import Self

from tf_mlstm import errors
from tf_mlstm.config.base import CheckedFields
from tf_mlstm.config.bounds import check_config_sizes
from tf_mlstm.config.choices import ALL_KINDS
from tf_mlstm.config.choices import AUTO
from tf_mlstm.config.choices import AUTO_NGRAMS
from tf_mlstm.config.choices import CV_FOLDS
from tf_mlstm.config.choices import DEFAULT_C_GRID
from tf_mlstm.config.choices import HEAD_INITS
from tf_mlstm.config.choices import PENALTIES
from tf_mlstm.config.choices import PRECISIONS
from tf_mlstm.config.choices import SEQUENCE_KINDS
from tf_mlstm.config.choices import SOLVERS
from tf_mlstm.config.choices import THRESHOLD_METRICS
from tf_mlstm.config.runner import BudgetFields
from tf_mlstm.config.runner import OptimizationFields
from tf_mlstm.config.runner import RuntimeFields
from tf_mlstm.config.runner import validate_runner_settings
from tf_mlstm.data.fields import NGRAM_KIND
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import split_keys
from tf_mlstm.errors import setting_name as _name

FEATURE_WINDOW = 256
"""Bytes per model call when features are computed (`--window`)."""
FEATURE_BATCH_SIZE = 64
"""Texts per model call when features are computed (`--batch_size`)."""
FEATURE_CACHE_CAP_ENV = "TF_MLSTM_FEATURE_CACHE_MB"
"""The environment variable that caps the feature cache (`transfer.feature_cache`)."""
FEATURE_CACHE_CAP_MB = 4096
"""About 150,000 texts of a 768-unit model's nine kinds, or 27,000 of a 4,096-unit one."""
LABEL_MAP_EXAMPLE = "1:negative,2:negative,3:neutral,4:positive,5:positive"


# === The settings' small languages ===


def parse_feature_kinds(spec: str) -> str | tuple[str, ...]:
    """Parses a `--features` value.

    Args:
      spec: comma-separated kinds from `ALL_KINDS`, "auto" or "auto,tfidf".

    Returns:
      `AUTO`, `AUTO_NGRAMS`, or distinct kinds in `ALL_KINDS` order.

    Raises:
      ValueError: an empty spec, an unknown kind, or "auto" mixed with model kinds.
    """
    names = [name.strip().lower() for name in spec.split(",") if name.strip()]
    choices = f"choose from {list(ALL_KINDS)}, auto or auto,tfidf"
    if not names:
        raise errors.InvalidValueError(f"no feature kinds in {spec!r}; {choices}")
    if AUTO in names:
        if set(names) - {AUTO, NGRAM_KIND}:
            raise errors.InvalidValueError(
                f"'auto' cannot be combined with other feature kinds than tfidf: {spec!r}"
            )
        return AUTO_NGRAMS if NGRAM_KIND in names else AUTO
    unknown = sorted(set(names) - set(ALL_KINDS))
    if unknown:
        raise errors.InvalidValueError(f"unknown feature kinds {unknown} in {spec!r}; {choices}")
    return tuple(kind for kind in ALL_KINDS if kind in names)


def feature_cache_cap_bytes() -> int:
    """The cache's size cap in bytes: `TF_MLSTM_FEATURE_CACHE_MB`, else `FEATURE_CACHE_CAP_MB`.

    Raises:
      errors.InvalidValueError: the variable is set to something other than a number >= 0.
    """
    value = os.environ.get(FEATURE_CACHE_CAP_ENV, "").strip()
    if not value:
        return FEATURE_CACHE_CAP_MB * 10**6
    try:
        megabytes = float(value)
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0 or megabytes == float("inf"):
        raise errors.InvalidValueError(
            f"{FEATURE_CACHE_CAP_ENV} must be a number of megabytes >= 0 (0 stores nothing), "
            f"got {value!r}"
        )
    return int(megabytes * 10**6)


# === Label maps ===


@dataclasses.dataclass(frozen=True)
class LabelMap:
    """Raw label values -> classes, from a `--label_map` spec.

    Attributes:
      spec: the spec it was parsed from.
      entries: ((raw value as written, class), ...) in the spec's order.
      classes: the distinct classes in first-named order; ints when all are written as such.

    Example:

    >>> from tf_mlstm.config.transfer import parse_label_map
    >>> stars = parse_label_map("1:negative,2:negative,4:positive,5:positive")
    >>> stars.classes, stars.lookup(5.0), stars.lookup("3")
    (('negative', 'positive'), 'positive', None)
    """

    spec: str
    entries: tuple
    classes: tuple

    def lookup(self, value) -> int | str | None:
        """The class of raw `value` (numbers numerically, text case-insensitively), or None."""
        key = _map_key(value)
        for raw, label in self.entries:
            if _map_key(raw) == key:
                return label
        return None

    def values(self) -> list[str]:
        """The raw values the map names, as written, for error messages."""
        return [raw for raw, _ in self.entries]


def _map_key(value):
    if isinstance(value, bool):
        return ("text", str(value).lower())
    if isinstance(value, (int, float)):
        return ("number", float(value))
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return ("text", text.lower())
    return ("number", number) if math.isfinite(number) else ("text", text.lower())


def parse_label_map(spec: str | None) -> LabelMap | None:
    """Parses a label map of comma-separated VALUE:CLASS entries, such as "1:neg,2:neg,4:pos".

    Args:
      spec: the spec; "" or None for no map.

    Returns:
      A `LabelMap`, or None for an empty spec.

    Raises:
      ValueError: one line naming the bad entry (no colon, empty, named twice), or < 2 classes.
    """
    if not spec or not spec.strip():
        return None
    entries, seen = [], {}
    for number, piece in enumerate(spec.split(","), 1):
        raw, colon, label = (part.strip() for part in piece.rpartition(":"))
        if not colon or not raw or not label:
            raise errors.InvalidValueError(
                f"{_name('label_map')} entry {number} ({piece.strip()!r}) is not VALUE:CLASS "
                f"(e.g. {_name('label_map')}={LABEL_MAP_EXAMPLE})"
            )
        key = _map_key(raw)
        if key in seen:
            raise errors.InvalidValueError(
                f"{_name('label_map')} names the value {raw!r} twice "
                f"(entries {seen[key]} and {number})"
            )
        seen[key] = number
        entries.append((raw, label))
    classes = tuple(dict.fromkeys(label for _, label in entries))
    if all(label.isdigit() for label in classes):
        entries = [(raw, int(label)) for raw, label in entries]
        classes = tuple(int(label) for label in classes)
    if len(classes) < 2:
        raise errors.InvalidValueError(
            f"{_name('label_map')}={spec} names one class; a classifier needs two or more"
        )
    return LabelMap(spec, tuple(entries), classes)


# === Config ===


@dataclasses.dataclass(frozen=True)
class LabeledDataFields(CheckedFields):
    """Labeled text for transfer and fine-tuning: splits, keys, labels, subsampling.

    Attributes:
      train_data: Labeled training files (comma-separated files/globs).
      validation_data: Labeled validation files; empty: hold out `validation_fraction` of train.
      test_data: Labeled test files; empty: no test metrics.
      text_key: Text keys/columns, tried in order: the first present one wins.
      label_key: Key/column of the class label; several, comma-separated: multi-label (0/1 each).
      label_map: Raw label values -> classes as VALUE:CLASS entries, e.g. 1:neg,2:neg,4:pos,5:pos.
      validation_fraction: Share of train held out for validation without `validation_data`.
      max_train_examples: Use a seeded random subset of this many training texts (0 = all).
      max_eval_examples: The same for `validation_data` and `test_data` each (0 = all).

    Example:

    >>> from tf_mlstm.config import TransferConfig
    >>> config = TransferConfig(train_data="train.csv", label_key="anger, joy")
    >>> config.labeled_data.label_keys
    ('anger', 'joy')
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
    def label_keys(self) -> tuple[str, ...]:
        """The label keys, in order (one: binary or K classes; more: multi-label)."""
        return split_keys(self.label_key)

    @property
    def text_keys(self) -> tuple[str, ...]:
        """The text keys, tried in order."""
        return split_keys(self.text_key)

    @property
    def labeled_data(self) -> "LabeledDataFields":
        """This config's labeled-data settings alone, as a `LabeledDataFields`."""
        return LabeledDataFields(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(LabeledDataFields)}
        )

    def validate_labeled_data(self) -> None:
        """Raises ValueError naming the first bad labeled-data setting."""
        if not self.train_data:
            raise errors.InvalidValueError(f"{_name('train_data')} is required.")
        if not self.text_keys:
            raise errors.InvalidValueError(f"{_name('text_key')} must name at least one key.")
        if not self.label_keys or len(set(self.label_keys)) != len(self.label_keys):
            raise errors.InvalidValueError(
                f"{_name('label_key')} must name distinct keys, got {self.label_key!r}."
            )
        if self.label_map and len(self.label_keys) > 1:
            raise errors.InvalidValueError(
                f"{_name('label_map')} needs one {_name('label_key')} "
                f"(several keys are 0/1 labels each), got {self.label_key!r}."
            )
        if not 0 < self.validation_fraction < 1:
            raise errors.InvalidValueError(
                f"{_name('validation_fraction')} must be in (0, 1), got {self.validation_fraction}."
            )
        for name in ("max_train_examples", "max_eval_examples"):
            if getattr(self, name) < 0:
                raise errors.InvalidValueError(
                    f"{_name(name)} must be >= 0 (0 = all), got {getattr(self, name)}."
                )


@dataclasses.dataclass(frozen=True)
class FinetuneConfig(
    LabeledDataFields,
    RuntimeFields,
    OptimizationFields,
    BudgetFields,
):
    """Fine-tuning settings. Field names match the `tf-mlstm-finetune` flags.

    Attributes:
      init_model_dir: The tf-mlstm-train `model_dir` to start from.
      model_dir: Output: checkpoints, configs and results.json.
      max_length: Bytes per text (document start included); longer texts are cut.
      features: The head's features, concatenated: of cell,hidden,mean,max,min,std.
      head_init: random, or probe: start a linear head as the logistic regression, then fine-tune.
      head_hidden: 0 = a linear head; N = one hidden layer of N ReLU units.
      head_dropout: Dropout rate before the output layer (training only; 0 = none).
      lm_loss_weight: Weight of the auxiliary language-model loss (0 = off).
      threshold_metric: What each label's threshold maximizes on the validation data.

    Example:

    >>> from tf_mlstm.config import FinetuneConfig
    >>> config = FinetuneConfig(
    ...     init_model_dir="run", model_dir="tuned", train_data="train.csv", features="cell,mean"
    ... ).validate()
    >>> config.feature_kinds, config.lr
    (('cell', 'mean'), 0.0001)
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
    def feature_kinds(self) -> tuple[str, ...]:
        """The head's feature kinds, in order."""
        return split_keys(self.features)

    def validate(self) -> Self:
        """Raises ValueError with one clear line for an inconsistent config; returns self."""
        for name in ("init_model_dir", "model_dir"):
            if not getattr(self, name):
                raise errors.InvalidValueError(f"{_name(name)} is required.")
        self.validate_labeled_data()
        validate_runner_settings(self)
        kinds = self.feature_kinds
        unknown = [kind for kind in kinds if kind not in SEQUENCE_KINDS]
        if not kinds or unknown or len(set(kinds)) != len(kinds):
            raise errors.InvalidValueError(
                f"{_name('features')} must name distinct kinds of {','.join(SEQUENCE_KINDS)}, got "
                f"{self.features!r}."
            )
        if self.head_init == "probe" and self.head_hidden:
            raise errors.InvalidValueError(
                f"{_name('head_init')}=probe starts a linear head; it cannot start "
                f"{_name('head_hidden')}={self.head_hidden}."
            )
        if self.head_hidden < 0:
            raise errors.InvalidValueError(
                f"{_name('head_hidden')} must be >= 0 (0 = a linear head), got {self.head_hidden}."
            )
        if not 0 <= self.head_dropout < 1:
            raise errors.InvalidValueError(
                f"{_name('head_dropout')} must be in [0, 1), got {self.head_dropout}."
            )
        if self.max_length < 2:
            raise errors.InvalidValueError(
                f"{_name('max_length')} must be >= 2 bytes, got {self.max_length}."
            )
        self.check_choices({"head_init": HEAD_INITS, "threshold_metric": THRESHOLD_METRICS})
        if self.lm_loss_weight < 0:
            raise errors.InvalidValueError(
                f"{_name('lm_loss_weight')} must be >= 0, got {self.lm_loss_weight}."
            )
        return self


@dataclasses.dataclass(frozen=True)
class TransferConfig(LabeledDataFields):
    """Settings of one transfer run. Field names match the flags.

    Attributes:
      model_dir: A tf-mlstm-train (or tf-mlstm-finetune) `model_dir`.
      output_dir: Where results, classifier and plots are written; not a model folder.
      label_threshold: Read `label_key` as a score: positive when >= this. Unset: a class.
      threshold_metric: Multi-label: what each label's threshold (and its C) maximizes.
      features: Concatenated kinds of cell, hidden, mean, max, min, std, cell_mean, cell_max,
        cell_min, tfidf; or auto (chosen on validation), auto,tfidf.
      num_labeled: Training-set sizes for the accuracy curve; empty: none.
      batch_size: Texts per model call.
      window: Bytes per model call (the state carries across).
      precision: Policy the features are computed in; auto: the fastest on this machine.
      c_grid: Comma-separated inverse regularization strengths; empty: 1e-4 .. 1.
      penalty: l2: dense weights, more accurate; l1: sparse weights (Radford et al.).
      solver: auto: batch, this project's solver; liblinear, saga and lbfgs are scikit-learn's.
      seed: Seed of subsamples, the held-out split and the solver.
      cv_folds: Folds of cross-validation for a validation split under 2,000 rows (0: none).
      progress: A progress bar on stderr; None: on a terminal only.
      overwrite: Replace `output_dir`'s outputs once the new ones are written; else refused.
      feature_cache: Keep and reuse each split's features in the user's cache folder.

    Example:

    >>> from tf_mlstm.config import TransferConfig
    >>> config = TransferConfig(
    ...     model_dir="run", output_dir="sentiment", train_data="train.csv", features="cell"
    ... )
    >>> config.validate()
    >>> config.penalty, config.c_grid[-1]
    ('l2', 1.0)
    """

    model_dir: str = ""
    output_dir: str = ""
    label_threshold: float | None = None  # None: labels are classes; else value >= it is 1
    threshold_metric: str = "accuracy"  # multi-label: what each label's threshold maximizes
    features: str = "auto"  # measured best (docs/transfer.md); "cell" is the paper's
    num_labeled: tuple = ()
    batch_size: int = FEATURE_BATCH_SIZE
    window: int = FEATURE_WINDOW
    precision: str = "float32"  # the policy features are computed in
    c_grid: tuple = DEFAULT_C_GRID
    penalty: str = "l2"  # measured best on a small model; "l1" is the paper's
    solver: str = "auto"  # batch (tf_mlstm.transfer.probe.solver); or scikit-learn's, by name
    seed: int = 0
    cv_folds: int = CV_FOLDS  # small validation splits: choose by K-fold CV; 0: never
    progress: bool | None = None  # None: a progress bar on a terminal only
    overwrite: bool = False  # replace a non-empty output_dir (preflight.refuse_existing)
    feature_cache: bool = True  # read and keep features in the user's cache (feature_cache.py)

    def validate(self) -> None:
        """Raises ValueError naming the first bad setting."""
        check_config_sizes(self)
        for name in ("model_dir", "output_dir"):
            if not getattr(self, name):
                raise errors.InvalidValueError(f"{_name(name)} is required.")
        self.validate_labeled_data()
        parse_feature_kinds(self.features)
        if self.batch_size <= 0 or self.window <= 0:
            raise errors.InvalidValueError(
                f"{_name('batch_size')} and {_name('window')} must be positive"
            )
        if self.precision not in PRECISIONS:
            raise errors.InvalidValueError(
                f"{_name('precision')} must be one of {PRECISIONS}, got {self.precision!r}"
            )
        if self.penalty not in PENALTIES:
            raise errors.InvalidValueError(
                f"{_name('penalty')} must be one of {PENALTIES}, got {self.penalty!r}"
            )
        if self.solver not in SOLVERS:
            raise errors.InvalidValueError(
                f"{_name('solver')} must be one of {SOLVERS}, got {self.solver!r}"
            )
        if self.solver == "lbfgs" and self.penalty != "l2":
            raise errors.InvalidValueError(
                f"{_name('solver')}=lbfgs fits only {_name('penalty')}=l2, not {self.penalty}"
            )
        if self.cv_folds < 0 or self.cv_folds == 1:
            raise errors.InvalidValueError(
                f"{_name('cv_folds')} must be 0 (choose on the validation split) or 2 or more, got "
                f"{self.cv_folds}"
            )
        if not self.c_grid or min(self.c_grid) <= 0:
            raise errors.InvalidValueError(
                f"{_name('c_grid')} must hold positive values, got {list(self.c_grid)}"
            )
        if self.label_threshold is not None and not math.isfinite(self.label_threshold):
            raise errors.InvalidValueError(
                f"{_name('label_threshold')} must be a finite number, got {self.label_threshold}"
            )
        if self.label_threshold is not None and self.label_map:
            raise errors.InvalidValueError(
                f"{_name('label_threshold')} and {_name('label_map')} cannot be combined: "
                "choose one"
            )
        parse_label_map(self.label_map)
        if self.feature_cache:
            feature_cache_cap_bytes()  # a bad TF_MLSTM_FEATURE_CACHE_MB, before the model loads
        if self.threshold_metric not in THRESHOLD_METRICS:
            raise errors.InvalidValueError(
                f"{_name('threshold_metric')} must be one of {THRESHOLD_METRICS}, got "
                f"{self.threshold_metric!r}"
            )
