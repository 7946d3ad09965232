"""Writes constraints.txt: the exact versions of tf_mlstm's installed dependency closure.

Usage (in an environment where `pip install -e ".[dev,beam]"` has just run and the
test suite passes):

  python tools/freeze_constraints.py --extras=dev,beam --output=constraints.txt

Unlike `pip freeze`, the output holds only what tf_mlstm needs: the
requirements of `setup.py` (`install_requires` and the chosen extras),
followed through the installed distributions' own requirements (environment
markers evaluated for this interpreter, extras followed), so unrelated
packages of the environment stay out. CI installs with
`pip install -c constraints.txt -e ".[dev,beam]"`, so a run is reproducible while
`setup.py` keeps the ranges users install against.
"""

import ast
import importlib.metadata
import pathlib
import sys

from absl import app
from absl import flags
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = pathlib.Path(__file__).resolve().parent.parent
SETUP_PY = REPO / "setup.py"


def define_flags():
    """Defines this tool's flags."""
    flags.DEFINE_list("extras", ["dev"], "Extras of setup.py to include (e.g. dev,gpu).")
    flags.DEFINE_string("output", str(REPO / "constraints.txt"), "File to write; - for stdout.")


def setup_requirements(setup_py=SETUP_PY):
    """The requirement lists of setup.py, read without running it.

    Args:
      setup_py: path of the setup.py whose module-level `_INSTALL_REQUIRES`
        (a list) and `_EXTRAS_REQUIRE` (a dict of lists) literals are read.

    Returns:
      (install_requires, extras_require): a list of requirement strings and a
      dict from extra name to such a list.

    Raises:
      ValueError: setup.py has no such literals.
    """
    tree = ast.parse(pathlib.Path(setup_py).read_text(encoding="utf-8"))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            names = ("_INSTALL_REQUIRES", "_EXTRAS_REQUIRE")
            if isinstance(target, ast.Name) and target.id in names:
                found[target.id] = ast.literal_eval(node.value)
    missing = {"_INSTALL_REQUIRES", "_EXTRAS_REQUIRE"} - found.keys()
    if missing:
        raise ValueError(f"{setup_py}: no literal {', '.join(sorted(missing))} at module level")
    return found["_INSTALL_REQUIRES"], found["_EXTRAS_REQUIRE"]


def _applies(requirement, extras):
    """Whether `requirement`'s marker holds here for a dependent installed with `extras`."""
    if requirement.marker is None:
        return True
    environment = default_environment()
    return any(
        requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras or {""}
    )


def dependency_closure(requirements):
    """The installed distributions that `requirements` need, transitively.

    Args:
      requirements: requirement strings (PEP 508), e.g. setup.py's lists.

    Returns:
      A dict from canonical name to (name as published, installed version).

    Raises:
      LookupError: a needed distribution is not installed (names it and what
        needs it).
    """
    found = {}
    visited = set()
    queue = [(Requirement(r), frozenset(), "setup.py") for r in requirements]
    while queue:
        requirement, parent_extras, needed_by = queue.pop()
        if not _applies(requirement, parent_extras):
            continue
        key = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        if (key, extras) in visited:
            continue
        visited.add((key, extras))
        try:
            dist = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise LookupError(
                f"{requirement.name} (needed by {needed_by}) is not installed; "
                'run pip install -e ".[dev,beam]" first'
            ) from None
        found[key] = (dist.metadata["Name"], dist.version)
        for line in dist.requires or []:
            queue.append((Requirement(line), extras, dist.metadata["Name"]))
    return found


def constraints_text(extras):
    """The constraints file for setup.py's requirements plus `extras`.

    Args:
      extras: names of setup.py extras to include.

    Returns:
      The file's text: a header and one `name==version` line per distribution.

    Raises:
      ValueError: an extra that setup.py does not define.
      LookupError: from `dependency_closure`.
    """
    install_requires, extras_require = setup_requirements()
    unknown = sorted(set(extras) - extras_require.keys())
    if unknown:
        raise ValueError(f"setup.py has no extra {unknown}; it has {sorted(extras_require)}")
    requirements = list(install_requires)
    for extra in extras:
        requirements += extras_require[extra]
    closure = dependency_closure(requirements)
    python = ".".join(str(v) for v in sys.version_info[:2])
    header = [
        "# Exact versions of tf_mlstm's dependencies (setup.py, extras: "
        f"{','.join(extras) or 'none'}) that the test suite passes with,",
        f"# resolved on CPython {python}, Linux x86_64. CI installs with",
        f'#   pip install -c constraints.txt -e ".[{",".join(extras)}]"',
        "# Regenerate after changing a range in setup.py, in a fresh environment:",
        f"#   python tools/freeze_constraints.py --extras={','.join(extras)}",
    ]
    pins = [f"{name}=={version}" for _, (name, version) in sorted(closure.items())]
    return "\n".join(header + pins) + "\n"


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        text = constraints_text(flags.FLAGS.extras)
    except (ValueError, LookupError) as e:
        sys.exit(f"freeze_constraints: {e}")
    if flags.FLAGS.output == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(flags.FLAGS.output).write_text(text, encoding="utf-8")
        pins = [line for line in text.splitlines() if not line.startswith("#")]
        print(f"wrote {len(pins)} pins to {flags.FLAGS.output}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
