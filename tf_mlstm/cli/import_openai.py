r"""tf-mlstm-import-openai: OpenAI's released byte mLSTM as a tf_mlstm run folder.

  tf-mlstm-import-openai \
      --weights_dir=generating-reviews-discovering-sentiment/model \
      --model_dir=runs/openai
  tf-mlstm-transfer --model_dir=runs/openai --output_dir=runs/openai/sst ...

Checks the release's 15 arrays (`0.npy` .. `14.npy`; Radford et al. 2017,
4096 units) against its layout, maps them onto `MLSTMLanguageModel`
(`tf_mlstm.models.openai_weights`) and writes config.json and a checkpoint
to `--model_dir`, which every tool then loads. Prints one JSON line with the
folder and the model's sizes.
"""

from absl import flags

from tf_mlstm import errors
from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config.binaries import ImportConfig

FLAGS = flags.FLAGS


_REQUIRED = ("weights_dir", "model_dir")
"""The flags without which the binary does not start."""


def define_import_flags() -> None:
    """Defines every tf-mlstm-import-openai flag from `ImportConfig` (both required)."""
    defaults = ImportConfig(weights_dir="", model_dir="")
    _flags.define_fields(defaults, ("weights_dir", "model_dir"), no_default=_REQUIRED)


def check_before_work(flag_values) -> None:
    """The release's folder and the new run folder, before TensorFlow starts (`preflight`)."""
    fv = flag_values
    if fv.weights_dir and not preflight.isdir(fv.weights_dir):
        raise errors.MissingFileError(
            f"{fv.weights_dir}: no such folder (want the release's model/)"
        )
    if fv.model_dir:
        preflight.check_output_dir("model_dir", fv.model_dir)
        # A finished import is refused with the folder's kind; a killed one is redone there.
        preflight.check_folder_kind(fv.model_dir, "model_dir", "tf-mlstm-import-openai", (None,))


def main(config) -> dict:
    """Converts the arrays; returns the summary."""
    from tf_mlstm import api  # pylint: disable=g-import-not-at-top

    return api.import_openai_weights(config.weights_dir, config.model_dir)


def run() -> None:
    """Entry point of `tf-mlstm-import-openai`."""
    _main.run_binary(__name__, define_import_flags, main, ImportConfig, required=list(_REQUIRED))


if __name__ == "__main__":
    run()
