"""What the binaries with `--runner` share: Beam's flags out of the command line, checked.

A binary that runs as an Apache Beam pipeline on `--runner=...` hands every
flag it does not define to Beam as a pipeline option. `split_pipeline_args`
takes them out before absl parses the rest (only when `--runner` is given:
otherwise an unknown flag stays an error); `check_pipeline_args` refuses, in
one line and before any pipeline starts, a runner without Apache Beam
installed and a flag that Beam does not know either.
"""

import importlib.util
import sys
from collections.abc import Callable
from collections.abc import Sequence

from absl import app
from absl import flags

from tf_mlstm.cli import _main

# What absl's parser and `_main` answer without a flag definition.
_PARSER_FLAGS = frozenset(
    ("flagfile", "undefok", "help", "helpshort", "helpfull", "helpxml", "h", "?", "version")
)


def split_pipeline_args(
    argv: Sequence[str], define_flags: Callable[[flags.FlagValues], None]
) -> tuple[list[str], list[str]]:
    """Takes the flags a binary does not define out of a command line given `--runner`.

    Without `--runner` nothing is taken out; a foreign flag goes to Beam with
    the value after it when that is no flag (`--project my-project`).

    Args:
        argv: The command line, the program first.
        define_flags: Defines the binary's flags on the `FlagValues` it is given.

    Returns:
        (the command line for the binary, the flags for Beam).
    """
    ours = flags.FlagValues()
    define_flags(ours)
    known = set(ours) | set(flags.FLAGS) | _PARSER_FLAGS
    args = list(argv[1:])
    cut = args.index("--") if "--" in args else len(args)
    head, tail = args[:cut], args[cut:]

    def name(arg):
        bare = arg.lstrip("-").split("=", 1)[0]
        return bare[2:] if bare.startswith("no") and bare[2:] in known else bare

    if not any(arg.startswith("-") and name(arg) == "runner" for arg in head):
        return list(argv), []
    kept, beam = [], []
    i = 0
    while i < len(head):
        arg = head[i]
        if arg.startswith("-") and arg != "-" and name(arg) not in known:
            beam.append(arg)
            if "=" not in arg and i + 1 < len(head) and not head[i + 1].startswith("-"):
                beam.append(head[i + 1])
                i += 1
        else:
            kept.append(arg)
        i += 1
    return [argv[0], *kept, *tail], beam


def check_pipeline_args(runner: str, pipeline_args: Sequence[str]) -> None:
    """Checks that Beam is installed and knows `pipeline_args`.

    Raises:
        app.UsageError: Apache Beam is not installed, or an argument is no
            Beam pipeline option.
    """
    if importlib.util.find_spec("apache_beam") is None:
        raise app.UsageError(
            "--runner needs Apache Beam, which is not installed: pip install tf_mlstm[beam]"
        )
    from tf_mlstm.beam import options  # pylint: disable=g-import-not-at-top

    try:
        options.pipeline_options(runner, pipeline_args)
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def run_binary(module_name, define_flags, body, build_config, required=()):
    """`_main.run_binary` for a binary with `--runner`: Beam's flags go to `build_config`.

    Args:
      module_name, define_flags, body, required: as for `_main.run_binary`
        (`define_flags` takes the `FlagValues` to define on).
      build_config: `build_config(flags.FLAGS, pipeline_args)` builds the config.
    """
    argv, pipeline_args = split_pipeline_args(sys.argv, define_flags)
    sys.argv[:] = argv
    _main.run_binary(
        module_name,
        define_flags,
        body,
        lambda: build_config(flags.FLAGS, pipeline_args),
        required=required,
    )
