"""SavedModel export: string-in signatures that serve without tf_mlstm.

Signatures (all take `text`: a [N] tf.string batch of raw UTF-8 text, which
they normalize in-graph as training did):

- `featurize`: `cell`, `hidden` (final states), `mean`, `max` (pooled hidden
  states), each [N, H] float32;
- `score`: `bits_per_char` [N] and `chars` [N], the text's mean bits per
  character under the model.

The exported model runs in float32 whatever precision it trained in.
"""

import json
import os

import tensorflow as tf
from absl import logging

from tf_mlstm.data.text import normalize_text_tf
from tf_mlstm.models import featurize
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.train.config import CHECKPOINT_SUBDIR
from tf_mlstm.train.config import CONFIG_FILE
from tf_mlstm.train.config import TrainConfig

SERVING_WINDOW = 256


def load_trained_model(model_dir, checkpoint=None):
    """Rebuilds a run's model in float32 and loads its newest checkpoint.

    Args:
      model_dir: a `tf-mlstm-train` model folder (has config.json).
      checkpoint: a specific checkpoint path (default: the newest).

    Returns:
      (model, config).

    Raises:
      FileNotFoundError: no config or no checkpoint in `model_dir`.
    """
    config_path = os.path.join(model_dir, CONFIG_FILE)
    if not tf.io.gfile.exists(config_path):
        raise FileNotFoundError(
            f"{model_dir}: no {CONFIG_FILE}; is it a " "tf-mlstm-train --model_dir?"
        )
    with tf.io.gfile.GFile(config_path) as f:
        config = TrainConfig.from_json(f.read())
    checkpoint = checkpoint or tf.train.latest_checkpoint(
        os.path.join(model_dir, CHECKPOINT_SUBDIR)
    )
    if not checkpoint:
        raise FileNotFoundError(f"{model_dir}: no checkpoint to load.")
    model = MLSTMLanguageModel.from_train_config(config, precision="float32")
    tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial()
    logging.info("Loaded %s", checkpoint)
    return model, config


class ServingModule(tf.Module):
    """Wraps a language model with string-in signatures."""

    def __init__(self, model, window=SERVING_WINDOW):
        super().__init__()
        self.model = model
        self.window = window

    def _ids(self, text):
        return featurize.texts_to_ids(normalize_text_tf(text), self.window)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def featurize(self, text):
        ids, valid, _ = self._ids(text)
        return featurize.featurize_ids(self.model, ids, valid, self.window)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def score(self, text):
        ids, valid, _ = self._ids(text)
        bits, chars = featurize.score_ids(self.model, ids, valid, self.window)
        return {"bits_per_char": bits / tf.maximum(chars, 1.0), "chars": chars}

    def signatures(self):
        return {"featurize": self.featurize, "score": self.score, "serving_default": self.featurize}


def export_saved_model(module, export_dir, metadata=None):
    """Writes a SavedModel with the module's signatures.

    Args:
      module: a `ServingModule` (or subclass with more signatures).
      export_dir: destination folder (replaced if present).
      metadata: optional dict written to `export_dir/assets.extra/meta.json`.

    Returns:
      export_dir.
    """
    if tf.io.gfile.exists(export_dir):
        tf.io.gfile.rmtree(export_dir)
    tf.saved_model.save(module, export_dir, signatures=module.signatures())
    if metadata:
        extra = os.path.join(export_dir, "assets.extra")
        tf.io.gfile.makedirs(extra)
        with tf.io.gfile.GFile(os.path.join(extra, "meta.json"), "w") as f:
            f.write(json.dumps(metadata, indent=2, sort_keys=True))
    logging.info("Exported SavedModel to %s", export_dir)
    return export_dir
