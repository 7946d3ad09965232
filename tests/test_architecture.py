"""The layering contract (docs/architecture.md) holds, and the binaries start without TensorFlow."""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys

import _forkserver
import pytest
from conftest import in_ci

REPO = pathlib.Path(__file__).resolve().parent.parent

# In CI, which installs the dev extra, a missing import-linter fails the tests instead.
needs_import_linter = pytest.mark.skipif(
    importlib.util.find_spec("importlinter") is None and not in_ci(),
    reason='import-linter is not installed (pip install -e ".[dev]")',
)


def _lint_imports(root):
    """Runs lint-imports with the contracts of `root`/pyproject.toml on `root`/tf_mlstm."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    return _forkserver.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command; "
            "sys.exit(lint_imports_command())",
            "--no-cache",
            "--no-logo",
        ],
        capture_output=True,
        text=True,
        cwd=root,
        env=env,
        timeout=120,
    )


@needs_import_linter
def test_import_contracts_are_kept():
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@needs_import_linter
def test_import_contracts_catch_each_kind_of_violation(tmp_path):
    shutil.copytree(
        REPO / "tf_mlstm", tmp_path / "tf_mlstm", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    package = tmp_path / "tf_mlstm"
    with open(package / "data" / "text.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.train import runner\n")  # a lower layer reaching up
    with open(package / "models" / "sampling.py", "a", encoding="utf-8") as f:
        f.write("\nfrom absl import flags\n")  # the library reading flags
    with open(package / "serving" / "__init__.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.train import strategy\n")  # serving using training code
    with open(package / "transfer" / "probe" / "neuron.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.data import framing\n")  # text to ids past the preprocessor
    with open(package / "transfer" / "probe" / "threshold.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.transfer.probe import fit\n")  # a probe layer reaching up
    with open(package / "transfer" / "probe" / "fit.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.transfer import experiment\n")  # the probe using the binary's flow
    with open(package / "transfer" / "plots.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.serving import saved_model\n")  # transfer using serving
    with open(package / "rundir.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.models import backbone\n")  # the run folder building models
    with open(package / "config" / "convert.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.data import words\n")  # a config reaching TensorFlow through data
    with open(package / "tasks" / "finetune.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.tasks import language_model\n")  # one task reaching another
    with open(package / "cli" / "eval.py", "a", encoding="utf-8") as f:
        f.write("\nfrom tf_mlstm.tasks import finetune\n")  # a task run past the entry points
    with open(package / "models" / "head_arrays.py", "a", encoding="utf-8") as f:
        f.write("\nimport sklearn\n")  # the served head needing the fit's library
    (package / "undeclared.py").write_text('"""A module no layer names."""\n')

    done = _lint_imports(tmp_path)

    assert done.returncode != 0
    out = done.stdout
    assert "tf_mlstm.data is not allowed to import tf_mlstm.train" in out
    assert "tf_mlstm.models.sampling -> absl.flags" in out
    assert "tf_mlstm.serving -> tf_mlstm.train.strategy" in out
    assert "tf_mlstm.transfer.probe.neuron -> tf_mlstm.data.framing" in out
    assert "- tf_mlstm.transfer.probe.threshold -> tf_mlstm.transfer.probe.fit" in out
    assert "tf_mlstm.transfer.probe.fit -> tf_mlstm.transfer.experiment" in out
    assert "tf_mlstm.transfer.plots -> tf_mlstm.serving.saved_model" in out
    assert "tf_mlstm.rundir is not allowed to import tf_mlstm.models" in out
    assert "tf_mlstm.config is not allowed to import tensorflow" in out
    assert "tf_mlstm.config.convert -> tf_mlstm.data.words" in out
    assert "tf_mlstm.tasks.finetune is not allowed to import tf_mlstm.tasks.language_model" in out
    assert "- tf_mlstm.cli.eval -> tf_mlstm.tasks.finetune" in out
    assert "tf_mlstm.models.head_arrays -> sklearn" in out
    assert "- tf_mlstm.undeclared" in out  # the layers contract is exhaustive


# Every binary module.
_CLI_MODULES = sorted(
    p.stem for p in (REPO / "tf_mlstm" / "cli").glob("*.py") if p.stem != "__init__"
)


@pytest.mark.parametrize("module", _CLI_MODULES)
def test_cli_module_imports_without_tensorflow(module):
    code = (
        f"import sys, tf_mlstm.cli.{module}\n"
        "assert 'tensorflow' not in sys.modules, 'imported tensorflow'\n"
    )
    # A fresh interpreter: a forked one (tests/_forkserver.py) has TensorFlow imported.
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, f"tf_mlstm.cli.{module}: {done.stderr[-2000:]}"
