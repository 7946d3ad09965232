"""Whether a process of this host still runs (TensorFlow-free: `preflight` asks it too)."""

import os
import socket


def ended(host: str, pid: int) -> bool:
    """Whether process `pid` of `host` has ended (False when it cannot tell); a zombie has ended.

    Example:
    >>> import os, socket
    >>> ended(socket.gethostname(), os.getppid())
    False
    """
    if host != socket.gethostname():
        return False  # another machine: no way to tell, so it counts as live
    if pid == os.getpid():
        return True  # ours but not in flight (the caller checks): an earlier process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name (field 2) may hold spaces; the state follows the last ')'.
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), else None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name (field 2) may hold spaces; it ends at the last ')'.
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None
