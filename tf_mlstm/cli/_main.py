"""The one skeleton every tf-mlstm binary runs in.

A binary supplies its flag definitions, a config (a frozen dataclass named
like the flags, or a function that builds one) and a body. `run_binary`
answers `--help` and `--version` (exit 0), refuses bad flags and config
values in one line before TensorFlow is imported, runs the module's
`check_before_work(flag_values)` when it has one, keeps TensorFlow's start-up
log quiet unless `--verbosity` or `TF_CPP_MIN_LOG_LEVEL` asks, turns a user's
error into one line and exit 1 (a run stopped by SIGTERM or Ctrl-C: 75 or
130), and prints the body's result as a final JSON line. The steps and their
reasons: docs/architecture.md.
"""

import contextlib
import dataclasses
import functools
import importlib.metadata
import json
import logging as std_logging
import os
import re
import sys

from absl import app
from absl import flags
from absl import logging

from tf_mlstm import _quiet as quiet
from tf_mlstm import errors
from tf_mlstm.cli._config import config_from_flags
from tf_mlstm.config import bounds

FLAGS = flags.FLAGS

TF_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
"""TensorFlow's C++ log threshold: 0 all, 1 no INFO, 2 no WARNING, 3 no ERROR."""
QUIET_TF_LOG_LEVEL = "3"
"""TensorFlow's log level when neither the user nor `--verbosity` asked for more.

A failure of a run comes back as a Python exception, reported whatever this
level; what it hides is noise such as the failed CUDA probe without GPUs.
"""
HELP_ARGS = ("-h", "--help", "-help", "-?", "--helpshort", "-helpshort")
HELPFULL_ARGS = ("--helpfull", "-helpfull")
VERSION_ARGS = ("--version", "-version")
# A Ctrl-C's exit status: 128 + SIGINT, as a shell reports an interrupted command.
EXIT_INTERRUPTED = 130
_REQUIRED = re.compile(r"Flag --(\w+) must have a value other than None")


def run_binary(module_name, define_flags, body, config, required=()):
    """Defines the flags, then runs `body(config)` as a binary (see the module doc).

    Args:
      module_name: the binary's module (`__name__`); its docstring is the usage text.
      define_flags: defines the binary's flags.
      body: `body(config)` does the work; returns a JSON-serializable result or None.
      config: a dataclass for `config_from_flags`, or a function of no arguments
        that builds the validated config from `FLAGS` (ValueError or
        app.UsageError for bad values).
      required: names of flags that must be given.
    """
    known = set(FLAGS)
    define_flags()
    flags.mark_flags_as_required(list(required))
    _describe_in_help(module_name, [FLAGS[name] for name in FLAGS if name not in known])
    name = binary_name(module_name)
    check = getattr(sys.modules[module_name], "check_before_work", None)
    app.run(
        lambda argv: _main(argv, body, config, name, check),
        flags_parser=functools.partial(parse_flags, name=name),
    )


def binary_name(module_name):
    """The command a binary is run as: the first word of its docstring ("tf-mlstm-train")."""
    doc = (sys.modules[module_name].__doc__ or "").strip()
    first = doc.split(":", 1)[0] if doc else ""
    if first and " " not in first:
        return first
    return os.path.basename(sys.argv[0]) if sys.argv else module_name


def package_version():
    """The installed tf_mlstm's version ("unknown" when it is not installed)."""
    try:
        return importlib.metadata.version("tf_mlstm")
    except importlib.metadata.PackageNotFoundError:
        import tf_mlstm  # pylint: disable=g-import-not-at-top

        return getattr(tf_mlstm, "__version__", "unknown")


def version_line(name):
    """What `--version` prints: the command, tf_mlstm's version and the stack's."""
    stack = []
    for package, shown in (("tensorflow", "TensorFlow"), ("keras", "Keras")):
        try:
            stack.append(f"{shown} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return f"{name} {package_version()}" + (f" ({', '.join(stack)})" if stack else "")


def parse_flags(argv, name):
    """absl's flag parsing with the conventions of a command line (see the module doc).

    Args:
      argv: the command line, the program first.
      name: the command's name, for `--version` and error lines.

    Returns:
      The arguments left after the flags, the program first.

    Raises:
      SystemExit: 0 after the help or the version; 1 after one error line.
    """
    for arg in argv[1:]:
        if arg == "--":  # absl reads no flags after it.
            break
        if arg in HELP_ARGS or arg in HELPFULL_ARGS:
            short = arg in HELP_ARGS
            with stdout_may_close():
                app.usage(shorthelp=short, writeto_stdout=True)
                if short:
                    print("Try --helpfull to get a list of all flags.")
            sys.exit(0)
        if arg in VERSION_ARGS:
            print(version_line(name))
            sys.exit(0)
    try:
        rest = FLAGS(argv)
        check_int_flags(FLAGS)
    except (flags.Error, errors.InvalidValueError) as e:
        usage_error(name, flag_error_line(e))
    return rest


def check_int_flags(flag_values):
    """Refuses an integer flag past its bound, before a config function can start TensorFlow.

    Every integer flag reaches a tensor (or NumPy's seed) as 32 bits at most; a
    size, length or count also has its own bound (`tf_mlstm.config.bounds`).

    Raises:
      errors.InvalidValueError: one line naming the flag (or flags) and the bound.
    """
    values = {}
    for flag_name in sorted(flag_values):
        flag = flag_values[flag_name]
        if isinstance(flag.parser, flags.IntegerParser) or flag.name in bounds.LARGEST:
            values[flag.name] = flag.value
    with errors.naming_flags():
        bounds.check_sizes(values)


@contextlib.contextmanager
def stdout_may_close():
    """Ends quietly when stdout is closed early (`--help | head`), without a traceback."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the failed flush of stdout at exit, so it goes to /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)


def flag_error_line(error):
    """absl's flag error as one line; the required flags that are missing named together."""
    missing = _REQUIRED.findall(str(error))
    if missing:
        return f"missing required flag{'s' if len(missing) > 1 else ''}: " + ", ".join(
            f"--{flag}" for flag in missing
        )
    return errors.one_line(error)


def usage_error(name, message):
    """Ends the command with one error line on stderr and exit status 1."""
    print(f"{name}: {message} (--help lists the flags)", file=sys.stderr)
    sys.exit(1)


def _main(argv, body, config, name, check_before_work=None):
    # The user wrote a command line: every message names a setting as its flag.
    with errors.naming_flags():
        _run(argv, body, config, name, check_before_work)


def _run(argv, body, config, name, check_before_work):
    # Armed before the config is built: a config function may start TensorFlow.
    quiet_tensorflow(os.environ, FLAGS["verbosity"].present, FLAGS.verbosity)
    try:
        if len(argv) > 1:
            raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
        # The values first (a dataclass's `validate` reads no file), then the paths, then a
        # config function, which may load a model and measure it.
        if dataclasses.is_dataclass(config):
            config = config_from_flags(config)
        if check_before_work is not None:
            run_body(check_before_work, FLAGS)
        if not dataclasses.is_dataclass(config):
            # A bad value is a usage error; another user error (a missing
            # model folder the config is measured on) is one line, as in the body.
            config = run_body(_usage_errors_of, config)
    except app.UsageError as e:
        usage_error(name, errors.one_line(e))
    result = run_body(body, config)
    if result is not None:
        print(json.dumps(result, sort_keys=True))


def _usage_errors_of(build):
    """`build()`, its ValueErrors raised as usage errors."""
    try:
        return build()
    except ValueError as e:
        raise app.UsageError(str(e)) from None


def run_body(body, config):
    """`body(config)`, with the ends every binary shares turned into exit statuses.

    Returns:
      What `body` returns.

    Raises:
      SystemExit: 1 after one line for a user's error; 75 or 130 for a run
        stopped by SIGTERM or Ctrl-C after its checkpoint; 130 for Ctrl-C elsewhere.
    """
    try:
        try:
            return body(config)
        except Exception as e:  # pylint: disable=broad-except
            status = getattr(e, "exit_status", None)
            if status is not None:  # The runner's stop on a signal: a relaunch resumes.
                logging.warning("%s", e)
                sys.exit(status)
            if not errors.is_user_error(e):
                raise
            logging.error("%s", errors.one_line(e))
            sys.exit(1)
    except KeyboardInterrupt:
        logging.warning("interrupted (Ctrl-C): stopped (exit status %d).", EXIT_INTERRUPTED)
        sys.exit(EXIT_INTERRUPTED)


def _describe_in_help(module_name, own_flags):
    """Makes absl's `--help` show the binary's usage text and all of `own_flags`.

    absl describes `__main__` and the flags of the file `sys.argv[0]` names; as a
    console script both are a generated shim's, and shared flag groups live in
    other modules. So the shim borrows the binary's docstring, and its flags
    become key flags of both the binary's module and the main file.
    """
    main = sys.modules.get("__main__")
    module = sys.modules[module_name]
    if main is not None and main is not module and not main.__doc__:
        main.__doc__ = module.__doc__
    for owner in {module_name, sys.argv[0] if sys.argv else ""}:
        for flag in own_flags:
            FLAGS.register_key_flag_for_module(owner, flag)


def tensorflow_log_level(environ, verbosity_given, verbosity):
    """The `TF_CPP_MIN_LOG_LEVEL` a run uses.

    Args:
      environ: the environment; a level the user set there is kept.
      verbosity_given: whether `--verbosity` (`-v`) was on the command line.
      verbosity: its value (absl's levels), mapped to TensorFlow's equivalent.

    Returns:
      The level, as the variable's string.
    """
    if environ.get(TF_LOG_LEVEL, "") != "":
        return environ[TF_LOG_LEVEL]
    if verbosity_given:
        return str(min(max(-verbosity, 0), 3))
    return QUIET_TF_LOG_LEVEL


def quiet_tensorflow(environ, verbosity_given, verbosity):
    """Sets TensorFlow's log level (see `tensorflow_log_level`); its start-up is then quiet.

    TensorFlow prints a few lines while it loads whatever the level says, so when
    the level hides INFO the next `import tensorflow` runs with stderr on
    /dev/null (`tf_mlstm._quiet`).
    """
    level = tensorflow_log_level(environ, verbosity_given, verbosity)
    environ[TF_LOG_LEVEL] = level
    if verbosity_given and verbosity > 0:
        environ.setdefault("TF_CPP_MAX_VLOG_LEVEL", str(verbosity))
    if not verbosity_given:
        # matplotlib's one-off font-cache notice is not the run's news either.
        std_logging.getLogger("matplotlib").setLevel(std_logging.WARNING)
    if "tensorflow" in sys.modules:
        return
    if level.isdigit() and int(level) >= 1:
        quiet.quiet_start()
    else:
        quiet.loud_start()  # `import tf_mlstm` made it quiet; the run asked to see it.
