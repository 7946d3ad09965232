"""tf-mlstm-train: train a byte-level mLSTM language model.

With no flags it trains a small model on the embedded demo corpus (the
`flags/demo.flags` recipe), then prints validation bits/char and exports a
SavedModel, all under ./tf_mlstm_demo. Recipes: `--flagfile=flags/X.flags`.

  tf-mlstm-train --train_data=data/reviews --model_dir=runs/r1 \
      --hidden_size=4096 --batch_size=256

Precision and XLA default to `auto`, decided from the hardware at start-up
(`tf_mlstm/train/hardware.py`); the run folder's config.json records the
concrete values.

Exit status: 0 done; 1 a bad flag or input, a peer worker's failure, or a
run that diverged (--max_nonfinite_steps non-finite steps in a row); 75 a
SIGTERM (preemption) stopped every worker at the same step after its
checkpoint: rerun the same command to resume.
"""

from absl import flags

from tf_mlstm.cli import _main
from tf_mlstm.train import config as config_lib

FLAGS = flags.FLAGS
_DEFAULTS = config_lib.TrainConfig()


def _default(name):
    return getattr(_DEFAULTS, name)


def define_data_flags():
    flags.DEFINE_string(
        "train_data",
        _default("train_data"),
        "TFRecord folder (its train-* shards are read) or a glob of shards, "
        "from tf-mlstm-make-tfrecords. Empty: the embedded demo corpus.",
    )
    flags.DEFINE_string(
        "validation_data",
        _default("validation_data"),
        "Validation shards (folder or glob). Empty: the validation-* shards beside --train_data.",
    )
    flags.DEFINE_string(
        "model_dir",
        _default("model_dir"),
        "Checkpoints, TensorBoard events, config, results and "
        "the SavedModel go here; a rerun resumes from it.",
    )
    flags.DEFINE_integer(
        "shuffle_buffer",
        _default("shuffle_buffer"),
        "Documents in the training shuffle buffer (0 = off).",
    )
    flags.DEFINE_string(
        "source_repeats",
        _default("source_repeats"),
        "Oversample documents by the input file they were converted from: "
        "comma-separated PATTERN=COUNT rules, a glob over the record's source path "
        "(e.g. '*/amazon/*=8' puts 8 copies of each Amazon review into the shuffle "
        "buffer). Training only; validation keeps the corpus as it is.",
    )


def define_model_flags():
    flags.DEFINE_integer("hidden_size", _default("hidden_size"), "mLSTM units (the paper: 4096).")
    flags.DEFINE_integer(
        "embedding_size", _default("embedding_size"), "Byte embedding width (the paper: 64)."
    )
    flags.DEFINE_boolean("weight_norm", _default("weight_norm"), "Weight-normalized mLSTM kernels.")


def define_optimization_flags():
    flags.DEFINE_integer(
        "seq_length", _default("seq_length"), "Truncated BPTT length in bytes (the paper: 256)."
    )
    flags.DEFINE_integer(
        "batch_size", _default("batch_size"), "Global batch (rows); split evenly over replicas."
    )
    flags.DEFINE_float("lr", _default("lr"), "Base Adam learning rate, tuned at --lr_base_batch.")
    flags.DEFINE_enum(
        "lr_scaling",
        _default("lr_scaling"),
        list(config_lib.SCALINGS),
        "Scale --lr by global batch / --lr_base_batch.",
    )
    flags.DEFINE_integer(
        "lr_base_batch", _default("lr_base_batch"), "The batch at which --lr was tuned."
    )
    flags.DEFINE_float("max_lr", _default("max_lr"), "Cap on the scaled rate (0 = none).")
    flags.DEFINE_integer("warmup_steps", _default("warmup_steps"), "Linear warmup steps.")
    flags.DEFINE_enum(
        "lr_decay",
        _default("lr_decay"),
        list(config_lib.DECAYS),
        "Decay after warmup, reaching its end at --total_steps.",
    )
    flags.DEFINE_integer(
        "total_steps", _default("total_steps"), "Schedule length in steps (0 = --max_steps)."
    )
    flags.DEFINE_enum(
        "schedule_length",
        _default("schedule_length"),
        list(config_lib.SCHEDULE_LENGTHS),
        "budget: with --max_minutes, the rate follows the schedule, then cools down to its "
        "end over the last fifth of the budget, so the decay ends when the budget does "
        "(predicted from the measured step rate, re-planned as the run goes; --total_steps "
        "if that comes first); steps: the decay ends at --total_steps, and a budget stop "
        "cuts it short.",
    )
    flags.DEFINE_float(
        "clip_norm", _default("clip_norm"), "Global gradient-norm clipping (0 = off)."
    )
    flags.DEFINE_enum(
        "precision",
        _default("precision"),
        list(config_lib.PRECISION_CHOICES),
        "Dtype policy; mixed_float16 adds dynamic loss scaling. auto: mixed_float16 on GPUs "
        "with tensor cores, mixed_bfloat16 on CPUs with AMX bfloat16 units, else float32; "
        "a resumed run keeps the precision its config.json records.",
    )
    flags.DEFINE_enum(
        "allreduce_dtype",
        _default("allreduce_dtype"),
        ["float32", "float16"],
        "Gradient all-reduce dtype (float16 halves traffic; needs mixed_float16).",
    )
    flags.DEFINE_enum(
        "jit_compile",
        _default("jit_compile"),
        list(config_lib.JIT_CHOICES),
        "XLA-compile the per-replica step; auto = on for GPUs and for float32 on CPUs, off "
        "for 16-bit policies on CPUs (measured; table in tf_mlstm/train/hardware.py).",
    )
    flags.DEFINE_integer("seed", _default("seed"), "Random seed.")


def define_budget_flags():
    flags.DEFINE_integer("max_steps", _default("max_steps"), "Stop after this many steps.")
    flags.DEFINE_float(
        "epochs",
        _default("epochs"),
        "Instead of --max_steps: passes over the training shards, turned into steps from "
        "the byte counts that tf-mlstm-make-tfrecords recorded in stats.json (global batch x "
        "--seq_length characters a step; --source_repeats copies are not counted).",
    )
    flags.DEFINE_float(
        "max_minutes",
        _default("max_minutes"),
        "Stop cleanly after this wall-clock budget (0 = none), "
        "then evaluate and export as at a normal end.",
    )
    flags.DEFINE_integer(
        "checkpoint_every_steps", _default("checkpoint_every_steps"), "Checkpoint interval."
    )
    flags.DEFINE_integer("keep_checkpoints", _default("keep_checkpoints"), "Checkpoints kept.")
    flags.DEFINE_integer(
        "max_nonfinite_steps",
        _default("max_nonfinite_steps"),
        "Stop with an error after this many non-finite (skipped) steps in a row; the last "
        "checkpoint is the last finite one.",
    )
    flags.DEFINE_integer(
        "log_every_steps", _default("log_every_steps"), "Progress line and TensorBoard interval."
    )
    flags.DEFINE_string(
        "profile_steps",
        _default("profile_steps"),
        "START,END: capture a TensorBoard profile of the steps after START up to END into "
        "MODEL_DIR/train (view it with the tensorboard-plugin-profile package).",
    )
    flags.DEFINE_integer(
        "eval_every_steps",
        _default("eval_every_steps"),
        "Validation interval (0 = only at the end).",
    )
    flags.DEFINE_integer(
        "eval_batches",
        _default("eval_batches"),
        "Batches per periodic validation (the final one scores the whole validation split).",
    )
    flags.DEFINE_integer(
        "sample_every_steps",
        _default("sample_every_steps"),
        "Generated-text sample interval (0 = off).",
    )
    flags.DEFINE_integer("sample_length", _default("sample_length"), "Bytes per generated sample.")


def define_distribution_flags():
    flags.DEFINE_enum(
        "distribution_strategy",
        _default("distribution_strategy"),
        list(config_lib.STRATEGIES),
        "default | one_device | mirrored (one machine, all "
        "GPUs) | multi_worker (cluster from TF_CONFIG or Slurm).",
    )
    flags.DEFINE_enum(
        "all_reduce",
        _default("all_reduce"),
        list(config_lib.ALL_REDUCE),
        "Collective implementation for gradient all-reduce.",
    )
    flags.DEFINE_enum(
        "cluster_resolver",
        _default("cluster_resolver"),
        ["tf_config", "slurm"],
        "Where multi_worker reads the cluster from.",
    )
    flags.DEFINE_integer("num_gpus", _default("num_gpus"), "GPUs per worker (-1 = all visible).")
    flags.DEFINE_float(
        "collective_timeout_s",
        _default("collective_timeout_s"),
        "multi_worker: a gradient all-reduce that waits longer than this for a peer fails "
        "with one clear line (a peer that is alive but stuck; 0 = wait forever). Must "
        "exceed the longest pause of the slowest worker (the first step's compilation).",
    )


def define_train_flags():
    """Defines every tf-mlstm-train flag."""
    define_data_flags()
    define_model_flags()
    define_optimization_flags()
    define_budget_flags()
    define_distribution_flags()


def main(config):
    """Trains, evaluates and exports; returns the results."""
    # Imported after flag parsing: TensorFlow start-up is slow and noisy.
    from tf_mlstm.cli import _run  # pylint: disable=g-import-not-at-top

    return _run.train_and_export(config)


def run():
    """Entry point of `tf-mlstm-train`."""
    _main.run_binary(__name__, define_train_flags, main, config_lib.TrainConfig)


if __name__ == "__main__":
    run()
