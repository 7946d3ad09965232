"""The training loop: data-parallel mLSTM language-model training.

Keras 3 `Model.fit` does not run under `MultiWorkerMirroredStrategy`, so
this is a custom loop: a `tf.function` that takes the next batch from this
worker's input pipeline, hands each local replica its block of rows, and
calls `strategy.run`; inside each replica

  1. forward and backward pass, XLA-compiled when `jit_compile` is on, with
     the loss scaled under float16;
  2. one all-reduce (SUM) of the gradients, optionally in float16, bundled
     with the step's statistics and the stop flag;
  3. `LossScaleOptimizer` (float16) checks finiteness and unscales, Adam
     clips by the global norm and applies (see `optimizer.py`).

Each replica carries its rows' recurrent state from step to step (truncated
BPTT); the model resets it at document starts. Checkpoints hold model,
optimizer and step; each worker's carried state and input position are saved
beside them (`checkpointing.py`). The worker owns a plain tf.data iterator
rather than a `distribute_datasets_from_function` one because only the
former can be checkpointed (TF 2.21), and an exact resume needs the data
position. A run stops at `max_steps`, at the `max_minutes` budget (agreed by
all workers through the all-reduce), and always ends with a checkpoint, so a
relaunch resumes where it stopped.
"""

import hashlib
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import rundir
from tf_mlstm.data import pipeline
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.models.language_model import bits_per_char_from_logits
from tf_mlstm.models.sampling import make_sampler
from tf_mlstm.models.sampling import sample_text
from tf_mlstm.train import checkpointing
from tf_mlstm.train import evaluation
from tf_mlstm.train import optimizer as optimizer_lib
from tf_mlstm.train import schedules
from tf_mlstm.train import strategy as strategy_lib

SAMPLE_PROMPT = "This product is"
# How a collective fails once the coordination service has noticed that a
# peer task is gone (heartbeat timeout) or has cancelled the pending ops.
_PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
)


def resolve_jit(choice):
    """`auto` means XLA on accelerators only: measured slower on CPU here."""
    if choice == "auto":
        return bool(
            tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU")
        )
    return choice == "true"


def build_model(config):
    """The language model for `config`, built, in its precision policy."""
    return MLSTMLanguageModel.from_train_config(config)


def build_schedule(config):
    """The learning-rate schedule for `config`."""
    peak = schedules.peak_learning_rate(
        config.lr, config.batch_size, config.lr_base_batch, config.lr_scaling, config.max_lr or None
    )
    return schedules.LargeBatchSchedule(
        peak, config.schedule_steps, config.warmup_steps, config.lr_decay
    )


class Trainer:
    """Owns the strategy, model, optimizer, data and bookkeeping of one run.

    Args:
      config: a validated `TrainConfig`.
      train_files: training TFRecord shards.
      validation_files: validation shards (may be empty).
    """

    def __init__(self, config, train_files, validation_files):
        self.config = config
        self.train_files = list(train_files)
        self.validation_files = list(validation_files)
        self.strategy = strategy_lib.get_distribution_strategy(
            config.distribution_strategy,
            num_gpus=None if config.num_gpus < 0 else config.num_gpus,
            all_reduce=config.all_reduce,
            cluster_resolver=config.cluster_resolver,
        )
        self.chief = strategy_lib.is_chief(self.strategy)
        _, self.worker, self.num_workers = strategy_lib.worker_info(self.strategy)
        replicas = self.strategy.num_replicas_in_sync
        if config.batch_size % replicas:
            raise ValueError(
                f"--batch_size={config.batch_size} (global) must be a "
                f"multiple of the {replicas} replicas."
            )
        self.per_replica_batch = config.batch_size // replicas
        self.local_replicas = replicas // self.num_workers
        self.jit = resolve_jit(config.jit_compile)
        tf.random.set_seed(config.seed)
        keras.utils.set_random_seed(config.seed)
        with self.strategy.scope():
            self.model = build_model(config)
            self.optimizer = optimizer_lib.build_optimizer(
                build_schedule(config), config.clip_norm, config.precision
            )
            self.optimizer.build(self.model.trainable_variables)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_steps")
        self._source_repeats = self._check_source_repeats()
        self.iterator = iter(self._worker_dataset())
        # The input position is per worker: saved beside this (see `save`).
        self.checkpoint = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            step=self.step,
            skipped=self.skipped,
        )
        self.checkpoint_dir = rundir.checkpoint_dir(config.model_dir)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint,
            strategy_lib.write_dirpath(self.checkpoint_dir, self.strategy),
            max_to_keep=config.keep_checkpoints,
        )
        self._train_step = self._make_train_step()
        self._sampler = None

    # --- data ---------------------------------------------------------------
    def _check_source_repeats(self):
        """Parses --source_repeats and logs what its rules match in the first shard."""
        rules = pipeline.parse_source_repeats(self.config.source_repeats)
        if not rules:
            return rules
        read, named, matches = pipeline.source_census(self.train_files, rules)
        if read and not named:
            raise ValueError(
                f"--source_repeats needs records that name their source file, but the "
                f"first {read} records of {self.train_files[0]} name none: convert the corpus "
                "again with this version of tf-mlstm-make-tfrecords."
            )
        for pattern, count in rules:
            logging.info(
                "source_repeats: %r (x%d) matches %d of the first %d records of %s.",
                pattern,
                count,
                matches[pattern],
                read,
                self.train_files[0],
            )
        return rules

    def _worker_dataset(self):
        """This worker's batches: `local_replicas` blocks of per-replica rows."""
        context = tf.distribute.InputContext(
            num_input_pipelines=self.num_workers,
            input_pipeline_id=self.worker,
            num_replicas_in_sync=self.strategy.num_replicas_in_sync,
        )
        return pipeline.lm_dataset(
            self.train_files,
            self.per_replica_batch * self.local_replicas,
            self.config.seq_length,
            input_context=context,
            training=True,
            seed=self.config.seed + self.worker,
            shuffle_buffer=self.config.shuffle_buffer,
            source_repeats=self._source_repeats,
        )

    # --- the step -----------------------------------------------------------
    def _make_train_step(self):
        model, optimizer, config = self.model, self.optimizer, self.config
        chars_per_step = float(config.batch_size * config.seq_length)
        reduce_dtype = tf.float16 if config.allreduce_dtype == "float16" else None
        scale_fn = getattr(optimizer, "scale_loss", None)
        use_scale = optimizer_lib.loss_scale(optimizer) is not None

        @tf.function(jit_compile=self.jit)
        def forward_backward(batch, h, c):
            with tf.GradientTape() as tape:
                logits, (h, c) = model(batch["inputs"], initial_state=[h, c], training=True)
                bits, chars = bits_per_char_from_logits(logits, batch["targets"], batch["weights"])
                # Mean over the global batch: summing replica gradients gives the
                # global mean gradient.
                loss = bits * math.log(2.0) / chars_per_step
                scaled = scale_fn(loss) if use_scale else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            return bits, chars, grads, h, c

        def replica_step(batch, h, c, stop):
            bits, chars, grads, h, c = forward_backward(batch, h, c)
            stats = tf.stack([bits, chars, stop])
            bundle = [tf.cast(g, reduce_dtype) if reduce_dtype else g for g in grads]
            context = tf.distribute.get_replica_context()
            if reduce_dtype is None:
                reduced, stats = context.all_reduce(tf.distribute.ReduceOp.SUM, (bundle, stats))
            else:
                # A multi-worker all-reduce packs its tensors into one buffer,
                # so they must share a dtype; the float32 statistics (sums far
                # past float16's range) travel in a second, tiny all-reduce.
                reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, bundle)
                stats = context.all_reduce(tf.distribute.ReduceOp.SUM, stats)
            grads = [tf.cast(g, tf.float32) for g in reduced]
            scale = tf.cast(optimizer_lib.loss_scale(optimizer), tf.float32) if use_scale else 1.0
            norm = tf.linalg.global_norm(grads) / scale
            finite = tf.math.is_finite(norm)
            optimizer.apply(grads, model.trainable_variables)
            return stats, norm, finite, h, c

        rows = self.per_replica_batch

        def replica_rows(batch):
            # Replica r always gets the same block of rows, so its carried
            # state stays aligned with its streams.
            def block(context):
                r = context.replica_id_in_sync_group % self.local_replicas
                return {k: v[r * rows : (r + 1) * rows] for k, v in batch.items()}

            return self.strategy.experimental_distribute_values_from_function(block)

        @tf.function
        def train_step(iterator, h, c, stop):
            batch = replica_rows(next(iterator))
            stats, norm, finite, h, c = self.strategy.run(replica_step, args=(batch, h, c, stop))
            first = lambda v: self.strategy.experimental_local_results(v)[0]
            finite = first(finite)
            self.step.assign_add(1)
            self.skipped.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
            return first(stats), first(norm), finite, h, c

        return train_step

    def _distribute_state(self, local_states=None):
        """Per-replica [h, c]: zeros, or the given per-local-replica arrays."""
        units = self.config.hidden_size
        dtype = self.model.compute_dtype

        def value(context, index):
            local = context.replica_id_in_sync_group % self.local_replicas
            if local_states is None:
                return tf.zeros((self.per_replica_batch, units), dtype)
            return tf.constant(local_states[local][index], dtype)

        return [
            self.strategy.experimental_distribute_values_from_function(
                lambda ctx, i=i: value(ctx, i)
            )
            for i in range(2)
        ]

    def _local_state_arrays(self, h, c):
        local = self.strategy.experimental_local_results
        return [(hh.numpy(), cc.numpy()) for hh, cc in zip(local(h), local(c))]

    def _stop_flag(self, value):
        return self.strategy.experimental_distribute_values_from_function(
            lambda _: tf.constant(value, tf.float32)
        )

    # --- bookkeeping --------------------------------------------------------
    def save(self, h, c):
        step = int(self.step.numpy())
        checkpointing.save_carried_state(
            self.config.model_dir,
            self.worker,
            step,
            self._local_state_arrays(h, c),
            keep=self.config.keep_checkpoints + 1,
        )
        checkpointing.save_input_state(
            self.config.model_dir,
            self.worker,
            step,
            self.iterator,
            self._input_layout(),
            keep=self.config.keep_checkpoints + 1,
        )
        self.manager.save(checkpoint_number=step)

    def _input_layout(self):
        """What this worker's iterator position depends on."""
        return {
            "num_workers": self.num_workers,
            "worker": self.worker,
            "rows": self.per_replica_batch * self.local_replicas,
            "seq_length": self.config.seq_length,
            "seed": self.config.seed,
            "shuffle_buffer": self.config.shuffle_buffer,
            "source_repeats": self.config.source_repeats,
            "train_files": self.train_files,
        }

    def validate(self, max_batches):
        """Validation bits/char (every worker computes it; the chief logs it)."""
        if not self.validation_files:
            return None
        dataset = pipeline.lm_dataset(
            self.validation_files, self.per_replica_batch, self.config.seq_length, training=False
        )
        with self.strategy.scope():
            return evaluation.evaluate(self.model, dataset, max_batches, self._eval_step)

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
        """
        try:
            return self._train(finalize)
        except _PEER_ERRORS as e:
            if self.num_workers <= 1:
                raise
            latest = tf.train.latest_checkpoint(self.checkpoint_dir) if self.chief else None
            raise strategy_lib.PeerWorkerError(
                f"worker {self.worker} stops at step {int(self.step.numpy())}: a peer worker "
                f"stopped ({_error_summary(e)}). Relaunch every worker with the same command to "
                "resume from the last checkpoint"
                + (f" ({os.path.basename(latest)})." if latest else ".")
            ) from e

    def _train(self, finalize):
        config = self.config
        rundir.begin_run(config.model_dir, {rundir.CONFIG_FILE: config}, chief=self.chief)
        restored = checkpointing.restore_latest(self.checkpoint, self.checkpoint_dir)
        start_step = int(self.step.numpy())
        state = None
        if restored:
            state = checkpointing.load_carried_state(
                config.model_dir,
                self.worker,
                start_step,
                self.local_replicas,
                (self.per_replica_batch, config.hidden_size),
                tf.as_dtype(self.model.compute_dtype),
            )
            checkpointing.restore_input_state(
                config.model_dir, self.worker, start_step, self.iterator, self._input_layout()
            )
        h, c = self._distribute_state(state)
        with self.strategy.scope():
            self._eval_step = evaluation.make_eval_step(self.model)
        summary_dir = strategy_lib.write_dirpath(
            os.path.join(config.model_dir, "train"), self.strategy
        )
        writer = tf.summary.create_file_writer(summary_dir)
        val_writer = tf.summary.create_file_writer(
            strategy_lib.write_dirpath(os.path.join(config.model_dir, "validation"), self.strategy)
        )
        logging.info(
            "Training: %d worker(s), %d replica(s), global batch %d (%d per "
            "replica) x %d chars, %s, XLA %s, from step %d to %d.",
            self.num_workers,
            self.strategy.num_replicas_in_sync,
            config.batch_size,
            self.per_replica_batch,
            config.seq_length,
            config.precision,
            "on" if self.jit else "off",
            start_step,
            config.max_steps,
        )

        begin = time.monotonic()
        deadline = begin + config.max_minutes * 60 if config.max_minutes else None
        window_start, window_bits, window_chars, window_steps = begin, 0.0, 0.0, 0
        step = start_step
        stop_requested = False
        last_saved = start_step if restored else -1
        while step < config.max_steps:
            out_of_time = deadline is not None and time.monotonic() >= deadline
            stats, norm, finite, h, c = self._train_step(
                self.iterator, h, c, self._stop_flag(1.0 if out_of_time else 0.0)
            )
            step = int(self.step.numpy())
            bits, chars, stop = (float(x) for x in stats.numpy())
            window_bits += bits
            window_chars += chars
            window_steps += 1
            if stop > 0:
                stop_requested = True
            if step % config.log_every_steps == 0 or step == config.max_steps:
                self._log_progress(
                    writer,
                    step,
                    deadline,
                    window_start,
                    window_bits,
                    window_chars,
                    window_steps,
                    float(norm),
                    bool(finite),
                )
                window_start, window_bits, window_chars = time.monotonic(), 0.0, 0.0
                window_steps = 0
            if step % config.checkpoint_every_steps == 0:
                self.save(h, c)
                last_saved = step
            if config.eval_every_steps and step % config.eval_every_steps == 0:
                self._log_validation(val_writer, step, config.eval_batches)
            if config.sample_every_steps and self.chief and step % config.sample_every_steps == 0:
                self._log_sample(writer, step)
            if stop_requested:
                logging.info(
                    "Time budget of %.1f minutes reached at step %d.", config.max_minutes, step
                )
                break
        if last_saved != step:
            self.save(h, c)
        results = {
            "step": step,
            "skipped_steps": int(self.skipped.numpy()),
            "train_minutes": (time.monotonic() - begin) / 60,
            "stopped_by": "time" if stop_requested else "max_steps",
            # Equal on every worker of a healthy run: replicas apply identical
            # reduced gradients.
            "weights_sha256": weights_checksum(self.model.weights),
        }
        final = self._log_validation(val_writer, step, 0)
        if final:
            results.update(
                {
                    "validation_bits_per_char": final["bits_per_char"],
                    "validation_chars": final["chars"],
                }
            )
        writer.flush()
        val_writer.flush()
        if finalize:
            strategy_lib.finalize(self.strategy)
        if self.chief:
            rundir.write_results(config.model_dir, results)
        else:
            strategy_lib.remove_temp_dirpath(summary_dir, self.strategy)
        return results

    def _log_progress(
        self,
        writer,
        step,
        deadline,
        window_start,
        bits,
        chars,
        steps,
        norm,
        finite,
    ):
        now = time.monotonic()
        bpc = bits / max(chars, 1.0)
        rate = chars / max(now - window_start, 1e-9)
        per_step = (now - window_start) / max(steps, 1)
        remaining = (self.config.max_steps - step) * per_step
        if deadline is not None:
            remaining = min(remaining, max(deadline - now, 0.0))
        lr = float(
            self.optimizer.learning_rate.numpy()
            if hasattr(self.optimizer.learning_rate, "numpy")
            else self.optimizer.learning_rate
        )
        scale = optimizer_lib.loss_scale(self.optimizer)
        logging.info(
            "step %d/%d  loss %.4f  bits/char %.4f  chars/s %.0f  |grad| %.3f%s"
            "  lr %.2e  ETA %s",
            step,
            self.config.max_steps,
            bpc * math.log(2),
            bpc,
            rate,
            norm,
            "" if finite else " (skipped: non-finite)",
            lr,
            _format_duration(remaining),
        )
        with writer.as_default(step=step):
            tf.summary.scalar("loss", bpc * math.log(2))
            tf.summary.scalar("bits_per_char", bpc)
            tf.summary.scalar("chars_per_second", rate)
            tf.summary.scalar("gradient_norm", norm)
            tf.summary.scalar("learning_rate", lr)
            tf.summary.scalar("skipped_steps", int(self.skipped.numpy()))
            if scale is not None:
                tf.summary.scalar("loss_scale", float(scale.numpy()))

    def _log_validation(self, writer, step, max_batches):
        result = self.validate(max_batches)
        if result is None:
            return None
        logging.info(
            "step %d  validation bits/char %.4f over %d chars%s",
            step,
            result["bits_per_char"],
            result["chars"],
            "" if not max_batches else f" ({max_batches} batches)",
        )
        with writer.as_default(step=step):
            tf.summary.scalar("bits_per_char", result["bits_per_char"])
        return result

    def _log_sample(self, writer, step):
        with self.strategy.scope():
            if self._sampler is None:
                # Compiled once; later samples reuse the graph.
                self._sampler = make_sampler(self.model)
            text = sample_text(
                self.model,
                SAMPLE_PROMPT,
                self.config.sample_length,
                temperature=0.8,
                seed=step,
                sampler=self._sampler,
            )
        # The sampler may start new documents: show their framing newlines.
        logging.info("step %d  sample: %r", step, SAMPLE_PROMPT + text)
        with writer.as_default(step=step):
            tf.summary.text("sample", SAMPLE_PROMPT + text)


def weights_checksum(variables):
    """SHA-256 (hex, 16 digits) of the variables' values, in order."""
    digest = hashlib.sha256()
    for variable in variables:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


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


def train(config, train_files, validation_files):
    """Trains per `config`; returns the results dict (see `Trainer.train`)."""
    return Trainer(config, train_files, validation_files).train()
