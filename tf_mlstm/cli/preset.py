r"""tf-mlstm-preset: write a trained model as a preset folder that loads without its run.

  tf-mlstm-preset --model_dir=runs/r1 --preset_dir=presets/r1
  tf-mlstm-preset --model_dir=runs/r1 --preset_dir=presets/r1_sst \
      --classifier=runs/r1/sst/classifier.json
  tf-mlstm-preset --model_dir=runs/r1_sst --preset_dir=presets/r1_sst_tuned

A preset is keras-hub's layout: config.json (the Keras model), preprocessor.json,
model.weights.h5 (the newest intact checkpoint's weights, one file) and metadata.json
(tf_mlstm, TensorFlow and Keras versions, the training data, held-out bits/char, the
weights' SHA-256), plus the classifier.json of a linear probe (`--classifier`). A
fine-tuned `--model_dir` gives the fine-tuned classifier's preset. In Python,
tf_mlstm.load(PRESET_DIR) loads it (docs/python.md, "Presets"). The folder is written
beside PRESET_DIR and renamed in whole; one that holds anything is refused unless
--overwrite. The last line printed is the metadata's summary:
{"preset_dir": ..., "kind": ..., "weights_sha256": ..., ...}.
"""

from absl import flags

from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config.binaries import PresetConfig

FLAGS = flags.FLAGS


_REQUIRED = ("model_dir", "preset_dir")
"""The flags without which the binary does not start."""


def define_preset_flags() -> None:
    """Defines every tf-mlstm-preset flag from `PresetConfig` (`run` marks required ones)."""
    defaults = PresetConfig(model_dir="", preset_dir="")
    _flags.define_fields(
        defaults, ("model_dir", "preset_dir", "classifier", "overwrite"), no_default=_REQUIRED
    )


def check_before_work(flag_values) -> None:
    """The run, the classifier and the preset folder, before TensorFlow starts (`preflight`)."""
    fv = flag_values
    preflight.check_trained_model(fv.model_dir)
    preflight.check_input_file("classifier", fv.classifier, "classifier file")
    preflight.check_output_dir("preset_dir", fv.preset_dir)
    preflight.check_folder_kind(
        fv.preset_dir, "preset_dir", "tf-mlstm-preset", (None, preflight.PRESET)
    )
    preflight.refuse_existing("--preset_dir", fv.preset_dir, fv.overwrite)


def write(config) -> dict:
    """Loads the run (and classifier) of `config` and writes its preset; returns a summary."""
    from tf_mlstm import api  # pylint: disable=g-import-not-at-top

    # float32: the weights are float32 under every policy, and the preset loads in any.
    trained = api.load(config.model_dir, classifier=config.classifier, precision="float32")
    metadata = trained.save_to_preset(config.preset_dir, config.overwrite)
    summary = {"preset_dir": config.preset_dir}
    for key in ("kind", "class_name", "parameter_count", "weights_sha256", "source"):
        summary[key] = metadata.get(key)
    return summary


def run() -> None:
    """Entry point of `tf-mlstm-preset`."""
    _main.run_binary(__name__, define_preset_flags, write, PresetConfig, required=list(_REQUIRED))


if __name__ == "__main__":
    run()
