"""Several tf-mlstm commands run one after another in one process of their own.

A binary run as its own process pays its own start (tf_mlstm's imports, a
fork from `_forkserver`'s warm interpreter, the first trace of each function)
each time. A test that runs a sequence of commands (transfer, then classify,
then export) and looks at each one's exit status, output and files, but not
at what a process start does (a signal, a kill), runs them here: in one
process, apart from the test's own (so no state of the test's TensorFlow
reaches them; forked through `_forkserver`), each through its binary's own entry
point (`tf_mlstm.cli.<binary>.run`, or a tool's script as `__main__`), with
the flags defined afresh for each, as the docs walk-through does.

Each command gets its own stdout and stderr, Python's and the C++ log's
alike (file descriptors 1 and 2 are redirected), and its exit status: what
`SystemExit` carried (0 when the entry point returned), or "exception" with
the traceback on its stderr. An argument `--flag=@newest:FOLDER` becomes
the newest numbered version in FOLDER as the command starts (an export an
earlier command of the sequence made).
"""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import _forkserver
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent

# The runner: reads the plan, runs each command, writes the results as it goes.
RUNNER = textwrap.dedent(
    """
    import importlib, io, json, logging, os, runpy, sys, time, traceback
    from absl import app, flags  # app defines its own flags, which every command keeps
    from tf_mlstm.cli import _flags

    FLAGS = flags.FLAGS
    plan_path, results_path = sys.argv[1:3]


    def expanded(arg):
        # "--flag=@newest:FOLDER": the newest numbered version in FOLDER, as it is now.
        if "@newest:" not in arg:
            return arg
        flag, folder = arg.split("@newest:")
        versions = [p for p in os.listdir(folder) if p.isdigit()]
        return flag + os.path.join(folder, max(versions, key=int))


    # Python's logging as it is before any command: a command's code (TensorFlow's import,
    # absl's flag parsing) leaves levels changed, which the next would inherit.
    loggers = [logging.getLogger(n) for n in ("absl", "tensorflow", "keras")] + [logging.root]
    baseline = [(lg, lg.level, lg.disabled, lg.propagate) for lg in loggers]
    results = []
    for item in json.load(open(plan_path)):
        for lg, level, disabled, propagate in baseline:
            lg.setLevel(level)
            lg.disabled, lg.propagate = disabled, propagate
        if results:  # absl's app.run makes INFO the default once per process: again here
            FLAGS.verbosity = 0
        module = None if item["tool"] else importlib.import_module(item["module"])
        with _flags.one_commands_flags():
            stdin, argv, start = sys.stdin, sys.argv, time.monotonic()
            sys.stdout.flush()
            sys.stderr.flush()
            saved = [os.dup(1), os.dup(2)]
            out = os.open(item["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            err = os.open(item["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out, 1)
            os.dup2(err, 2)
            sys.argv = [expanded(arg) for arg in item["argv"]]
            if item["stdin"] is not None:
                sys.stdin = io.TextIOWrapper(io.BytesIO(item["stdin"].encode("utf-8")))
            status = 0
            try:
                if item["tool"]:
                    runpy.run_path(item["module"], run_name="__main__")
                else:
                    module.run()
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (1 if e.code else 0)
            except BaseException:
                traceback.print_exc()
                status = "exception"
            finally:
                sys.stdin, sys.argv = stdin, argv
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                for fd in (out, err, *saved):
                    os.close(fd)
        seconds = round(time.monotonic() - start, 1)
        results.append({"status": status, "seconds": seconds})
        json.dump(results, open(results_path, "w"))
    """
)


@dataclasses.dataclass
class Result:
    """One command's end: like `subprocess.CompletedProcess`, `returncode` may be "exception"."""

    args: list
    returncode: object
    stdout: str
    stderr: str
    seconds: float


def _plan_item(command, stdin, folder, index):
    """The runner's item for `command`: [python, -m, module, ...] or [python, tools/x.py, ...]."""
    command = [str(arg) for arg in command]
    if command[0] == sys.executable:
        command = command[1:]
    if command[0] == "-m":
        module, args, tool = command[1], command[2:], False
        program = "tf-mlstm-" + module.rsplit(".", 1)[1].replace("_", "-")
    else:
        module, args, tool = str(REPO / command[0]), command[1:], True
        program = command[0]
    return {
        "module": module,
        "tool": tool,
        "argv": [program, *args],
        "stdin": stdin,
        "stdout": str(folder / f"{index}.out"),
        "stderr": str(folder / f"{index}.err"),
    }


def run_in_one_process(commands, folder, timeout, stdin=None, cwd=REPO, env=None):
    """Runs `commands` in order in one fresh process (see the module doc).

    Args:
      commands: argument lists as a test gives `subprocess.run`:
        `[sys.executable, "-m", "tf_mlstm.cli.<binary>", *flags]`, or a tool
        `[sys.executable, "tools/<tool>.py", *flags]` (a path from the
        repository root).
      folder: a folder for the plan and each command's output.
      timeout: seconds for all of them together.
      stdin: None, or a list with each command's standard input (text or None).
      cwd: the folder they run in.
      env: extra environment variables over this process's.

    Returns:
      A `Result` per command that ran; a command that hangs fails the test
      with its output, naming it.
    """
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stdin = stdin or [None] * len(commands)
    items = [_plan_item(c, s, folder, i) for i, (c, s) in enumerate(zip(commands, stdin))]
    plan, results_path = folder / "plan.json", folder / "results.json"
    plan.write_text(json.dumps(items))
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "tools"), environment.get("PYTHONPATH", "")]
    )
    try:
        runner = folder / "runner.py"
        runner.write_text(RUNNER)
        done = _forkserver.run(
            [sys.executable, str(runner), str(plan), str(results_path)],
            capture_output=True,
            text=True,
            errors="replace",
            cwd=cwd,
            env=environment,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        done = None
    ended = json.loads(results_path.read_text()) if results_path.exists() else []
    results = [
        Result(
            args=item["argv"],
            returncode=end["status"],
            stdout=pathlib.Path(item["stdout"]).read_text(errors="replace"),
            stderr=pathlib.Path(item["stderr"]).read_text(errors="replace"),
            seconds=end["seconds"],
        )
        for item, end in zip(items, ended)
    ]
    if done is None or (done.returncode and len(results) < len(items)):
        current = items[min(len(results), len(items) - 1)]
        err = pathlib.Path(current["stderr"])
        said = err.read_text(errors="replace")[-3000:] if err.exists() else ""
        why = f"ran past its {timeout} s time-out" if done is None else "ended early"
        pytest.fail(
            f"{len(commands)} commands in one process {why} after {len(results)}, in "
            f"{' '.join(current['argv'])[:300]}; its output ended:\n{said}"
            + ("" if done is None else done.stderr[-2000:]),
            pytrace=False,
        )
    return results
