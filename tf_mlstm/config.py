"""The frozen training configuration: one object built once from flags.

Everything below `tf_mlstm.cli` receives a `TrainConfig`; nothing reads
absl FLAGS. `validate()` turns bad combinations into one clear message.

Layering: plain dataclasses and the names of the choices, importing only
`errors` and `data`'s field names, so that the run folder (`rundir`), which
reads and writes config.json, sits below training without importing it.
Fine-tuning's config composes the same field groups (`transfer.settings`).
"""

import dataclasses
import json
import math
import numbers

from tf_mlstm import errors
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import split_keys
from tf_mlstm.data.repeats import parse_source_repeats

# The precision policies a run computes in, and the choice that
# `train.hardware` (or `train.autotune`, by measuring) resolves.
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
AUTO = "auto"
PRECISION_CHOICES = (AUTO,) + PRECISIONS

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker")
ALL_REDUCE = ("auto", "ring", "nccl")
JIT_CHOICES = ("auto", "true", "false")
ALLREDUCE_DTYPES = ("float32", "float16")
SCHEDULE_LENGTHS = ("budget", "steps")
# Learning-rate scaling with the batch and decay shapes (train/schedules.py).
SCALINGS = ("none", "linear", "sqrt")
DECAYS = ("constant", "linear", "cosine", "exponential")


def profile_bounds(spec):
    """`--profile_steps` "START,END" as (START, END): profile the steps after START up to END.

    Returns:
      None for "" (no profiling).

    Raises:
      ValueError: not two integers with 0 <= START < END.
    """
    if not spec:
        return None
    parts = [p.strip() for p in spec.split(",")]
    try:
        start, end = (int(p) for p in parts)
    except ValueError:
        start, end = -1, -1
    if len(parts) != 2 or not 0 <= start < end:
        raise errors.InvalidValueError(
            f"--profile_steps must be START,END with 0 <= START < END (e.g. 20,25), got {spec!r}."
        )
    return start, end


# The scalar field types a config checks when it is constructed, and their names.
_SCALAR_TYPES = {bool: "True or False", int: "an int", float: "a number", str: "a str"}


def _accepts(expected, value):
    """Whether `value` fits the scalar annotation `expected` (None: not a scalar, unchecked)."""
    if expected is bool:
        return isinstance(value, bool)
    # NumPy's scalars count (a size computed from an array is a numpy.int64).
    if expected is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if expected is float:  # an int is a number too
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    return None


class CheckedFields:
    """Checks the scalar fields' types when a config dataclass is constructed.

    A value of the wrong type (`TrainConfig(hidden_size="64")`) is refused at
    once, naming the field, instead of failing deep inside the work. Fields
    of other types (tuples, which flags may give as a comma-separated str)
    are left to `validate`, as are ranges.
    """

    def __post_init__(self):
        for field in dataclasses.fields(self):
            expected = field.type
            options = getattr(expected, "__args__", None)
            if type(expected).__name__ == "UnionType" and options:
                choices = [t for t in options if t is not type(None)]
                value = getattr(self, field.name)
                if value is None or len(choices) != 1:
                    continue
                expected = choices[0]
            value = getattr(self, field.name)
            if _accepts(expected, value) is False:
                raise errors.InvalidValueError(
                    f"{type(self).__name__}: {field.name} must be {_SCALAR_TYPES[expected]}, "
                    f"got {value!r}."
                )


class JsonConfig(CheckedFields):
    """JSON round trip for frozen config dataclasses."""

    def to_json(self):
        """The config as sorted, indented JSON."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    # Integer fields that may be negative, with their smallest value
    # (num_gpus: -1 = all visible). Every other integer field is a count, a
    # size, a step or a seed: >= 0.
    NEGATIVE_INTS = {"num_gpus": -1}

    def check_numbers(self):
        """Raises ValueError naming the first number field out of its range.

        Floats must be finite; integers must be >= 0, or >= their entry in
        `NEGATIVE_INTS`. Ranges particular to a field are `validate`'s.
        """
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise errors.InvalidValueError(
                    f"--{field.name} must be a finite number, got {value}."
                )
            if isinstance(value, int) and not isinstance(value, bool):
                errors.check_int32(f"--{field.name}", value)
                lowest = self.NEGATIVE_INTS.get(field.name, 0)
                if value < lowest:
                    raise errors.InvalidValueError(
                        f"--{field.name} must be >= {lowest}, got {value}."
                    )

    def check_positive(self, names):
        """Raises ValueError naming the first of the fields `names` that is not > 0."""
        for name in names:
            if not getattr(self, name) > 0:
                raise errors.InvalidValueError(
                    f"--{name} must be positive, got {getattr(self, name)}."
                )

    def check_choices(self, choices):
        """Raises ValueError naming the first field whose value is not among its choices.

        Args:
          choices: field name -> the values it may take.
        """
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise errors.InvalidValueError(
                    f"--{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}."
                )

    # Field names a config file written before a rename holds: old -> new.
    RENAMED_FIELDS = {}

    @classmethod
    def upgrade_saved(cls, values):
        """A saved config's dict with the names `RENAMED_FIELDS` replaced (new ones win)."""
        upgraded = {cls.RENAMED_FIELDS.get(k, k): v for k, v in values.items()}
        upgraded.update({k: v for k, v in values.items() if k not in cls.RENAMED_FIELDS})
        return upgraded

    @classmethod
    def from_json(cls, text):
        """Builds a config from `to_json` output, ignoring unknown keys."""
        values = cls.upgrade_saved(json.loads(text))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


# === The shared vocabulary ===
#
# Small groups of settings that every training binary shares, each with its
# one validation. `TrainConfig` and the fine-tuning config
# (`transfer.settings.FinetuneConfig`) are composed of them: their fields are
# the groups' fields (so config files stay flat and a flag name is a field
# name), and `validate` calls each group's check once. A binary changes a
# group's default by declaring the field again; its check stays the group's.

CLUSTER_RESOLVERS = ("tf_config", "slurm")


@dataclasses.dataclass(frozen=True)
class RuntimeFields(JsonConfig):
    """Where and how the steps run: precision, XLA, seed, distribution."""

    precision: str = AUTO  # resolved from the hardware when the run starts (hardware.py)
    allreduce_dtype: str = "float32"
    jit_compile: str = AUTO  # likewise
    seed: int = 0
    distribution_strategy: str = "default"
    all_reduce: str = "auto"
    cluster_resolver: str = "tf_config"
    num_gpus: int = -1  # -1 = all visible
    collective_timeout_s: float = 1800.0  # 0 = wait forever for a stuck peer

    @property
    def runtime(self):
        """This config's runtime settings alone, as a `RuntimeFields`."""
        return _group(self, RuntimeFields)

    def validate_runtime(self):
        """Raises ValueError naming the first bad runtime setting."""
        self.check_choices(
            {
                "precision": PRECISION_CHOICES,
                "allreduce_dtype": ALLREDUCE_DTYPES,
                "jit_compile": JIT_CHOICES,
                "distribution_strategy": STRATEGIES,
                "all_reduce": ALL_REDUCE,
                "cluster_resolver": CLUSTER_RESOLVERS,
            }
        )
        if not 0 <= self.collective_timeout_s < float("inf"):
            raise errors.InvalidValueError(
                f"--collective_timeout_s must be a finite number >= 0 (0 = no timeout), got "
                f"{self.collective_timeout_s}."
            )
        # With auto the check waits for the resolved config (hardware.resolve_run_config
        # validates it again once the precision is concrete).
        if self.allreduce_dtype == "float16" and self.precision not in ("mixed_float16", AUTO):
            raise errors.InvalidValueError(
                "--allreduce_dtype=float16 needs "
                "--precision=mixed_float16 (its loss scaling keeps "
                "float16 gradient sums finite)."
            )


@dataclasses.dataclass(frozen=True)
class OptimizationFields(JsonConfig):
    """The optimizer's settings: global batch, peak rate, warmup, decay, clipping."""

    batch_size: int = 32  # global
    lr: float = 5e-3
    warmup_steps: int = 0
    lr_decay: str = "linear"
    clip_norm: float = 1.0

    @property
    def optimization(self):
        """This config's optimization settings alone, as an `OptimizationFields`."""
        return _group(self, OptimizationFields)

    def validate_optimization(self, schedule_steps):
        """Raises ValueError naming the first bad optimization setting.

        Args:
          schedule_steps: the schedule's length, which bounds the warmup.
        """
        self.check_positive(("batch_size", "lr"))
        self.check_choices({"lr_decay": DECAYS})
        if self.clip_norm < 0:
            raise errors.InvalidValueError(f"--clip_norm must be >= 0, got {self.clip_norm}.")
        if not 0 <= self.warmup_steps <= schedule_steps:
            raise errors.InvalidValueError(
                f"--warmup_steps must be in [0, {schedule_steps}] "
                f"(the schedule length), got {self.warmup_steps}."
            )


@dataclasses.dataclass(frozen=True)
class BudgetFields(JsonConfig):
    """How long a run goes and its bookkeeping: steps, time, cadence, divergence."""

    max_steps: int = 600
    max_minutes: float = 0.0  # 0 = no time budget
    schedule_length: str = "budget"  # with max_minutes: end the decay at the budget
    max_nonfinite_steps: int = 20  # non-finite steps in a row that end the run
    log_every_steps: int = 25
    profile_steps: str = ""  # "START,END": TensorBoard profile of those steps
    eval_every_steps: int = 200  # 0 = only at the end
    checkpoint_every_steps: int = 200
    keep_checkpoints: int = 3

    @property
    def budget(self):
        """This config's budget settings alone, as a `BudgetFields`."""
        return _group(self, BudgetFields)

    @property
    def schedule_steps(self):
        """The learning-rate schedule's length in steps."""
        return self.max_steps

    def validate_budget(self):
        """Raises ValueError naming the first bad budget setting."""
        self.check_positive(
            (
                "max_steps",
                "max_nonfinite_steps",
                "log_every_steps",
                "checkpoint_every_steps",
                "keep_checkpoints",
            )
        )
        self.check_choices({"schedule_length": SCHEDULE_LENGTHS})
        if self.max_minutes < 0:
            raise errors.InvalidValueError(f"--max_minutes must be >= 0, got {self.max_minutes}.")
        profile_bounds(self.profile_steps)


def _group(config, group):
    """The fields of `group` (a fields dataclass) taken from `config`, as a `group`."""
    return group(**{f.name: getattr(config, f.name) for f in dataclasses.fields(group)})


def validate_runner_settings(config):
    """The checks of the groups every runner config is composed of, each group's once."""
    config.check_numbers()
    config.validate_runtime()
    config.validate_optimization(config.schedule_steps)
    config.validate_budget()


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
                raise errors.InvalidValueError(f"--{name} must be >= 0, got {getattr(self, name)}.")
        try:
            parse_source_repeats(self.source_repeats)
        except ValueError as error:
            raise errors.InvalidValueError(f"--{error}") from None
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
            raise errors.InvalidValueError("--text_key must name at least one key")
        return self
