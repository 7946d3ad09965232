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
from tf_mlstm.models.classifier import predict_probabilities
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head import MULTICLASS
from tf_mlstm.models.head import MULTILABEL
from tf_mlstm.models.head import HeadSpec
from tf_mlstm.rundir import FINETUNE_CONFIG_FILE
from tf_mlstm.tasks.finetune import FinetuneTask
from tf_mlstm.train.runner import Runner

# Re-exported: the configuration lives in a module without TensorFlow, so
# that `tf-mlstm-finetune --help` and its flag checks answer at once.
THRESHOLD_METRICS = settings.THRESHOLD_METRICS
FinetuneConfig = settings.FinetuneConfig


def finetune(config):
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

    Attributes:
      model: the float32 `MLSTMClassifier`.
      config: its `FinetuneConfig`.
      kind: BINARY, MULTICLASS or MULTILABEL.
      classes: the probability columns' names: for MULTICLASS the K classes,
        for MULTILABEL the label keys, for BINARY the classes (0, 1).
      thresholds: [K] float32 sigmoid thresholds (BINARY: one), or None
        for MULTICLASS.
    """

    model: MLSTMClassifier
    config: FinetuneConfig
    kind: str
    classes: tuple
    thresholds: np.ndarray | None

    def predict_proba(self, texts, batch_size=64, progress=False):
        """[N, C] probabilities of normalized `texts`: C = 2 for BINARY (negative,
        positive), the K classes' softmax, or the L labels' sigmoids."""
        outputs = predict_probabilities(
            self.model, texts, self.config.max_length, batch_size, progress
        )
        if self.kind == BINARY:
            outputs = np.concatenate([1.0 - outputs, outputs], axis=1)
        return outputs

    @property
    def head(self):
        """The `models.head.HeadSpec`: how the probabilities become decisions."""
        thresholds = () if self.thresholds is None else tuple(self.thresholds.tolist())
        return HeadSpec(self.kind, self.classes, thresholds)

    def predict(self, probabilities):
        """The predictions for `predict_proba`'s output: [N] classes, or [N, L] 0/1."""
        return self.head.decide(probabilities)

    def serving_head_arrays(self):
        """The head as the fields of an `models.head_arrays.ClassifierHead`.

        The features are the fine-tuned ones unstandardized (mean 0, scale 1),
        read from each text's first `max_length` framed bytes as in training.
        """
        width = self.model.encoder.hidden_size * len(self.model.feature_kinds)
        fields = {
            "feature_kinds": self.model.feature_kinds,
            "mean": np.zeros(width, np.float32),
            "scale": np.ones(width, np.float32),
            "weights": self.model.classifier.kernel.numpy().T,
            "bias": self.model.classifier.bias.numpy(),
            "classes": tuple(self.classes),
            "neuron": -1,
            "multilabel": self.kind == MULTILABEL,
            "thresholds": () if self.thresholds is None else tuple(self.thresholds.tolist()),
            "max_length": self.config.max_length,
        }
        if self.model.hidden_layer is not None:
            fields["hidden_weights"] = self.model.hidden_layer.kernel.numpy().T
            fields["hidden_bias"] = self.model.hidden_layer.bias.numpy()
        return fields


def load_finetuned_model(model_dir):
    """Rebuilds a fine-tuned classifier in float32 from its newest checkpoint.

    Args:
      model_dir: a `tf-mlstm-finetune` --model_dir.

    Returns:
      A `FinetunedClassifier`.

    Raises:
      InvalidValueError: the folder holds no finished fine-tuning run.
      FileNotFoundError: it holds no checkpoint.
    """
    model = MLSTMClassifier.from_finetune_run(model_dir)
    config = rundir.read_config(model_dir, FinetuneConfig, FINETUNE_CONFIG_FILE)
    spec = model.head_spec
    thresholds = np.array(spec.thresholds, np.float32) if spec.kind != MULTICLASS else None
    return FinetunedClassifier(model, config, spec.kind, spec.classes, thresholds)
