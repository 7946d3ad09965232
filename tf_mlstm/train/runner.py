"""The distributed runner: one training loop for every kind of training.

Language-model training (`lm_task.py`) and fine-tuning
(`tf_mlstm.transfer.finetune`) are tasks; this module owns everything they
share, in the task/trainer split of tensorflow/models `official/core`:

* the strategy, the replica layout and seeding;
* the optimizer with loss scaling (`optimizer.py`), the step and
  skipped-step counters;
* the checkpoint manager, plus per-worker state beside it
  (`checkpointing.py`): the input position of this worker's iterator and the
  recurrent state a task carries from step to step;
* the step: the task's forward and backward pass, XLA-compiled when
  `jit_compile` is on, with the loss scaled under float16; ONE all-reduce
  (SUM) of the gradients bundled with the task's statistics and the stop
  flag (optionally in float16); then `optimizer.apply`;
* the cadence (progress log and TensorBoard summaries, checkpoints, the
  task's periodic evaluation), the `max_minutes` budget, a peer worker's
  failure (`PeerWorkerError`), the final synchronization and `results.json`.

Why the data is a per-worker plain tf.data iterator rather than
`distribute_datasets_from_function`: only the former can be checkpointed
(TF 2.21), and an exact resume needs the input position. The worker's batch
holds `local_replicas` blocks of per-replica rows; replica r always gets
block r (`experimental_distribute_values_from_function`), so state it
carries stays aligned with its rows.

Why the stop flag rides in the all-reduce: workers check their clocks at
slightly different moments, so each would stop at a different step and the
others would hang in the next collective. Summed with the statistics, one
worker's "stop" is seen by every replica at the same step, at no extra
collective.

Divergence: a step whose all-reduced gradients are not finite is skipped in
every precision (`optimizer.py`), and counted. A checkpoint that falls due
inside such a stretch waits for the next finite step, so a diverging run
does not rotate its good checkpoints out; after `max_nonfinite_steps` in a
row the run ends with `TrainingDivergedError` (the binaries: one line, exit
status 1).

Preemption: a Slurm time limit or a Kubernetes eviction sends SIGTERM and
kills a little later; a person at a terminal presses Ctrl-C (SIGINT). While
training, either signal only sets a flag (`stop_signals.py`, the one place
signals are handled); before each step the flag joins the stop flags in the
all-reduce, so every worker stops after the same step, writes a checkpoint
(with carried state and input position) and exits with `EXIT_PREEMPTED`
(75, `EX_TEMPFAIL`: "try again") after SIGTERM, `EXIT_INTERRUPTED` (130)
after Ctrl-C, distinct from success (0), errors (1) and a death by signal
(128 + n). Relaunching the same command resumes with no step lost. A second
Ctrl-C ends the process at once (status 130), without that checkpoint.

A task supplies (see `Task`): the model (built under the strategy scope)
and the variables it trains, the learning rate, a per-worker dataset and its
layout, the loss with its statistics (and carried state), progress text,
periodic evaluations, config files and its final results. It sees the run
through a `TaskContext` (strategy, replica layout, step, summary writers),
never the runner itself; what a checkpoint restores (the shared checkpoint,
this worker's carried state and input position) is one `RunState`.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tensorboard.plugins.hparams import api as hparams_api

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm import rundir
from tf_mlstm.config import profile_bounds
from tf_mlstm.train import autotune
from tf_mlstm.train import checkpointing
from tf_mlstm.train import hardware
from tf_mlstm.train import optimizer as optimizer_lib
from tf_mlstm.train import schedules
from tf_mlstm.train import stop_signals
from tf_mlstm.train import strategy as strategy_lib

# How a collective fails once the coordination service has noticed that a
# peer task is gone (heartbeat timeout) or has cancelled the pending ops.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
)
# Exit statuses of a run stopped by SIGTERM (75) or Ctrl-C (130) after its
# checkpoint: relaunching resumes.
EXIT_PREEMPTED = stop_signals.EXIT_PREEMPTED
EXIT_INTERRUPTED = stop_signals.EXIT_INTERRUPTED
# Positions of the stop flags and the budget's predicted end (summed over
# replicas) at the end of the all-reduced statistics.
_TIME_STOP, _SIGNAL_STOP, _PLANNED_END = -3, -2, -1
# The folder of the training summaries inside --model_dir.
TRAIN_SUMMARY_SUBDIR = "train"


class PreemptedError(RuntimeError):
    """A SIGTERM or Ctrl-C stopped the run; every worker checkpointed the same step.

    Attributes:
      step: the step of that checkpoint.
      exit_status: the process's exit status (75 after SIGTERM, 130 after Ctrl-C).
    """

    def __init__(self, message, step, exit_status=EXIT_PREEMPTED):
        super().__init__(message)
        self.step = step
        self.exit_status = exit_status


class TrainingDivergedError(errors.UserError, RuntimeError):
    """Too many non-finite steps in a row: the run stops, its checkpoints stay finite."""


@dataclasses.dataclass(frozen=True)
class TaskContext:
    """What a `Task` may know of the run it is part of (the runner builds it).

    Attributes:
      strategy: the `tf.distribute` strategy (evaluations run under its scope).
      chief: whether this worker is the chief (the one that logs samples and
        writes the run folder).
      worker: this worker's index.
      num_workers: the workers of the run.
      local_replicas: the replicas on this worker.
      per_replica_batch: rows each replica computes a step.
      step: the global step, an int64 `tf.Variable` (read inside the compiled
        step, e.g. to seed dropout, so that a resumed run repeats it).
      summary_writer: `summary_writer(name)` -> the TensorBoard writer of
        `model_dir/name` (a temporary folder off the chief).
    """

    strategy: object
    chief: bool
    worker: int
    num_workers: int
    local_replicas: int
    per_replica_batch: int
    step: object
    summary_writer: object


class Task:
    """What one kind of training gives the `Runner`.

    The runner calls, in this order: `prepare` (read data, check inputs),
    `build_model` (under the strategy scope, after seeding), both with the
    run's `TaskContext`,
    `learning_rate`, `checkpoint_objects`, `dataset`, `input_layout`, then
    `loss` inside the compiled step, `progress` at each log line, the
    `periodic` callbacks, and `results` at the end. Subclasses override what
    they need; the defaults are "nothing".
    """

    #: What the start line calls this run ("Training", "Fine-tuning").
    title = "Training"
    #: The run folder's file that records the task's config (and the precision).
    config_file = rundir.CONFIG_FILE

    def check_inputs(self):
        """Raises, with one line, when an input is missing: first, before the hardware is resolved.

        Cheap checks only (files exist, a model folder has its config); `prepare` reads.
        """

    def set_config(self, config):
        """Takes the config with `auto` precision and XLA made concrete (before `prepare`)."""
        self.config = config

    def measurement(self, rows):
        """How `auto` times this task's step: an `autotune.Probe`, or None (the table decides).

        Args:
          rows: rows per replica.
        """
        return None

    def prepare(self, context):
        """Reads and checks inputs before the model is built (seeding follows).

        Args:
          context: the run's `TaskContext`; a task may keep it.
        """

    def build_model(self, context):
        """Builds the model under the strategy scope.

        Args:
          context: the run's `TaskContext`.

        Returns:
          (model, trainable variables the optimizer updates).
        """
        raise NotImplementedError

    def learning_rate(self):
        """The learning rate or `LearningRateSchedule`."""
        raise NotImplementedError

    def checkpoint_objects(self):
        """{name: trackable} saved in each checkpoint besides optimizer and steps."""
        raise NotImplementedError

    def dataset(self, input_context, rows):
        """This worker's infinite tf.data pipeline of batches of `rows` rows.

        Args:
          input_context: `tf.distribute.InputContext` naming this worker.
          rows: rows per batch (per-replica rows x local replicas).

        Returns:
          A dataset of dicts of tensors whose first axis is the row.
        """
        raise NotImplementedError

    def input_layout(self):
        """JSON-able description of what the input position depends on."""
        return {}

    def carried_state_shape(self, rows):
        """(rows, units) of an (h, c) pair each replica carries, or None.

        Args:
          rows: rows per replica.
        """
        return None

    def loss(self, batch, state):
        """Forward pass of one replica (inside the compiled step, under the tape).

        Args:
          batch: this replica's rows.
          state: the carried [h, c] or [] (see `carried_state_shape`).

        Returns:
          (loss whose replica sum is the global mean, float32 statistics
          vector summed over replicas, new state).
        """
        raise NotImplementedError

    def progress(self, step, window, steps, seconds):
        """The progress text and summaries of a log window.

        Args:
          step: the global step.
          window: statistics summed over replicas and the window's steps.
          steps: steps in the window.
          seconds: wall time of the window.

        Returns:
          (text for the log line, {summary name: scalar}).
        """
        raise NotImplementedError

    def describe(self):
        """Extra words for the start line after the global batch (e.g. ' x 256 chars')."""
        return ""

    def periodic(self):
        """[(every_steps, callback(step))] run on every worker at that cadence."""
        return []

    def configs(self):
        """{file name: config dataclass} checked on resume and written by the chief at start."""
        return {}

    def results(self, step):
        """Task results merged into the run's results (after the last checkpoint)."""
        return {}


class Runner:
    """Runs a `Task` data-parallel under a `tf.distribute` strategy.

    `auto` precision and XLA are resolved here, after the strategy and before
    the task prepares: measured on the chief where the task supplies a
    `measurement` and the run can afford it (`autotune.py`), the choice
    handed to every worker, recorded in the run's config file.

    Args:
      task: the `Task`.
      config: a validated config with the run fields (`model_dir`,
        `batch_size`, `seed`, `precision`, `clip_norm`, `jit_compile`,
        `allreduce_dtype`, `max_steps`, `max_minutes`, `max_nonfinite_steps`,
        `log_every_steps`, `checkpoint_every_steps`, `keep_checkpoints`,
        `eval_every_steps`, and the distribution fields).
      strategy: the strategy to run under; None builds the one `config` names.

    Raises:
      ValueError: the global batch does not divide over the replicas, or the
        task rejects its inputs.
    """

    def __init__(self, task, config, strategy=None):
        self.task = task
        self.config = config
        task.check_inputs()
        self._setup_strategy(strategy)
        self.autotune, self.autotune_seconds = None, 0.0
        if hardware.AUTO in (config.precision, config.jit_compile):
            self.config = hardware.resolve_run_config(
                config, os.path.join(config.model_dir, task.config_file), decide=self._decide
            )
            task.set_config(self.config)
        self.jit = self.config.jit_compile == "true"
        self._writers = _SummaryWriters(self.config.model_dir, self.strategy)
        with self.strategy.scope():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps")
        self.context = TaskContext(
            strategy=self.strategy,
            chief=self.chief,
            worker=self.worker,
            num_workers=self.num_workers,
            local_replicas=self.local_replicas,
            per_replica_batch=self.per_replica_batch,
            step=self.step,
            summary_writer=self._writers.get,
        )
        task.prepare(self.context)
        tf.random.set_seed(config.seed)
        keras.utils.set_random_seed(config.seed)
        self._build_model_and_optimizer()
        self.run_state = self._setup_run_state()
        self._profiling = False
        self._signals = stop_signals.StopSignals()
        self._train_step = self._make_train_step()

    # === Setup ===

    def _setup_strategy(self, strategy=None):
        config = self.config
        self.strategy = strategy or strategy_lib.get_distribution_strategy(
            config.distribution_strategy,
            num_gpus=None if config.num_gpus < 0 else config.num_gpus,
            all_reduce=config.all_reduce,
            cluster_resolver=config.cluster_resolver,
            collective_timeout_s=config.collective_timeout_s,
        )
        self.chief = strategy_lib.is_chief(self.strategy)
        _, self.worker, self.num_workers = strategy_lib.worker_info(self.strategy)
        replicas = self.strategy.num_replicas_in_sync
        if config.batch_size % replicas:
            raise errors.InvalidValueError(
                f"--batch_size={config.batch_size} (global) must be a "
                f"multiple of the {replicas} replicas."
            )
        self.per_replica_batch = config.batch_size // replicas
        self.local_replicas = replicas // self.num_workers

    # === auto precision and XLA ===

    def _decide(self, precision, jit, machine, use_gpus):
        """`hardware.resolve_run_config`'s `decide`: the chief's choice, on every worker."""
        options = autotune.candidates(machine, use_gpus, precision, jit)
        choice = self._chief_choice(options, machine, use_gpus) if self.chief else None
        if self.num_workers > 1:
            # Every worker takes part, whatever its own hardware says, so
            # that unlike machines still agree.
            choice = autotune.agree(self.strategy, choice, self.chief, self.local_replicas)
        self.autotune = choice
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

    def _chief_choice(self, options, machine, use_gpus):
        config = self.config
        probe = self.task.measurement(self.per_replica_batch)
        if probe is None:
            allowed, why, key = False, "this task's step is not measurable", None
        else:
            allowed, why = autotune.worth_measuring(
                config.max_minutes, config.max_steps, len(options)
            )
            shape = {**probe.shape, "replicas": self.strategy.num_replicas_in_sync}
            key = autotune.cache_key(machine, use_gpus, shape)
        scratch = tempfile.mkdtemp(prefix="tf_mlstm_autotune_")
        try:
            choice = autotune.choose(
                options,
                lambda candidate: self._candidate_step(candidate, probe, scratch, use_gpus),
                probe.units_per_step if probe else 0,
                cache=autotune.Cache(),
                key=key,
                max_seconds=autotune.time_cap_s(config.max_minutes),
                allowed=allowed,
                not_allowed_why=why,
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self.autotune_seconds = choice.seconds
        return choice

    def _candidate_step(self, candidate, probe, scratch, use_gpus):
        """One step of `candidate` on one replica of this worker, synthetic data, fresh model.

        Built by a second runner on one local device, so nothing of this run
        (its variables, seeds, iterator, folder) is touched: this runner
        seeds and builds its model afterwards exactly as without measuring.
        """
        config = dataclasses.replace(
            self.config,
            precision=candidate.precision,
            jit_compile="true" if candidate.jit else "false",
            batch_size=self.per_replica_batch,
            model_dir=os.path.join(scratch, candidate.name.replace("/", "_")),
            max_minutes=0.0,
        )
        gpu = use_gpus and tf.config.list_logical_devices("GPU")
        device = tf.distribute.OneDeviceStrategy("/gpu:0" if gpu else "/cpu:0")
        probe_runner = Runner(probe.make_task(config), config, strategy=device)
        return probe_runner.train_step

    def _build_model_and_optimizer(self):
        config = self.config
        with self.strategy.scope():
            self.model, self.variables = self.task.build_model(self.context)
            schedule = self.task.learning_rate()
            self.plan = None
            if (
                config.schedule_length == "budget"
                and config.max_minutes > 0
                and isinstance(schedule, schedules.LargeBatchSchedule)
            ):
                # The decay's end follows the time budget (see schedules.py).
                self.plan = schedules.SchedulePlan(schedule.total_steps, schedule.warmup_steps)
                schedule.plan = self.plan
            self.optimizer = optimizer_lib.build_optimizer(
                schedule, config.clip_norm, config.precision
            )
            self.optimizer.build(self.variables)

    def _setup_run_state(self):
        context = tf.distribute.InputContext(
            num_input_pipelines=self.num_workers,
            input_pipeline_id=self.worker,
            num_replicas_in_sync=self.strategy.num_replicas_in_sync,
        )
        rows = self.per_replica_batch * self.local_replicas
        checkpoint = tf.train.Checkpoint(
            **self.task.checkpoint_objects(),
            optimizer=self.optimizer,
            step=self.step,
            skipped=self.skipped,
            **(self.plan.variables() if self.plan else {}),
        )
        layout = {
            "num_workers": self.num_workers,
            "worker": self.worker,
            "rows": rows,
            "seed": self.config.seed,
            **self.task.input_layout(),
        }
        return RunState(
            checkpoint,
            self.step,
            iter(self.task.dataset(context, rows)),
            layout,
            self.task.carried_state_shape(self.per_replica_batch),
            self.model.compute_dtype,
            self.config.model_dir,
            self.config.keep_checkpoints,
            self.strategy,
            self.worker,
            self.local_replicas,
        )

    def summary_writer(self, name):
        """The summary writer of `model_dir/name` (a temporary folder off the chief)."""
        return self._writers.get(name)

    # === The step ===

    def _make_train_step(self):
        task, optimizer, variables = self.task, self.optimizer, self.variables
        reduce_dtype = tf.float16 if self.config.allreduce_dtype == "float16" else None
        use_scale = optimizer_lib.loss_scale(optimizer) is not None

        @tf.function(jit_compile=self.jit, autograph=False)
        def forward_backward(batch, state):
            with tf.GradientTape() as tape:
                loss, stats, state = task.loss(batch, state)
                scaled = optimizer.scale_loss(loss) if use_scale else loss
            grads = tape.gradient(scaled, variables)
            return tf.cast(stats, tf.float32), grads, state

        def replica_step(batch, state, stop):
            stats, grads, state = forward_backward(batch, state)
            stats = tf.concat([stats, stop], axis=0)
            context = tf.distribute.get_replica_context()
            if reduce_dtype is None:
                grads, stats = context.all_reduce(tf.distribute.ReduceOp.SUM, (grads, stats))
            else:
                # A multi-worker all-reduce packs its tensors into one buffer,
                # so they must share a dtype; the float32 statistics (sums far
                # past float16's range) travel in a second, tiny all-reduce.
                grads = context.all_reduce(
                    tf.distribute.ReduceOp.SUM, [tf.cast(g, reduce_dtype) for g in grads]
                )
                stats = context.all_reduce(tf.distribute.ReduceOp.SUM, stats)
            grads = [tf.cast(g, tf.float32) for g in grads]
            scale = tf.cast(optimizer_lib.loss_scale(optimizer), tf.float32) if use_scale else 1.0
            norm = tf.linalg.global_norm(grads) / scale
            finite = tf.math.is_finite(norm)
            optimizer.apply(grads, variables)
            return stats, norm, finite, state

        rows = self.per_replica_batch
        local_replicas = self.local_replicas

        def replica_rows(batch):
            def block(context):
                r = context.replica_id_in_sync_group % local_replicas
                return tf.nest.map_structure(lambda v: v[r * rows : (r + 1) * rows], batch)

            return self.strategy.experimental_distribute_values_from_function(block)

        replicas = float(self.strategy.num_replicas_in_sync)

        @tf.function(autograph=False)
        def train_step(iterator, state, stop):
            batch = replica_rows(next(iterator))
            stats, norm, finite, state = self.strategy.run(replica_step, args=(batch, state, stop))
            first = lambda v: self.strategy.experimental_local_results(v)[0]
            finite = first(finite)
            if self.plan is not None:
                # The mean of the workers' predictions: one value everywhere.
                agreed = tf.cast(tf.round(first(stats)[_PLANNED_END] / replicas), tf.int64)
                self.plan.advance(optimizer.iterations, agreed)
            self.step.assign_add(1)
            self.skipped.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
            return first(stats), first(norm), finite, state

        return train_step

    def train_step(self, stop=False, preempted=False, planned_end=0):
        """Runs one step; returns (task statistics, agreed stop reason, |grad|, finite).

        Args:
          stop: this worker's time budget is spent: every worker stops after
            this step.
          preempted: this worker got SIGTERM or Ctrl-C: every worker stops
            after this step.
          planned_end: this worker's prediction of the step at which the time
            budget ends (used with a budget plan; the workers' mean is applied).

        Returns:
          The statistics summed over replicas, "preempted", "time" or None
          (what any worker asked for), the global norm of the all-reduced
          gradients (unscaled, before clipping: the logged |grad|), and
          whether the step was finite (applied).
        """
        values = [1.0 if stop else 0.0, 1.0 if preempted else 0.0, float(planned_end)]
        flag = self.strategy.experimental_distribute_values_from_function(
            lambda _: tf.constant(values, tf.float32)
        )
        state = self.run_state
        stats, norm, finite, state.carried = self._train_step(state.iterator, state.carried, flag)
        stats = stats.numpy()
        reason = None
        if stats[_SIGNAL_STOP] > 0:
            reason = "preempted"
        elif stats[_TIME_STOP] > 0:
            reason = "time"
        return stats[:_TIME_STOP], reason, float(norm), bool(finite)

    # === Checkpoints ===

    def save(self):
        """Checkpoints the step (see `RunState.save`)."""
        self.run_state.save()

    def restore(self):
        """Restores the newest checkpoint with this worker's state; returns its path or None."""
        return self.run_state.restore()

    # === The run ===

    def train(self, finalize=True):
        """Runs to `max_steps` or the time budget; returns the results dict.

        Args:
          finalize: end with a synchronization of all workers. A caller with
            more chief-only work to do (an export) passes False and calls
            `strategy.finalize` itself afterwards, so no worker exits while
            another still runs (the survivor would log a crash).

        Raises:
          strategy_lib.PeerWorkerError: another worker stopped mid-run (its
            collectives failed after the heartbeat timeout); relaunching all
            workers resumes from the last checkpoint.
          PreemptedError: SIGTERM or Ctrl-C reached a worker; all of them
            checkpointed the same step (exit with its `exit_status`;
            relaunching resumes).
          TrainingDivergedError: `max_nonfinite_steps` non-finite steps in a row.
        """
        try:
            # From before the run folder is made: a signal during start-up
            # stops the run at its first step, which is checkpointed.
            with self._signals.caught():
                results = self._train(finalize)
        except PEER_ERRORS as e:
            if self.num_workers <= 1:
                raise
            latest = (
                tf.train.latest_checkpoint(self.run_state.checkpoint_dir) if self.chief else None
            )
            raise peer_failure(
                e, self.worker, int(self.step.numpy()), self.config.collective_timeout_s, latest
            ) from e
        finally:
            # The run is over (finished, stopped or failed): a later run in
            # this process, or a relaunch, may take the folder.
            if self.chief:
                rundir.release_locks()
        # A signal that came after the last step's agreement ends the process now.
        self._signals.deliver_late()
        return results

    def _train(self, finalize):
        # The run lock, and on resume the configs checked against their saved
        # copies, before anything is restored or written; how auto decided
        # goes into the task's config file.
        extras = {}
        if self.autotune is not None:
            extras[self.task.config_file] = {"autotune": self.autotune.record()}
        rundir.begin_run(
            self.config.model_dir, self.task.configs(), chief=self.chief, extras=extras
        )
        restored = self.restore()
        start_step = int(self.step.numpy())
        if restored:
            finished = self._finished_earlier(start_step)
            if finished is not None:
                if finalize:
                    strategy_lib.finalize(self.strategy)
                return finished
        self._record_hparams()
        self._log_start(start_step)
        begin = time.monotonic()
        stopped_by, last_saved = self._run_steps(start_step, begin, bool(restored))
        step = int(self.step.numpy())
        if last_saved != step:
            self.save()
        if stopped_by == "preempted":
            self._stop_preempted(step)
        results = self._results(stopped_by, begin)
        self._finish(results, finalize)
        return results

    def _finished_earlier(self, step):
        """The saved results when the run already ended at `step`, else None.

        A rerun of a finished run changes nothing: no steps, no new
        evaluation, results.json and the event files as they were. Every
        worker restored the same step and reads the same file, so all agree.
        The returned dict carries `finished_earlier: True` (not in the file).
        """
        if step < self.config.max_steps:
            return None
        path = os.path.join(self.config.model_dir, rundir.RESULTS_FILE)
        try:
            with tf.io.gfile.GFile(path) as f:
                saved = json.load(f)
        except (tf.errors.NotFoundError, ValueError):
            return None  # Killed before its results: evaluate and write them now.
        if saved.get("step") != step:
            return None
        logging.info(
            "%s already finished at step %d (--max_steps=%d): %s left as it was; raise "
            "--max_steps to train on.",
            self.config.model_dir,
            step,
            self.config.max_steps,
            path,
        )
        return {**saved, "finished_earlier": True}

    def _stop_preempted(self, step):
        """After the checkpoint of a signal's stop: synchronize, then raise PreemptedError."""
        # Acted on: every worker stopped at this step.
        signal_name, status = self._signals.acted_on()
        for writer in self._writers.writers():
            writer.flush()
        # No final evaluation or results: a preemption notice leaves little
        # time, and the run is not finished.
        strategy_lib.finalize(self.strategy)
        raise PreemptedError(
            f"worker {self.worker} stopped at step {step} on {signal_name}, after checkpointing "
            f"it (exit status {status}); relaunch the same command to resume.",
            step,
            status,
        )

    def _record_hparams(self):
        """The run's settings as TensorBoard HParams, so runs of a sweep compare side by side."""
        values = {
            name: value
            for name, value in dataclasses.asdict(self.config).items()
            if isinstance(value, (bool, int, float, str))
        }
        with self.summary_writer(TRAIN_SUMMARY_SUBDIR).as_default():
            hparams_api.hparams(
                values, trial_id=os.path.basename(self.config.model_dir.rstrip("/"))
            )

    def _profile(self, step):
        """Starts or stops the TensorBoard profiler at the `--profile_steps` bounds."""
        bounds = profile_bounds(self.config.profile_steps)
        if not bounds or not self.chief:
            return
        if step == bounds[0]:
            logging.info(
                "Profiling steps %d to %d into %s.", bounds[0] + 1, bounds[1], self._profile_dir
            )
            tf.profiler.experimental.start(self._profile_dir)
            self._profiling = True
        elif step == bounds[1] and self._profiling:
            tf.profiler.experimental.stop()
            self._profiling = False

    @property
    def _profile_dir(self):
        return os.path.join(self.config.model_dir, TRAIN_SUMMARY_SUBDIR)

    def _log_start(self, start_step):
        config = self.config
        logging.info(
            "%s: %d worker(s), %d replica(s), global batch %d (%d per replica)%s, %s, XLA %s, "
            "from step %d to %d.",
            self.task.title,
            self.num_workers,
            self.strategy.num_replicas_in_sync,
            config.batch_size,
            self.per_replica_batch,
            self.task.describe(),
            config.precision,
            "on" if self.jit else "off",
            start_step,
            config.max_steps,
        )

    def _run_steps(self, start_step, begin, restored):
        """The step loop with its cadence; returns (stopped_by, last saved step).

        Raises:
          TrainingDivergedError: `max_nonfinite_steps` non-finite steps in a row.
        """
        config = self.config
        # Measuring `auto` settings (before `begin`) counts against the budget.
        budget_s = config.max_minutes * 60 - self.autotune_seconds
        deadline = begin + budget_s if config.max_minutes else None
        window = _Window(begin)
        pauses = _Pauses()
        step, last_saved = start_step, start_step if restored else -1
        nonfinite_run, save_due = 0, False
        planner = None
        if self.plan is not None and deadline is not None:
            planner = schedules.BudgetPlanner(self.plan.total_steps, deadline)
        while step < config.max_steps:
            self._profile(step)
            out_of_time = deadline is not None and time.monotonic() >= deadline
            planned_end = planner.plan(step) if planner else 0
            signalled = self._signals.requested
            stats, stop, norm, finite = self.train_step(out_of_time, signalled, planned_end)
            step = int(self.step.numpy())
            nonfinite_run = self._count_nonfinite(step, nonfinite_run, finite, norm, last_saved)
            window.add(stats)
            if step % config.log_every_steps == 0 or step == config.max_steps:
                self._log_progress(step, window, norm, finite, deadline, pauses)
                window = _Window(time.monotonic())
            # A checkpoint falling due inside a non-finite stretch waits for
            # the next finite step: saving then would rotate good checkpoints
            # out for a run that may be diverging. Every worker sees the same
            # all-reduced verdict, so they all save at the same step.
            save_due = save_due or step % config.checkpoint_every_steps == 0
            if save_due and finite:
                with pauses.timed(_CHECKPOINT, window):
                    self.save()
                last_saved, save_due = step, False
            for index, (every, callback) in enumerate(self.task.periodic()):
                if every and step % every == 0:
                    with pauses.timed(index, window):
                        callback(step)
            if stop == "time":
                logging.info(
                    "Time budget of %.1f minutes reached at step %d.", config.max_minutes, step
                )
                return stop, last_saved
            if stop == "preempted":
                self._log_signal_stop(step)
                return stop, last_saved
        return "max_steps", last_saved

    def _log_signal_stop(self, step):
        signum = self._signals.received
        name = stop_signals.STOP_SIGNALS[signum][1] if signum else stop_signals.PEER_SIGNAL
        again = " (Ctrl-C again stops at once, without it)" if signum == signal.SIGINT else ""
        logging.warning(
            "%s: every worker stops at step %d and checkpoints it%s.", name, step, again
        )

    def _count_nonfinite(self, step, run, finite, norm, last_saved):
        """The length of the current non-finite stretch; raises when it is too long."""
        if finite:
            if run:
                logging.info("step %d: finite again after %d skipped step(s).", step, run)
            return 0
        run += 1
        if run == 1:
            logging.warning(
                "step %d: non-finite gradients (|grad| %s): the update is skipped.", step, norm
            )
        if run < self.config.max_nonfinite_steps:
            return run
        for writer in self._writers.writers():
            writer.flush()
        # Every worker reaches this at the same step (the verdict is
        # all-reduced); a last synchronization lets them exit together.
        strategy_lib.finalize(self.strategy)
        kept = f"ckpt-{last_saved}" if last_saved >= 0 else "none yet"
        raise TrainingDivergedError(
            f"training diverged: {run} non-finite steps in a row (steps {step - run + 1} to "
            f"{step}, --max_nonfinite_steps={self.config.max_nonfinite_steps}); no update was "
            f"applied and the last checkpoint ({kept}) holds the last finite weights. Lower "
            "--lr or --clip_norm (or check the input) before resuming."
        )

    def _log_progress(self, step, window, norm, finite, deadline, pauses):
        now = time.monotonic()
        # The rate is the steps' own: the checkpoints and evaluations inside
        # the window are left out, and the ETA adds those still to come at the
        # time each kind has taken so far.
        seconds = max(now - window.start - window.paused, 1e-9)
        text, scalars = self.task.progress(step, window.total, window.steps, seconds)
        remaining = (self.config.max_steps - step) * seconds / max(window.steps, 1)
        cadences = {_CHECKPOINT: self.config.checkpoint_every_steps}
        cadences.update({i: every for i, (every, _) in enumerate(self.task.periodic())})
        remaining += pauses.ahead(step, self.config.max_steps, cadences)
        if deadline is not None:
            remaining = min(remaining, max(deadline - now, 0.0))
        lr = self.learning_rate()
        planned = f"  schedule ends at {int(self.plan.planned_steps.numpy())}" if self.plan else ""
        logging.info(
            "step %d/%d  %s  |grad| %.3f%s  lr %.2e%s  ETA %s",
            step,
            self.config.max_steps,
            text,
            norm,
            "" if finite else " (skipped: non-finite)",
            lr,
            planned,
            _format_duration(remaining),
        )
        scale = optimizer_lib.loss_scale(self.optimizer)
        with self.summary_writer(TRAIN_SUMMARY_SUBDIR).as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
            tf.summary.scalar("gradient_norm", norm)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("skipped_steps", int(self.skipped.numpy()))
            if scale is not None:
                tf.summary.scalar("loss_scale", float(scale.numpy()))

    def learning_rate(self):
        """The current learning rate as a float."""
        lr = self.optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    def _results(self, stopped_by, begin):
        results = {
            "step": int(self.step.numpy()),
            "skipped_steps": int(self.skipped.numpy()),
            "train_minutes": (time.monotonic() - begin) / 60,
            "stopped_by": stopped_by,
            # Equal on every worker of a healthy run: replicas apply identical
            # reduced gradients.
            "weights_sha256": rundir.weights_checksum(self.model.weights),
            "final_learning_rate": self.learning_rate(),
        }
        if self.plan is not None:
            results["schedule_steps"] = int(self.plan.planned_steps.numpy())
        results.update(self.task.results(results["step"]))
        return results

    def _finish(self, results, finalize):
        with fileio.write_errors(self.config.model_dir):
            for writer in self._writers.writers():
                writer.flush()
        if finalize:
            strategy_lib.finalize(self.strategy)
        if self.chief:
            with fileio.write_errors(self.config.model_dir):
                rundir.write_results(self.config.model_dir, results)
        else:
            for path in self._writers.paths():
                strategy_lib.remove_temp_dirpath(path, self.strategy)
            strategy_lib.remove_temp_dirpath(self.run_state.checkpoint_dir, self.strategy)


# How many of the newest checkpoints a resume considers when it looks for the
# newest with every worker's state (each worker keeps one state more than
# there are checkpoints).
_COMPLETE_CANDIDATES = 8


class RunState:
    """What a checkpoint restores: the shared checkpoint and this worker's state beside it.

    The shared `tf.train.Checkpoint` (task objects, optimizer, step
    counters) is the chief's; the recurrent state each local replica carries
    from step to step and the position of this worker's input iterator are
    saved per worker beside it (`checkpointing.py`), so a resumed run
    continues the exact trajectory of an uninterrupted one.

    Args:
      checkpoint: the shared `tf.train.Checkpoint`.
      step: the global step variable (inside `checkpoint`).
      iterator: this worker's input iterator (its position is saved).
      layout: JSON-able description of what the input position depends on
        (a saved position is used only under the same layout).
      state_shape: (rows, units) of the (h, c) each replica carries, or None.
      state_dtype: the carried state's dtype (the model's compute dtype).
      model_dir: the run folder.
      keep: checkpoints to keep.
      strategy: the run's strategy.
      worker: this worker's index.
      local_replicas: the replicas on this worker.

    Attributes:
      carried: the per-replica [h, c] (distributed values), or [].
      iterator: see Args.
      checkpoint_dir: the shared checkpoint folder.
    """

    def __init__(
        self,
        checkpoint,
        step,
        iterator,
        layout,
        state_shape,
        state_dtype,
        model_dir,
        keep,
        strategy,
        worker,
        local_replicas,
    ):
        self.checkpoint = checkpoint
        self.iterator = iterator
        self._step = step
        self._layout = layout
        self._state_shape = state_shape
        self._state_dtype = state_dtype
        self._model_dir = model_dir
        self._keep = keep
        self._strategy = strategy
        self._worker = worker
        self._local_replicas = local_replicas
        self.checkpoint_dir = rundir.checkpoint_dir(model_dir)
        self.manager = tf.train.CheckpointManager(
            checkpoint,
            strategy_lib.write_dirpath(self.checkpoint_dir, strategy),
            max_to_keep=keep,
        )
        # A save that failed or was killed left its `ckpt-N_temp` shards; this
        # worker alone writes its folder (the chief under the run lock).
        fileio.clean_checkpoint_temps(self.manager.directory)
        self.carried = self._distribute()
        self._all_saved = None
        if strategy_lib.worker_info(strategy)[2] > 1:
            # Traced once, not at every checkpoint.
            self._all_saved = tf.function(
                lambda: strategy_lib.sum_over_replicas(strategy, lambda _: tf.ones([])),
                autograph=False,
            )

    def _distribute(self, local_states=None):
        """Per-replica [h, c]: zeros, or the given per-local-replica arrays; [] if none."""
        if self._state_shape is None:
            return []
        shape, dtype = self._state_shape, self._state_dtype

        def value(context, index):
            local = context.replica_id_in_sync_group % self._local_replicas
            if local_states is None:
                return tf.zeros(shape, dtype)
            return tf.constant(local_states[local][index], dtype)

        return [
            self._strategy.experimental_distribute_values_from_function(
                lambda ctx, i=i: value(ctx, i)
            )
            for i in range(2)
        ]

    def _local_arrays(self):
        local = self._strategy.experimental_local_results
        h, c = self.carried
        return [(hh.numpy(), cc.numpy()) for hh, cc in zip(local(h), local(c))]

    def save(self):
        """Checkpoints the current step: every worker's own state, then the shared checkpoint.

        The shared checkpoint is the commit: a resume restores the newest one
        and expects each worker's state of its step beside it. So no worker
        starts it before every worker has written its own state (one
        all-reduce, `_all_saved`): a worker killed before then leaves no
        checkpoint of this step, and the relaunch resumes from the one
        before, which has every worker's state (each worker keeps one state
        more than there are checkpoints).
        """
        step = int(self._step.numpy())
        model_dir, worker, keep = self._model_dir, self._worker, self._keep + 1
        where = f"{model_dir} (checkpoint {step})"
        with fileio.write_errors(where):
            if self.carried:
                checkpointing.save_carried_state(
                    model_dir, worker, step, self._local_arrays(), keep=keep
                )
            checkpointing.save_input_state(
                model_dir, worker, step, self.iterator, self._layout, keep=keep
            )
        if self._all_saved is not None:
            self._all_saved()
        with fileio.write_errors(where):
            self.manager.save(checkpoint_number=step)

    def restore(self):
        """Restores the newest intact checkpoint and this worker's state; its path or None.

        Newest, that is, of those with every worker's state beside them
        (`_newest_complete`); when none has, the newest, each worker's state
        then starting afresh with a warning.
        """
        restored = checkpointing.restore_latest(
            self.checkpoint, self.checkpoint_dir, newest_step=self._newest_complete()
        )
        if not restored:
            return None
        step, model_dir = int(self._step.numpy()), self._model_dir
        if self._state_shape is not None:
            self.carried = self._distribute(
                checkpointing.load_carried_state(
                    model_dir,
                    self._worker,
                    step,
                    self._local_replicas,
                    self._state_shape,
                    dtype=self._state_dtype,
                )
            )
        checkpointing.restore_input_state(
            model_dir, self._worker, step, self.iterator, self._layout
        )
        return restored

    def _newest_complete(self):
        """The step of the newest checkpoint with every worker's state, agreed; or None.

        `save` commits a checkpoint only after every worker's state, but a
        folder written before that, or whose state files were lost, may hold
        a checkpoint without some worker's: resuming from it would restart
        that worker's recurrent state and input, and the trajectory would
        differ from an uninterrupted run's. Each worker checks its own files
        for the newest checkpoints; one all-reduce counts them, so every
        worker picks the same step. None (no bound) when no checkpoint has
        every worker's state, as after a change of the worker layout.
        """
        prefixes = rundir.list_checkpoints(self.checkpoint_dir)[:_COMPLETE_CANDIDATES]
        workers = strategy_lib.worker_info(self._strategy)[2]
        if not prefixes and workers == 1:
            return None  # a fresh start (every worker of a cluster joins the all-reduce below)
        steps = [rundir.checkpoint_step(prefix) for prefix in prefixes]
        mine = [
            float(
                checkpointing.has_state(
                    self._model_dir, self._worker, step, self._layout, self._state_shape is not None
                )
            )
            for step in steps
        ]
        mine += [0.0] * (_COMPLETE_CANDIDATES - len(mine))
        if workers > 1:
            local_replicas = self._local_replicas

            def count(context):
                first = tf.equal(context.replica_id_in_sync_group % local_replicas, 0)
                return tf.constant(mine, tf.float32) * tf.cast(first, tf.float32)

            mine = strategy_lib.sum_over_replicas(self._strategy, count).numpy().tolist()
        complete = [step for step, have in zip(steps, mine) if round(have) == workers]
        if not complete:  # also a fresh start, or another worker layout
            return None
        if complete[0] != steps[0]:
            logging.warning(
                "Checkpoint ckpt-%d lacks the carried state or input position of %d of the %d "
                "worker(s): resuming from ckpt-%d, the newest with every worker's state.",
                steps[0],
                workers - round(mine[0]),
                workers,
                complete[0],
            )
        return complete[0]


class _SummaryWriters:
    """The run's TensorBoard writers by folder name (temporary folders off the chief)."""

    def __init__(self, model_dir, strategy):
        self._model_dir = model_dir
        self._strategy = strategy
        self._writers = {}

    def get(self, name):
        """The summary writer of `model_dir/name`, created on first use."""
        if name not in self._writers:
            path = strategy_lib.write_dirpath(os.path.join(self._model_dir, name), self._strategy)
            self._writers[name] = (path, tf.summary.create_file_writer(path))
        return self._writers[name][1]

    def writers(self):
        return [writer for _, writer in self._writers.values()]

    def paths(self):
        return [path for path, _ in self._writers.values()]


class _Window:
    """Statistics summed over the steps since the last progress line."""

    def __init__(self, start):
        self.start = start
        self.total = None
        self.steps = 0
        self.paused = 0.0  # seconds of checkpoints and evaluations in the window

    def add(self, stats):
        self.total = stats.astype(np.float64) if self.total is None else self.total + stats
        self.steps += 1


_CHECKPOINT = "checkpoint"


class _Pauses:
    """The time the step loop spends outside steps, by kind: checkpoints, each periodic task.

    A progress line's rate leaves these pauses out and its ETA adds the ones
    still due, each at the mean time its kind has taken in this launch, so the
    ETA neither jumps up after an evaluation nor forgets the ones ahead.
    """

    def __init__(self):
        self._seconds = {}  # kind -> (count, total seconds)

    @contextlib.contextmanager
    def timed(self, kind, window):
        """Times the block as a pause of `kind`, and leaves it out of `window`'s time."""
        start = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - start
            window.paused += seconds
            count, total = self._seconds.get(kind, (0, 0.0))
            self._seconds[kind] = (count + 1, total + seconds)

    def ahead(self, step, max_steps, cadences):
        """Seconds of the pauses still due at `step` (after its line) to `max_steps`, at mean times.

        Args:
          step: the step just logged (its own pauses come after the line).
          max_steps: the last step.
          cadences: {kind: every so many steps (0: never)}.
        """
        seconds = 0.0
        for kind, every in cadences.items():
            count, total = self._seconds.get(kind, (0, 0.0))
            if every and count:
                due = max_steps // every - (step - 1) // every
                seconds += max(due, 0) * total / count
        return seconds


def peer_failure(error, worker, step, collective_timeout_s, latest_checkpoint):
    """The one-line `PeerWorkerError` for a collective that failed with a `PEER_ERRORS` kind.

    Args:
      error: the TensorFlow error.
      worker: this worker's index.
      step: the step it stops at.
      collective_timeout_s: the `--collective_timeout_s` in force.
      latest_checkpoint: the newest checkpoint's prefix (the chief), or None.
    """
    what = "stopped"
    if isinstance(error, tf.errors.DeadlineExceededError):
        what = (
            "did not reach the all-reduce within --collective_timeout_s="
            f"{collective_timeout_s:g} (stuck, or far slower)"
        )
    return strategy_lib.PeerWorkerError(
        f"worker {worker} stops at step {step}: a peer worker {what} "
        f"({_error_summary(error)}). Relaunch every worker with the same command to resume "
        "from the last checkpoint"
        + (f" ({os.path.basename(latest_checkpoint)})." if latest_checkpoint else ".")
    )


def _error_summary(error):
    """The line of a TensorFlow error that says what happened.

    Graph execution errors start with boilerplate and an indented traceback
    of where the op was defined; the cause is a later, unindented line.
    """
    boilerplate = ("Graph execution error", "Detected at node", "[[", "The error could be from")
    for line in (getattr(error, "message", "") or str(error)).splitlines():
        if line.strip() and not line[0].isspace() and not line.startswith(boilerplate):
            return line.strip()[:300]
    return type(error).__name__


def _format_duration(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
