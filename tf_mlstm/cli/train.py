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
concrete values and the rates. `--hidden_size=auto` chooses the model's size
for the budget the same way (`tf_mlstm/train/autosize.py`): each of
--size_candidates timed, the scaling law's prediction at the end of the
budget, one log line; the run folder records the size and a resume keeps it.
It picks the lowest predicted bits/char, or with --optimize_for=transfer the
widest size predicted within 0.15 bits/char of that (wider features transfer
better: docs/scaling.md).

Exit status: 0 done; 1 a bad flag or input, a peer worker's failure, or a
run that diverged (--max_nonfinite_steps non-finite steps in a row); 75 a
SIGTERM (preemption) stopped every worker at the same step after its
checkpoint, 130 Ctrl-C did: rerun the same command to resume. A second
Ctrl-C stops at once, without that checkpoint (also 130).
"""

from absl import flags

from tf_mlstm import config as config_lib
from tf_mlstm import preflight
from tf_mlstm import sizing
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.train import stop_signals

FLAGS = flags.FLAGS
_DEFAULTS = config_lib.TrainConfig()


def define_data_flags() -> None:
    _flags.define_fields(
        _DEFAULTS,
        ("train_data", "validation_data", "model_dir", "shuffle_buffer", "source_repeats"),
    )


def define_model_flags() -> None:
    _flags.define_fields(
        _DEFAULTS,
        (
            "hidden_size",
            "size_candidates",
            "optimize_for",
            "scaling_law",
            "embedding_size",
            "weight_norm",
        ),
        choices={"optimize_for": config_lib.OPTIMIZE_FOR},
    )


def define_optimization_flags() -> None:
    _flags.define_fields(
        _DEFAULTS,
        ("seq_length", "batch_size", "lr_scaling", "lr_base_batch", "max_lr", "total_steps"),
        choices={"lr_scaling": config_lib.SCALINGS},
    )


def define_budget_flags() -> None:
    _flags.define_fields(
        _DEFAULTS, ("epochs", "eval_batches", "sample_every_steps", "sample_length", "export")
    )


def define_train_flags() -> None:
    """Defines every tf-mlstm-train flag."""
    define_data_flags()
    define_model_flags()
    define_optimization_flags()
    define_budget_flags()
    _flags.define_runner_flags(_DEFAULTS)


def check_before_work(flag_values) -> None:
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
    if fv.hidden_size == config_lib.AUTO:
        sizing.load_law(fv.scaling_law)  # a bad law file: one line, before TensorFlow starts


def main(config) -> dict:
    """Trains, evaluates and exports; returns the results."""
    # Imported after flag parsing: TensorFlow start-up is slow and noisy.
    from tf_mlstm import api  # pylint: disable=g-import-not-at-top

    results = api.pretrain(config)
    if "validation_bits_per_char" in results:
        print(f"validation bits/char: {results['validation_bits_per_char']:.4f}")
    return results


def run() -> None:
    """Entry point of `tf-mlstm-train`."""
    stop_signals.stop_until_training()
    _main.run_binary(__name__, define_train_flags, main, config_lib.TrainConfig)


if __name__ == "__main__":
    run()
