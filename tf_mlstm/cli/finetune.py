r"""tf-mlstm-finetune: fine-tune a trained mLSTM end to end as a text classifier.

  tf-mlstm-finetune --init_model_dir=runs/r1 --model_dir=runs/r1_sst \
      --train_data=sst/train.csv --validation_data=sst/val.csv \
      --test_data=sst/test.csv --text_key=sentence --label_key=label
  tf-mlstm-finetune ... --label_key=funny,useful,spoiler        # multi-label
  tf-mlstm-finetune ... --label_key=stars \
      --label_map=1:neg,2:neg,3:neutral,4:pos,5:pos --head_hidden=256   # 3 classes

A head on `--features` of the text trains with the encoder unfrozen
(`--head_init=probe`: started as the logistic regression, then fine-tuned).
The labels decide the task: binary, K classes or multi-label, each sigmoid's
threshold chosen on validation. It runs on `tf-mlstm-train`'s runner, with
its distribution and precision flags, time budget and exit statuses (75 or
130 after a checkpoint: rerun to resume). Writes checkpoints,
`finetune_config.json` and `results.json` to `--model_dir` and prints the
results. Details: docs/transfer.md.
"""

from absl import flags

from tf_mlstm import config as finetune_lib
from tf_mlstm import preflight
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.train import stop_signals

FLAGS = flags.FLAGS
_DEFAULTS = finetune_lib.FinetuneConfig()


def define_finetune_flags() -> None:
    """Defines every tf-mlstm-finetune flag (all optional; `run` marks required ones)."""
    flags.DEFINE_string(
        "init_model_dir", None, _flags.field_help(finetune_lib.FinetuneConfig, "init_model_dir")
    )
    flags.DEFINE_string(
        "model_dir", None, _flags.field_help(finetune_lib.FinetuneConfig, "model_dir")
    )
    flags.DEFINE_string(
        "train_data", None, _flags.field_help(finetune_lib.FinetuneConfig, "train_data")
    )
    _flags.define_fields(_DEFAULTS, ("validation_data", "test_data"))
    _flags.define_text_key(_flags.field_help(finetune_lib.FinetuneConfig, "text_key"))
    _flags.define_fields(
        _DEFAULTS,
        (
            "label_key",
            "label_map",
            "validation_fraction",
            "max_train_examples",
            "max_eval_examples",
            "max_length",
            "features",
            "head_init",
            "head_hidden",
            "head_dropout",
            "lm_loss_weight",
            "threshold_metric",
            "batch_size",
        ),
        choices={
            "head_init": finetune_lib.HEAD_INITS,
            "threshold_metric": finetune_lib.THRESHOLD_METRICS,
        },
    )
    _flags.define_runner_flags(_DEFAULTS)
    _flags.define_deprecated_alias("feature", "features")  # the spelling of earlier releases


def check_before_work(flag_values) -> None:
    """The run folders, the data and a resume's head, before TensorFlow starts (`preflight`)."""
    fv = flag_values
    preflight.check_output_dir("model_dir", fv.model_dir)
    # A language-model run (the --init_model_dir too) as the output: its config.json is not ours.
    preflight.check_folder_kind(
        fv.model_dir, "model_dir", "tf-mlstm-finetune", (None, preflight.FINETUNE_RUN)
    )
    preflight.check_not_in_use(fv.model_dir)
    for name in ("train_data", "validation_data", "test_data"):
        preflight.check_input_files(name, fv[name].value)
    preflight.check_trained_model(fv.init_model_dir, "init_model_dir")
    preflight.check_resume_flags(
        fv, preflight.FINETUNE_CONFIG_FILE, upgrade=finetune_lib.FinetuneConfig.upgrade_saved
    )


def main(config) -> dict:
    """Fine-tunes; returns the results without the per-step history."""
    from tf_mlstm import api  # pylint: disable=g-import-not-at-top

    results = api.finetune(config)
    results.pop("history", None)
    return results


def run() -> None:
    """Entry point of `tf-mlstm-finetune`."""
    stop_signals.stop_until_training()
    _main.run_binary(
        __name__,
        define_finetune_flags,
        main,
        finetune_lib.FinetuneConfig,
        required=["init_model_dir", "model_dir", "train_data"],
    )


if __name__ == "__main__":
    run()
