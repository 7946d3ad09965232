r"""tf-mlstm: one command whose subcommands are the tf-mlstm-* binaries.

  tf-mlstm train --max_steps=100     # the same as: tf-mlstm-train --max_steps=100
  tf-mlstm classify --help           # a binary's own usage text and flags
  tf-mlstm --help                    # the binaries, one line each
  tf-mlstm --version

Every module of `tf_mlstm.cli` with a `run` entry point is a subcommand,
named like its console script without the `tf-mlstm-` prefix (`make-tfrecords`
or `make_tfrecords`); what a subcommand says about itself is the first line
of its module's docstring, read without importing it.
"""

import ast
import importlib
import importlib.util
import pkgutil
import sys

from tf_mlstm.cli import _main

PREFIX = "tf-mlstm-"
_UMBRELLA = "tf-mlstm"


def binaries() -> dict[str, str]:
    """The subcommands: {"make-tfrecords": "tf_mlstm.cli.make_tfrecords", ...}, sorted."""
    package = importlib.import_module("tf_mlstm.cli")
    found = {}
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("_") or module.name == "main":
            continue
        found[module.name.replace("_", "-")] = f"{package.__name__}.{module.name}"
    return dict(sorted(found.items()))


def summary(module_name) -> str:
    """The first line of a binary's docstring, without its "tf-mlstm-x: " prefix."""
    spec = importlib.util.find_spec(module_name)
    with open(spec.origin, encoding="utf-8") as source:
        doc = ast.get_docstring(ast.parse(source.read())) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    head, sep, rest = first.partition(": ")
    return rest if sep and head.startswith(PREFIX) else first


def usage() -> str:
    """`tf-mlstm --help`: how to call it and the subcommands, one line each."""
    names = binaries()
    width = max(map(len, names))
    lines = [
        f"usage: {_UMBRELLA} COMMAND [--flags]   (the same as {PREFIX}COMMAND [--flags])",
        "",
        "commands:",
        *(f"  {name:<{width}}  {summary(module)}" for name, module in names.items()),
        "",
        f"{_UMBRELLA} COMMAND --help shows a command's flags.",
    ]
    return "\n".join(lines)


def run(argv=None) -> None:
    """Entry point of `tf-mlstm`: runs `tf-mlstm-COMMAND` with the rest of the arguments."""
    argv = list(sys.argv if argv is None else argv)
    command = argv[1] if len(argv) > 1 else None
    if command in _main.HELP_ARGS or command in _main.HELPFULL_ARGS:
        with _main.stdout_may_close():
            print(usage())
        sys.exit(0)
    if command in _main.VERSION_ARGS:
        print(_main.version_line(_UMBRELLA))
        sys.exit(0)
    if command is None:
        print(usage(), file=sys.stderr)
        sys.exit(1)
    names = binaries()
    name = command.replace("_", "-")
    if name.startswith(PREFIX):
        name = name[len(PREFIX) :]
    if name not in names:
        print(
            f"{_UMBRELLA}: unknown command {command!r} ({_UMBRELLA} --help lists the commands)",
            file=sys.stderr,
        )
        sys.exit(1)
    # The binary sees the command line its own console script would get, and
    # its `--help` shows its own usage text (absl shows `__main__`'s).
    sys.argv = [PREFIX + name, *argv[2:]]
    main = sys.modules.get("__main__")
    if main is not None:
        main.__doc__ = None
    return importlib.import_module(names[name]).run()


if __name__ == "__main__":
    run()
