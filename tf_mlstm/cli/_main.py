"""The one skeleton every tf-mlstm binary runs in.

A binary supplies its flag definitions, a config (a frozen dataclass whose
fields are named like the flags, or a function that builds one) and a body
that turns the config into a result. `run_binary` does the rest, the same
way for every binary:

1. defines the flags and marks the required ones;
2. makes `--help` show the binary's own usage text and flags also when it
   runs as a console script (absl describes the `__main__` module, which is
   then a generated shim without either);
3. parses the flags and refuses positional arguments; flag bounds and the
   config's `validate()` answer before TensorFlow is imported, with one
   error line and exit status 1 (absl would print the whole usage text,
   every flag, before it);
4. runs the body; a user's error (`tf_mlstm.errors.is_user_error`: a bad
   value, a missing or unwritable file, a full disk, a port in use, a dead
   peer) is one error line and exit status 1, a preempted training run
   exits with its own status (75, relaunch to resume), and anything else is
   a bug that keeps its traceback;
5. prints the body's result, when it returns one, as the last line: one
   JSON object.
"""

import dataclasses
import json
import sys

from absl import app
from absl import flags
from absl import logging

from tf_mlstm import errors
from tf_mlstm.cli._config import config_from_flags

FLAGS = flags.FLAGS


def run_binary(module_name, define_flags, body, config, required=()):
    """Defines the flags, then runs `body(config)` as a binary (see the module doc).

    Args:
      module_name: the binary's module (`__name__`), whose docstring is the
        usage text and whose flags `--help` lists.
      define_flags: defines the binary's flags.
      body: `body(config)` does the work; it returns a JSON-serializable
        result to print as the last line, or None.
      config: a dataclass for `config_from_flags`, or a function of no
        arguments that builds the validated config from `FLAGS` (raising
        ValueError or app.UsageError for bad values).
      required: names of flags that must be given.
    """
    known = set(FLAGS)
    define_flags()
    flags.mark_flags_as_required(list(required))
    _describe_in_help(module_name, [FLAGS[name] for name in FLAGS if name not in known])
    app.run(lambda argv: _main(argv, body, config))


def _main(argv, body, config):
    try:
        if len(argv) > 1:
            raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
        if dataclasses.is_dataclass(config):
            config = config_from_flags(config)
        else:
            try:
                config = config()
            except ValueError as e:
                raise app.UsageError(str(e)) from None
    except app.UsageError as e:
        logging.error("%s (--help lists the flags)", e)
        sys.exit(1)
    result = run_body(body, config)
    if result is not None:
        print(json.dumps(result, sort_keys=True))


def run_body(body, config):
    """`body(config)`, with the ends every binary shares turned into exit statuses.

    Returns:
      What `body` returns.

    Raises:
      SystemExit: 1 after one error line for a user's error; the preempted
        status after a SIGTERM that every worker checkpointed.
    """
    try:
        return body(config)
    except Exception as e:  # pylint: disable=broad-except
        status = getattr(e, "exit_status", None)
        if status is not None:  # The runner's preemption: a relaunch resumes.
            logging.warning("%s", e)
            sys.exit(status)
        if not errors.is_user_error(e):
            raise
        logging.error("%s", errors.one_line(e))
        sys.exit(1)


def _describe_in_help(module_name, own_flags):
    """Makes absl's `--help` show the binary's usage text and all of `own_flags`.

    absl prints the docstring of `__main__` and the flags that the file named
    by `sys.argv[0]` defined. Run as a console script, both are a generated
    shim's (no text, no flags); and a binary's flags may be defined by a
    shared flag group in another module. So the binary's docstring is lent
    to a shim without one, and its flags are made key flags of both the
    binary's module and the main file.
    """
    main = sys.modules.get("__main__")
    module = sys.modules[module_name]
    if main is not None and main is not module and not main.__doc__:
        main.__doc__ = module.__doc__
    for owner in {module_name, sys.argv[0] if sys.argv else ""}:
        for flag in own_flags:
            FLAGS.register_key_flag_for_module(owner, flag)
