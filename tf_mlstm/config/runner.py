"""The groups of settings every run on the distributed runner shares.

`TrainConfig` and `FinetuneConfig` inherit their fields, so config files stay flat.
"""

import dataclasses

from tf_mlstm import errors
from tf_mlstm.config.base import JsonConfig
from tf_mlstm.config.base import group_of
from tf_mlstm.config.choices import ALL_REDUCE
from tf_mlstm.config.choices import ALLREDUCE_DTYPES
from tf_mlstm.config.choices import AUTO
from tf_mlstm.config.choices import CLUSTER_RESOLVERS
from tf_mlstm.config.choices import DECAYS
from tf_mlstm.config.choices import JIT_CHOICES
from tf_mlstm.config.choices import PRECISION_CHOICES
from tf_mlstm.config.choices import SCHEDULE_LENGTHS
from tf_mlstm.config.choices import STRATEGIES
from tf_mlstm.errors import setting_name as _name


def profile_bounds(spec: str) -> tuple[int, int] | None:
    """`--profile_steps` "START,END" as (START, END): profile the steps after START up to END.

    Returns:
      (START, END), or None for "" (no profiling).

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
            f"{_name('profile_steps')} must be START,END with 0 <= START < END (e.g. 20,25), "
            f"got {spec!r}."
        )
    return start, end


@dataclasses.dataclass(frozen=True)
class RuntimeFields(JsonConfig):
    """Where and how the steps run: precision, XLA, seed, distribution.

    Attributes:
      precision: Dtype policy (mixed_float16 adds loss scaling); auto: the fastest measured here.
      allreduce_dtype: Gradient all-reduce dtype (float16 halves traffic; needs mixed_float16).
      jit_compile: XLA-compile the per-replica step; auto: measured with `precision`.
      seed: Random seed.
      distribution_strategy: default | one_device | mirrored | multi_worker (TF_CONFIG or Slurm).
      all_reduce: Collective implementation for gradient all-reduce.
      cluster_resolver: Where multi_worker reads the cluster from.
      num_gpus: GPUs per worker (-1 = all visible).
      collective_timeout_s: Fail when an all-reduce waits longer (0 = forever); above compile time.

    Example:

    >>> from tf_mlstm.config import TrainConfig
    >>> TrainConfig(seed=7, precision="float32").runtime
    RuntimeFields(precision='float32', allreduce_dtype='float32', jit_compile='auto', seed=7, ...)
    """

    precision: str = AUTO  # resolved from the hardware when the run starts (auto/hardware.py)
    allreduce_dtype: str = "float32"
    jit_compile: str = AUTO  # likewise
    seed: int = 0
    distribution_strategy: str = "default"
    all_reduce: str = "auto"
    cluster_resolver: str = "tf_config"
    num_gpus: int = -1  # -1 = all visible
    collective_timeout_s: float = 1800.0  # 0 = wait forever for a stuck peer

    @property
    def runtime(self) -> "RuntimeFields":
        """This config's runtime settings alone, as a `RuntimeFields`."""
        return group_of(self, RuntimeFields)

    def validate_runtime(self) -> None:
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
                f"{_name('collective_timeout_s')} must be a finite number >= 0 (0 = no timeout), "
                f"got {self.collective_timeout_s}."
            )
        # With auto the check waits for the resolved config (hardware.resolve_run_config
        # validates it again once the precision is concrete).
        if self.allreduce_dtype == "float16" and self.precision not in ("mixed_float16", AUTO):
            raise errors.InvalidValueError(
                f"{_name('allreduce_dtype')}=float16 needs "
                f"{_name('precision')}=mixed_float16 (its loss scaling keeps "
                "float16 gradient sums finite)."
            )


@dataclasses.dataclass(frozen=True)
class OptimizationFields(JsonConfig):
    """The optimizer's settings: global batch, peak rate, warmup, decay, clipping.

    Attributes:
      batch_size: Global batch (rows); split evenly over replicas.
      lr: Peak Adam learning rate.
      warmup_steps: Linear warmup steps.
      lr_decay: Decay after warmup, reaching its end at the end of the schedule.
      clip_norm: Global gradient-norm clipping (0 = off).

    Example:

    >>> from tf_mlstm.config import TrainConfig
    >>> TrainConfig(batch_size=8, lr=1e-3).optimization
    OptimizationFields(batch_size=8, lr=0.001, warmup_steps=0, lr_decay='linear', clip_norm=1.0)
    """

    batch_size: int = 32  # global
    lr: float = 5e-3
    warmup_steps: int = 0
    lr_decay: str = "linear"
    clip_norm: float = 1.0

    @property
    def optimization(self) -> "OptimizationFields":
        """This config's optimization settings alone, as an `OptimizationFields`."""
        return group_of(self, OptimizationFields)

    def validate_optimization(self, schedule_steps: int) -> None:
        """Raises ValueError naming the first bad optimization setting.

        Args:
          schedule_steps: the schedule's length, which bounds the warmup.
        """
        self.check_positive(("batch_size", "lr"))
        self.check_choices({"lr_decay": DECAYS})
        if self.clip_norm < 0:
            raise errors.InvalidValueError(
                f"{_name('clip_norm')} must be >= 0, got {self.clip_norm}."
            )
        if not 0 <= self.warmup_steps <= schedule_steps:
            raise errors.InvalidValueError(
                f"{_name('warmup_steps')} must be in [0, {schedule_steps}] "
                f"(the schedule length), got {self.warmup_steps}."
            )


@dataclasses.dataclass(frozen=True)
class BudgetFields(JsonConfig):
    """How long a run goes and its bookkeeping: steps, time, cadence, divergence.

    Attributes:
      max_steps: Stop after this many steps.
      max_minutes: Stop cleanly after this wall-clock budget, then finish as usual (0 = none).
      schedule_length: budget: the decay ends with `max_minutes`; steps: at the last step.
      max_nonfinite_steps: Stop with an error after this many non-finite steps in a row.
      log_every_steps: Progress line and TensorBoard interval.
      profile_steps: START,END: profile the steps after START up to END into MODEL_DIR/train.
      eval_every_steps: Validation interval (0 = only at the end).
      checkpoint_every_steps: Checkpoint interval.
      keep_checkpoints: Checkpoints kept.

    Example:

    >>> from tf_mlstm.config import TrainConfig
    >>> budget = TrainConfig(max_steps=50, max_minutes=2.0).budget
    >>> budget.max_steps, budget.max_minutes, budget.schedule_steps
    (50, 2.0, 50)
    """

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
    def budget(self) -> "BudgetFields":
        """This config's budget settings alone, as a `BudgetFields`."""
        return group_of(self, BudgetFields)

    @property
    def schedule_steps(self) -> int:
        """The learning-rate schedule's length in steps."""
        return self.max_steps

    def validate_budget(self) -> None:
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
            raise errors.InvalidValueError(
                f"{_name('max_minutes')} must be >= 0, got {self.max_minutes}."
            )
        profile_bounds(self.profile_steps)


def validate_runner_settings(config) -> None:
    """The checks of the groups every runner config is composed of, each group's once."""
    config.check_numbers()
    config.validate_runtime()
    config.validate_optimization(config.schedule_steps)
    config.validate_budget()
