"""tf-mlstm-export: write a servable SavedModel of a trained model.

  tf-mlstm-export --model_dir=runs/r1 --export_dir=serving/mlstm/1
  tf-mlstm-export --model_dir=runs/r1 --export_dir=serving/mlstm/2 \
      --classifier=runs/r1/sst/classifier.json

The SavedModel has the signatures `featurize` (the default), `score` and
`generate`, and with `--classifier` also `classify` (standardization and the
logistic regression run in the graph). Every signature takes raw UTF-8 text
and normalizes it in the graph as training did; see docs/serving.md. The
model is exported in float32 whatever precision it trained in. The last line
printed is one JSON object: {"export_dir": ..., "signatures": [...]}.
"""

import dataclasses
import json
import sys

from absl import app
from absl import flags
from absl import logging

from tf_mlstm.cli._config import config_from_flags

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """What to export. Field names match the flags."""

    model_dir: str
    export_dir: str
    classifier: str = ""
    window: int = 256

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        if self.window <= 0:
            raise ValueError(f"--window must be positive, got {self.window}")
        return self


def define_export_flags():
    """Defines every tf-mlstm-export flag (all optional; `run` marks required ones)."""
    defaults = ExportConfig("", "")
    flags.DEFINE_string("model_dir", None, "A tf-mlstm-train (or tf-mlstm-finetune) --model_dir.")
    flags.DEFINE_string(
        "export_dir", None, "The SavedModel folder (replaced), e.g. serving/NAME/VERSION."
    )
    flags.DEFINE_string(
        "classifier",
        defaults.classifier,
        "A tf-mlstm-transfer classifier.json; adds the classify signature.",
    )
    flags.DEFINE_integer("window", defaults.window, "Bytes per model call inside the signatures.")


def export(config):
    """Exports the model (and classifier) of `config`.

    Args:
      config: a validated `ExportConfig`.

    Returns:
      The names of the exported signatures.

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: a classifier that does not fit the model.
    """
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top
    from tf_mlstm.export import saved_model  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import logistic  # pylint: disable=g-import-not-at-top

    head = None
    metadata = {}
    if config.classifier:
        classifier = logistic.LogisticClassifier.load(config.classifier)
        head = classifier.serving_head()
        kind, unit = classifier.describe(classifier.neuron.index)
        metadata["classifier"] = {
            "source": config.classifier,
            "feature_kinds": list(classifier.feature_kinds),
            "classes": list(classifier.classes),
            "C": classifier.C,
            "nonzero_weights": classifier.nonzero_weights,
            "neuron": {"index": classifier.neuron.index, "kind": kind, "unit": unit},
        }
    model, train_config = rundir.load_trained_model(config.model_dir)
    try:
        module = saved_model.ServingModule(model, window=config.window, classifier=head)
    except ValueError as e:
        raise ValueError(f"{config.classifier}: {e}") from e
    metadata["config"] = train_config.to_json()
    saved_model.export_saved_model(module, config.export_dir, metadata=metadata)
    return sorted(module.signatures())


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    config = config_from_flags(ExportConfig)
    try:
        signatures = export(config)
    except (OSError, ValueError) as e:
        logging.error("%s", e)
        sys.exit(1)
    print(json.dumps({"export_dir": config.export_dir, "signatures": signatures}))


def run():
    define_export_flags()
    flags.mark_flags_as_required(["model_dir", "export_dir"])
    app.run(main)


if __name__ == "__main__":
    run()
