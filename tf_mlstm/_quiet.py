"""TensorFlow's start-up, quiet: its first import and GPU probe with stderr on /dev/null.

Later messages show as usual; a user who set `TF_CPP_MIN_LOG_LEVEL` sees everything.
"""

import contextlib
import importlib.abc
import importlib.util
import os
import sys

TF_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL"
"""TensorFlow's C++ log threshold: 0 all, 1 no INFO, 2 no WARNING, 3 no ERROR."""

PACKAGE = "tensorflow"


def user_chose_tensorflow_log_level(environ=None):
    """Whether `TF_CPP_MIN_LOG_LEVEL` is set (an empty value counts as unset)."""
    return (os.environ if environ is None else environ).get(TF_LOG_LEVEL, "") != ""


def quiet_start():
    """Makes TensorFlow's first import (or, once imported, its GPU probe) quiet; idempotent."""
    if PACKAGE in sys.modules:
        with stderr_to_devnull():
            _probe_devices(sys.modules[PACKAGE])
        return
    if not any(isinstance(finder, _QuietFirstImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietFirstImport(PACKAGE))


def loud_start():
    """Undoes `quiet_start` for an import still to come: TensorFlow then starts as it prints."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _QuietFirstImport)]


def _shows_info():
    level = os.environ.get(TF_LOG_LEVEL, "")
    return level != "" and not (level.isdigit() and int(level) >= 1)


def _probe_devices(tensorflow):
    # Looking for GPUs once initializes CUDA (or fails to, with its error line);
    # later lookups, and the runtime's start, print nothing more.
    try:
        tensorflow.config.list_physical_devices()
    except Exception:  # pylint: disable=broad-except
        pass  # Only quietness is at stake: the run's own use reports a real failure.


class _QuietFirstImport(importlib.abc.MetaPathFinder):
    """Runs the first import of one package with file descriptor 2 on /dev/null."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        del path, target
        if fullname != self.name:
            return None
        loud_start()
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or _shows_info():
            return spec  # A level set since to show everything (0): TensorFlow starts as it prints.
        spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    """`loader`, executing the module (and the GPU probe) with stderr on /dev/null."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        with stderr_to_devnull():
            self.loader.exec_module(module)
            _probe_devices(module)


_SAVED_STDERR = []  # the real stderr's descriptor while fd 2 is on /dev/null


def stderr_fd() -> int:
    """The descriptor of the process's real stderr, also while start-up is quiet."""
    return _SAVED_STDERR[-1] if _SAVED_STDERR else 2


@contextlib.contextmanager
def stderr_to_devnull():
    """Points file descriptor 2 at /dev/null (C++ writes there directly), then back."""
    sys.stderr.flush()
    saved = os.dup(2)
    _SAVED_STDERR.append(saved)
    try:
        with open(os.devnull, "w", encoding="utf-8") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        _SAVED_STDERR.pop()
        os.close(saved)
