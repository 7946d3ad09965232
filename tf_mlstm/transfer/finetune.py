"""Fine-tuning the mLSTM end to end with a classifier head (`tf-mlstm-finetune`).

A `MLSTMClassifier` puts a float32 dense head on features of a trained
language model (`tf-mlstm-train` --model_dir) and trains both, the encoder
unfrozen, on labeled text:

- targets are binary (one label key of 0/1 labels), K classes (one label
  key of other values, or the classes of a label map: a softmax and its
  cross-entropy) or multi-label (several keys, each a 0/1 label): a sigmoid
  per label and binary cross-entropy, averaged over labels;
- the head is linear, or one ReLU hidden layer (`head_hidden` units) and the
  output layer, with optional dropout before the output layer in training;
- features: the final cell or hidden state (`cell`, as in Radford et al.
  2017, or `hidden`) and statistics of the hidden state over the text
  (`mean`, `max`, `min`, `std`), one kind or several concatenated, with the
  definitions of `tf_mlstm.models.featurize` (so a served head reads the same
  numbers);
- the head starts random, or (`head_init="probe"`, a linear head) as the
  logistic regression fitted on the starting model's features of the
  training texts, its C chosen on validation: linear probing, then
  fine-tuning (Kumar et al. 2022), so the first steps do not spend the
  encoder's features on fitting a random head;
- an optional auxiliary language-model loss (`lm_loss_weight` times the mean
  next-byte cross-entropy of each text) keeps the encoder a language model;
- after training, one threshold per sigmoid label is chosen on the
  validation split (maximizing accuracy or F1), and accuracy and F1 (with
  per-label F1 for multi-label) are reported on validation and test; a K-class
  task predicts its most probable class and reports accuracy, macro F1 and
  per-class precision, recall and F1.

The labeled data is read, held out, scored and thresholded by
`tf_mlstm.transfer.labeled`, as for `tf-mlstm-transfer`.

Padding: rows are padded on the left, so a row reads
`[pad ... pad, DOC_START, text bytes]`. The model resets its state at
`DOC_START`, so the padding cannot reach the features or the loss (the mean
and the language-model loss are masked to the text), and the training path
(the mLSTM's sequence gradient, which takes no padding mask) gives every text
exactly the result it would get alone.

Distribution, checkpoints and fault handling are the language model's:
`FinetuneTask` (`tf_mlstm.tasks.finetune`) is a task of
`tf_mlstm.train.runner`, which owns the strategy, the all-reduced step (loss
scaling under `mixed_float16`, optional float16 all-reduce), the time
budget, a peer worker's failure, TensorBoard summaries (`train/`,
`validation/`), skipped steps and an exact resume (the input position is
saved per worker). The output folder holds `checkpoints/` (the
encoder as `model`, so `MLSTMLanguageModel.from_run` and the other tools read a
fine-tuned encoder too, plus the head's `classifier` and `head_hidden`,
optimizer and step; head dropout draws from a stateless generator seeded by the
step and replica, so a resumed run drops what an uninterrupted one would),
`input_state/`, the base model's `config.json`,
`finetune_config.json` and `results.json`.
"""

import dataclasses

import numpy as np

from tf_mlstm import config as settings
from tf_mlstm import rundir
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.classifier import predict_served_probabilities
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.rundir import FINETUNE_CONFIG_FILE
from tf_mlstm.tasks.finetune import FinetuneTask
from tf_mlstm.train.runner import Runner

# Re-exported: the configuration lives in a module without TensorFlow, so
# that `tf-mlstm-finetune --help` and its flag checks answer at once.
THRESHOLD_METRICS = settings.THRESHOLD_METRICS
FinetuneConfig = settings.FinetuneConfig


def finetune(config) -> dict:
    """Fine-tunes per `config`; returns the results dict (see `Runner.train`).

    The runner checks the inputs first (a missing one is the only line on
    screen), then resolves `auto` precision and XLA: measured on the chief
    with `FinetuneTask.measurement` where the run can afford it, else by the
    hardware table; an existing run keeps the precision it started in.
    """
    return Runner(FinetuneTask(config), config).train()


@dataclasses.dataclass(frozen=True)
class FinetunedClassifier:
    """A finished fine-tuning run, ready to classify (see `load_finetuned_model`).

    What it classifies with is the model's: the kind, classes and thresholds
    of `model.head_spec`, the weights of its head layers (`head`, the same
    `ClassifierHead` a logistic probe gives, as the SavedModel serves it).

    Attributes:
      model: the float32 `MLSTMClassifier`.
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
        """[N, C] probabilities of normalized `texts` (`HeadSpec.probabilities_tf`): C = 2
        for binary (negative, positive), the K classes' softmax, or the L labels' sigmoids."""
        return predict_served_probabilities(
            self.model, texts, self.config.max_length, batch_size, progress
        )

    def predict(self, probabilities) -> np.ndarray:
        """The predictions for `predict_proba`'s output: [N] classes, or [N, L] 0/1."""
        return self.model.head_spec.decide(probabilities)

    @property
    def head(self) -> ClassifierHead:
        """The fine-tuned head as a `models.head_arrays.ClassifierHead`, as it is served.

        The features are the fine-tuned ones unstandardized (mean 0, scale 1),
        read from each text's first `max_length` framed bytes as in training.
        """
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
      precision: the policy its encoder computes in (float32: what
        `tf-mlstm-classify` uses; the head stays float32).

    Returns:
      A `FinetunedClassifier`.

    Raises:
      InvalidValueError: the folder holds no finished fine-tuning run.
      FileNotFoundError: it holds no checkpoint.
    """
    model = MLSTMClassifier.from_finetune_run(model_dir, precision=precision)
    config = rundir.read_config(model_dir, FinetuneConfig, FINETUNE_CONFIG_FILE)
    return FinetunedClassifier(model, config)
