"""Exporting a run: the head it serves, the metadata beside it, the SavedModel.

The `classify` head is a classifier.json's or a fine-tuned run's own (a `ClassifierHead`
either way, described in meta.json).
"""

import os

from tf_mlstm import errors
from tf_mlstm import rundir
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
      dict: `export_dir` (the version folder), `version`, `signatures` (sorted names).

    Raises:
      FileNotFoundError: a missing model or classifier.
      ValueError: `export_dir` holds something not written here, or a classifier that does not fit.
    """
    try:
        # Before anything is loaded: a wrong folder is answered at once.
        saved_model.check_export_base(config.export_dir)
        head, metadata, model = None, {}, None
        if config.classifier:
            classifier = logistic.LogisticClassifier.load(config.classifier)
            head, metadata["classifier"] = probe_head(classifier, config.classifier)
        # float32 unless asked: the precision every server CPU runs at speed.
        precision = features.resolve_precision(config.precision or "float32")
        if not config.classifier and rundir.is_finetune_run(config.model_dir):
            tuned = finetune.load_finetuned_model(config.model_dir, precision)
            head, metadata["classifier"] = fine_tuned_head(tuned, config.model_dir)
            model = tuned.model.encoder  # the run loaded once: its encoder is exported
        return saved_model.export_trained_model(
            config.model_dir,
            config.export_dir,
            classifier=head,
            window=config.window,
            max_text_bytes=config.max_text_bytes,
            max_generate_length=config.max_generate_length,
            metadata=metadata,
            precision=precision,
            allow_other_model=config.allow_other_model,
            model=model,
        )
    except saved_model.ExportDirError as e:
        raise errors.InvalidValueError(f"{errors.setting_name('export_dir')}={e}") from None
    except ValueError as e:
        if config.classifier and str(e).startswith("classifier "):
            raise errors.InvalidValueError(f"{config.classifier}: {e}") from e
        raise


def fine_tuned_head(tuned, source: str) -> tuple[ClassifierHead, dict]:
    """(`ClassifierHead`, its metadata) of a loaded `FinetunedClassifier` of run `source`."""
    config = tuned.config
    metadata = {
        "fine_tuned": True,
        "head_hidden": config.head_hidden,
        "max_length": config.max_length,
    }
    head = tuned.head
    return head, _metadata(head, source, metadata)


def probe_head(classifier, source: str) -> tuple[ClassifierHead, dict]:
    """(`ClassifierHead`, its metadata) of a `LogisticClassifier` read from `source`."""
    metadata = {"C": classifier.report.C, "nonzero_weights": classifier.nonzero_weights}
    if classifier.head.binary and classifier.report.neurons:
        kind, unit = classifier.describe(classifier.neuron.index)
        metadata["neuron"] = {"index": classifier.neuron.index, "kind": kind, "unit": unit}
    return classifier.head, _metadata(classifier.head, source, metadata)


def _metadata(head, source, fitted):
    """meta.json's "classifier": source, kind, features, classes, thresholds, and `fitted`."""
    spec = head.head_spec
    metadata = {
        "source": os.path.basename(os.path.normpath(source)),
        "task": spec.kind,
        "feature_kinds": list(head.feature_kinds),
        "classes": list(spec.classes),
        **fitted,
    }
    if spec.thresholds:
        metadata["thresholds"] = [float(t) for t in spec.thresholds]
    return metadata
