"""Runs one command as N multi-worker processes on this machine.

The reusable core of `tools/launch_local_workers.py`: pick free loopback
ports, give each worker its `TF_CONFIG`, start the workers each in its own
process group, prefix every line they print with `[worker i] `, optionally
pin each to its own CPU cores, and supervise them: the first worker to fail
takes the others down and its exit status becomes the launcher's.

Workers end with their launcher: on Linux each gets SIGKILL when the
launcher dies (the parent-death signal), so a launcher killed outright (a
lost login node, `kill -9`) leaves no orphans holding the run's lock, and
the same command relaunched takes the run over at once.

Stopping a worker takes SIGKILL in general: a TensorFlow multi-worker
process installs a SIGTERM handler (for preemption notices) and keeps
blocking in a collective, so SIGTERM is sent first and SIGKILL follows after
a grace period.
"""

import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TextIO

from absl import logging

from tf_mlstm import errors

HOST = "127.0.0.1"
_POLL_S = 0.05
# After a worker fails, how long the others get to stop by themselves before
# SIGTERM (at most the grace period): a survivor that already saw its peer
# go is on its way out with one line saying so, and a SIGTERM in that moment
# (its handler back to the default once training has ended) would end it
# before it says it.
_REPORT_S = 5.0
# prctl(2)'s option that sends the calling process a signal when its parent dies.
_PR_SET_PDEATHSIG = 1


def pick_ports(num_workers: int, base_port: int = 0, host: str = HOST) -> list[int]:
    """Chooses one TCP port per worker.

    Args:
      num_workers: how many ports.
      base_port: 0 lets the OS pick free ports; otherwise the ports are
        `base_port, base_port + 1, ...` and must be free.
      host: the address the workers will listen on.

    Returns:
      The ports, in worker order.

    Raises:
      ValueError: `num_workers` < 1, `base_port` out of range, or a requested
        port is taken.
    """
    if num_workers < 1:
        raise errors.InvalidValueError(f"num_workers must be >= 1, got {num_workers}")
    if base_port and not 0 < base_port <= 65536 - num_workers:
        raise errors.InvalidValueError(
            f"base_port {base_port} leaves no room for {num_workers} ports"
        )
    # All sockets stay bound until every port is chosen, so the OS cannot
    # hand out one port twice; the workers bind them again a moment later.
    with contextlib.ExitStack() as stack:
        ports = []
        for i in range(num_workers):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            port = base_port + i if base_port else 0
            try:
                sock.bind((host, port))
            except OSError as e:
                raise errors.InvalidValueError(
                    f"port {port} on {host} is not free: {e.strerror}"
                ) from None
            ports.append(sock.getsockname()[1])
    return ports


def build_tf_config(ports: Sequence[int], index: int, host: str = HOST) -> str:
    """The `TF_CONFIG` value for worker `index` of a loopback cluster.

    Args:
      ports: one port per worker.
      index: this worker's index.
      host: the workers' address.

    Returns:
      JSON text: `{"cluster": {"worker": ["host:p0", ...]}, "task":
      {"type": "worker", "index": index}}`.
    """
    return json.dumps(
        {
            "cluster": {"worker": [f"{host}:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
    )


def core_sets(num_workers: int, cpus_per_worker: int) -> list[set[int]] | None:
    """Splits the CPUs this process may use into one block per worker.

    Args:
      num_workers: how many workers.
      cpus_per_worker: cores per worker (K); worker i gets the i-th block of
        K cores among those allowed to this process.

    Returns:
      One core set per worker, or None (with a warning) when there are too
      few cores or the platform cannot pin.
    """
    if not hasattr(os, "sched_getaffinity"):
        logging.warning("CPU pinning is not supported on this platform; not pinning")
        return None
    cores = sorted(os.sched_getaffinity(0))
    needed = num_workers * cpus_per_worker
    if needed > len(cores):
        logging.warning(
            "%d workers x %d cores need %d cores but %d are available; not pinning",
            num_workers,
            cpus_per_worker,
            needed,
            len(cores),
        )
        return None
    return [set(cores[i * cpus_per_worker : (i + 1) * cpus_per_worker]) for i in range(num_workers)]


def worker_env(
    ports: Sequence[int],
    index: int,
    cpus_per_worker: int | None = None,
    base_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of worker `index`.

    Args:
      ports: one port per worker.
      index: the worker's index.
      cpus_per_worker: when set, TensorFlow's thread pools get this many
        threads, matching the cores the worker is pinned to.
      base_env: the environment to extend; None uses this process's.

    Returns:
      The environment, with `TF_CONFIG` set.
    """
    env = dict(os.environ if base_env is None else base_env)
    env["TF_CONFIG"] = build_tf_config(ports, index)
    # Pipes are block-buffered; unbuffered output keeps the workers' lines
    # interleaved in the order they were printed.
    env["PYTHONUNBUFFERED"] = "1"
    if cpus_per_worker:
        env["TF_NUM_INTEROP_THREADS"] = str(cpus_per_worker)
        env["TF_NUM_INTRAOP_THREADS"] = str(cpus_per_worker)
    return env


def end_with_launcher():
    """A `preexec_fn` that makes a worker get SIGKILL when this process dies, or None.

    Linux only (`prctl(PR_SET_PDEATHSIG)`); elsewhere None, and a killed
    launcher's workers run on. The function is resolved here, before any
    fork, so the child only calls it.

    Returns:
      The function for `subprocess.Popen(preexec_fn=...)`, or None.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    launcher = os.getpid()

    def preexec():
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher:  # The launcher died before the line above took effect.
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def run_local_workers(
    command: Sequence[str],
    num_workers: int,
    cpus_per_worker: int | None = None,
    base_port: int = 0,
    grace_s: float = 5.0,
    forward_signals: bool = True,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Runs `command` as `num_workers` workers of a loopback cluster.

    Args:
      command: the program and its arguments, run as is by every worker.
      num_workers: how many workers.
      cpus_per_worker: when set, pins worker i to cores `[i*K, (i+1)*K)` and
        sizes its TensorFlow thread pools to K.
      base_port: first port (0: free ports chosen by the OS).
      grace_s: how long a worker asked to stop may take before SIGKILL.
      forward_signals: pass SIGINT and SIGTERM on to the workers (only from
        the main thread, where Python can handle signals).
      stdout: where the workers' prefixed stdout lines go (default
        `sys.stdout`).
      stderr: where their stderr lines go (default `sys.stderr`).

    Returns:
      0 when every worker exits 0; otherwise the status of the first worker
      to fail (128 + the signal for a worker killed by a signal). When the
      launcher itself is sent SIGINT or SIGTERM, it passes the signal on and
      returns the status the workers end with inside the grace period (75
      for a training run that checkpointed on SIGTERM, so a scheduler sees
      what a worker would have said), or 128 + the signal if they do not.

    Raises:
      ValueError: an empty command, a program that is not found, or bad
        worker/port/CPU counts.
    """
    if not command:
        raise errors.InvalidValueError("no command to run")
    if shutil.which(command[0]) is None:
        raise errors.InvalidValueError(
            f"command not found: {command[0]!r} (not a file, nor on PATH)"
        )
    if cpus_per_worker is not None and cpus_per_worker < 1:
        raise errors.InvalidValueError(f"cpus_per_worker must be >= 1, got {cpus_per_worker}")
    ports = pick_ports(num_workers, base_port)
    cores = core_sets(num_workers, cpus_per_worker) if cpus_per_worker else None
    logging.info(
        "starting %d workers on %s ports %s: %s",
        num_workers,
        HOST,
        ports,
        shlex.join(command),
    )
    supervisor = _Supervisor(grace_s, stdout or sys.stdout, stderr or sys.stderr)
    with _forwarded_signals(supervisor, enabled=forward_signals):
        try:
            for index in range(num_workers):
                env = worker_env(ports, index, cpus_per_worker)
                supervisor.start(index, command, env, cores[index] if cores else None)
            return supervisor.wait()
        finally:
            supervisor.stop_all()


class _Supervisor:
    """Starts workers, relays their output and stops them together."""

    def __init__(self, grace_s, stdout, stderr):
        self._grace_s = grace_s
        self._streams = {"stdout": stdout, "stderr": stderr}
        self._lock = threading.Lock()
        self._procs = []
        self._readers = []
        self._signal = None
        # When the workers' grace period ends: one period from the first stop
        # request (a forwarded signal) to SIGKILL, however many stages follow.
        self._deadline = None

    def start(self, index, command, env, cores):
        proc = subprocess.Popen(
            list(command),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Its own group, so that stopping a worker also stops whatever it
            # started, and a terminal's Ctrl-C reaches workers only through us.
            process_group=0,
            preexec_fn=end_with_launcher(),
        )
        self._procs.append(proc)
        if cores is not None:
            # Set right after exec, before the interpreter starts threads,
            # which inherit it.
            try:
                os.sched_setaffinity(proc.pid, cores)
            except OSError as e:
                logging.warning("could not pin worker %d to cores %s: %s", index, cores, e)
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            reader = threading.Thread(
                target=self._relay, args=(f"[worker {index}] ", pipe, name), daemon=True
            )
            reader.start()
            self._readers.append(reader)

    def _relay(self, prefix, pipe, name):
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                with self._lock:
                    stream = self._streams[name]
                    stream.write(f"{prefix}{line}\n")
                    stream.flush()

    def interrupt(self, signum):
        """Called from a signal handler: remember it, pass it on."""
        self._signal = signum
        self._start_grace()
        for proc in self._procs:
            _signal_group(proc, signum)

    def wait(self):
        """Waits for all workers; returns the run's exit status."""
        while True:
            if self._signal is not None:
                return self._status_after_signal()
            codes = [proc.poll() for proc in self._procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                index, code = failed[0]
                logging.error("worker %d exited with status %d; stopping the others", index, code)
                self._let_the_others_stop(min(_REPORT_S, self._grace_s))
                return 128 - code if code < 0 else code
            if all(c == 0 for c in codes):
                return 0
            time.sleep(_POLL_S)

    def _let_the_others_stop(self, seconds):
        """Waits up to `seconds` for every worker to exit by itself."""
        deadline = time.monotonic() + seconds
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return

    def _status_after_signal(self):
        """The workers' status once they obeyed the forwarded signal, within the grace period."""
        deadline = self._start_grace()
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        codes = [proc.poll() for proc in self._procs]
        failed = [code for code in codes if code not in (None, 0)]
        if None in codes or not failed:
            # Still running (`stop_all` ends them) or all done: the signal's own status.
            return 128 + self._signal
        return 128 - failed[0] if failed[0] < 0 else failed[0]

    def _start_grace(self):
        """The end of the workers' grace period, which starts at the first call."""
        if self._deadline is None:
            self._deadline = time.monotonic() + self._grace_s
        return self._deadline

    def stop_all(self):
        """Stops any live worker: SIGTERM, then SIGKILL once the grace period ends.

        The period runs from the first stop request: workers sent a signal
        earlier (`interrupt`) that ignored it are killed when it ends, not
        after a second period.
        """
        live = [proc for proc in self._procs if proc.poll() is None]
        for proc in live:
            _signal_group(proc, signal.SIGTERM)
        deadline = self._start_grace()
        for proc in live:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in live:
            # Also reaches children the worker started in its group.
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        for reader in self._readers:
            # A grandchild that escaped its group could hold a pipe open.
            reader.join(timeout=self._grace_s)


def _signal_group(proc, signum):
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@contextlib.contextmanager
def _forwarded_signals(supervisor, enabled):
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = lambda signum, frame: supervisor.interrupt(signum)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
