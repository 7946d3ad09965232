"""The planted faults of docs/reliability.md stay planted where their promises are kept.

`tools/mutants.py` is slow by nature (it runs each row's tests in a mutated
copy of the repository) and runs outside the suite. These checks are fast:
every row names a mutant, every mutant still finds its code exactly once and
leaves Python that compiles, every test a row names exists, and the tool's
own verdicts (caught, survived, error) are right on a small repository made
here, so a refactor cannot orphan a mutant or blind the tool silently.
"""

import ast
import importlib.util
import pathlib
import sys
import textwrap

import _forkserver
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mutants", REPO / "tools" / "mutants.py")
mutants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutants)

ROWS = mutants.read_rows((REPO / mutants.DOC).read_text())
REGISTRY = mutants.read_mutants((REPO / mutants.REGISTRY).read_text())


def test_every_row_names_its_tests_and_a_mutant_of_the_registry():
    assert len(ROWS) > 50
    for row in ROWS:
        assert row.tests, f"{row.table}: '{row.fault[:60]}' names no test"
        assert row.mutants, f"{row.table}: '{row.fault[:60]}' names no mutant"
        for name in row.mutants:
            assert name in REGISTRY, (
                f"'{row.fault[:60]}' names mutant '{name}', not in the registry"
            )
    used = {name for row in ROWS for name in row.mutants}
    assert not set(REGISTRY) - used, "mutants no row names: " + ", ".join(set(REGISTRY) - used)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_mutant_finds_its_code_once_and_compiles(name):
    mutant = REGISTRY[name]
    path = REPO / mutant.file
    assert path.is_file(), f"mutant '{name}': no file {mutant.file}"
    assert mutant.find != mutant.replace
    text = mutants.mutated_text(mutant, path.read_text())
    if path.suffix == ".py":
        compile(text, str(path), "exec")


def test_every_test_a_row_names_exists():
    for row in ROWS:
        for node in row.tests:
            file, name = node.split("::")
            path = REPO / file
            assert path.is_file(), f"'{row.fault[:60]}' names {node}: no such file"
            defined = {
                n.name
                for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.FunctionDef)
            }
            assert name in defined, f"'{row.fault[:60]}' names {node}: no such test"


def test_a_mutant_whose_code_moved_is_an_error_naming_it():
    mutant = mutants.Mutant("gone", "a.py", find="x = 1", replace="x = 2", why="")
    with pytest.raises(ValueError, match=r"mutant 'gone': its code occurs 0 times in a\.py"):
        mutants.mutated_text(mutant, "y = 1\n")
    with pytest.raises(ValueError, match="occurs 2 times"):
        mutants.mutated_text(mutant, "x = 1\nx = 1\n")


def test_the_tool_tells_caught_survived_and_error_apart(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "tools").mkdir()
    (repo / "tests").mkdir()
    (repo / "pkg_under_test.py").write_text("def answer():\n    # the answer\n    return 42\n")
    (repo / "tests" / "test_answer.py").write_text(
        "import pkg_under_test\n\n\ndef test_answer():\n    assert pkg_under_test.answer() == 42\n"
    )
    (repo / "docs" / "reliability.md").write_text(
        textwrap.dedent(
            """\
            ## Things

            | fault | test | mutant |
            | --- | --- | --- |
            | a wrong answer | `test_answer.py::test_answer` | `wrong-answer` |
            | a comment | `test_answer.py::test_answer` | `comment-only` |
            | moved code | `test_answer.py::test_answer` | `moved` |
            """
        )
    )
    (repo / "tools" / "mutants.toml").write_text(
        textwrap.dedent(
            """\
            [wrong-answer]
            file = "pkg_under_test.py"
            find = "return 42"
            replace = "return 41"
            why = "the answer changes"

            [comment-only]
            file = "pkg_under_test.py"
            find = "# the answer"
            replace = "# an answer"
            why = "nothing a test can see"

            [moved]
            file = "pkg_under_test.py"
            find = "return 43"
            replace = "return 44"
            why = "code that is not there"
            """
        )
    )
    _forkserver.run(["git", "init", "-q"], cwd=repo, check=True)
    out = _forkserver.run(
        [sys.executable, str(REPO / "tools" / "mutants.py"), "--repo", str(repo), "--baseline"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    outcomes = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            result = __import__("json").loads(line)
            outcomes[(result["mutant"], result["baseline"])] = result["outcome"]
    assert outcomes == {
        ("wrong-answer", True): "passed",
        ("wrong-answer", False): "caught",
        ("comment-only", True): "passed",
        ("comment-only", False): "survived",
        ("moved", True): "passed",
        ("moved", False): "error",
    }, out.stdout + out.stderr
    assert "1 caught, 1 survived, 1 error of 3 mutants" in out.stdout
    assert out.returncode == 2  # an error outranks a survivor
