"""The package's words hold: return types on public functions, runnable examples on public classes.

`tf_mlstm` is walked with `ast` (nothing imported): every public function
and method (no leading underscore, in a public module and class; dunder
methods aside) must say what it returns, and every public class must show
how it is used in an `Example:` block of its docstring, written as doctest
lines (`>>> `), as keras's own layers do. The examples then run here, all
in this one process (doctest, tiny shapes), so an example that no longer
holds fails the suite.

An example that needs a trained run folder uses `model_dir`, a tiny untrained
one this module writes once (`EXAMPLE_GLOBALS`).

Docstrings stay short: a module's at most `MODULE_DOCSTRING_MAX_LINES`
lines, all of them together at most `DOCSTRING_MAX_SHARE` of the package's
lines. The README and the recipes (`flags/*.flags`) stay short too: measurements,
per-machine figures and history belong in docs/, so README.md holds at most
`README_MAX_LINES` lines and each flag file at most `FLAG_FILE_MAX_COMMENT_LINES`
comment lines.
"""

import ast
import doctest
import importlib
import pathlib

import pytest

import _models

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "tf_mlstm"

README_MAX_LINES = 300
FLAG_FILE_MAX_COMMENT_LINES = 30
# Docstrings say what is; measurements and history go to docs/.
MODULE_DOCSTRING_MAX_LINES = 25
DOCSTRING_MAX_SHARE = 0.25

# Files exempt while a restructuring moves them (a folder ends with "/"), brought in
# by removing them here once the move lands. None now: every public module is checked.
BEING_RESTRUCTURED = frozenset()


def _relative(path):
    return path.relative_to(REPO).as_posix()


def _exempt(relative):
    return any(
        relative == entry or (entry.endswith("/") and relative.startswith(entry))
        for entry in BEING_RESTRUCTURED
    )


def _public_module(path):
    """Not a private module (`_flags.py`) nor inside one; `__init__.py` is public."""
    parts = path.relative_to(PACKAGE).parts
    return not any(part.startswith("_") and part != "__init__.py" for part in parts)


def checked_files():
    """The package's public modules under these rules, as repository-relative paths."""
    return sorted(
        _relative(path)
        for path in PACKAGE.rglob("*.py")
        if _public_module(path) and not _exempt(_relative(path))
    )


def _public(name):
    return not name.startswith("_")


def missing_words(source, filename="<source>"):
    """What `source` lacks: ([functions without a return annotation], [classes without examples]).

    Each entry is "filename:line qualified.name". Functions and classes nested
    in a function body are not public API and are not looked at.
    """
    tree = ast.parse(source, filename)
    functions, classes = [], []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                if _public(child.name) and child.returns is None:
                    functions.append(f"{filename}:{child.lineno} {prefix}{child.name}")
            elif isinstance(child, ast.ClassDef) and _public(child.name):
                docstring = ast.get_docstring(child) or ""
                if not _has_example(docstring):
                    classes.append(f"{filename}:{child.lineno} {prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return functions, classes


def _has_example(docstring):
    """An `Example:` (or `Examples:`) heading followed by at least one doctest line."""
    lines = docstring.splitlines()
    for i, line in enumerate(lines):
        if line.strip() in ("Example:", "Examples:"):
            return any(later.strip().startswith(">>> ") for later in lines[i + 1 :])
    return False


def _missing_in_package():
    functions, classes = [], []
    for relative in checked_files():
        found = missing_words((REPO / relative).read_text(), relative)
        functions += found[0]
        classes += found[1]
    return functions, classes


def test_every_public_function_says_what_it_returns():
    functions, _ = _missing_in_package()
    assert not functions, (
        f"{len(functions)} public functions without a return annotation:\n" + "\n".join(functions)
    )


def test_every_public_class_shows_an_example():
    _, classes = _missing_in_package()
    assert not classes, (
        f"{len(classes)} public classes without an `Example:` block of `>>>` lines:\n"
        + "\n".join(classes)
    )


def test_the_walk_notices_what_is_missing():
    source = '''
def shown() -> int:
    return 1


def unsaid(x):
    return x


def _private(x):
    return x


class Shown:
    """Shown.

    Example:

    >>> Shown().value()
    1
    """

    def value(self) -> int:
        return 1

    def __repr__(self):
        return "Shown"


class Unshown:
    """No example here; "Example:" without doctest lines is not one either.

    Example:
      Unshown()
    """

    def size(self):
        return 0


class _Private:
    def anything(self):
        return 0


def outer() -> None:
    def inner(x):
        return x
'''
    functions, classes = missing_words(source, "m.py")
    assert functions == ["m.py:6 unsaid", "m.py:37 Unshown.size"]
    assert classes == ["m.py:30 Unshown"]


def test_every_exempt_path_exists():
    # An entry whose file has moved or gone is stale: bring its successor in.
    missing = [entry for entry in BEING_RESTRUCTURED if not (REPO / entry).exists()]
    assert not missing, f"exempt paths that no longer exist: {missing}"


def comment_lines(text):
    """How many lines of a flag file are comments (`#` first, after any indentation)."""
    return sum(line.lstrip().startswith("#") for line in text.splitlines())


def test_the_readme_and_the_flag_files_stay_short():
    too_long = []
    readme = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    if readme > README_MAX_LINES:
        too_long.append(f"README.md: {readme} lines (at most {README_MAX_LINES})")
    flag_files = sorted((REPO / "flags").glob("*.flags"))
    assert flag_files
    for path in flag_files:
        count = comment_lines(path.read_text(encoding="utf-8"))
        if count > FLAG_FILE_MAX_COMMENT_LINES:
            too_long.append(
                f"{_relative(path)}: {count} comment lines (at most {FLAG_FILE_MAX_COMMENT_LINES})"
            )
    why = "measurements, per-machine figures and history go to docs/"
    assert not too_long, why + ":\n" + "\n".join(too_long)


def docstring_lines(source):
    """(lines of docstrings, lines of the module docstring) of Python `source`."""
    total = module = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if ast.get_docstring(node, clean=False) is not None:
                lines = node.body[0].end_lineno - node.body[0].lineno + 1
                total += lines
                module = lines if isinstance(node, ast.Module) else module
    return total, module


def test_docstrings_are_short_and_at_most_a_quarter_of_the_package():
    documented = written = 0
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        total, module = docstring_lines(source)
        documented += total
        written += len(source.splitlines())
        if module > MODULE_DOCSTRING_MAX_LINES:
            too_long.append(f"{_relative(path)}: a module docstring of {module} lines")
    assert not too_long, (
        f"at most {MODULE_DOCSTRING_MAX_LINES} lines; history goes to docs/:\n"
        + "\n".join(too_long)
    )
    assert documented <= DOCSTRING_MAX_SHARE * written, (
        f"docstrings are {documented} of the package's {written} lines "
        f"({documented / written:.1%}, at most {DOCSTRING_MAX_SHARE:.0%})"
    )


def test_docstring_lines_counts_docstrings_only():
    source = '"""Module.\n\nMore."""\n\n\ndef f():\n    """One."""\n    return 1  # """no"""\n'
    assert docstring_lines(source) == (4, 3)


def test_comment_lines_counts_comments_only():
    text = "# why\n--lr=0.006\n  # indented\n#\n--seed=0\n"
    assert comment_lines(text) == 3


def _modules_with_examples():
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " in path.read_text():
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            names.append(module.removesuffix(".__init__"))
    return names


@pytest.fixture(scope="module")
def example_globals(tmp_path_factory):
    """What examples may use without defining it: `model_dir`, a tiny untrained run folder."""
    model_dir, _ = _models.write_untrained_model_dir(tmp_path_factory.mktemp("example_run"))
    return {"model_dir": str(model_dir)}


@pytest.mark.parametrize("module_name", _modules_with_examples())
def test_docstring_examples_run(module_name, example_globals, tmp_path, monkeypatch):
    if module_name.startswith("tf_mlstm.beam."):
        pytest.importorskip(
            "apache_beam",
            reason="Apache Beam is not installed: the [beam] extra (pip install -e '.[dev,beam]')",
        )
    # Examples that write files write them in a fresh folder.
    monkeypatch.chdir(tmp_path)
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    tests = finder.find(module, module_name, extraglobs=example_globals)
    assert tests, f"{module_name} has `>>> ` lines but no docstring example doctest finds"
    report = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
