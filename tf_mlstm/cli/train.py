r"""tf-mlstm-train: train a byte-level mLSTM language model.

With no flags it trains a small model on the embedded demo corpus (the
`flags/demo.flags` recipe), then prints validation bits/char and exports a
SavedModel, all under ./tf_mlstm_demo. Recipes: `--flagfile=flags/X.flags`.

  tf-mlstm-train --train_data=data/reviews --model_dir=runs/r1 \
      --hidden_size=4096 --batch_size=256

Precision and XLA default to `auto`: measured at start-up, a few steps of
each native setting at the run's shape, cached in the user's cache folder
(`tf_mlstm/train/autotune.py`; the table in `tf_mlstm/train/hardware.py` for
runs too short to measure); the run folder's config.json records the
concrete values and the rates.

Exit status: 0 done; 1 a bad flag or input, a peer worker's failure, or a
run that diverged (--max_nonfinite_steps non-finite steps in a row); 75 a
SIGTERM (preemption) stopped every worker at the same step after its
checkpoint, 130 Ctrl-C did: rerun the same command to resume. A second
Ctrl-C stops at once, without that checkpoint (also 130).
"""

from absl import flags

from tf_mlstm import config as config_lib
from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main

FLAGS = flags.FLAGS
_DEFAULTS = config_lib.TrainConfig()


def _default(name):
    return getattr(_DEFAULTS, name)


def define_data_flags():
    flags.DEFINE_string(
        "train_data",
        _default("train_data"),
        _flags.field_help(config_lib.TrainConfig, "train_data"),
    )
    flags.DEFINE_string(
        "validation_data",
        _default("validation_data"),
        _flags.field_help(config_lib.TrainConfig, "validation_data"),
    )
    flags.DEFINE_string(
        "model_dir",
        _default("model_dir"),
        _flags.field_help(config_lib.TrainConfig, "model_dir"),
    )
    flags.DEFINE_integer(
        "shuffle_buffer",
        _default("shuffle_buffer"),
        _flags.field_help(config_lib.TrainConfig, "shuffle_buffer"),
    )
    flags.DEFINE_string(
        "source_repeats",
        _default("source_repeats"),
        _flags.field_help(config_lib.TrainConfig, "source_repeats"),
    )


def define_model_flags():
    flags.DEFINE_integer(
        "hidden_size",
        _default("hidden_size"),
        _flags.field_help(config_lib.TrainConfig, "hidden_size"),
    )
    flags.DEFINE_integer(
        "embedding_size",
        _default("embedding_size"),
        _flags.field_help(config_lib.TrainConfig, "embedding_size"),
    )
    flags.DEFINE_boolean(
        "weight_norm",
        _default("weight_norm"),
        _flags.field_help(config_lib.TrainConfig, "weight_norm"),
    )


def define_optimization_flags():
    flags.DEFINE_integer(
        "seq_length",
        _default("seq_length"),
        _flags.field_help(config_lib.TrainConfig, "seq_length"),
    )
    flags.DEFINE_integer(
        "batch_size",
        _default("batch_size"),
        _flags.field_help(config_lib.TrainConfig, "batch_size"),
    )
    flags.DEFINE_enum(
        "lr_scaling",
        _default("lr_scaling"),
        list(config_lib.SCALINGS),
        _flags.field_help(config_lib.TrainConfig, "lr_scaling"),
    )
    flags.DEFINE_integer(
        "lr_base_batch",
        _default("lr_base_batch"),
        _flags.field_help(config_lib.TrainConfig, "lr_base_batch"),
    )
    flags.DEFINE_float(
        "max_lr", _default("max_lr"), _flags.field_help(config_lib.TrainConfig, "max_lr")
    )
    flags.DEFINE_integer(
        "total_steps",
        _default("total_steps"),
        _flags.field_help(config_lib.TrainConfig, "total_steps"),
    )


def define_budget_flags():
    flags.DEFINE_float(
        "epochs",
        _default("epochs"),
        _flags.field_help(config_lib.TrainConfig, "epochs"),
    )
    flags.DEFINE_integer(
        "eval_batches",
        _default("eval_batches"),
        _flags.field_help(config_lib.TrainConfig, "eval_batches"),
    )
    flags.DEFINE_integer(
        "sample_every_steps",
        _default("sample_every_steps"),
        _flags.field_help(config_lib.TrainConfig, "sample_every_steps"),
    )
    flags.DEFINE_integer(
        "sample_length",
        _default("sample_length"),
        _flags.field_help(config_lib.TrainConfig, "sample_length"),
    )
    flags.DEFINE_boolean(
        "export",
        _default("export"),
        _flags.field_help(config_lib.TrainConfig, "export"),
    )


def define_train_flags():
    """Defines every tf-mlstm-train flag."""
    define_data_flags()
    define_model_flags()
    define_optimization_flags()
    define_budget_flags()
    _flags.define_runner_flags(_DEFAULTS)


def check_before_work(flag_values):
    """The run folder, the data and a resume's model, before TensorFlow starts (`preflight`).

    A mistake here would otherwise be met after TensorFlow's start-up, the
    autotune measurement or the model's construction.
    """
    fv = flag_values
    preflight.check_output_dir("model_dir", fv.model_dir)
    preflight.check_folder_kind(
        fv.model_dir, "model_dir", "tf-mlstm-train", (None, preflight.LANGUAGE_MODEL_RUN)
    )
    preflight.check_not_in_use(fv.model_dir)
    preflight.check_input_files("train_data", fv.train_data, folders=True)
    preflight.check_input_files("validation_data", fv.validation_data, folders=True)
    preflight.check_resume_flags(
        fv, preflight.CONFIG_FILE, upgrade=config_lib.TrainConfig.upgrade_saved
    )


def main(config):
    """Trains, evaluates and exports; returns the results."""
    # Imported after flag parsing: TensorFlow start-up is slow and noisy.
    from tf_mlstm import api  # pylint: disable=g-import-not-at-top

    results = api.pretrain(config)
    if "validation_bits_per_char" in results:
        print(f"validation bits/char: {results['validation_bits_per_char']:.4f}")
    return results


def run():
    """Entry point of `tf-mlstm-train`."""
    _main.run_binary(__name__, define_train_flags, main, config_lib.TrainConfig)


if __name__ == "__main__":
    run()
