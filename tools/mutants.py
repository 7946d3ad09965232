"""Plants each reliability row's fault in a copy of the repository and runs that row's tests.

docs/reliability.md lists every fault a run can meet, what it costs and the
tests that prove it. Each row also names a *mutant*: a small change, kept in
`tools/mutants.toml`, at the one place in the code that keeps the row's
promise (the SIGTERM handler installed late, a staging folder left behind, a
checkpoint written without the learning-rate plan). This tool applies each
mutant to a fresh copy of the repository and runs the row's tests there:

- **caught**: a test failed, as it must when its promise is broken;
- **survived**: every test passed with the promise broken, a defect of the
  tests (the tool exits 1);
- **error**: the mutant no longer finds its code, or the tests could not be
  collected (the tool exits 2): a refactor moved the code, so the mutant must
  move with it (tests/test_mutants.py checks this on every run of the suite).

  python tools/mutants.py --list                    # rows, mutants and tests
  python tools/mutants.py sigterm-handler-late      # one row, by its mutant
  python tools/mutants.py                           # every row (an hour or more)
  python tools/mutants.py --baseline ROW            # the row's tests unmutated first

The copy holds the tracked and untracked-not-ignored files (what `git
ls-files` lists), with `../shared` linked beside it when present, so a test
that reads the shared corpora finds them. The tests run with the copy first
on `PYTHONPATH`, so they and the binaries they start import the mutated
package, not an installed one. A generic mutation tool (mutmut, cosmic-ray)
mutates every operator it finds and reruns a suite per mutant; with
TensorFlow's start-up in every test process that is days of CPU on 2 cores,
and most of its mutants would be equivalent or untested by design. A named
mutant per promise, run against the tests that claim the promise, answers
the question the reliability table asks.
"""

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

from absl import app
from absl import flags

FLAGS = flags.FLAGS

REPO = pathlib.Path(__file__).resolve().parent.parent
DOC = "docs/reliability.md"
REGISTRY = "tools/mutants.toml"
# pytest's exit status when some test failed; any other non-zero status
# (interrupted, usage error, nothing collected) says the run proved nothing.
_TESTS_FAILED = 1
_TEST_ID = re.compile(r"`(test_\w+\.py)::(\w+)`")
_MUTANT_NAME = re.compile(r"`([a-z0-9][a-z0-9-]*)`")


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the reliability tables: the fault, its tests and its mutants."""

    table: str
    fault: str
    tests: tuple  # "tests/test_x.py::test_y" node ids
    mutants: tuple  # names in the registry


@dataclasses.dataclass(frozen=True)
class Mutant:
    """A planted fault: `find` in `file` (exactly once) becomes `replace`."""

    name: str
    file: str
    find: str
    replace: str
    why: str


def _split_cells(line):
    # Table cells, split on pipes outside backquotes (a cell may quote `a | b`).
    cells, cell, quoted = [], [], False
    for char in line.strip().strip("|"):
        if char == "`":
            quoted = not quoted
        if char == "|" and not quoted:
            cells.append("".join(cell).strip())
            cell = []
        else:
            cell.append(char)
    cells.append("".join(cell).strip())
    return cells


def read_rows(doc_text):
    """The rows of every table in the reliability document.

    Args:
      doc_text: the text of docs/reliability.md.

    Returns:
      A list of `Row`, in the document's order. A table's test column is the
      one headed "test"; its mutant column the one headed "mutant".

    Raises:
      ValueError: a table without a test or mutant column.
    """
    rows, table, header = [], "", None
    for line in doc_text.splitlines():
        if line.startswith("## "):
            table, header = line[3:].strip(), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _split_cells(line)
        if header is None:
            header = [cell.lower() for cell in cells]
            if "test" not in header or "mutant" not in header:
                raise ValueError(
                    f"{DOC}: the table under '## {table}' needs a 'test' and a 'mutant' column"
                )
            continue
        if set(line.replace("|", "").strip()) <= set("-: "):
            continue  # the separator line
        tests = tuple(
            f"tests/{file}::{name}" for file, name in _TEST_ID.findall(cells[header.index("test")])
        )
        mutants = tuple(_MUTANT_NAME.findall(cells[header.index("mutant")]))
        rows.append(Row(table=table, fault=cells[0], tests=tests, mutants=mutants))
    return rows


def read_mutants(registry_text):
    """The registry of mutants.

    Args:
      registry_text: the text of tools/mutants.toml.

    Returns:
      A dict from name to `Mutant`.

    Raises:
      ValueError: an entry without its file, find or replace text.
    """
    mutants = {}
    for name, entry in tomllib.loads(registry_text).items():
        missing = {"file", "find", "replace", "why"} - set(entry)
        if missing:
            raise ValueError(f"{REGISTRY}: mutant '{name}' lacks {', '.join(sorted(missing))}")
        mutants[name] = Mutant(
            name=name, **{k: entry[k] for k in ("file", "find", "replace", "why")}
        )
    return mutants


def mutated_text(mutant, text):
    """The text of `mutant.file` with the mutant applied.

    Args:
      mutant: a `Mutant`.
      text: the file's current text.

    Returns:
      The mutated text.

    Raises:
      ValueError: `find` does not occur exactly once (the code it plants its
        fault in has moved or been copied).
    """
    count = text.count(mutant.find)
    if count != 1:
        raise ValueError(
            f"mutant '{mutant.name}': its code occurs {count} times in {mutant.file} "
            "(exactly once expected); move the mutant with the code that keeps its promise"
        )
    return text.replace(mutant.find, mutant.replace)


def copy_repository(repo, destination):
    """Copies the files git knows of (tracked, or untracked and not ignored).

    Args:
      repo: the repository root.
      destination: an empty or missing folder.
    """
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for relative in filter(None, listed.split("\0")):
        source = pathlib.Path(repo, relative)
        if not source.is_file():
            continue  # deleted in the working tree
        target = pathlib.Path(destination, relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def run_tests(root, tests, timeout, log):
    """Runs pytest on `tests` in the copy at `root`; returns pytest's exit status."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    with open(log, "w") as out:
        try:
            return subprocess.run(
                command, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            out.write(f"\n[mutants] the tests ran past {timeout} s\n")
            return None


def try_mutant(repo, row, mutant, timeout, logs, baseline=False):
    """Applies `mutant` (or nothing, for the baseline) to a copy and runs the row's tests.

    Returns:
      A dict: mutant, outcome (caught, survived, error; for the baseline
      passed or failed), seconds, log, detail.
    """
    started = time.monotonic()
    label = f"baseline-{mutant.name}" if baseline else mutant.name
    log = pathlib.Path(logs, f"{label}.log")
    result = {"mutant": mutant.name, "baseline": baseline, "log": str(log), "detail": ""}
    with tempfile.TemporaryDirectory(prefix="tf_mlstm_mutant_") as scratch:
        root = pathlib.Path(scratch, repo.name)
        copy_repository(repo, root)
        shared = repo.parent / "shared"
        if shared.exists():
            os.symlink(shared, pathlib.Path(scratch, "shared"))
        if not baseline:
            path = root / mutant.file
            try:
                path.write_text(mutated_text(mutant, path.read_text()))
            except (OSError, ValueError) as error:
                return dict(result, outcome="error", detail=str(error), seconds=0.0)
        status = run_tests(root, row.tests, timeout, log)
    seconds = round(time.monotonic() - started, 1)
    if status is None:
        outcome, detail = ("failed" if baseline else "caught"), f"timed out after {timeout} s"
    elif status == 0:
        outcome = "passed" if baseline else "survived"
        detail = "every test passed" + ("" if baseline else " with the fault planted")
    elif status == _TESTS_FAILED:
        outcome, detail = ("failed" if baseline else "caught"), _first_failure(log)
    else:
        outcome, detail = "error", f"pytest exited {status} (nothing proven; see the log)"
    return dict(result, outcome=outcome, detail=detail, seconds=seconds)


def _first_failure(log):
    for line in pathlib.Path(log).read_text(errors="replace").splitlines():
        if line.startswith("FAILED ") or line.startswith("ERROR "):
            return line[:200]
    return "a test failed"


def select(rows, mutants, names):
    """The (row, mutant) pairs to try: every pair, or those whose mutant is named.

    Raises:
      ValueError: a name that no row uses.
    """
    pairs = [(row, mutants[name]) for row in rows for name in row.mutants if name in mutants]
    if not names:
        return pairs
    unknown = sorted(set(names) - {mutant.name for _, mutant in pairs})
    if unknown:
        raise ValueError(f"no row of {DOC} names the mutant(s) {', '.join(unknown)} (see --list)")
    return [(row, mutant) for row, mutant in pairs if mutant.name in names]


def define_flags():
    """This tool's flags."""
    flags.DEFINE_bool("list", False, "Print the rows, their mutants and tests, and exit.")
    flags.DEFINE_bool("baseline", False, "Run each row's tests unmutated first (they must pass).")
    flags.DEFINE_integer("timeout", 900, "Seconds a row's tests may take.")
    flags.DEFINE_string("repo", str(REPO), "The repository to copy.")
    flags.DEFINE_string("logs", None, "Folder for each run's pytest output (default: a new one).")
    flags.DEFINE_string("json", None, "Write the results here as JSON.")


def main(argv):
    """Tries the mutants named in `argv` (all when none); returns the exit status."""
    args, names = FLAGS, argv[1:]
    repo = pathlib.Path(args.repo).resolve()
    try:
        rows = read_rows((repo / DOC).read_text())
        mutants = read_mutants((repo / REGISTRY).read_text())
        pairs = select(rows, mutants, names)
    except (OSError, ValueError) as error:
        print(f"mutants: {error}", file=sys.stderr)
        return 2
    if args.list:
        for row, mutant in pairs:
            print(f"{mutant.name}\t{row.table}: {row.fault[:70]}\t{' '.join(row.tests)}")
        return 0
    logs = pathlib.Path(args.logs or tempfile.mkdtemp(prefix="tf_mlstm_mutant_logs_"))
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for row, mutant in pairs:
        if args.baseline:
            base = try_mutant(repo, row, mutant, args.timeout, logs, baseline=True)
            print(json.dumps(base), flush=True)
            results.append(base)
            if base["outcome"] != "passed":
                continue  # a mutant of a failing row proves nothing
        result = try_mutant(repo, row, mutant, args.timeout, logs)
        print(json.dumps(result), flush=True)
        results.append(result)
    tried = [r for r in results if not r["baseline"]]
    counts = {k: sum(r["outcome"] == k for r in tried) for k in ("caught", "survived", "error")}
    print(
        f"{counts['caught']} caught, {counts['survived']} survived, {counts['error']} error "
        f"of {len(tried)} mutants; logs in {logs}"
    )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if counts["error"] or any(r["outcome"] == "failed" for r in results):
        return 2
    return 1 if counts["survived"] else 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
