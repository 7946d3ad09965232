"""The errors a user can fix, told apart from bugs.

Binaries report these in one line with exit status 1 (`cli/_main.py`); anything else is a
bug and keeps its traceback. Messages name a setting by `setting_name`.
"""

import contextlib
import contextvars
import re
from collections.abc import Iterator

_FLAG_NAMES = contextvars.ContextVar("tf_mlstm_flag_names", default=False)


def setting_name(name: str) -> str:
    """The setting `name` as the user wrote it: `--name` in a binary, `name` from Python.

    Args:
      name: a config field's name, which is also its flag's name.

    Returns:
      `--name` inside `naming_flags()`, else `name`.
    """
    return f"--{name}" if _FLAG_NAMES.get() else name


@contextlib.contextmanager
def naming_flags() -> Iterator[None]:
    """Within it, `setting_name` gives flags: the user wrote a command line."""
    token = _FLAG_NAMES.set(True)
    try:
        yield
    finally:
        _FLAG_NAMES.reset(token)


class UserError(Exception):
    """A problem the user can fix; its message is the whole report (one line).

    Example:
    >>> from tf_mlstm import errors
    >>> error = errors.UserError("--input=a.json: no such file")
    >>> errors.is_user_error(error), errors.one_line(error)
    (True, '--input=a.json: no such file')
    """


class InvalidValueError(UserError, ValueError):
    """A flag, argument, file or record holds a value that cannot be used.

    Example:
    >>> from tf_mlstm import errors
    >>> try:
    ...     errors.check_int32("--seed", 2**31)
    ... except ValueError as error:  # also an InvalidValueError
    ...     print(error)
    --seed=2147483648 is out of range: sizes, counts and steps are at most 2147483647.
    """


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist (also a `FileNotFoundError`).

    Example:
    >>> from tf_mlstm import errors
    >>> error = errors.MissingFileError("--model_dir=runs/x: no such folder")
    >>> isinstance(error, FileNotFoundError), errors.is_user_error(error)
    (True, True)
    """


class WriteError(UserError):
    """The filesystem refused a write (full, over a size limit or quota, read-only).

    Example:
    >>> from tf_mlstm import errors
    >>> errors.is_user_error(errors.WriteError("out/: the disk is full"))
    True
    """


# TensorFlow's error codes for trouble outside the program: files that are
# missing, unreadable or damaged, a full disk or exhausted memory, peers that
# cannot be reached. By name, so this module never imports TensorFlow.
_TF_ENVIRONMENT_ERRORS = (
    "NotFoundError",
    "AlreadyExistsError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "UnavailableError",
    "DeadlineExceededError",
    "DataLossError",
)


def is_user_error(error) -> bool:
    """Whether `error` is one a user can fix (reported in one line) or a bug.

    Args:
      error: an exception.

    Returns:
      True for a `UserError`, an `OSError`, or a TensorFlow error of trouble outside the program.
    """
    if isinstance(error, (UserError, OSError)):
        return True
    module = type(error).__module__ or ""
    return module.startswith("tensorflow") and any(
        cls.__name__ in _TF_ENVIRONMENT_ERRORS for cls in type(error).__mro__
    )


# TensorFlow's op context around a message: "{{function_node __wrapped__SaveV2_...}} "
# before it and " [Op:SaveV2]" (with a "name: ...") after it.
_OP_PREFIX = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
_OP_SUFFIX = re.compile(r"\s*\[Op:\w+\](\s*name:.*)?$")


def one_line(error) -> str:
    """`error`'s message on one line, without TensorFlow's op context."""
    text = " ".join(str(error).split())
    message = getattr(error, "message", None)
    if isinstance(message, str) and message.strip():
        text = " ".join(message.split())
    text = _OP_SUFFIX.sub("", _OP_PREFIX.sub("", text))
    return text or type(error).__name__


# Sizes, counts, lengths and steps become int32 tensors (shapes, loop
# bounds, the sampler's length); past this a value overflows into a traceback.
INT32_MAX = 2**31 - 1


def check_int32(name, value) -> None:
    """Raises one line when the integer `value` of flag or argument `name` is past int32.

    Args:
      name: as the user wrote it (`--length`, or `length` for a Python argument).
      value: the integer given.

    Raises:
      InvalidValueError: `value` is above `INT32_MAX` or below its negative.
    """
    if not -INT32_MAX <= value <= INT32_MAX:
        raise InvalidValueError(
            f"{name}={value} is out of range: sizes, counts and steps are at most {INT32_MAX}."
        )
