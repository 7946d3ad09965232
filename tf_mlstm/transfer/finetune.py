"""A finished fine-tuning run (`tf-mlstm-finetune`), loaded to classify.

Training is a task of the runner (`tf_mlstm.tasks.finetune`); `load_finetuned_model` rebuilds
a finished run. Rows are padded on the left and the state resets at `DOC_START`, so every text
gets the result it would get alone (docs/transfer.md, "Fine-tuning").
"""

import dataclasses

import numpy as np

from tf_mlstm import rundir
from tf_mlstm.config import FinetuneConfig
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.classifier import predict_served_probabilities
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.rundir import FINETUNE_CONFIG_FILE

# Re-exported: the configuration lives in a module without TensorFlow, so
# that `tf-mlstm-finetune --help` and its flag checks answer at once.


@dataclasses.dataclass(frozen=True)
class FinetunedClassifier:
    """A finished fine-tuning run, ready to classify (see `load_finetuned_model`).

    Attributes:
      model: the float32 `MLSTMClassifier`; its `head_spec` holds kind, classes and thresholds.
      config: its `FinetuneConfig` (texts are read cut to its `max_length`).

    Example:
    >>> from tf_mlstm.models.classifier import MLSTMClassifier
    >>> from tf_mlstm.models.language_model import MLSTMLanguageModel
    >>> model = MLSTMClassifier(MLSTMLanguageModel.from_run(model_dir), 1, "mean")
    >>> tuned = FinetunedClassifier(model, FinetuneConfig(features="mean", max_length=16))
    >>> probabilities = tuned.predict_proba(["good", "bad"])
    >>> probabilities.shape, tuned.predict(probabilities).shape
    ((2, 2), (2,))
    >>> tuned.head.head_spec == model.head_spec, tuned.head.max_length
    (True, 16)
    """

    model: MLSTMClassifier
    config: FinetuneConfig

    def predict_proba(self, texts, batch_size=64, progress=False) -> np.ndarray:
        """[N, C] probabilities of normalized `texts`: C = 2 (binary), K classes or L labels."""
        return predict_served_probabilities(
            self.model, texts, self.config.max_length, batch_size, progress
        )

    def predict(self, probabilities) -> np.ndarray:
        """The predictions for `predict_proba`'s output: [N] classes, or [N, L] 0/1."""
        return self.model.head_spec.decide(probabilities)

    @property
    def head(self) -> ClassifierHead:
        """The fine-tuned head as the served `ClassifierHead` (identity standardization)."""
        model = self.model
        width = model.encoder.hidden_size * len(model.feature_kinds)
        hidden = {}
        if model.hidden_layer is not None:
            hidden = {
                "hidden_weights": model.hidden_layer.kernel.numpy().T,
                "hidden_bias": model.hidden_layer.bias.numpy(),
            }
        return ClassifierHead(
            feature_kinds=model.feature_kinds,
            mean=np.zeros(width, np.float32),
            scale=np.ones(width, np.float32),
            weights=model.classifier.kernel.numpy().T,
            bias=model.classifier.bias.numpy(),
            head_spec=model.head_spec,
            neuron=-1,
            max_length=self.config.max_length,
            **hidden,
        )


def load_finetuned_model(model_dir, precision="float32") -> FinetunedClassifier:
    """Rebuilds a fine-tuned classifier from its newest checkpoint.

    Args:
      model_dir: a `tf-mlstm-finetune` --model_dir.
      precision: the encoder's policy (float32, as `tf-mlstm-classify`; the head stays float32).

    Returns:
      A `FinetunedClassifier`.

    Raises:
      InvalidValueError: the folder holds no finished fine-tuning run.
      FileNotFoundError: it holds no checkpoint.
    """
    model = MLSTMClassifier.from_finetune_run(model_dir, precision=precision)
    config = rundir.read_config(model_dir, FinetuneConfig, FINETUNE_CONFIG_FILE)
    return FinetunedClassifier(model, config)
