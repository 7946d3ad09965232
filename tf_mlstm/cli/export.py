r"""tf-mlstm-export: write a servable, versioned SavedModel of a trained model.

  tf-mlstm-export --model_dir=runs/r1 --export_dir=serving/mlstm
  tf-mlstm-export --model_dir=runs/r1 --export_dir=serving/mlstm_sst \
      --classifier=runs/r1/sst/classifier.json
  tf-mlstm-export --model_dir=runs/r1_sst --export_dir=serving/mlstm_sst_tuned

The SavedModel goes to `EXPORT_DIR/<step>/` (the folder TensorFlow Serving
watches), renamed in when whole; a folder holding anything else is refused.
Its signatures are `featurize` (the default), `score` and `generate`, plus
`classify` with `--classifier` or for a fine-tuned `--model_dir`; each takes
raw UTF-8 text. The model is exported in float32, or in the precision the
classifier was fitted in (`--precision` overrides). The last line printed is
{"export_dir": <the version folder>, "version": ..., "signatures": [...]}.
Details: docs/serving.md.
"""

from absl import flags

from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config import choices
from tf_mlstm.config.binaries import ExportConfig

FLAGS = flags.FLAGS


_REQUIRED = ("model_dir", "export_dir")
"""The flags without which the binary does not start."""


def define_export_flags() -> None:
    """Defines every tf-mlstm-export flag from `ExportConfig` (`run` marks required ones)."""
    defaults = ExportConfig(model_dir="", export_dir="")
    _flags.define_fields(
        defaults,
        (
            "model_dir",
            "export_dir",
            "classifier",
            "window",
            "max_text_bytes",
            "max_generate_length",
            "precision",
            "allow_other_model",
        ),
        choices={"precision": choices.PRECISION_CHOICES},
        no_default=_REQUIRED,
    )


def check_before_work(flag_values) -> None:
    """The model, the classifier and the export folder, before TensorFlow starts (`preflight`)."""
    fv = flag_values
    preflight.check_trained_model(fv.model_dir)
    preflight.check_input_file("classifier", fv.classifier, "classifier file")
    preflight.check_output_dir("export_dir", fv.export_dir)


def export(config) -> dict:
    """Exports the model (and classifier) of `config`: `tf_mlstm.serving.export.export`."""
    from tf_mlstm.serving import export as export_lib  # pylint: disable=g-import-not-at-top

    return export_lib.export(config)


def run() -> None:
    """Entry point of `tf-mlstm-export`."""
    _main.run_binary(__name__, define_export_flags, export, ExportConfig, required=list(_REQUIRED))


if __name__ == "__main__":
    run()
