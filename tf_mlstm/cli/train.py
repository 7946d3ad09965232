r"""tf-mlstm-train: train a byte-level mLSTM language model.

  tf-mlstm-train --train_data=data/reviews --model_dir=runs/r1 \
      --hidden_size=4096 --batch_size=256

With no flags it trains a small model on the embedded demo corpus
(`flags/demo.flags`) under ./tf_mlstm_demo, then evaluates and exports it.
Recipes: `--flagfile=flags/X.flags`. Precision, XLA and `--hidden_size=auto`
are chosen by measuring at start-up (docs/performance.md, docs/scaling.md);
config.json records the values chosen.

Exit status: 0 done; 1 a bad flag or input, a peer worker's failure, or a
diverged run; 75 (SIGTERM) or 130 (Ctrl-C) after every worker checkpointed
the same step: rerun the same command to resume.
"""

from absl import flags

from tf_mlstm import config as config_lib
from tf_mlstm import preflight
from tf_mlstm.auto import law
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
    """The run folder, the data and a resume's model, before TensorFlow starts (`preflight`)."""
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
        law.load_law(fv.scaling_law)  # a bad law file: one line, before TensorFlow starts


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
