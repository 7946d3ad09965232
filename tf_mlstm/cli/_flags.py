"""Flag groups that several binaries share, defined once.

One definition means one name, one help text and one default everywhere: a
record reads the same in every binary.
"""

import contextlib

from absl import flags
from absl import logging

from tf_mlstm.config import choices
from tf_mlstm.config.base import field_help
from tf_mlstm.config.binaries import refuse_output_over_input  # noqa: F401
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import split_keys

# === One name per idea ===
#
# Every binary names one idea with one flag (`--train_data`, `--validation_data`,
# `--test_data`, `--features`, `--validation_fraction`, ...), the name of the
# config field it sets. A name a binary used before keeps working for now as a
# deprecated alias: it sets the flag it stands for and logs one warning line.

DEPRECATED_ALIASES = {}
"""Deprecated flag name -> the flag it sets, for every alias defined so far."""


@contextlib.contextmanager
def one_commands_flags():
    """Undoes what one binary run in this process did to the flags, when it ends.

    For running several binaries one after another in one process (the
    tests' walk-throughs): the flags the binary defined are removed, the
    others unparsed, and the deprecated aliases put back as they were.
    """
    known, aliases = set(flags.FLAGS), dict(DEPRECATED_ALIASES)
    try:
        yield
    finally:
        flags.FLAGS.unparse_flags()
        for name in set(flags.FLAGS) - known:
            delattr(flags.FLAGS, name)
        DEPRECATED_ALIASES.clear()
        DEPRECATED_ALIASES.update(aliases)


def define_deprecated_alias(old_name, name, flag_values=flags.FLAGS):
    """Defines `--old_name` as a deprecated spelling of the existing flag `--name`.

    The alias parses like `--name` and sets its value (so a required `--name`
    is satisfied by it too); each use logs one warning line naming the new
    spelling. `--help` lists it as deprecated.

    Args:
      old_name: the spelling that is going away.
      name: the flag it sets (defined before).
      flag_values: where both live.
    """
    original = flag_values[name]

    class _DeprecatedAlias(flags.Flag):
        def parse(self, argument):
            original.parse(argument)
            self.present += 1

        def _parse_from_default(self, value):
            return value  # the original flag parsed it already

        @property
        def value(self):
            return original.value

        @value.setter
        def value(self, value):
            original.value = value

    flags.DEFINE_flag(
        _DeprecatedAlias(
            original.parser,
            original.serializer,
            old_name,
            original.default,
            f"Deprecated: use --{name}.",
            boolean=original.boolean,
        ),
        flag_values,
    )

    def warn_once_parsed(_):
        # A validator runs once every flag has parsed, so the warning is one
        # ordinary log line (absl announces log lines written during parsing).
        if flag_values[old_name].present:
            logging.warning("--%s is deprecated; use --%s (same value).", old_name, name)
        return True

    flags.register_validator(old_name, warn_once_parsed, flag_values=flag_values)
    DEPRECATED_ALIASES[old_name] = name


def define_text_key(help_text="Keys/columns holding the text, tried in order."):
    """`--text_key`: a comma-separated list, `TEXT_KEYS` by default."""
    flags.DEFINE_list("text_key", list(TEXT_KEYS), help_text)


text_keys = split_keys  # The keys of a `--text_key` (or any key list) value.


def define_feature_precision(default="auto", note="", help_text=None):
    """`--precision` of the binaries that compute features (transfer, classify).

    Its help is `help_text` (the config field's documentation) when given.
    """
    flags.DEFINE_enum(
        "precision",
        default,
        list(choices.PRECISION_CHOICES),
        help_text
        or "Policy the features are computed in: a mixed one runs the products in 16 bits, the "
        "weights and features stay float32. auto: the fastest on this machine, timed on a few "
        "batches of the model at --batch_size x --window among the policies the hardware "
        "computes natively (float32; mixed_bfloat16 on CPUs with bfloat16 instructions or "
        "AMX; mixed_float16 on GPUs with tensor cores, mixed_bfloat16 from compute "
        "capability 8.0), cached in the user's cache folder."
        + note,
    )


def define_overwrite(output_flag, fv=None, help_text=None):
    """`--overwrite` of a binary that writes `output_flag` (the rerun rule: `tf_mlstm.outputs`).

    Its help is `help_text` (the config field's documentation) when given.
    """
    kwargs = {} if fv is None else {"flag_values": fv}
    flags.DEFINE_bool(
        "overwrite",
        False,
        help_text
        or f"Replace what {output_flag} already holds (once the new output is all written; a "
        "failed run leaves it as it was); without it an existing output is refused before "
        "any work.",
        **kwargs,
    )


def define_allow_other_model(help_text=None):
    """`--allow_other_model` of the binaries that apply a fitted classifier (classify, export).

    Its help is `help_text` (the config field's documentation) when given.
    """
    flags.DEFINE_bool(
        "allow_other_model",
        False,
        help_text
        or "Apply a classifier to other model weights than those it was fitted on (classifier.json "
        "records their fingerprint), with a warning; "
        "without it that is an error.",
    )


def resolve_feature_precision(choice, model_dir=None, batch_size=None, window=None):
    """`choice`, with `auto` measured for `model_dir`'s model at this batch shape (logged)."""
    from tf_mlstm.transfer import features  # pylint: disable=g-import-not-at-top

    shape = {k: v for k, v in (("batch_size", batch_size), ("window", window)) if v}
    return features.resolve_precision(choice, model_dir, **shape)


def define_runner_flags(defaults):
    """The distributed runner's flags, shared by tf-mlstm-train and tf-mlstm-finetune.

    Optimization (rate, warmup, decay, clipping), the step and time budget,
    the cadence (log, evaluate, checkpoint, profile), divergence handling,
    precision, XLA, seed and distribution. Each help text is the field's
    documentation in the runner's field groups (`tf_mlstm.config.runner`),
    so both binaries say the same.

    Args:
      defaults: the binary's config with its defaults (a `TrainConfig` or a
        `FinetuneConfig`); each flag's default is the field of its name.
    """

    def default(name):
        return getattr(defaults, name)

    flags.DEFINE_float("lr", default("lr"), field_help(type(defaults), "lr"))
    flags.DEFINE_integer(
        "warmup_steps", default("warmup_steps"), field_help(type(defaults), "warmup_steps")
    )
    flags.DEFINE_enum(
        "lr_decay",
        default("lr_decay"),
        list(choices.DECAYS),
        field_help(type(defaults), "lr_decay"),
    )
    flags.DEFINE_float("clip_norm", default("clip_norm"), field_help(type(defaults), "clip_norm"))
    flags.DEFINE_integer("max_steps", default("max_steps"), field_help(type(defaults), "max_steps"))
    flags.DEFINE_float(
        "max_minutes",
        default("max_minutes"),
        field_help(type(defaults), "max_minutes"),
    )
    flags.DEFINE_enum(
        "schedule_length",
        default("schedule_length"),
        list(choices.SCHEDULE_LENGTHS),
        field_help(type(defaults), "schedule_length"),
    )
    flags.DEFINE_integer(
        "checkpoint_every_steps",
        default("checkpoint_every_steps"),
        field_help(type(defaults), "checkpoint_every_steps"),
    )
    flags.DEFINE_integer(
        "keep_checkpoints",
        default("keep_checkpoints"),
        field_help(type(defaults), "keep_checkpoints"),
    )
    flags.DEFINE_integer(
        "max_nonfinite_steps",
        default("max_nonfinite_steps"),
        field_help(type(defaults), "max_nonfinite_steps"),
    )
    flags.DEFINE_integer(
        "log_every_steps", default("log_every_steps"), field_help(type(defaults), "log_every_steps")
    )
    flags.DEFINE_string(
        "profile_steps",
        default("profile_steps"),
        field_help(type(defaults), "profile_steps"),
    )
    flags.DEFINE_integer(
        "eval_every_steps",
        default("eval_every_steps"),
        field_help(type(defaults), "eval_every_steps"),
    )
    flags.DEFINE_enum(
        "precision",
        default("precision"),
        list(choices.PRECISION_CHOICES),
        field_help(type(defaults), "precision"),
    )
    flags.DEFINE_enum(
        "allreduce_dtype",
        default("allreduce_dtype"),
        list(choices.ALLREDUCE_DTYPES),
        field_help(type(defaults), "allreduce_dtype"),
    )
    flags.DEFINE_enum(
        "jit_compile",
        default("jit_compile"),
        list(choices.JIT_CHOICES),
        field_help(type(defaults), "jit_compile"),
    )
    flags.DEFINE_integer("seed", default("seed"), field_help(type(defaults), "seed"))
    define_distribution_flags(defaults)


def define_distribution_flags(defaults):
    """How the work is spread: strategy, all-reduce, cluster, GPUs, collective timeout."""
    flags.DEFINE_enum(
        "distribution_strategy",
        defaults.distribution_strategy,
        list(choices.STRATEGIES),
        field_help(type(defaults), "distribution_strategy"),
    )
    flags.DEFINE_enum(
        "all_reduce",
        defaults.all_reduce,
        list(choices.ALL_REDUCE),
        field_help(type(defaults), "all_reduce"),
    )
    flags.DEFINE_enum(
        "cluster_resolver",
        defaults.cluster_resolver,
        list(choices.CLUSTER_RESOLVERS),
        field_help(type(defaults), "cluster_resolver"),
    )
    flags.DEFINE_integer("num_gpus", defaults.num_gpus, field_help(type(defaults), "num_gpus"))
    flags.DEFINE_float(
        "collective_timeout_s",
        defaults.collective_timeout_s,
        field_help(type(defaults), "collective_timeout_s"),
    )
