"""The byte-level language model: a next-byte head on `MLSTMBackbone`.

Checkpoints keep `embedding`, `mlstm` and `head` directly under the model, so older runs load.
"""

import keras
import tensorflow as tf

from tf_mlstm import rundir
from tf_mlstm.layers import MLSTM
from tf_mlstm.models import preset as preset_lib
from tf_mlstm.models.backbone import VOCAB_SIZE
from tf_mlstm.models.backbone import MLSTMBackbone

__all__ = ["VOCAB_SIZE", "MLSTMLanguageModel", "bits_per_char_from_logits"]


@keras.saving.register_keras_serializable(package="tf_mlstm")
class MLSTMLanguageModel(keras.Model):
    """Byte-level mLSTM language model: `model(ids)` -> `(logits [B, T, 256] float32, [h, c])`.

    Args:
      backbone: the `MLSTMBackbone` to put the head on; None builds one of the sizes below.
      hidden_size, embedding_size, weight_norm: the sizes of a backbone built here.
      **kwargs: the base model's arguments (name, dtype policy, ...).

    Example:

    >>> backbone = MLSTMBackbone(hidden_size=8, embedding_size=4)
    >>> model = MLSTMLanguageModel(backbone)
    >>> model.build()
    >>> logits, (h, c) = model(tf.constant([[0, 65, 66]]))
    >>> logits.shape, h.shape
    (TensorShape([1, 3, 256]), TensorShape([1, 8]))
    """

    def __init__(
        self, backbone=None, hidden_size=4096, embedding_size=64, weight_norm=True, **kwargs
    ):
        if backbone is not None:
            kwargs.setdefault("dtype", backbone.dtype_policy)
        super().__init__(**kwargs)
        if backbone is None:
            backbone = MLSTMBackbone(
                hidden_size, embedding_size, weight_norm, dtype=self.dtype_policy, name="backbone"
            )
        self.backbone = backbone
        self.head = keras.layers.Dense(VOCAB_SIZE, dtype=self.dtype_policy, name="head")
        self.run_config = None
        self.run_checkpoint = None
        self.run_dir = None
        self.preset_metadata = None  # metadata.json of the preset it was loaded from

    # === The backbone's ===
    @property
    def hidden_size(self) -> int:
        """The backbone's mLSTM units."""
        return self.backbone.hidden_size

    @property
    def embedding_size(self) -> int:
        """The backbone's byte embedding width."""
        return self.backbone.embedding_size

    @property
    def weight_norm(self) -> bool:
        """Whether the backbone's mLSTM kernels are weight-normalized."""
        return self.backbone.weight_norm

    @property
    def embedding(self) -> keras.layers.Embedding:
        """The backbone's byte embedding layer."""
        return self.backbone.embedding

    @property
    def mlstm(self) -> MLSTM:
        """The backbone's mLSTM layer."""
        return self.backbone.mlstm

    def encode(self, ids, initial_state=None, valid=None, training=None, **options) -> tuple:
        """`MLSTMBackbone.encode`: hidden states (or pooled statistics) and [h, c]."""
        return self.backbone.encode(ids, initial_state, valid=valid, training=training, **options)

    def initial_state(self, batch_size) -> list[tf.Tensor]:
        """Zero [h, c] for `batch_size` rows in the compute dtype."""
        return self.backbone.initial_state(batch_size)

    # === Layers ===
    def build(self, input_shape=None) -> None:
        self.backbone.build()
        self.head.build((None, None, self.hidden_size))
        self.built = True

    def call(self, ids, initial_state=None, training=None) -> tuple:
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
    def from_train_config(cls, config, precision=None) -> "MLSTMLanguageModel":
        """Builds the model a `TrainConfig` describes, in its precision policy.

        Args:
          config: has `hidden_size`, `embedding_size`, `weight_norm` and `precision`.
          precision: overrides `config.precision` (e.g. float32 for serving).

        Returns:
          A built, untrained `MLSTMLanguageModel`.
        """
        policy = precision or config.precision
        backbone = MLSTMBackbone(
            config.hidden_size,
            config.embedding_size,
            config.weight_norm,
            dtype=policy,
            name="backbone",
        )
        model = cls(backbone, dtype=policy, name="mlstm_lm")
        model.build()
        return model

    @classmethod
    def from_run(cls, model_dir, checkpoint=None, precision="float32") -> "MLSTMLanguageModel":
        """The trained model (or fine-tuned encoder) of a run folder.

        Args:
          model_dir: a `tf-mlstm-train` (or `tf-mlstm-finetune`) model folder.
          checkpoint: a checkpoint prefix (default: the newest intact).
          precision: the dtype policy: float32 or a mixed one.

        Returns:
          A built `MLSTMLanguageModel` with `run_config`, `run_checkpoint` and `run_dir`.

        Raises:
          FileNotFoundError: no config or no checkpoint in `model_dir`.
          RunDirError: no intact checkpoint, or the given one is damaged.
        """
        config = rundir.read_config(model_dir)
        model = cls.from_train_config(config, precision=precision)
        model.run_config = config
        model.run_checkpoint = rundir.restore_model(
            tf.train.Checkpoint(model=model), model_dir, checkpoint
        )
        model.run_dir = model_dir
        return model

    # === Presets ===
    @classmethod
    def from_preset(cls, preset, precision="float32") -> "MLSTMLanguageModel":
        """The language model of a preset folder (a fine-tuned classifier's: its encoder).

        Args:
          preset: a folder `save_to_preset` or `tf-mlstm-preset` wrote.
          precision: the dtype policy: float32 or a mixed one.

        Returns:
          A built `MLSTMLanguageModel` with the preset's `preset_metadata`.

        Raises:
          MissingFileError: no such folder, or a file of the preset is missing.
          InvalidValueError: not a preset (the message says what the folder is), or
            weights other than those its metadata records.
        """
        model = preset_lib.load_model(preset, precision)
        return getattr(model, "encoder", model)

    def save_to_preset(self, preset_dir, overwrite=False, classifier="") -> dict:
        """Writes this model as a preset folder (`tf_mlstm.models.preset`), loaded by `from_preset`.

        Args:
          preset_dir: the folder to write: new or empty, unless `overwrite`.
          overwrite: replace what it holds (an earlier preset; never a run or data folder).
          classifier: a `tf-mlstm-transfer` classifier.json fitted on this model: the
            preset of that linear probe.

        Returns:
          The metadata written (metadata.json).

        Raises:
          InvalidValueError: `preset_dir` holds something (without `overwrite`) or is
            another tool's folder, or the classifier was fitted on other weights.
        """
        kind = preset_lib.LINEAR_PROBE if classifier else preset_lib.LANGUAGE_MODEL
        return preset_lib.write_preset(self, preset_dir, kind, overwrite, classifier)

    # === Config ===
    def get_config(self) -> dict:
        return {**super().get_config(), **self.backbone.architecture()}


def bits_per_char_from_logits(logits, targets, weights=None) -> tuple[tf.Tensor, tf.Tensor]:
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
