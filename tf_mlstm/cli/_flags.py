"""Flag groups that several binaries share, defined once.

One definition means one name, one help text and one default everywhere: a
record reads the same in every binary.
"""

import contextlib
import dataclasses
import sys
from collections.abc import Iterator

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
def one_commands_flags() -> Iterator[None]:
    """Undoes what one binary run in this process did to the flags, when it ends.

    For running several binaries in one process (the tests' walk-throughs).
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


def define_deprecated_alias(old_name, name, flag_values=flags.FLAGS) -> None:
    """Defines `--old_name` as a deprecated spelling of the existing flag `--name`.

    It sets `--name`'s value (satisfying a required `--name` too) and logs one
    warning naming the new spelling on each use.

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


_DEFINE_BY_TYPE = {
    bool: flags.DEFINE_bool,
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
    str: flags.DEFINE_string,
}


class _IntOrAutoParser(flags.ArgumentParser):
    """An integer flag that also takes the word auto (`--hidden_size=auto`)."""

    syntactic_help = f"an integer or {choices.AUTO}"

    def parse(self, argument):
        if isinstance(argument, int) and not isinstance(argument, bool):
            return argument
        text = str(argument).strip()
        if text == choices.AUTO:
            return text
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"must be an integer or {choices.AUTO}, got {text!r}") from None

    def flag_type(self):
        return f"int or {choices.AUTO}"


def _one_type(annotation):
    """`annotation`, or X for an optional `X | None`."""
    options = [t for t in getattr(annotation, "__args__", ()) if t is not type(None)]
    return options[0] if len(options) == 1 else annotation


def define_fields(
    defaults, names, choices=None, lower_bounds=None, no_default=(), flag_values=None
) -> None:
    """Defines a flag for each field `names` of the config `defaults`, derived from the field.

    Name, default, type and help (`field_help`) are the field's; a field with
    `choices` is an enum, a tuple field a comma-separated list. The flags belong
    to the calling module, as if it had defined them.

    Args:
      defaults: the binary's config with its defaults (a `TrainConfig`, ...).
      names: the fields, in the order `--help` lists them.
      choices: field name -> the values it may take (`tf_mlstm.config.choices`).
      lower_bounds: field name -> the least value its (int or float) flag takes.
      no_default: fields whose flag defaults to None (required, or resolved later).
      flag_values: where to define them (`flags.FLAGS` when None).
    """
    caller = sys._getframe(1).f_globals["__name__"]  # pylint: disable=protected-access
    module = {"module_name": sys.argv[0] if caller == "__main__" else caller}
    if flag_values is not None:
        module["flag_values"] = flag_values
    config_class = type(defaults)
    types = {field.name: field.type for field in dataclasses.fields(config_class)}
    for name in names:
        default = None if name in no_default else getattr(defaults, name)
        help_text = field_help(config_class, name)
        bound = {"lower_bound": lower_bounds[name]} if lower_bounds and name in lower_bounds else {}
        if choices and name in choices:
            flags.DEFINE_enum(name, default, list(choices[name]), help_text, **module)
        elif types[name] == int | str:  # a number, or auto
            flags.DEFINE(_IntOrAutoParser(), name, default, help_text, **module)
        elif _one_type(types[name]) in _DEFINE_BY_TYPE:
            _DEFINE_BY_TYPE[_one_type(types[name])](name, default, help_text, **bound, **module)
        else:  # a key list: a tuple, or a str or list that may hold several
            listed = list(default) if isinstance(default, tuple) else default
            flags.DEFINE_list(name, listed, help_text, **module)


def define_text_key(
    help_text="Keys/columns holding the text, tried in order.", flag_values=None
) -> None:
    """`--text_key`: a comma-separated list, `TEXT_KEYS` by default (on `flag_values`)."""
    kwargs = {} if flag_values is None else {"flag_values": flag_values}
    flags.DEFINE_list("text_key", list(TEXT_KEYS), help_text, **kwargs)


text_keys = split_keys  # The keys of a `--text_key` (or any key list) value.


def define_feature_precision(default="auto", note="", help_text=None) -> None:
    """`--precision` of the binaries that compute features (help: `help_text` when given)."""
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


def define_overwrite(output_flag, fv=None, help_text=None) -> None:
    """`--overwrite` of a binary that writes `output_flag` (help: `help_text` when given)."""
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


def define_allow_other_model(help_text=None) -> None:
    """`--allow_other_model` of classify and export (help: `help_text` when given)."""
    flags.DEFINE_bool(
        "allow_other_model",
        False,
        help_text
        or "Apply a classifier to other model weights than those it was fitted on (classifier.json "
        "records their fingerprint), with a warning; "
        "without it that is an error.",
    )


def resolve_feature_precision(choice, model_dir=None, batch_size=None, window=None) -> str:
    """`choice`, with `auto` measured for `model_dir`'s model at this batch shape (logged)."""
    from tf_mlstm.transfer import features  # pylint: disable=g-import-not-at-top

    shape = {k: v for k, v in (("batch_size", batch_size), ("window", window)) if v}
    return features.resolve_precision(choice, model_dir, **shape)


def define_runner_flags(defaults) -> None:
    """The distributed runner's flags, shared by tf-mlstm-train and tf-mlstm-finetune.

    Each help text is the field's documentation in `tf_mlstm.config.runner`, so
    both binaries say the same.

    Args:
      defaults: the binary's config with its defaults; each flag's default is its field's.
    """

    define_fields(
        defaults,
        ("lr", "warmup_steps", "lr_decay", "clip_norm", "max_steps", "max_minutes"),
        choices={"lr_decay": choices.DECAYS},
    )
    define_fields(
        defaults,
        (
            "schedule_length",
            "checkpoint_every_steps",
            "keep_checkpoints",
            "max_nonfinite_steps",
            "log_every_steps",
            "profile_steps",
            "eval_every_steps",
        ),
        choices={"schedule_length": choices.SCHEDULE_LENGTHS},
    )
    define_fields(
        defaults,
        ("precision", "allreduce_dtype", "jit_compile", "seed"),
        choices={
            "precision": choices.PRECISION_CHOICES,
            "allreduce_dtype": choices.ALLREDUCE_DTYPES,
            "jit_compile": choices.JIT_CHOICES,
        },
    )
    define_distribution_flags(defaults)


def define_distribution_flags(defaults) -> None:
    """How the work is spread: strategy, all-reduce, cluster, GPUs, collective timeout."""
    define_fields(
        defaults,
        (
            "distribution_strategy",
            "all_reduce",
            "cluster_resolver",
            "num_gpus",
            "collective_timeout_s",
        ),
        choices={
            "distribution_strategy": choices.STRATEGIES,
            "all_reduce": choices.ALL_REDUCE,
            "cluster_resolver": choices.CLUSTER_RESOLVERS,
        },
    )
