"""A run's `auto` settings, decided before its model exists: the size, then precision and XLA.

The chief decides each and every worker takes its choice, so unlike machines agree.
"""

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from absl import logging

from tf_mlstm import rundir
from tf_mlstm.auto import hardware
from tf_mlstm.auto import measure
from tf_mlstm.auto import size


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where this worker stands in the run: what the decisions need of the strategy.

    With several workers, `sum_over_replicas(value_of)` is the run's all-reduce by which every
    worker takes the chief's choice (`train.strategy.sum_over_replicas` on `strategy`).

    Example:
    >>> import tensorflow as tf
    >>> from tf_mlstm.auto.settings import Layout
    >>> layout = Layout(tf.distribute.get_strategy(), chief=True, num_workers=1,
    ...     local_replicas=1, per_replica_batch=2)
    >>> layout.strategy.num_replicas_in_sync
    1
    """

    strategy: Any
    chief: bool
    num_workers: int
    local_replicas: int
    per_replica_batch: int
    sum_over_replicas: Callable | None = None


class AutoSettings:
    """Resolves the `auto` fields of a config for one run, on every worker alike.

    Args:
      task: the run's `Task` (its `measurement`, `config_file` and `set_config`).
      layout: this worker's `Layout`.
      build_step: `build_step(config, candidate, probe, scratch, use_gpus, hidden_size=None)`
        -> one step of `config` at that `measure.Candidate` and size, on one replica.

    Attributes:
      size: the `size.Decision`, or None where the size was given.
      precision: the `measure.Choice`, or None where precision and XLA were given.
      seconds: the seconds spent measuring, which come off the run's budget.

    Example:
    >>> import tensorflow as tf
    >>> from tf_mlstm.config import TrainConfig
    >>> from tf_mlstm.tasks.language_model import SyntheticLanguageModelTask
    >>> from tf_mlstm.auto.settings import AutoSettings, Layout
    >>> config = TrainConfig(model_dir="run", hidden_size="auto", size_candidates="8,16",
    ...     embedding_size=4, seq_length=8, batch_size=2, max_steps=2, max_minutes=0,
    ...     precision="float32", jit_compile="false").validate()
    >>> layout = Layout(tf.distribute.get_strategy(), True, 1, 1, 2)
    >>> auto = AutoSettings(SyntheticLanguageModelTask(config), layout, build_step=None)
    >>> auto.resolve(config).hidden_size, auto.size.how, auto.seconds
    (16, 'steps', 0.0)
    """

    def __init__(self, task, layout: Layout, build_step: Callable):
        self.task = task
        self.layout = layout
        self.build_step = build_step
        self.size = None
        self.precision = None
        self.seconds = 0.0

    def resolve(self, config) -> Any:
        """`config` with a concrete `hidden_size`, `precision` and `jit_compile`, set on the task.

        Args:
          config: the run's validated config; any of the three may be "auto".

        Returns:
          The resolved, validated config (the same object where nothing is `auto`).
        """
        if getattr(config, "hidden_size", None) == size.AUTO:
            config = self._resolve_size(config)
        elif (unused := size.unused_settings(config)) and self.layout.chief:
            logging.warning("%s.", unused)
        if hardware.AUTO in (config.precision, config.jit_compile):
            config = hardware.resolve_run_config(
                config,
                os.path.join(config.model_dir, self.task.config_file),
                decide=lambda *args: self._decide_precision(config, *args),
            )
            self.task.set_config(config)
        return config

    def records(self) -> dict:
        """What goes into the task's config file: how `auto` decided (empty where nothing did)."""
        record = {}
        if self.precision is not None:
            record["autotune"] = self.precision.record()
        if self.size is not None and self.size.record:
            record["autosize"] = self.size.record
        return record

    # === The size ===

    def _resolve_size(self, config):
        layout, task = self.layout, self.task
        replicas = layout.strategy.num_replicas_in_sync
        self.size = size.decide(
            config,
            replicas,
            chief=layout.chief,
            num_workers=layout.num_workers,
            recorded=rundir.recorded_hidden_size(config.model_dir) if layout.chief else None,
            recorded_path=os.path.join(config.model_dir, task.config_file),
            rates_of=lambda sizes, cap: size.rates_on_this_machine(
                config,
                task,
                layout.per_replica_batch,
                replicas,
                lambda *args: self.build_step(config, *args),
                sizes,
                cap,
            ),
            agree=lambda values: measure.agree_values(
                layout.sum_over_replicas, values, layout.chief, layout.local_replicas
            ),
        )
        size.log(self.size)
        self.seconds += self.size.seconds
        config = dataclasses.replace(config, hidden_size=self.size.units).validate()
        task.set_config(config)
        return config

    # === Precision and XLA ===

    def _decide_precision(self, config, precision, jit, machine, use_gpus):
        layout = self.layout
        options = measure.candidates(machine, use_gpus, precision, jit)
        choice = self._chief_choice(config, options, machine, use_gpus) if layout.chief else None
        if layout.num_workers > 1:
            # Every worker takes part, whatever its own hardware says, so
            # that unlike machines still agree.
            choice = measure.agree(
                layout.sum_over_replicas, choice, layout.chief, layout.local_replicas
            )
        self.precision = choice
        if choice.how in ("table", "only candidate"):
            if choice.note:
                logging.info("Autotune: not measured (%s); the table decides.", choice.note)
            return None
        return (
            choice.candidate.precision,
            choice.reason(),
            choice.candidate.jit,
            "set explicitly" if jit != hardware.AUTO else "chosen with the precision",
        )

    def _chief_choice(self, config, options, machine, use_gpus):
        layout = self.layout
        probe = self.task.measurement(layout.per_replica_batch)
        if probe is None:
            allowed, why, key = False, "this task's step is not measurable", None
        else:
            allowed, why = measure.worth_measuring(
                config.max_minutes, config.max_steps, len(options)
            )
            shape = {**probe.shape, "replicas": layout.strategy.num_replicas_in_sync}
            key = measure.cache_key(machine, use_gpus, shape)
        scratch = tempfile.mkdtemp(prefix="tf_mlstm_autotune_")
        try:
            choice = measure.choose(
                options,
                lambda candidate: self.build_step(config, candidate, probe, scratch, use_gpus),
                probe.units_per_step if probe else 0,
                cache=measure.Cache(),
                key=key,
                max_seconds=measure.time_cap_s(config.max_minutes),
                allowed=allowed,
                not_allowed_why=why,
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.seconds += choice.seconds
        return choice
