"""Binaries started as processes forked from a warm interpreter, not from scratch.

A test that runs `python -m tf_mlstm.cli.<binary>` (or `python tools/<x>.py`,
or `python -c CODE`) as a subprocess pays TensorFlow's import, about 6-7
CPU-seconds, before the binary does anything; over the suite that was most
of its CPU. Here a fork server (one per pytest process and import-time
environment) imports TensorFlow once, as a binary's own start would
(quietly, devices probed), and each command is a process forked from it: a
real process with its own pid, exit status, signals, stdout and stderr
(files, or pipes read while it runs), environment and working folder, which
imports tf_mlstm and runs the binary's module as `__main__`, as `python -m`
does. No tf_mlstm module is imported before the fork, so each command runs
the code as it is on disk (a mutant's copy included). It ends as a process
ends (threads joined, exit handlers run, streams flushed) but without the
interpreter's teardown of every module TensorFlow loaded, about 1.3
CPU-seconds a command that nothing a test checks is in.

What a fork cannot reproduce falls back to a plain subprocess, so a test
keeps its meaning: a command that is not one of those three forms, a
command whose TensorFlow start-up is what is tested (`--verbosity`, `-v`, or
an environment asking to see TensorFlow's start-up lines), options this
module does not offer, input written while it runs, and any environment
variable read while TensorFlow loads (each value of those gets its own
server). PYTHONPATH is not one: it decides which tf_mlstm a command imports
and which start-up hooks run (`sitecustomize.py`, a test's injected fault);
each forked command's sys.path is made from its own, and its hooks run
before its main module, as at a fresh start (a server itself starts without
them). `TF_MLSTM_TESTS_NO_FORK=1` makes every command a plain subprocess, to
compare; in one command's environment, that command (and what it starts).

A forked command that itself starts `python -m tf_mlstm.cli.<binary>` (the
local cluster launcher starting its workers) forks that binary from its own
interpreter in turn while it has TensorFlow imported and not started: the
worker sheds what the launcher added (its flags, descriptors, signal
handlers and logging set-up), gets its own arguments, environment and
standard streams, and ends as a forked command does. Such a worker's /proc
environ and cmdline stay the launcher's. A binary whose PYTHONPATH holds a
start-up hook (the launcher has run it already) or whose start-up
environment differs starts fresh.

`run` and `Popen` take `subprocess.run`'s and `subprocess.Popen`'s
arguments; a test that checks TensorFlow's start-up itself keeps using
`subprocess`.
"""

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

# Read while TensorFlow (and Python) start: a command with other values than a server's
# needs a server started with them (PYTHONPATH aside: see `_server_for`).
_START_ENV = (
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONWARNINGS",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "CUDA_VISIBLE_DEVICES",
    "KERAS_BACKEND",
    "KERAS_HOME",
    "OMP_NUM_THREADS",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
)
# What the binaries set when the user did not (tf_mlstm/cli/_main.py's QUIET_TF_LOG_LEVEL):
# TensorFlow's start-up is then quiet, which is what the server's import reproduces.
_QUIET_LEVEL = "3"
_MAX_SERVERS = 3

_SERVER = textwrap.dedent(
    """
    import json, os, runpy, select, sys

    requests, replies = int(sys.argv[1]), int(sys.argv[2])
    START_ENV = json.loads(sys.argv[3])
    SERVER_PATH = [p for p in (os.environ.get("PYTHONPATH") or "").split(os.pathsep) if p]
    HOOKS = json.loads(sys.argv[4])
    # TensorFlow's import and device probe as a binary's quiet start makes them (tf_mlstm._quiet).
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    import tensorflow

    try:
        tensorflow.config.list_physical_devices()
    except Exception:
        pass
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


    def reply(message):
        os.write(replies, (json.dumps(message) + "\\n").encode())


    def run_main(argv, module, script, code=None):
        sys.argv = list(argv)
        if code is not None:  # `python -c CODE ...`: sys.argv[0] is "-c", sys.path[0] ""
            sys.path[0] = ""
            main = type(sys)("__main__")
            main.__builtins__ = __builtins__
            sys.modules["__main__"] = main
            exec(compile(code, "<string>", "exec"), main.__dict__)
        elif module:
            sys.path[0] = os.getcwd()
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(script)
            sys.path[0] = os.path.dirname(script)
            runpy.run_path(script, run_name="__main__")


    def end_quickly(code):
        # What a process's end does that anyone can see: its threads joined, its exit handlers
        # run (absl's and logging's flush among them), its streams flushed. Then the exit
        # itself, skipping the interpreter's teardown of every module TensorFlow loaded:
        # about 1.3 CPU-seconds a command, which a fresh process of the binary pays too, but
        # nothing it tests is in it.
        import atexit, threading

        threading._shutdown()
        atexit._run_exitfuncs()
        for out in (sys.stdout, sys.stderr):
            try:
                out.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)


    def own_path(env):
        # sys.path as the command's own PYTHONPATH makes it at a fresh start: the server's
        # entries out, the command's in, after sys.path[0] (no tf_mlstm module is imported
        # yet, so which copy of it the command runs follows from here).
        wanted = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
        rest = list(sys.path[1:])
        for entry in SERVER_PATH:
            if entry in rest:
                rest.remove(entry)
        sys.path[1:] = wanted + rest


    def hooks_on(env):
        # The start-up hooks (a test's injected fault) on `env`'s PYTHONPATH.
        path = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
        return [h for h in HOOKS if any(os.path.exists(os.path.join(p, h + ".py")) for p in path)]


    def run_hooks(env):
        # The command's start-up hooks, run as a fresh start runs them before its main module:
        # nothing of tf_mlstm is imported yet (a server never starts with a hook on its path,
        # `_server_for`).
        for hook in hooks_on(env):
            sys.modules.pop(hook, None)
            __import__(hook)


    def child(request, opened):
        os.close(requests)
        os.close(replies)
        for fd, handle in enumerate(opened):
            os.dup2(handle, fd)
        for handle in set(opened):
            if handle > 2:
                os.close(handle)
        os.environ.clear()
        os.environ.update(request["env"])
        own_path(request["env"])
        os.chdir(request["cwd"])
        fork_binaries_it_starts()
        run_hooks(request["env"])
        run_main(request["argv"], request["module"], request["script"], request.get("code"))


    def fork_binaries_it_starts():
        # A command that itself starts `python -m tf_mlstm.cli.<binary>` (the local cluster
        # launcher starting its workers) forks it from its own warm interpreter, which has
        # imported TensorFlow and not started it (once its runtime runs, as in a tool that
        # evaluates between runs, it starts them fresh). What the command had when it started is
        # what its forks shed: the flags and descriptors it added, its signal handlers.
        import io, logging, signal, subprocess, traceback
        from absl import app, flags

        known_flags, known_fds = set(flags.FLAGS), set(os.listdir("/proc/self/fd"))
        start = {name: os.environ.get(name) for name in START_ENV}

        def forkable(args, env, shell, executable, options):
            if shell or executable or isinstance(args, (str, bytes, os.PathLike)):
                return None
            argv = [os.fspath(arg) for arg in args]
            if len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
                return None
            if not argv[2].startswith("tf_mlstm.cli.") or any(
                arg.startswith(("--verbosity", "-v")) for arg in argv[3:]
            ):
                return None
            if any(env.get(name) != value for name, value in start.items()):
                return None  # read as TensorFlow loads: a fresh start reads them
            if hooks_on(env):
                return None  # a start-up hook (a test's injected fault) runs in a fresh start
            if runtime_started():
                return None  # its thread pools would not be in the fork: it would hang
            return None if any(options) else argv

        def runtime_started():
            from tensorflow.python.eager import context  # private: the test's own check

            started = context.context_safe()
            return started is not None and bool(getattr(started, "_initialized", True))

        def stream(fd, like):
            unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
            raw = io.FileIO(fd, "w", closefd=False)
            wrapped = io.TextIOWrapper(
                raw if unbuffered else io.BufferedWriter(raw),
                encoding=like.encoding,
                errors=like.errors,
                write_through=unbuffered,
            )
            return wrapped

        def forked_main(argv, env, cwd, fds, process_group, new_session):
            code = 1
            try:
                for sig in signal.valid_signals():
                    if callable(signal.getsignal(sig)) and sig != signal.SIGINT:
                        signal.signal(sig, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                if new_session:
                    os.setsid()
                elif process_group is not None and process_group >= 0:
                    os.setpgid(0, process_group)
                for target, fd in enumerate(fds):
                    if fd != -1:
                        os.dup2(fd, target)
                for fd in set(os.listdir("/proc/self/fd")) - known_fds:
                    if int(fd) > 2:
                        try:
                            os.close(int(fd))
                        except OSError:
                            pass
                sys.stdout, sys.stderr = stream(1, sys.stdout), stream(2, sys.stderr)
                sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
                for name in set(flags.FLAGS) - known_flags:
                    delattr(flags.FLAGS, name)
                flags.FLAGS.unparse_flags()
                # absl's `app.run` sets up its flags and logging once per process: again here.
                app._run_init.done = False
                app._register_and_parse_flags_with_usage.done = False
                app._define_help_flags_called = False
                root = logging.getLogger()
                for handler in list(root.handlers):
                    root.removeHandler(handler)
                root.setLevel(logging.WARNING)
                if env is not None:
                    os.environ.clear()
                    os.environ.update(env)
                if cwd is not None:
                    os.chdir(cwd)
                try:
                    run_main(argv[2:], argv[2], None)
                    code = 0
                except SystemExit as e:
                    if e.code is None or isinstance(e.code, int):
                        code = e.code or 0
                    else:
                        print(e.code, file=sys.stderr)
            except KeyboardInterrupt:
                traceback.print_exc()
                code = -signal.SIGINT  # as Python ends on an uncaught Ctrl-C: by the signal
            except BaseException:
                traceback.print_exc()
            finally:
                for out in (sys.stdout, sys.stderr):
                    try:
                        out.flush()
                    except Exception:
                        pass
                if code < 0:
                    signal.signal(-code, signal.SIG_DFL)
                    os.kill(os.getpid(), -code)
                # A process's end (threads joined, exit handlers run, `end_quickly`), never
                # back into the stack of the process it forked.
                end_quickly(code)

        class ForkedBinary(subprocess.Popen):
            def _execute_child(
                self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                errread, errwrite, restore_signals, gid, gids, uid, umask,
                start_new_session, process_group,
            ):
                unsupported = [pass_fds, gid, gids, uid, umask not in (-1, None)]
                argv = forkable(
                    args, os.environ if env is None else env, shell, executable, unsupported
                )
                if argv is None:
                    return super()._execute_child(
                        args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                        startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread,
                        c2pwrite, errread, errwrite, restore_signals, gid, gids, uid,
                        umask, start_new_session, process_group,
                    )
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    if preexec_fn is not None:  # As in a spawned child: after the fork.
                        preexec_fn()
                    fds = (p2cread, c2pwrite, errwrite)
                    forked_main(argv, env, cwd, fds, process_group, start_new_session)
                self.pid = pid
                self.forked = True
                self._child_created = True
                self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

        subprocess.Popen = ForkedBinary


    def open_stdio(stdio):
        # Opened here, before the fork and the reply: the test may close its own copy (a
        # log file it hands on) as soon as the command has started.
        opened, by_path = [], {}
        for path, flags in stdio:
            if path not in by_path:
                by_path[path] = os.open(path, flags, 0o644)
            opened.append(by_path[path])
        return opened


    reply({"ready": os.getpid()})
    pending = b""
    while True:
        readable, _, _ = select.select([requests], [], [], 0.02)
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            cpu = usage.ru_utime + usage.ru_stime
            reply({"pid": pid, "code": os.waitstatus_to_exitcode(status), "cpu": cpu})
        if not readable:
            continue
        data = os.read(requests, 1 << 20)
        if not data:
            break
        pending += data
        while b"\\n" in pending:
            line, pending = pending.split(b"\\n", 1)
            request = json.loads(line)
            try:
                opened = open_stdio(request["stdio"])
            except OSError as e:
                reply({"id": request["id"], "error": str(e)})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                # Its own exit: SystemExit, an exception (traceback, the interpreter's end),
                # a signal.
                code = 0
                try:
                    child(request, opened)
                except SystemExit as e:
                    if e.code is None or isinstance(e.code, int):
                        code = e.code or 0
                    else:
                        print(e.code, file=sys.stderr)
                        code = 1
                end_quickly(code)
            for handle in set(opened):
                os.close(handle)
            reply({"id": request["id"], "pid": pid})
    """
)


class _Server:
    """One warm interpreter and the commands forked from it."""

    def __init__(self, env):
        requests_read, self._requests = os.pipe()
        self._replies, replies_write = os.pipe()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _SERVER,
                str(requests_read),
                str(replies_write),
                json.dumps(_START_ENV),
                json.dumps(_HOOKS),
            ],
            pass_fds=(requests_read, replies_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        os.close(requests_read)
        os.close(replies_write)
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._started = {}
        self.codes = {}
        self._next = 0
        self._reader = os.fdopen(self._replies, "rb")
        first = self._reader.readline()
        self.ok = first.startswith(b'{"ready"')
        if self.ok:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self._reader:
            message = json.loads(line)
            with self._changed:
                if "code" in message:
                    self.codes[message["pid"]] = message["code"]
                    global CHILD_CPU_SECONDS  # noqa: PLW0603
                    CHILD_CPU_SECONDS += message["cpu"]
                else:
                    self._started[message["id"]] = message.get("pid", message.get("error"))
                self._changed.notify_all()
        with self._changed:
            self.ok = False
            self._changed.notify_all()

    def fork(self, request):
        """Starts `request`'s command; returns its pid."""
        with self._lock:
            self._next += 1
            request = dict(request, id=self._next)
            os.write(self._requests, (json.dumps(request) + "\n").encode())
        with self._changed:
            self._changed.wait_for(lambda: request["id"] in self._started or not self.ok, 60)
            if request["id"] not in self._started:
                raise RuntimeError("the fork server ended without starting the command")
            started = self._started.pop(request["id"])
        if isinstance(started, str):
            raise OSError(f"the command's standard streams could not be opened: {started}")
        return started

    def wait(self, pid, timeout):
        with self._changed:
            self._changed.wait_for(lambda: pid in self.codes or not self.ok, timeout)
            return self.codes.get(pid)

    def close(self):
        os.close(self._requests)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


_servers = {}
# CPU-seconds of the commands forked so far (waited for), as `RUSAGE_CHILDREN` counts a
# subprocess's: what a test's commands cost, for a profile of the suite.
CHILD_CPU_SECONDS = 0.0
_servers_lock = threading.Lock()


@atexit.register
def _close_servers():
    for server in _servers.values():
        if server is not None:
            server.close()


def _server_for(args, env):
    """The server for `args` run with `env`, started as its TensorFlow would start."""
    start_env = dict(env)
    module = _command(args)[0]
    level = env.get("TF_CPP_MIN_LOG_LEVEL", "")
    if module and module.startswith("tf_mlstm.cli.") and level == "":
        # The binaries set their quiet level before TensorFlow loads (tf_mlstm/cli/_main.py);
        # TensorFlow reads it once, as it loads.
        start_env["TF_CPP_MIN_LOG_LEVEL"] = _QUIET_LEVEL
    # PYTHONPATH decides only which tf_mlstm a command imports and which start-up hooks run
    # (both per command: `own_path`, `run_hooks`): one server serves every value of it, and
    # starts without the hooks, which a server must not run for the commands it serves.
    start_env["PYTHONPATH"] = _without_start_up_hooks(start_env.get("PYTHONPATH"))
    if start_env["PYTHONPATH"] is None:
        del start_env["PYTHONPATH"]
    key = tuple(start_env.get(name) for name in _START_ENV if name != "PYTHONPATH")
    with _servers_lock:
        if key not in _servers:
            if len(_servers) >= _MAX_SERVERS:
                return None
            server = _Server(start_env)
            _servers[key] = server if server.ok else None
        return _servers[key]


def _command(args):
    """(module, script, code) when `args` is `python -m module ...`, `python x.py ...` or
    `python -c CODE ...` (the other two None), else None."""
    args = [os.fspath(arg) for arg in args]
    if len(args) < 2 or args[0] != sys.executable:
        return None
    if args[1] == "-m" and len(args) > 2:
        return args[2], None, None
    if args[1] == "-c" and len(args) > 2:
        return None, None, args[2]
    if args[1].endswith(".py"):
        return None, args[1], None
    return None


# The modules Python runs at start-up when a PYTHONPATH folder holds them.
_HOOKS = ("sitecustomize", "usercustomize")


def _without_start_up_hooks(path):
    """PYTHONPATH `path` less the folders holding a module Python runs at start-up."""
    entries = [p for p in (path or "").split(os.pathsep) if p]
    kept = [
        p for p in entries if not any(os.path.exists(os.path.join(p, h + ".py")) for h in _HOOKS)
    ]
    return os.pathsep.join(kept) or None


def _forkable(args, env, options):
    if os.environ.get("TF_MLSTM_TESTS_NO_FORK") or env.get("TF_MLSTM_TESTS_NO_FORK"):
        return False  # in this process, or for this command (and what it starts)
    if set(options) - _OPTIONS:
        return False
    if _command(args) is None:
        return False
    if any(str(arg).startswith(("--verbosity", "-v")) for arg in args[2:]):
        return False  # The binary sets TensorFlow's log level before TensorFlow loads.
    # A level showing TensorFlow's start-up lines: they come from a real start only.
    return env.get("TF_CPP_MIN_LOG_LEVEL", "") not in ("0",)


_OPTIONS = {
    "stdin",
    "stdout",
    "stderr",
    "env",
    "cwd",
    "text",
    "errors",
    "encoding",
    "universal_newlines",
}


class _Input:
    """A file the command reads as its standard input (`run`'s `input=`)."""

    def __init__(self, folder, data):
        self.path = os.path.join(folder, "input")
        with open(self.path, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)


class ForkedProcess:
    """A `subprocess.Popen` look-alike for a command forked from a server.

    With `live_pipes` (what `Popen` asks for), stdout and stderr given as
    `subprocess.PIPE` are pipes read while the command runs, as a
    subprocess's are: `proc.stdout.readline()`, and `communicate` reading
    both to their end (a named pipe the server opens for the command, so the
    end comes when every process holding it has closed it). Without it
    (`run`), what the command writes is collected in a file and read once it
    has ended.
    """

    def __init__(
        self, server, args, stdin, stdout, stderr, env, cwd, text, errors, encoding, live_pipes
    ):
        self.args = args
        self.returncode = None
        self._server = server
        self._text = text or errors is not None or encoding is not None
        self._errors = errors or "strict"
        self._encoding = encoding or "utf-8"
        self._folder = tempfile.mkdtemp(prefix="forked-")
        self._captured = {}
        self._live = {}  # fd -> the read end of its named pipe, opened before the fork
        self._readers = None
        write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            stdio = [self._stdio(0, stdin, os.O_RDONLY)]
            stdio.append(self._stdio(1, stdout, write, live_pipes))
            if stderr == subprocess.STDOUT:
                stdio.append(stdio[1])
            else:
                stdio.append(self._stdio(2, stderr, write, live_pipes))
            module, script, code = _command(args)
            argv = [os.fspath(arg) for arg in args]
            self.pid = server.fork(
                {
                    # sys.argv as `python -m module ...` (runpy puts the module's path first),
                    # `python script ...` or `python -c CODE ...` makes it.
                    "argv": argv[2:] if module else ["-c", *argv[3:]] if code else argv[1:],
                    "module": module,
                    "script": script,
                    "code": code,
                    "env": env,
                    "cwd": os.fspath(cwd or os.getcwd()),
                    "stdio": stdio,
                }
            )
        except BaseException:
            for handle in self._live.values():
                os.close(handle)
            shutil.rmtree(self._folder, ignore_errors=True)
            raise
        self.stdin = None
        self.stdout, self.stderr = (self._pipe(fd) for fd in (1, 2))

    def _stdio(self, fd, what, flags, live=False):
        if what is None:
            # Inherited: this process's own descriptor, as it is now.
            if fd == 0:
                return [os.devnull, os.O_RDONLY]
            return [f"/proc/{os.getpid()}/fd/{fd}", os.O_WRONLY | os.O_APPEND]
        if what == subprocess.DEVNULL:
            return [os.devnull, flags]
        if what == subprocess.PIPE and live and fd:
            path = os.path.join(self._folder, f"pipe-{fd}")
            os.mkfifo(path)
            # Open for reading first (without waiting for a writer), so the server's open
            # for writing returns at once.
            self._live[fd] = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            return [path, os.O_WRONLY]
        if what == subprocess.PIPE:
            path = os.path.join(self._folder, str(fd))
            self._captured[fd] = path
            if fd == 0:
                open(path, "wb").close()
            return [path, flags]
        if isinstance(what, _Input):
            return [what.path, os.O_RDONLY]
        number = what if isinstance(what, int) else what.fileno()
        # The same open file, reached through this process: appended to, as a shared
        # descriptor would be (stdout and stderr to one log).
        return [f"/proc/{os.getpid()}/fd/{number}", flags | (os.O_APPEND if fd else 0)]

    def _pipe(self, fd):
        """The file object reading `fd`'s live pipe (blocking now that the command holds it)."""
        if fd not in self._live:
            return None
        os.set_blocking(self._live[fd], True)
        if self._text:
            return open(self._live[fd], encoding=self._encoding, errors=self._errors)
        return open(self._live[fd], "rb")

    def poll(self):
        if self.returncode is None:
            self.returncode = self._server.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            self.returncode = self._server.wait(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def _output(self, fd):
        if fd not in self._captured:
            return None
        with open(self._captured[fd], "rb") as f:
            data = f.read()
        return data.decode(self._encoding, self._errors) if self._text else data

    def _read_pipes(self, timeout):
        """Both live pipes read to their end, as `communicate` reads a subprocess's."""
        if self._readers is None:
            self._readers = {}
            for fd, stream in ((1, self.stdout), (2, self.stderr)):
                if stream is not None:
                    chunks = []
                    reader = threading.Thread(
                        target=lambda stream=stream, chunks=chunks: chunks.append(stream.read()),
                        daemon=True,
                    )
                    reader.start()
                    self._readers[fd] = (reader, chunks)
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader, _ in self._readers.values():
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        outputs = {fd: chunks[0] for fd, (_, chunks) in self._readers.items()}
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return outputs, None if deadline is None else max(0.0, deadline - time.monotonic())

    def communicate(self, input=None, timeout=None):  # noqa: A002 (Popen's name)
        del input
        live = {}
        if self._live:
            live, timeout = self._read_pipes(timeout)
        self.wait(timeout)
        outputs = tuple(live[fd] if fd in live else self._output(fd) for fd in (1, 2))
        shutil.rmtree(self._folder, ignore_errors=True)
        return outputs


def Popen(args, **options):  # noqa: N802 (subprocess's name)
    """`subprocess.Popen(args, **options)`, forked from a server where it can be."""
    env = dict(options.get("env") or os.environ)
    if not _forkable(args, env, options) or options.get("stdin") == subprocess.PIPE:
        # Input written while the command runs: a plain subprocess has the pipe.
        return subprocess.Popen(args, **options)
    server = _server_for(args, env)
    if server is None:
        return subprocess.Popen(args, **options)
    return _forked(server, args, env, options, live_pipes=True)


def _forked(server, args, env, options, live_pipes=False):
    return ForkedProcess(
        server,
        list(args),
        options.get("stdin"),
        options.get("stdout"),
        options.get("stderr"),
        env,
        options.get("cwd"),
        options.get("text") or options.get("universal_newlines"),
        options.get("errors"),
        options.get("encoding"),
        live_pipes,
    )


def run(args, *, capture_output=False, timeout=None, check=False, input=None, **options):  # noqa: A002
    """`subprocess.run(args, ...)`, forked from a server where it can be."""
    env = dict(options.get("env") or os.environ)
    server = _forkable(args, env, options) and _server_for(args, env)
    if not server:
        return subprocess.run(
            args,
            capture_output=capture_output,
            timeout=timeout,
            check=check,
            input=input,
            **options,
        )
    if capture_output:
        options = dict(options, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    folder = tempfile.mkdtemp(prefix="forked-input-")
    try:
        if input is not None:
            options = dict(options, stdin=_Input(folder, input))
        process = _forked(server, args, env, options)
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            process.kill()
            process.wait(30)
            # What it wrote before the kill, as subprocess.run's time-out carries it.
            expired.output, expired.stderr = process.communicate()
            raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    done = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        done.check_returncode()
    return done
