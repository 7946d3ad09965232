"""Exporting a run: the head it serves, the metadata beside it, the SavedModel.

What `tf-mlstm-export` and `tf_mlstm.export` do with an `ExportConfig`: the
`classify` head is a `tf-mlstm-transfer` classifier.json (`--classifier`), or
a fine-tuned run's own head (a `tf-mlstm-finetune` run without one), turned
into the plain arrays `serving.saved_model` serves; what was fitted is
recorded in the export's meta.json under "classifier"; the model and the
signatures are `saved_model.export_trained_model`.
"""

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.models.head import BINARY
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.serving import saved_model
from tf_mlstm.transfer import features
from tf_mlstm.transfer import finetune
from tf_mlstm.transfer.probe import logistic


def export(config) -> dict:
    """Exports the model (and classifier) of `config` as a new version.

    Args:
      config: a validated `ExportConfig`.

    Returns:
      dict with `export_dir` (the version folder written), `version` and
      `signatures` (the exported signature names, sorted).

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: `export_dir` holds something this tool did not write, or a
        classifier does not fit the model.
    """
    try:
        # Before anything is loaded: a wrong folder is answered at once.
        saved_model.check_export_base(config.export_dir)
        head, metadata, precision = None, {}, config.precision or "float32"
        if not config.classifier and rundir.is_finetune_run(config.model_dir):
            head, metadata["classifier"] = fine_tuned_head(config.model_dir)
        elif config.classifier:
            classifier = logistic.LogisticClassifier.load(config.classifier)
            head, metadata["classifier"] = probe_head(classifier, config.classifier)
            # Served as it was fitted, unless asked otherwise.
            precision = config.precision or classifier.precision or "float32"
        return saved_model.export_trained_model(
            config.model_dir,
            config.export_dir,
            classifier=head,
            window=config.window,
            max_text_bytes=config.max_text_bytes,
            max_generate_length=config.max_generate_length,
            metadata=metadata,
            precision=features.resolve_precision(precision),
            allow_other_model=config.allow_other_model,
        )
    except saved_model.ExportDirError as e:
        raise errors.InvalidValueError(f"{errors.setting_name('export_dir')}={e}") from None
    except ValueError as e:
        if config.classifier and str(e).startswith("classifier "):
            raise errors.InvalidValueError(f"{config.classifier}: {e}") from e
        raise


def fine_tuned_head(model_dir: str) -> tuple[ClassifierHead, dict]:
    """(`ClassifierHead`, its metadata) of a finished `tf-mlstm-finetune` run."""
    tuned = finetune.load_finetuned_model(model_dir)
    head = ClassifierHead(**tuned.serving_head_arrays())
    metadata = {
        "source": model_dir,
        "task": tuned.kind,
        "fine_tuned": True,
        "feature_kinds": list(tuned.model.feature_kinds),
        "classes": list(tuned.classes),
        "head_hidden": tuned.config.head_hidden,
        "max_length": tuned.config.max_length,
    }
    if tuned.thresholds is not None:
        metadata["thresholds"] = tuned.thresholds.tolist()
    return head, metadata


def probe_head(classifier, source: str) -> tuple[ClassifierHead, dict]:
    """(`ClassifierHead`, its metadata) of a `LogisticClassifier` read from `source`."""
    head = classifier.serving_head()
    metadata = {
        "source": source,
        "task": classifier.kind,
        "feature_kinds": list(classifier.feature_kinds),
        "classes": list(classifier.classes),
        "C": classifier.C,
        "nonzero_weights": classifier.nonzero_weights,
    }
    if classifier.kind == BINARY and classifier.neurons:
        kind, unit = classifier.describe(classifier.neuron.index)
        metadata["neuron"] = {"index": classifier.neuron.index, "kind": kind, "unit": unit}
    if classifier.multilabel:
        metadata["thresholds"] = list(classifier.thresholds)
    return head, metadata
