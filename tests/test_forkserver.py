"""The tests' fork server: a forked command is the process a fresh one would be."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import _forkserver
import pytest

# A script that reports what its process sees, then ends as its first argument says.
_REPORT = textwrap.dedent(
    """
    import json, os, sys
    report = {
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "path0": sys.path[0],
        "env": os.environ.get("FORKSERVER_PROBE"),
        "stdin": sys.stdin.read(),
        "tensorflow_imported": "tensorflow" in sys.modules,
        "tf_mlstm_imported": "tf_mlstm" in sys.modules,
        "pid": os.getpid(),
        "name": __name__,
    }
    print(json.dumps(report))
    print("to stderr", file=sys.stderr)
    how = sys.argv[1]
    if how == "exit":
        sys.exit(int(sys.argv[2]))
    if how == "raise":
        raise RuntimeError("raised in the command")
    if how == "sleep":
        print("sleeping", flush=True)
        import time
        time.sleep(120)
    """
)


@pytest.fixture(name="script")
def fixture_script(tmp_path):
    path = tmp_path / "report.py"
    path.write_text(_REPORT)
    return path


def _env(**changes):
    return dict(os.environ, FORKSERVER_PROBE="probe", **changes)


def test_a_forked_command_sees_its_arguments_folder_environment_and_input(script, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = _forkserver.run(
        [sys.executable, str(script), "exit", "0", "--flag=1"],
        capture_output=True,
        text=True,
        cwd=work,
        env=_env(),
        input="what the test sends",
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["argv"] == ["exit", "0", "--flag=1"]
    assert report["cwd"] == str(work) and report["path0"] == str(tmp_path)
    assert report["env"] == "probe" and report["stdin"] == "what the test sends"
    assert report["name"] == "__main__" and report["pid"] != os.getpid()
    # Warm: TensorFlow is there already, tf_mlstm is imported fresh by each command.
    assert report["tensorflow_imported"] and not report["tf_mlstm_imported"]
    assert done.stderr == "to stderr\n"


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["exit", "3"], 3, "to stderr\n"),
        (["raise"], 1, "RuntimeError: raised in the command"),
    ],
)
def test_exit_statuses_and_tracebacks_are_a_processs(script, args, code, said):
    done = _forkserver.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, env=_env()
    )
    assert done.returncode == code
    assert said in done.stderr


def test_a_signal_ends_it_as_it_ends_a_process_and_a_time_out_kills_it(script, tmp_path):
    log = tmp_path / "log"
    with open(log, "w") as out:
        proc = _forkserver.Popen(
            [sys.executable, str(script), "sleep"], stdout=out, stderr=subprocess.STDOUT, env=_env()
        )
    assert isinstance(proc, _forkserver.ForkedProcess)
    deadline = time.monotonic() + 60
    while "sleeping" not in log.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    # stdout and stderr into one file, in the order written.
    assert log.read_text().splitlines()[1:] == ["to stderr", "sleeping"]

    with pytest.raises(subprocess.TimeoutExpired):
        _forkserver.run([sys.executable, str(script), "sleep"], env=_env(), timeout=2)


def test_pipes_are_read_while_the_command_runs_and_to_their_end(script):
    proc = _forkserver.Popen(
        [sys.executable, str(script), "sleep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert isinstance(proc, _forkserver.ForkedProcess)
    # Read while it runs: its report and "sleeping" come before it ends.
    assert json.loads(proc.stdout.readline())["argv"] == ["sleep"]
    assert proc.stdout.readline() == "sleeping\n" and proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=1)
    proc.kill()
    # A second communicate, as after a subprocess's time-out, gets the rest.
    out, err = proc.communicate(timeout=30)
    assert (out, err) == ("", "to stderr\n") and proc.returncode == -signal.SIGKILL

    proc = _forkserver.Popen(
        [sys.executable, str(script), "exit", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4 and err is None and proc.stderr is None
    assert out.endswith(b"to stderr\n") and b'"argv": ["exit", "4"]' in out


def test_each_command_has_its_own_pythonpath_and_start_up_hooks_through_one_server(tmp_path):
    # As `python -c`: sys.argv[0] "-c", the code's module __main__.
    code = (
        "import probe_module, sys; "
        "print(probe_module.VALUE, sys.path[1], sys.argv, __name__, 'sitecustomize' in sys.modules)"
    )
    said = []
    # The hooked command first, in a server of its own (a start-up variable of its own):
    # the server it starts must not run the hook for the commands after it.
    for name in ("hooked", "first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "probe_module.py").write_text(f"VALUE = {name!r}")
        if name == "hooked":
            # A test's injected fault: run at start-up, before the main module.
            hook = "import probe_module; probe_module.VALUE = 'patched'; print('hook ran')"
            (tmp_path / name / "sitecustomize.py").write_text(hook)
        env = _env(PYTHONPATH=str(tmp_path / name), PYTHONHASHSEED="7")
        done = _forkserver.run(
            [sys.executable, "-c", code, name], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        said.append(done.stdout)
        if name == "hooked":
            servers = dict(_forkserver._servers)
    assert said == [
        f"hook ran\npatched {tmp_path / 'hooked'} ['-c', 'hooked'] __main__ True\n",
        f"first {tmp_path / 'first'} ['-c', 'first'] __main__ False\n",
        f"second {tmp_path / 'second'} ['-c', 'second'] __main__ False\n",
    ]
    assert _forkserver._servers == servers  # one server ran all three


def test_what_a_fork_cannot_reproduce_runs_as_a_plain_subprocess(script, monkeypatch):
    started = []
    real = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    for args, env in [
        ([sys.executable, "-S", "-c", "print(1)"], _env()),  # the interpreter's own options
        ([sys.executable, str(script), "exit", "0", "--verbosity=1"], _env()),
        ([sys.executable, str(script), "exit", "0"], _env(TF_CPP_MIN_LOG_LEVEL="0")),
        # Asked for in the command's own environment.
        ([sys.executable, str(script), "exit", "0"], _env(TF_MLSTM_TESTS_NO_FORK="1")),
    ]:
        done = _forkserver.run(args, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        assert started[-1] == args


# A launcher in miniature: its own flag, then the binaries it
# starts the way tools/local_cluster.py starts workers.
_LAUNCHER = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from absl import app, flags

    flags.DEFINE_integer("num_workers", 2, "the launcher's own flag")


    def main(argv):
        binary = [sys.executable, "-m", "tf_mlstm.cli.eval"]
        said = {}
        for name, args in (
            ("missing", ["--model_dir=no_such_run", "--data=x"]),
            ("its_flag", ["--num_workers=2"]),
        ):
            proc = subprocess.Popen(
                binary + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0
            )
            out, err = proc.communicate(timeout=120)
            said[name] = {
                "forked": getattr(proc, "forked", False),
                "code": proc.returncode,
                "err": err.decode()[-400:],
            }
        hooked = dict(os.environ, PYTHONPATH=argv[1])
        proc = subprocess.Popen(binary + ["--help"], stdout=subprocess.PIPE, env=hooked)
        proc.communicate(timeout=120)
        said["hooked"] = {"forked": getattr(proc, "forked", False), "code": proc.returncode}
        import tensorflow as tf

        tf.constant(1.0) + 1.0  # the launcher's own runtime starts: a fork of it would hang
        proc = subprocess.Popen(binary + ["--help"], stdout=subprocess.PIPE)
        proc.communicate(timeout=120)
        said["started"] = {"forked": getattr(proc, "forked", False), "code": proc.returncode}
        print(json.dumps(said))


    app.run(main)
    """
)


def test_a_forked_launcher_forks_the_binaries_it_starts_each_as_a_fresh_process(tmp_path):
    """Workers forked from the launcher's warm interpreter: their own exit status and
    output, the binary's flags only (not the launcher's), a start-up hook honoured, and
    none forked once the launcher's own runtime has started."""
    launcher = tmp_path / "launcher.py"
    launcher.write_text(_LAUNCHER)
    hooked = tmp_path / "hooked"
    hooked.mkdir()
    (hooked / "sitecustomize.py").write_text("")
    done = _forkserver.run(
        [sys.executable, str(launcher), str(hooked)],
        capture_output=True,
        text=True,
        timeout=240,
        env=_env(TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    missing, its_flag = said["missing"], said["its_flag"]
    assert missing["forked"] and its_flag["forked"]
    assert missing["code"] == 1 and "no_such_run" in missing["err"], missing
    # The launcher's flag is not the binary's: a fresh process would not know it either.
    assert its_flag["code"] == 1 and "num_workers" in its_flag["err"], its_flag
    # A start-up hook on PYTHONPATH runs only in a fresh start: that binary is exec'd.
    assert said["hooked"] == {"forked": False, "code": 0}
    # Once the launcher's own TensorFlow runtime runs, its binaries start fresh.
    assert said["started"] == {"forked": False, "code": 0}
