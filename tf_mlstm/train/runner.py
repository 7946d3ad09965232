"""The distributed runner (`Runner`): one training loop for every kind of task."""

import dataclasses
import functools
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm import failpoints
from tf_mlstm import fileio
from tf_mlstm import rundir
from tf_mlstm.auto import settings as auto_settings
from tf_mlstm.train import cadence
from tf_mlstm.train import compiled_step
from tf_mlstm.train import optimizer as optimizer_lib
from tf_mlstm.train import schedules
from tf_mlstm.train import stop_signals
from tf_mlstm.train import strategy as strategy_lib
from tf_mlstm.train import summaries
from tf_mlstm.train.compiled_step import SIGNAL_STOP
from tf_mlstm.train.compiled_step import TIME_STOP
from tf_mlstm.train.run_errors import PEER_ERRORS
from tf_mlstm.train.run_errors import PreemptedError
from tf_mlstm.train.run_errors import peer_failure
from tf_mlstm.train.run_state import RunState
from tf_mlstm.train.summaries import TRAIN_SUMMARY_SUBDIR
from tf_mlstm.train.task_protocol import TaskContext


class Runner:
    """Runs a `Task` data-parallel under a `tf.distribute` strategy.

    Args:
      task: the `Task`.
      config: a validated config with the run and distribution fields; `auto` is resolved here.
      strategy: the strategy to run under; None builds the one `config` names.

    Raises:
      ValueError: the batch does not divide over the replicas, or the task rejects its inputs.

    Example:

    >>> from tf_mlstm.config import TrainConfig
    >>> from tf_mlstm.tasks.language_model import SyntheticLanguageModelTask
    >>> from tf_mlstm.train.runner import Runner
    >>> config = TrainConfig(
    ...     model_dir="run", hidden_size=8, embedding_size=4, seq_length=8, batch_size=2,
    ...     max_steps=2, precision="float32", jit_compile="false", sample_every_steps=0,
    ... ).validate()
    >>> results = Runner(SyntheticLanguageModelTask(config), config).train()
    >>> results["step"], results["stopped_by"]
    (2, 'max_steps')
    """

    def __init__(self, task, config, strategy=None):
        self.task = task
        self.config = config
        task.check_inputs()
        self._setup_strategy(strategy)
        try:
            self._set_up(task, config)
        except PEER_ERRORS as e:
            # The start-up's own collectives (the chief's auto settings, the
            # resume step) fail as the training step's do: one line.
            if self.num_workers <= 1:
                raise
            raise peer_failure(e, self.worker, None, config.collective_timeout_s, None) from e

    def _set_up(self, task, config):
        layout = auto_settings.Layout(
            self.strategy,
            self.chief,
            self.num_workers,
            self.local_replicas,
            self.per_replica_batch,
            sum_over_replicas=functools.partial(strategy_lib.sum_over_replicas, self.strategy),
        )
        self.auto = auto_settings.AutoSettings(task, layout, self._candidate_step)
        self.config = self.auto.resolve(config)
        self.jit = self.config.jit_compile == "true"
        self._writers = summaries.SummaryWriters(self.config.model_dir, self.strategy)
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
        self._profiler = cadence.Profiler(self.config.profile_steps, self.chief, self._profile_dir)
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
                f"{errors.setting_name('batch_size')}={config.batch_size} (global) must be a "
                f"multiple of the {replicas} replicas."
            )
        self.per_replica_batch = config.batch_size // replicas
        self.local_replicas = replicas // self.num_workers

    # === auto size, precision and XLA (auto/settings.py) ===

    def _candidate_step(self, config, candidate, probe, scratch, use_gpus, hidden_size=None):
        """A step of `config` at `candidate`, on a second runner on one local device."""
        config = dataclasses.replace(
            config,
            precision=candidate.precision,
            jit_compile="true" if candidate.jit else "false",
            batch_size=self.per_replica_batch,
            model_dir=os.path.join(scratch, f"{candidate.name.replace('/', '_')}_{hidden_size}"),
            max_minutes=0.0,
            **({} if hidden_size is None else {"hidden_size": hidden_size}),
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

    def summary_writer(self, name) -> tf.summary.SummaryWriter:
        """The summary writer of `model_dir/name` (a temporary folder off the chief)."""
        return self._writers.get(name)

    # === The step ===

    def _make_train_step(self):
        return compiled_step.make_train_step(
            task=self.task,
            optimizer=self.optimizer,
            variables=self.variables,
            strategy=self.strategy,
            per_replica_batch=self.per_replica_batch,
            local_replicas=self.local_replicas,
            jit=self.jit,
            allreduce_dtype=self.config.allreduce_dtype,
            plan=self.plan,
            step=self.step,
            skipped=self.skipped,
        )

    def train_step(
        self, stop=False, preempted=False, planned_end=0
    ) -> tuple[np.ndarray, str | None, float, bool]:
        """Runs one step; returns (task statistics, agreed stop reason, |grad|, finite).

        Args:
          stop: this worker's time budget is spent.
          preempted: this worker got SIGTERM or Ctrl-C.
          planned_end: this worker's prediction of the step at which the time budget ends.

        Returns:
          The statistics summed over replicas, "preempted", "time" or None (what any worker
          asked for), the all-reduced gradients' global norm (unscaled), and whether it was applied.
        """
        flag = compiled_step.stop_flags(self.strategy, stop, preempted, planned_end)
        state = self.run_state
        with strategy_lib.collective_deadline():
            stats, norm, finite, state.carried = self._train_step(
                state.iterator, state.carried, flag
            )
            stats = stats.numpy()
        reason = None
        if stats[SIGNAL_STOP] > 0:
            reason = "preempted"
        elif stats[TIME_STOP] > 0:
            reason = "time"
        return stats[:TIME_STOP], reason, float(norm), bool(finite)

    # === Checkpoints ===

    def save(self) -> None:
        """Checkpoints the step (see `RunState.save`)."""
        self.run_state.save()

    def restore(self) -> str | None:
        """Restores the newest checkpoint with this worker's state; returns its path or None."""
        return self.run_state.restore()

    # === The run ===

    def train(self, finalize=True) -> dict:
        """Runs to `max_steps` or the time budget; returns the results dict.

        Args:
          finalize: end with a synchronization of all workers (False: the caller finalizes).

        Raises:
          strategy_lib.PeerWorkerError: another worker stopped mid-run.
          PreemptedError: SIGTERM or Ctrl-C reached a worker; every worker stopped at one step.
          TrainingDivergedError: `max_nonfinite_steps` non-finite steps in a row.
        """
        try:
            # From before the run folder is made: a signal held during
            # start-up stops every worker here, before anything is written;
            # one after, at the first step, which is checkpointed.
            with self._signals.caught():
                if strategy_lib.stop_agreed_at_start_up(self.strategy, self._signals.requested):
                    self._stop_at_start_up()
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
        records = self.auto.records()
        extras = {self.task.config_file: records} if records else {}
        rundir.begin_run(
            self.config.model_dir, self.task.configs(), chief=self.chief, extras=extras
        )
        failpoints.reach("resume")
        restored = self.restore()
        start_step = int(self.step.numpy())
        if restored:
            finished = self._finished_earlier(start_step)
            if finished is not None:
                if finalize:
                    strategy_lib.finalize(self.strategy)
                return finished
        summaries.record_hparams(self.summary_writer(TRAIN_SUMMARY_SUBDIR), self.config)
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
        """Saved results (marked `finished_earlier`) if the run ended at `step`, else None."""
        if step < self.config.max_steps:
            return None
        saved = rundir.read_results(self.config.model_dir)
        if saved is None:
            return None  # Killed before its results: evaluate and write them now.
        if saved.get("step") != step:
            return None
        logging.info(
            "%s already finished at step %d (%s=%d): %s left as it was; raise %s to train on.",
            self.config.model_dir,
            step,
            errors.setting_name("max_steps"),
            self.config.max_steps,
            rundir.RESULTS_FILE,
            errors.setting_name("max_steps"),
        )
        return {**saved, "finished_earlier": True}

    def _stop_at_start_up(self):
        signal_name, status = self._signals.acted_on()
        if signal_name == stop_signals.PEER_SIGNAL:
            # TensorFlow's notifier may have heard it here, in the rendezvous: any worker's.
            signal_name = "SIGTERM to a worker of the cluster"
        raise PreemptedError(
            f"worker {self.worker} stopped before training on {signal_name} during start-up, "
            f"nothing of the run written (exit status {status}); the same command starts or "
            "resumes the run.",
            None,
            status,
        )

    def _stop_preempted(self, step):
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
        """The step loop with its cadence; returns (stopped_by, last saved step)."""
        config = self.config
        # Measuring `auto` settings (before `begin`) counts against the budget.
        budget_s = config.max_minutes * 60 - self.auto.seconds
        deadline = begin + budget_s if config.max_minutes else None
        window = cadence.Window(begin)
        pauses = cadence.Pauses()
        step, last_saved = start_step, start_step if restored else -1
        nonfinite_run, save_due = 0, False
        planner = None
        if self.plan is not None and deadline is not None:
            planner = schedules.BudgetPlanner(self.plan.total_steps, deadline)
        while step < config.max_steps:
            self._profiler.at(step)
            out_of_time = deadline is not None and time.monotonic() >= deadline
            planned_end = planner.plan(step) if planner else 0
            signalled = self._signals.requested
            stats, stop, norm, finite = self.train_step(out_of_time, signalled, planned_end)
            step = int(self.step.numpy())
            nonfinite_run = cadence.count_nonfinite(
                step,
                nonfinite_run,
                finite,
                norm,
                last_saved,
                config.max_nonfinite_steps,
                self._writers.writers(),
                self.strategy,
            )
            window.add(stats)
            if step % config.log_every_steps == 0 or step == config.max_steps:
                self._log_progress(step, window, norm, finite, deadline, pauses)
                window = cadence.Window(time.monotonic())
            # A checkpoint falling due inside a non-finite stretch waits for
            # the next finite step: saving then would rotate good checkpoints
            # out for a run that may be diverging. Every worker sees the same
            # all-reduced verdict, so they all save at the same step.
            save_due = save_due or step % config.checkpoint_every_steps == 0
            if save_due and finite:
                with pauses.timed(cadence.CHECKPOINT, window):
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
                cadence.log_signal_stop(step, self._signals.received)
                return stop, last_saved
        return "max_steps", last_saved

    def _log_progress(self, step, window, norm, finite, deadline, pauses):
        now = time.monotonic()
        # The rate is the steps' own: the checkpoints and evaluations inside
        # the window are left out, and the ETA adds those still to come at the
        # time each kind has taken so far.
        seconds = max(now - window.start - window.paused, 1e-9)
        text, scalars = self.task.progress(step, window.total, window.steps, seconds)
        remaining = (self.config.max_steps - step) * seconds / max(window.steps, 1)
        cadences = {cadence.CHECKPOINT: self.config.checkpoint_every_steps}
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
            cadence.format_duration(remaining),
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

    def learning_rate(self) -> float:
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
