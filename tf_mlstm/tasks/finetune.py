"""Fine-tuning as a task of the distributed runner (`tf-mlstm-finetune`).

`FinetuneTask` trains a `MLSTMClassifier` (encoder unfrozen, head optionally from a linear
probe) on labeled text; `SyntheticFinetuneTask` is the same step on random rows, which `auto`
precision times.
"""

import functools

import numpy as np
import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.auto import measure
from tf_mlstm.data import readers
from tf_mlstm.data.text import DOC_START
from tf_mlstm.models import language_model
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.classifier import frame_left_padded
from tf_mlstm.models.classifier import lm_loss_per_text
from tf_mlstm.models.classifier import predict_features
from tf_mlstm.models.classifier import predict_probabilities
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTICLASS
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.rundir import CONFIG_FILE
from tf_mlstm.rundir import FINETUNE_CONFIG_FILE
from tf_mlstm.train import schedules
from tf_mlstm.train.task_protocol import Task
from tf_mlstm.transfer import labeled
from tf_mlstm.transfer.probe.fit import fit_logistic


def task_kind(data: labeled.LabeledData) -> str:
    """BINARY, MULTICLASS or MULTILABEL: what the training data's labels ask for.

    Args:
      data: the training `labeled.LabeledData`.

    Returns:
      The kind.

    Raises:
      ValueError: one label key with fewer than two classes.
    """
    if data.multilabel:
        return MULTILABEL
    classes = data.classes()
    if len(classes) < 2:
        raise errors.InvalidValueError(
            f"{data.source}: every label is {classes[0]!r}; a classifier needs two or more classes"
        )
    return BINARY if classes == (0, 1) else MULTICLASS


class FinetuneTask(Task):
    """Fine-tuning a `MLSTMClassifier` as a task of the distributed runner.

    The encoder starts from `init_model_dir`, the head is new (random or `probe_head`), and the
    training labels choose the task (`task_kind`).

    Args:
      config: a validated `FinetuneConfig`.

    Example:
    >>> from tf_mlstm.config import FinetuneConfig
    >>> from tf_mlstm.tasks.finetune import FinetuneTask
    >>> config = FinetuneConfig(
    ...     init_model_dir=model_dir, train_data="reviews.jsonl", model_dir="tuned"
    ... ).validate()
    >>> task = FinetuneTask(config)
    >>> task.title, task.config_file, task.labels
    ('Fine-tuning', 'finetune_config.json', ('label',))
    >>> probe = task.measurement(rows=4)  # what `auto` precision times: one sigmoid
    >>> probe.shape["task"], probe.shape["outputs"], probe.shape["softmax"]
    ('finetune', 1, False)
    """

    title = "Fine-tuning"
    # The runner reads the recorded precision from, and writes how `auto`
    # decided into, fine-tuning's own config file (config.json is the base
    # model's).
    config_file = FINETUNE_CONFIG_FILE

    def __init__(self, config):
        self.config = config
        self.labels = config.label_keys
        self.history = []
        self.head_init = None
        self.probe = None

    # === Data and model ===

    def check_inputs(self) -> None:
        config = self.config
        # A language-model run (or another kind) as the output is refused
        # before anything is written: its config.json would be replaced.
        rundir.check_folder_kind(
            config.model_dir, "model_dir", "tf-mlstm-finetune", (None, rundir.FINETUNE_RUN)
        )
        for spec in (config.train_data, config.validation_data, config.test_data):
            if spec:
                readers.expand_inputs(spec)
        rundir.read_config(config.init_model_dir)

    def prepare(self, context) -> None:
        self.context = context
        self._load_data()
        self.base_model = language_model.MLSTMLanguageModel.from_run(self.config.init_model_dir)
        self.base_config = self.base_model.run_config
        if len(self.train_ids) < context.num_workers:
            raise errors.InvalidValueError(
                f"{self.config.train_data}: {len(self.train_ids)} training texts cannot feed "
                f"{context.num_workers} workers."
            )
        resuming = tf.train.latest_checkpoint(rundir.checkpoint_dir(self.config.model_dir))
        if self.config.head_init == "probe" and not resuming:
            self.head_init = self.probe_head()

    def probe_head(self) -> tuple:
        """(kernel [D, K], bias [K]): an L2 logistic regression on the starting features.

        Returns:
          (kernel, bias) as NumPy arrays.
        """
        config = self.config
        encoder = self._encoder()
        model = MLSTMClassifier(encoder, 1, config.feature_kinds)
        x, y = {}, {}
        for name in ("train", "validation"):
            x[name] = predict_features(
                model, self.splits[name].texts, config.max_length, progress=True
            )
            y[name] = self.targets[name].astype(np.int64)
            if self.kind == BINARY:
                y[name] = y[name][:, 0]
        classes = {BINARY: (0, 1), MULTICLASS: tuple(range(len(self.names)))}.get(self.kind)
        classifier, _ = fit_logistic(
            x["train"],
            y["train"],
            x["validation"],
            y["validation"],
            config.feature_kinds,
            encoder.hidden_size,
            penalty="l2",
            classes=self.labels if self.kind == MULTILABEL else classes,
            threshold_metric=config.threshold_metric,
        )
        metrics = classifier.metrics(x["validation"], y["validation"])
        self.probe = {"C": classifier.report.C, "validation": metrics}
        logging.info(
            "Head from a linear probe: C %s, validation accuracy %.4f.",
            classifier.report.C,
            metrics["accuracy"],
        )
        head = classifier.head
        kernel = (head.weights / head.scale).T
        bias = head.bias - head.weights @ (head.mean / head.scale)
        return kernel, bias

    def _load_data(self):
        config = self.config

        def read(spec, limit):
            return labeled.read_labeled(
                spec,
                config.text_keys,
                self.labels,
                label_map=config.label_map or None,
                limit=limit,
                seed=config.seed,
            )

        train = read(config.train_data, config.max_train_examples)
        if config.validation_data:
            validation = read(config.validation_data, config.max_eval_examples)
        else:
            train, validation = labeled.split_off(train, config.validation_fraction, config.seed)
            logging.info(
                "Validation: %d texts held out of %s (%s=%g).",
                len(validation.texts),
                errors.setting_name("train_data"),
                errors.setting_name("validation_fraction"),
                config.validation_fraction,
            )
        self.splits = {"train": train, "validation": validation}
        if config.test_data:
            self.splits["test"] = read(config.test_data, config.max_eval_examples)
        self.kind = task_kind(train)
        if self.kind == MULTICLASS:
            self.names = train.classes()
            self.targets = {
                name: labeled.encode_classes(split, self.names)
                for name, split in self.splits.items()
            }
        else:
            self.names = self.labels
            self.targets = {name: split.indicator() for name, split in self.splits.items()}
        framed = frame_left_padded(train.texts, config.max_length)
        self.train_ids, self.train_lengths = framed.ids, framed.lengths
        cut = int(framed.truncated.sum())
        if cut:
            logging.info(
                "Cut %d training texts to %s=%d bytes.",
                cut,
                errors.setting_name("max_length"),
                config.max_length,
            )

    def _encoder(self):
        """The language model to fine-tune, in the run's precision, with the base weights."""
        encoder = MLSTMLanguageModel.from_train_config(
            self.base_config, precision=self.config.precision
        )
        encoder.set_weights(self.base_model.get_weights())
        return encoder

    def build_model(self, context) -> tuple:
        config = self.config
        encoder = self._encoder()
        self.model = MLSTMClassifier(
            encoder,
            len(self.names),
            config.features,
            softmax=self.kind == MULTICLASS,
            head_hidden=config.head_hidden,
            head_dropout=config.head_dropout,
            head_init=self.head_init,
            max_length=config.max_length,
        )
        trained = [encoder.embedding, encoder.mlstm, *self.model.head_layers().values()]
        if config.lm_loss_weight > 0:
            trained.append(encoder.head)  # only the auxiliary loss reaches the LM head
        return self.model, [v for layer in trained for v in layer.trainable_variables]

    def learning_rate(self) -> object:
        config = self.config
        return schedules.LargeBatchSchedule(
            config.lr, config.max_steps, config.warmup_steps, config.lr_decay
        )

    def checkpoint_objects(self) -> dict:
        return self.model.checkpoint_objects()

    def dataset(self, input_context, rows) -> tf.data.Dataset:
        ids = tf.constant(self.train_ids)
        lengths = tf.constant(self.train_lengths)
        labels = tf.constant(self.targets["train"])
        indices = tf.data.Dataset.range(len(self.train_ids)).shard(
            input_context.num_input_pipelines, input_context.input_pipeline_id
        )
        shard_size = len(
            range(
                input_context.input_pipeline_id,
                len(self.train_ids),
                input_context.num_input_pipelines,
            )
        )
        indices = indices.shuffle(
            shard_size,
            seed=self.config.seed + input_context.input_pipeline_id,
            reshuffle_each_iteration=True,
        )
        return (
            indices.repeat()
            .batch(rows, drop_remainder=True)
            .map(
                lambda i: {
                    "ids": tf.gather(ids, i),
                    "lengths": tf.gather(lengths, i),
                    "labels": tf.gather(labels, i),
                }
            )
            .prefetch(2)
        )

    def input_layout(self) -> dict:
        config = self.config
        return {
            "train_data": config.train_data,
            "train_examples": len(self.train_ids),
            "max_length": config.max_length,
            "validation_data": config.validation_data,
            "validation_fraction": config.validation_fraction,
            # The keys as lists, however they were given: the binary's list flags
            # and a Python caller's comma-separated strings name the same input.
            "label_key": list(config.label_keys),
            "label_map": config.label_map,
            "text_key": list(config.text_keys),
        }

    # === The step ===

    def loss(self, batch, state) -> tuple:
        ids, lengths, labels = batch["ids"], batch["lengths"], batch["labels"]
        lm_weight = self.config.lm_loss_weight
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        # Seeded by step and replica: a resumed run draws the same dropout.
        dropout_seed = tf.stack(
            [self.context.step, tf.cast(replica, tf.int64) + 65536 * self.config.seed]
        )
        logits, hidden = self.model.forward(ids, lengths, training=True, dropout_seed=dropout_seed)
        # Sums over the replica's rows / global batch: summing replica
        # gradients gives the global mean gradient.
        if self.kind == MULTICLASS:
            class_loss = tf.reduce_sum(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            )
            predicted = tf.argmax(logits, axis=1, output_type=labels.dtype)
            correct = tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float32))
        else:
            per_label = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            class_loss = tf.reduce_sum(tf.reduce_mean(per_label, axis=1))
            right = tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), labels), tf.float32)
            correct = tf.reduce_sum(tf.reduce_mean(right, axis=1))
        lm_loss = tf.constant(0.0)
        if lm_weight > 0:
            lm_loss = tf.reduce_sum(lm_loss_per_text(self.model, hidden, ids, lengths))
        loss = (class_loss + lm_weight * lm_loss) / float(self.config.batch_size)
        return loss, tf.stack([class_loss, lm_loss, correct]), state

    def describe(self) -> str:
        outputs = "classes" if self.kind == MULTICLASS else "labels"
        return (
            f" x {self.train_ids.shape[1]} bytes; {self.config.init_model_dir} "
            f"({','.join(self.config.feature_kinds)} features, {self.kind} {outputs} "
            f"{','.join(str(name) for name in self.names)}) on "
            f"{len(self.train_ids)} texts"
        )

    def progress(self, step, window, steps, seconds) -> tuple:
        rows = steps * self.config.batch_size
        entry = {
            "step": step,
            "loss": float(window[0] / rows),
            "lm_loss": float(window[1] / rows),
            "accuracy": float(window[2] / rows),
        }
        self.history.append(entry)
        text = (
            f"loss {entry['loss']:.4f}  lm loss {entry['lm_loss']:.4f}  "
            f"accuracy {entry['accuracy']:.3f}"
        )
        return text, {k: v for k, v in entry.items() if k != "step"}

    # === Evaluation and results ===

    def periodic(self) -> list:
        return [(self.config.eval_every_steps, self._log_validation)]

    def _log_validation(self, step):
        _, metrics = self.evaluate("validation")
        f1 = "macro_f1" if self.kind == MULTICLASS else "f1"
        logging.info(
            "step %d  validation accuracy %.4f  %s %.4f%s",
            step,
            metrics["accuracy"],
            f1,
            metrics[f1],
            "" if self.kind == MULTICLASS else " (threshold 0.5)",
        )
        with self.context.summary_writer("validation").as_default(step=step):
            tf.summary.scalar("accuracy", metrics["accuracy"])
            tf.summary.scalar(f1, metrics[f1])

    def configs(self) -> dict:
        return {CONFIG_FILE: self.base_config, FINETUNE_CONFIG_FILE: self.config}

    def evaluate(self, split, thresholds=None, progress=False) -> tuple:
        """Probabilities and metrics on one split (every worker computes them).

        Args:
          split: "train", "validation" or "test".
          thresholds: the sigmoid labels' thresholds (None: 0.5 each).
          progress: whether to report the texts done.

        Returns:
          ([N, K] probabilities, the metrics dict).
        """
        probabilities = predict_probabilities(
            self.model, self.splits[split], self.config.max_length, progress=progress
        )
        if thresholds is None:
            thresholds = np.full(len(self.names), 0.5)
        return probabilities, self._metrics(split, probabilities, thresholds)

    def _metrics(self, split, probabilities, thresholds):
        """The metrics of `probabilities` on `split` (sigmoids cut at `thresholds`)."""
        if self.kind == MULTICLASS:
            return labeled.class_metrics(
                self.targets[split], np.argmax(probabilities, axis=1), self.names
            )
        return labeled.label_metrics(
            self.targets[split], probabilities > thresholds, self.labels, thresholds
        )

    def results(self, step) -> dict:
        # The final evaluation, over whole splits, reports its progress; the periodic one
        # is summed up by its own log line.
        probabilities, at_half = self.evaluate("validation", progress=True)
        results = {
            "kind": self.kind,
            "labels": list(self.labels),
            "feature": self.model.feature,
            "head_init": self.config.head_init,
            "head_hidden": self.config.head_hidden,
            "head_dropout": self.config.head_dropout,
            "precision": self.config.precision,
        }
        if self.kind == MULTICLASS:
            thresholds = None
            chosen = at_half
            results["classes"] = list(self.names)
            logging.info(
                "validation accuracy %.4f  macro F1 %.4f", chosen["accuracy"], chosen["macro_f1"]
            )
        else:
            thresholds = labeled.choose_thresholds(
                probabilities, self.targets["validation"], self.config.threshold_metric
            )
            chosen = self._metrics("validation", probabilities, thresholds)
            results["thresholds"] = {name: float(t) for name, t in zip(self.labels, thresholds)}
            results["threshold_metric"] = self.config.threshold_metric
            logging.info(
                "validation accuracy %.4f  F1 %.4f (thresholds %s)",
                chosen["accuracy"],
                chosen["f1"],
                ", ".join(f"{t:.3f}" for t in thresholds),
            )
        if self.probe is not None:
            results["probe"] = self.probe
        results["train_examples"] = len(self.splits["train"].texts)
        results["validation"] = chosen
        if self.kind != MULTICLASS:
            results["validation_at_0.5"] = at_half
        results["history"] = self.history
        if "test" in self.splits:
            _, results["test"] = self.evaluate("test", thresholds, progress=True)
            f1 = "macro_f1" if self.kind == MULTICLASS else "f1"
            logging.info(
                "test accuracy %.4f  %s %.4f", results["test"]["accuracy"], f1, results["test"][f1]
            )
        return results

    # === auto precision and XLA ===

    def measurement(self, rows) -> measure.StepMeasurement:
        """Fine-tuning's step at this run's shape on synthetic rows (`measure.StepMeasurement`).

        The head is planned from the config alone (one key without a map: one sigmoid).

        Args:
          rows: rows per replica.

        Returns:
          The probe.
        """
        config = self.config
        base = rundir.read_config(config.init_model_dir)
        outputs, softmax = self._planned_head()
        shape = {
            "task": "finetune",
            "hidden_size": base.hidden_size,
            "embedding_size": base.embedding_size,
            "weight_norm": base.weight_norm,
            "max_length": config.max_length,
            "rows": rows,
            "features": ",".join(config.feature_kinds),
            "head_hidden": config.head_hidden,
            "head_dropout": config.head_dropout > 0,
            "outputs": outputs,
            "softmax": softmax,
            "lm_loss": config.lm_loss_weight > 0,
        }
        make_task = functools.partial(
            SyntheticFinetuneTask, base_config=base, outputs=outputs, softmax=softmax
        )
        return measure.StepMeasurement(make_task, shape, rows * config.max_length)

    def _planned_head(self):
        """(outputs, softmax) of the head as the config alone tells it (before the data)."""
        if len(self.labels) > 1:
            return len(self.labels), False
        label_map = labeled.parse_label_map(self.config.label_map or None)
        if label_map is not None and tuple(label_map.classes) != (0, 1):
            return len(label_map.classes), True
        return 1, False


class SyntheticFinetuneTask(FinetuneTask):
    """Fine-tuning's step on random rows, on a fresh encoder of the base shape: what `auto` times.

    Args:
      config: the `FinetuneConfig` of the candidate (its precision and XLA).
      base_config: the base model's `TrainConfig`.
      outputs, softmax: the head's outputs, and whether they are one softmax or sigmoids.

    Example:
    >>> from tf_mlstm.config import FinetuneConfig, TrainConfig
    >>> from tf_mlstm.tasks.finetune import SyntheticFinetuneTask
    >>> config = FinetuneConfig(
    ...     init_model_dir="base", train_data="reviews.jsonl", model_dir="tuned", max_length=16
    ... )
    >>> task = SyntheticFinetuneTask(config, TrainConfig(), outputs=3, softmax=True)
    >>> batch = next(iter(task.dataset(None, rows=2)))  # random rows of 3 classes
    >>> batch["ids"].shape.as_list(), batch["labels"].shape.as_list()
    ([2, 16], [2])
    """

    def __init__(self, config, base_config, outputs, softmax):
        super().__init__(config)
        self.base_config = base_config
        self.base_model = None
        self._outputs, self._softmax = outputs, softmax

    def check_inputs(self) -> None:
        pass  # nothing is read

    def prepare(self, context) -> None:
        self.context = context
        if self._softmax:
            self.kind, self.names = MULTICLASS, tuple(range(self._outputs))
        else:
            self.kind = MULTILABEL if self._outputs > 1 else BINARY
            self.names = tuple(f"label_{i}" for i in range(self._outputs))

    def _encoder(self):
        return MLSTMLanguageModel.from_train_config(
            self.base_config, precision=self.config.precision
        )

    def dataset(self, input_context, rows) -> tf.data.Dataset:
        length = self.config.max_length
        text = tf.random.stateless_uniform(
            [rows, length - 1], seed=[0, 0], maxval=256, dtype=tf.int32
        )
        ids = tf.concat([tf.fill([rows, 1], DOC_START), text], axis=1)
        if self._softmax:
            labels = tf.random.stateless_uniform(
                [rows], seed=[0, 1], maxval=self._outputs, dtype=tf.int64
            )
        else:
            labels = tf.cast(
                tf.random.stateless_uniform([rows, self._outputs], seed=[0, 1]) < 0.5, tf.float32
            )
        batch = {
            "ids": tf.cast(ids, tf.uint8),
            "lengths": tf.fill([rows], length),
            "labels": labels,
        }
        return tf.data.Dataset.from_tensors(batch).repeat()

    def input_layout(self) -> dict:
        return {}

    def periodic(self) -> list:
        return []
