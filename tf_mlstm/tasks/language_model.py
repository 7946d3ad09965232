"""Language-model training (`tf-mlstm-train`) as a task of the distributed runner.

Next-byte prediction with truncated BPTT: each replica carries its rows' state [h, c] across
steps (reset at document starts). The loss is the mean cross-entropy over the global batch's
characters, so the SUM all-reduce gives the global mean gradient.
"""

import math

import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm.auto import measure
from tf_mlstm.config import TrainConfig
from tf_mlstm.data import pipeline
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.models.language_model import bits_per_char_from_logits
from tf_mlstm.models.sampling import make_sampler
from tf_mlstm.models.sampling import sample_text
from tf_mlstm.rundir import CONFIG_FILE
from tf_mlstm.train import evaluation
from tf_mlstm.train import schedules
from tf_mlstm.train.summaries import TRAIN_SUMMARY_SUBDIR
from tf_mlstm.train.task_protocol import Task

SAMPLE_PROMPT = "This product is"
VALIDATION_SUMMARY_SUBDIR = "validation"


def build_model(config: TrainConfig) -> MLSTMLanguageModel:
    """The language model for `config`, built, in its precision policy.

    Args:
      config: a validated `TrainConfig`.

    Returns:
      The model.
    """
    return MLSTMLanguageModel.from_train_config(config)


def build_schedule(config: TrainConfig) -> schedules.LargeBatchSchedule:
    """The learning-rate schedule for `config`.

    Args:
      config: a validated `TrainConfig`.

    Returns:
      The schedule, its peak scaled to the global batch.
    """
    peak = schedules.peak_learning_rate(
        config.lr, config.batch_size, config.lr_base_batch, config.lr_scaling, config.max_lr or None
    )
    return schedules.LargeBatchSchedule(
        peak, config.schedule_steps, config.warmup_steps, config.lr_decay
    )


class LanguageModelTask(Task):
    """Next-byte language modeling on TFRecord shards.

    Args:
      config: a validated `TrainConfig`.
      train_files, validation_files: training TFRecord shards, and validation ones (maybe none).

    Example:
    >>> from tf_mlstm.config import TrainConfig
    >>> from tf_mlstm.tasks.language_model import LanguageModelTask
    >>> config = TrainConfig(hidden_size=16, seq_length=32).validate()
    >>> task = LanguageModelTask(config, ["data/train-00000-of-00001.tfrecord"], [])
    >>> task.carried_state_shape(rows=4), task.describe()
    ((4, 16), ' x 32 chars')
    """

    title = "Training"

    def __init__(self, config, train_files, validation_files):
        self.config = config
        self.train_files = list(train_files)
        self.validation_files = list(validation_files)
        self._sampler = None
        self._eval_step = None

    # === Model and data ===

    def prepare(self, context) -> None:
        self.context = context
        self.source_repeats = self._check_source_repeats()

    def build_model(self, context) -> tuple:
        self.model = build_model(self.config)
        return self.model, self.model.trainable_variables

    def learning_rate(self) -> object:
        return build_schedule(self.config)

    def checkpoint_objects(self) -> dict:
        return {"model": self.model}

    def _check_source_repeats(self):
        """Parses --source_repeats and logs what its rules match in the first shard."""
        rules = pipeline.parse_source_repeats(self.config.source_repeats)
        if not rules:
            return rules
        read, named, matches = pipeline.source_census(self.train_files, rules)
        if read and not named:
            raise errors.InvalidValueError(
                f"{errors.setting_name('source_repeats')} needs records that name their source "
                "file, but the "
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

    def dataset(self, input_context, rows) -> tf.data.Dataset:
        return pipeline.lm_dataset(
            self.train_files,
            rows,
            self.config.seq_length,
            input_context=input_context,
            training=True,
            seed=self.config.seed + input_context.input_pipeline_id,
            shuffle_buffer=self.config.shuffle_buffer,
            source_repeats=self.source_repeats,
        )

    def input_layout(self) -> dict:
        return {
            "seq_length": self.config.seq_length,
            "shuffle_buffer": self.config.shuffle_buffer,
            "source_repeats": self.config.source_repeats,
            "train_files": self.train_files,
        }

    def carried_state_shape(self, rows) -> tuple | None:
        return (rows, self.config.hidden_size)

    def measurement(self, rows) -> measure.StepMeasurement:
        config = self.config
        shape = {
            "task": "language_model",
            "hidden_size": config.hidden_size,
            "embedding_size": config.embedding_size,
            "weight_norm": config.weight_norm,
            "seq_length": config.seq_length,
            "rows": rows,
        }
        return measure.StepMeasurement(SyntheticLanguageModelTask, shape, rows * config.seq_length)

    # === The step ===

    def loss(self, batch, state) -> tuple:
        logits, state = self.model(batch["inputs"], initial_state=state, training=True)
        bits, chars = bits_per_char_from_logits(logits, batch["targets"], batch["weights"])
        chars_per_step = float(self.config.batch_size * self.config.seq_length)
        loss = bits * math.log(2.0) / chars_per_step
        return loss, tf.stack([bits, chars]), list(state)

    def describe(self) -> str:
        return f" x {self.config.seq_length} chars"

    def progress(self, step, window, steps, seconds) -> tuple:
        bits, chars = window
        bpc = bits / max(chars, 1.0)
        rate = chars / max(seconds, 1e-9)
        text = f"loss {bpc * math.log(2):.4f}  bits/char {bpc:.4f}  chars/s {rate:.0f}"
        scalars = {
            "loss": bpc * math.log(2),
            "bits_per_char": bpc,
            "chars_per_second": rate,
        }
        return text, scalars

    # === Evaluation and results ===

    def periodic(self) -> list:
        config = self.config
        hooks = [(config.eval_every_steps, self._periodic_validation)]
        if self.context.chief:
            hooks.append((config.sample_every_steps, self._log_sample))
        return hooks

    def configs(self) -> dict:
        return {CONFIG_FILE: self.config}

    def validate(self, max_batches) -> dict | None:
        """Validation bits/char (every worker computes it; the chief logs it).

        Args:
          max_batches: the most batches read.

        Returns:
          `evaluation.evaluate`'s dict, or None without validation shards.
        """
        if not self.validation_files:
            return None
        dataset = pipeline.lm_dataset(
            self.validation_files,
            self.context.per_replica_batch,
            self.config.seq_length,
            training=False,
        )
        with self.context.strategy.scope():
            if self._eval_step is None:
                self._eval_step = evaluation.make_eval_step(self.model)
            return evaluation.evaluate(self.model, dataset, max_batches, self._eval_step)

    def _periodic_validation(self, step):
        self._log_validation(step, self.config.eval_batches)

    def _log_validation(self, step, max_batches):
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
        writer = self.context.summary_writer(VALIDATION_SUMMARY_SUBDIR)
        with writer.as_default(step=step):
            tf.summary.scalar("bits_per_char", result["bits_per_char"])
        return result

    def _log_sample(self, step):
        with self.context.strategy.scope():
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
        with self.context.summary_writer(TRAIN_SUMMARY_SUBDIR).as_default(step=step):
            tf.summary.text("sample", SAMPLE_PROMPT + text)

    def results(self, step) -> dict:
        final = self._log_validation(step, 0)
        if not final:
            # Said in the results too, not only in the start-up warning.
            return {"validation": "none: no validation shards with records"}
        return {
            "validation_bits_per_char": final["bits_per_char"],
            "validation_chars": final["chars"],
        }


class SyntheticLanguageModelTask(LanguageModelTask):
    """The language model's step on random bytes: what `auto` times (`auto/measure.py`).

    Args:
      config: the `TrainConfig` of the candidate (its precision and XLA).

    Example:
    >>> from tf_mlstm.config import TrainConfig
    >>> from tf_mlstm.tasks.language_model import SyntheticLanguageModelTask
    >>> task = SyntheticLanguageModelTask(TrainConfig(seq_length=8))
    >>> batch = next(iter(task.dataset(None, rows=2)))
    >>> batch["inputs"].shape.as_list(), batch["inputs"].dtype.name
    ([2, 8], 'uint8')
    """

    def __init__(self, config):
        super().__init__(config, [], [])

    def prepare(self, context) -> None:
        self.context = context
        self.source_repeats = ()

    def dataset(self, input_context, rows) -> tf.data.Dataset:
        ids = tf.random.stateless_uniform(
            [rows, self.config.seq_length + 1], seed=[0, 0], maxval=256, dtype=tf.int32
        )
        ids = tf.cast(ids, tf.uint8)
        batch = {
            "inputs": ids[:, :-1],
            "targets": ids[:, 1:],
            "weights": tf.ones([rows, self.config.seq_length], tf.float32),
        }
        return tf.data.Dataset.from_tensors(batch).repeat()

    def periodic(self) -> list:
        return []
