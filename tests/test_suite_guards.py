"""The suite's own guards: CI cannot skip on missing data, the whole run's deadline, the shared
tiny model remembers a failure, subprocess time-outs fail with the command's output."""

import ast
import pathlib
import re
import subprocess
import sys

import conftest
import pytest

import _models


def test_missing_shared_data_skips_on_a_developer_machine(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path / "missing")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(
        pytest.skip.Exception, match=r"shared review corpora not found at .*missing"
    ):
        conftest.shared_data_folder()


@pytest.mark.parametrize("value", ["true", "1", "TRUE"])
def test_missing_shared_data_fails_in_ci(monkeypatch, tmp_path, value):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path / "missing")
    monkeypatch.setenv("CI", value)
    # Any outcome is caught here: a skip let through would end this test as skipped,
    # which a run counts as passed.
    with pytest.raises(BaseException) as outcome:
        conftest.shared_data_folder()
    assert outcome.type is pytest.fail.Exception, f"{outcome.type.__name__}: {outcome.value}"
    assert re.search(
        r"shared review corpora not found at .*missing .*; CI=true, so the test fails "
        r"instead of skipping$",
        str(outcome.value),
    ), outcome.value


@pytest.mark.parametrize("value", ["", "false", "0"])
def test_present_shared_data_is_returned_in_and_out_of_ci(monkeypatch, tmp_path, value):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path)
    monkeypatch.setenv("CI", value)
    assert conftest.shared_data_folder() == tmp_path


class _Config:
    """The two things the deadline reads from a pytest config."""

    def __init__(self, minutes, start):
        self.minutes = minutes
        self.stash = {conftest._SESSION_START: start}  # pylint: disable=protected-access

    def getini(self, name):
        assert name == "suite_deadline_minutes"
        return self.minutes


def test_auto_starts_two_workers_per_core(monkeypatch, pytestconfig):
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setattr(conftest.os, "sched_getaffinity", lambda pid: {0, 1})
    assert conftest.pytest_xdist_auto_num_workers(pytestconfig) == 4
    # The user's own count wins: xdist's hook reads it when this one answers None.
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "2")
    assert conftest.pytest_xdist_auto_num_workers(pytestconfig) is None


def test_the_longest_tests_are_collected_first(monkeypatch, pytestconfig):
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)  # one process
    # A renamed test would leave FIRST naming nothing and the walk-through back at the end.
    for nodeid in conftest.FIRST:
        path, name = nodeid.split("::")
        text = (pytestconfig.rootpath / path).read_text()
        functions = {
            node.name for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)
        }
        function, _, parameter = name.partition("[")
        assert function in functions
        assert not parameter or f'"{parameter[:-1]}"' in text, name
    items = [_Item("tests/b.py::t"), _Item(conftest.FIRST[0]), _Item("tests/a.py::t")]
    conftest.pytest_collection_modifyitems(pytestconfig, items)
    assert [item.nodeid for item in items] == [conftest.FIRST[0], "tests/b.py::t", "tests/a.py::t"]


def test_each_longest_test_heads_a_workers_first_share(monkeypatch, pytestconfig):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    others = [_Item(f"tests/t.py::t{i}") for i in range(17)]
    items = others[:9] + [_Item(nodeid) for nodeid in conftest.FIRST] + others[9:]
    conftest.pytest_collection_modifyitems(pytestconfig, items)
    # worksteal deals 20 tests to 4 idle workers as 5 + 5 + 5 + 5, in order.
    assert conftest._share_starts(20, 4) == [0, 5, 10, 15]
    assert [items[i].nodeid for i in (0, 5, 10)] == list(conftest.FIRST)
    assert [item.nodeid for item in items if item.nodeid not in conftest.FIRST] == [
        item.nodeid for item in others
    ]
    assert conftest._share_starts(7, 3) == [0, 2, 4]  # 2 + 2 + 3


class _Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


def test_the_run_fails_its_remaining_tests_past_the_deadline():
    config = _Config("30", start=1000.0)
    assert conftest.suite_deadline_passed(config, now=1000.0 + 30 * 60) is None
    message = conftest.suite_deadline_passed(config, now=1000.0 + 31 * 60)
    assert message.startswith("the test run has lasted 31.0 minutes, past its deadline of 30 ")
    assert "suite_deadline_minutes in pyproject.toml" in message
    assert conftest.suite_deadline_passed(_Config("0", 1000.0), now=1e9) is None


def test_this_run_has_a_deadline(pytestconfig):
    # pyproject.toml sets it; a deadline of 0 would let a slowed-down run outlast CI's limit.
    assert 0 < float(pytestconfig.getini("suite_deadline_minutes")) <= 60
    assert conftest.suite_deadline_passed(pytestconfig) is None


def test_a_failed_tiny_model_fails_later_users_without_training_again(monkeypatch, tmp_path):
    calls = []

    def failing_run(command, timeout, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "the training broke")

    class Factory:
        def mktemp(self, name):
            return tmp_path / name

    monkeypatch.setattr(_models, "_TRAINED", {})
    monkeypatch.setattr(_models, "run", failing_run)
    with pytest.raises(
        pytest.fail.Exception, match="(?s)tf-mlstm-train failed:.*the training broke"
    ):
        _models.tiny_trained_model_dir(Factory())
    with pytest.raises(
        pytest.fail.Exception,
        match="the shared tiny model failed earlier in this run: tf-mlstm-train failed:",
    ):
        _models.tiny_trained_model_dir(Factory())
    assert len(calls) == 1
    assert all(flag in calls[0] for flag in _models.PINNED_FLAGS)


def test_a_command_past_its_time_out_fails_with_its_output():
    script = "import sys, time; print('started', file=sys.stderr, flush=True); time.sleep(60)"
    with pytest.raises(pytest.fail.Exception, match=r"ran past its 2 s time-out") as failed:
        _models.run([sys.executable, "-c", script], timeout=2)
    assert failed.value.msg.endswith("its output ended:\nstarted\n")
    done = _models.run([sys.executable, "-c", "print('fine')"], timeout=60)
    assert done.returncode == 0 and done.stdout == "fine\n"


def _per_test_timeout_s():
    import tomllib

    with open(pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["pytest"]["ini_options"]["timeout"]


# What a test may spend besides its longest command: fixtures, its other steps.
_MARGIN_S = 60


def _literal_timeouts(path):
    """(line, seconds) of each `timeout=<number>` in a call, numbers and module constants."""
    tree = ast.parse(path.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, (int, float))
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg != "timeout":
                continue
            value = keyword.value
            if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)):
                found.append((keyword.value.lineno, value.value))
            elif isinstance(value, ast.Name) and value.id in constants:
                found.append((keyword.value.lineno, constants[value.id]))
    return found


def test_no_command_time_out_in_a_test_reaches_the_per_test_time_out():
    """A command's time-out past pytest-timeout's never fires: the hang is cut by the
    per-test time-out instead, and the command and its output are lost."""
    limit = _per_test_timeout_s() - _MARGIN_S
    tests = pathlib.Path(__file__).resolve().parent
    too_long = [
        f"{path.name}:{line}: timeout={seconds}"
        for path in sorted(tests.glob("*.py"))
        for line, seconds in _literal_timeouts(path)
        if seconds > limit
    ]
    assert not too_long, f"command time-outs above {limit} s: " + ", ".join(too_long)


def test_the_time_out_guard_reads_literals_and_module_constants(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("T = 700\nrun(x, timeout=T)\np.wait(timeout=30)\nf(timeout=t)\n")
    assert _literal_timeouts(path) == [(2, 700), (3, 30)]
