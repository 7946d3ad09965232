"""The byte-level language model: a next-byte head on `MLSTMBackbone`.

Call: `model(ids, initial_state=None)` -> `(logits [B, T, 256] float32,
[h, c])`: the backbone's hidden states, through one dense layer, as float32
logits under every precision policy. The backbone's `encode` and
`initial_state` are the model's too, so every tool that runs the recurrence
(featurization, scoring, sampling, fine-tuning) takes a language model.

Checkpoints keep the layout of every run so far: `embedding`, `mlstm` and
`head` directly under the model (see `_trackable_children`), so runs
trained before the backbone existed load and resume unchanged.
"""

import keras
import tensorflow as tf
from absl import logging

from tf_mlstm import rundir
from tf_mlstm.models.backbone import VOCAB_SIZE
from tf_mlstm.models.backbone import MLSTMBackbone

__all__ = ["VOCAB_SIZE", "MLSTMLanguageModel", "bits_per_char_from_logits"]


@keras.saving.register_keras_serializable(package="tf_mlstm")
class MLSTMLanguageModel(keras.Model):
    """Byte-level mLSTM language model: `MLSTMBackbone` -> dense -> 256 logits.

    Call: `model(ids, initial_state=None, training=None)` ->
    `(logits [B, T, 256] float32, [h, c])`.

    Args: the backbone's sizes (`MLSTMBackbone`: `hidden_size`,
    `embedding_size`, `weight_norm`), then the base model's arguments (name,
    dtype policy, ...), which the backbone shares.
    """

    def __init__(self, hidden_size=4096, embedding_size=64, weight_norm=True, **kwargs):
        super().__init__(**kwargs)
        self.backbone = MLSTMBackbone(
            hidden_size, embedding_size, weight_norm, dtype=self.dtype_policy, name="backbone"
        )
        self.head = keras.layers.Dense(VOCAB_SIZE, dtype=self.dtype_policy, name="head")

    # === The backbone's ===
    @property
    def hidden_size(self):
        return self.backbone.hidden_size

    @property
    def embedding_size(self):
        return self.backbone.embedding_size

    @property
    def weight_norm(self):
        return self.backbone.weight_norm

    @property
    def embedding(self):
        return self.backbone.embedding

    @property
    def mlstm(self):
        return self.backbone.mlstm

    def encode(self, ids, initial_state=None, valid=None, training=None, **options):
        """`MLSTMBackbone.encode`: hidden states (or pooled statistics) and [h, c]."""
        return self.backbone.encode(ids, initial_state, valid=valid, training=training, **options)

    def initial_state(self, batch_size):
        """Zero [h, c] for `batch_size` rows in the compute dtype."""
        return self.backbone.initial_state(batch_size)

    # === Layers ===
    def build(self, input_shape=None):
        self.backbone.build()
        self.head.build((None, None, self.hidden_size))
        self.built = True

    def call(self, ids, initial_state=None, training=None):
        outputs, state = self.encode(ids, initial_state, training=training)
        logits = tf.cast(self.head(outputs), tf.float32)
        return logits, state

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        children = super()._trackable_children(save_type, **kwargs)
        if save_type == "checkpoint":
            # The layout of every checkpoint so far: the layers at the top.
            children.pop("backbone", None)
            children["embedding"] = self.backbone.embedding
            children["mlstm"] = self.backbone.mlstm
        return children

    @classmethod
    def from_train_config(cls, config, precision=None):
        """Builds the model a `TrainConfig` describes, in its precision policy.

        Args:
          config: an object with `hidden_size`, `embedding_size`, `weight_norm`
            and `precision` attributes.
          precision: overrides `config.precision` (e.g. float32 for serving).

        Returns:
          A built `MLSTMLanguageModel`.
        """
        model = cls(
            hidden_size=config.hidden_size,
            embedding_size=config.embedding_size,
            weight_norm=config.weight_norm,
            dtype=precision or config.precision,
            name="mlstm_lm",
        )
        model.build()
        return model

    @classmethod
    def from_run(cls, model_dir, checkpoint=None, precision="float32"):
        """The model of a run folder, from its newest intact checkpoint.

        Args and errors as `load_trained_checkpoint`; the run's configuration
        is `rundir.read_config(model_dir)`.
        """
        return load_trained_checkpoint(model_dir, checkpoint, precision)[0]

    # === Config ===
    def get_config(self):
        return {**super().get_config(), **self.backbone.architecture()}


def bits_per_char_from_logits(logits, targets, weights=None):
    """Summed cross-entropy in bits and the number of characters scored.

    Args:
      logits: [B, T, 256] float32.
      targets: [B, T] byte ids.
      weights: optional [B, T] 1/0 weights.

    Returns:
      (total bits float32 scalar, character count float32 scalar).
    """
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(targets, tf.int32), logits=tf.cast(logits, tf.float32)
    )
    if weights is None:
        weights = tf.ones_like(ce)
    weights = tf.cast(weights, tf.float32)
    return (tf.reduce_sum(ce * weights) / tf.math.log(2.0), tf.reduce_sum(weights))


# === From a run folder ===


def load_trained_model(model_dir, checkpoint=None, precision="float32"):
    """Rebuilds a run's model and loads its newest intact checkpoint.

    Returns (model, config); see `load_trained_checkpoint`.
    """
    model, config, _ = load_trained_checkpoint(model_dir, checkpoint, precision)
    return model, config


def load_trained_checkpoint(model_dir, checkpoint=None, precision="float32"):
    """Rebuilds a run's model and loads its newest intact checkpoint, naming it.

    Args:
      model_dir: a `tf-mlstm-train` (or `tf-mlstm-finetune`) model folder.
      checkpoint: a specific checkpoint prefix (default: the newest intact).
      precision: the dtype policy to compute in. float32 (the default) is
        what serving exports; a mixed policy keeps the float32 weights and
        runs the products in 16 bits, which is what makes featurizing large
        corpora fast on GPUs and on CPUs with bfloat16 units.

    Returns:
      (model, config, the checkpoint prefix loaded).

    Raises:
      FileNotFoundError: no config or no checkpoint in `model_dir`.
      RunDirError: no intact checkpoint, or the given one is damaged.
    """
    config = rundir.read_config(model_dir)
    model = MLSTMLanguageModel.from_train_config(config, precision=precision)
    restorer = tf.train.Checkpoint(model=model)
    if checkpoint:
        try:
            restorer.restore(checkpoint).expect_partial()
        except (tf.errors.OpError, IndexError) as error:
            raise rundir.RunDirError(
                f"checkpoint {checkpoint} is missing or damaged ({rundir.first_line(error)})."
            ) from None
        logging.info("Restored %s", checkpoint)
    else:
        checkpoint = rundir.restore_checkpoint(
            restorer, rundir.checkpoint_dir(model_dir), partial=True
        )
        if not checkpoint:
            raise FileNotFoundError(f"{model_dir}: no checkpoint to load.")
    return model, config, checkpoint
