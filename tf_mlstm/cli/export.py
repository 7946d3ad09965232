r"""tf-mlstm-export: write a servable, versioned SavedModel of a trained model.

  tf-mlstm-export --model_dir=runs/r1 --export_dir=serving/mlstm
  tf-mlstm-export --model_dir=runs/r1 --export_dir=serving/mlstm_sst \
      --classifier=runs/r1/sst/classifier.json
  tf-mlstm-export --model_dir=runs/r1_sst --export_dir=serving/mlstm_sst_tuned

`--export_dir` is the folder TensorFlow Serving is pointed at: the SavedModel
goes to `EXPORT_DIR/<step>/`, the version being the global step of the
checkpoint exported, so a later checkpoint becomes a newer version. It is
written beside its final place and renamed in; an export of the same step is
replaced. A folder holding anything else (a model folder, `.`) is refused,
never emptied.

The SavedModel has the signatures `featurize` (the default), `score` and
`generate`, and with `--classifier` also `classify` (standardization and the
logistic regression run in the graph). A finished `tf-mlstm-finetune` run
given as `--model_dir` without `--classifier` gets the `classify` of its
fine-tuned head (its classes or labels, and the thresholds chosen on its
validation data; each text's first `--max_length` bytes, as in fine-tuning).
Every signature takes raw UTF-8 text and normalizes it in the graph as
training did; requests beyond
`--max_text_bytes` or `--max_generate_length` fail with InvalidArgument (see
docs/serving.md). The model is exported in float32 whatever precision it
trained in, or with `--classifier` in the precision the classifier's features
were fitted in (`--precision` overrides either); a classifier fitted on other
model weights than those of `--model_dir` is refused (classifier.json records
their fingerprint) unless `--allow_other_model`. The last line printed is one
JSON object:
{"export_dir": <the version folder>, "version": ..., "signatures": [...]}.
"""

import dataclasses

from absl import flags

from tf_mlstm import errors
from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """What to export. Field names match the flags."""

    model_dir: str
    export_dir: str
    classifier: str = ""
    window: int = 256
    # The same as tf_mlstm.export.saved_model.DEFAULT_MAX_* (not imported here:
    # TensorFlow loads only after the flags parsed).
    max_text_bytes: int = 65536
    max_generate_length: int = 4096
    precision: str | None = None  # None: the classifier's (float32 without one)
    allow_other_model: bool = False

    def validate(self):
        """Raises ValueError with one clear line for a bad value; returns self."""
        for name in ("window", "max_text_bytes", "max_generate_length"):
            value = getattr(self, name)
            if value <= 0:
                raise errors.InvalidValueError(f"--{name} must be positive, got {value}")
        return self


def define_export_flags():
    """Defines every tf-mlstm-export flag (all optional; `run` marks required ones)."""
    defaults = ExportConfig("", "")
    flags.DEFINE_string("model_dir", None, "A tf-mlstm-train (or tf-mlstm-finetune) --model_dir.")
    flags.DEFINE_string(
        "export_dir",
        None,
        "The folder of SavedModel versions, e.g. serving/NAME: the export goes to "
        "EXPORT_DIR/<checkpoint step>. Must be new, empty or hold only earlier exports.",
    )
    flags.DEFINE_string(
        "classifier",
        defaults.classifier,
        "A tf-mlstm-transfer classifier.json; adds the classify signature (a "
        "tf-mlstm-finetune --model_dir has its own without this flag).",
    )
    flags.DEFINE_integer("window", defaults.window, "Bytes per model call inside the signatures.")
    flags.DEFINE_integer(
        "max_text_bytes",
        defaults.max_text_bytes,
        "Longest text or prompt (UTF-8 bytes) a request may hold; longer ones are refused.",
    )
    flags.DEFINE_integer(
        "max_generate_length",
        defaults.max_generate_length,
        "Largest length the generate signature accepts; larger requests are refused.",
    )
    _flags.define_feature_precision(
        defaults.precision,
        " Unset: with --classifier, the precision its features were fitted in (recorded in "
        "classifier.json), else float32. 'auto' decides by this machine, not the server's.",
    )
    _flags.define_allow_other_model()


def check_before_work(flag_values):
    """The model, the classifier and the export folder, before TensorFlow starts (`preflight`)."""
    fv = flag_values
    preflight.check_trained_model(fv.model_dir)
    preflight.check_input_file("classifier", fv.classifier, "classifier file")
    preflight.check_output_dir("export_dir", fv.export_dir)


def export(config):
    """Exports the model (and classifier) of `config` as a new version.

    Args:
      config: a validated `ExportConfig`.

    Returns:
      dict with `export_dir` (the version folder written), `version` and
      `signatures` (the exported signature names, sorted).

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: `--export_dir` holds something this tool did not write, or a
        classifier does not fit the model.
    """
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top
    from tf_mlstm.export import saved_model  # pylint: disable=g-import-not-at-top
    from tf_mlstm.models.head_arrays import ClassifierHead  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import finetune  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer.probe import logistic  # pylint: disable=g-import-not-at-top

    try:
        # Before anything is loaded: a wrong folder is answered at once.
        saved_model.check_export_base(config.export_dir)
        head = None
        metadata = {}
        precision = config.precision or "float32"
        if not config.classifier and rundir.is_finetune_run(config.model_dir):
            tuned = finetune.load_finetuned_model(config.model_dir)
            head = ClassifierHead(**tuned.serving_head_arrays())
            metadata["classifier"] = {
                "source": config.model_dir,
                "task": tuned.kind,
                "fine_tuned": True,
                "feature_kinds": list(tuned.model.feature_kinds),
                "classes": list(tuned.classes),
                "head_hidden": tuned.config.head_hidden,
                "max_length": tuned.config.max_length,
            }
            if tuned.thresholds is not None:
                metadata["classifier"]["thresholds"] = tuned.thresholds.tolist()
        elif config.classifier:
            classifier = logistic.LogisticClassifier.load(config.classifier)
            head = classifier.serving_head()
            # Served as it was fitted, unless asked otherwise.
            precision = config.precision or classifier.precision or "float32"
            metadata["classifier"] = {
                "source": config.classifier,
                "task": classifier.kind,
                "feature_kinds": list(classifier.feature_kinds),
                "classes": list(classifier.classes),
                "C": classifier.C,
                "nonzero_weights": classifier.nonzero_weights,
            }
            if classifier.kind == "binary" and classifier.neurons:
                kind, unit = classifier.describe(classifier.neuron.index)
                neuron = {"index": classifier.neuron.index, "kind": kind, "unit": unit}
                metadata["classifier"]["neuron"] = neuron
            if classifier.multilabel:
                metadata["classifier"]["thresholds"] = list(classifier.thresholds)
        return saved_model.export_trained_model(
            config.model_dir,
            config.export_dir,
            classifier=head,
            window=config.window,
            max_text_bytes=config.max_text_bytes,
            max_generate_length=config.max_generate_length,
            metadata=metadata,
            precision=_flags.resolve_feature_precision(precision),
            allow_other_model=config.allow_other_model,
        )
    except saved_model.ExportDirError as e:
        raise errors.InvalidValueError(f"--export_dir={e}") from None
    except ValueError as e:
        if config.classifier and str(e).startswith("classifier "):
            raise errors.InvalidValueError(f"{config.classifier}: {e}") from e
        raise


def run():
    """Entry point of `tf-mlstm-export`."""
    _main.run_binary(
        __name__, define_export_flags, export, ExportConfig, required=["model_dir", "export_dir"]
    )


if __name__ == "__main__":
    run()
