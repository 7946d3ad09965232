"""Exports that fail or are stopped: an earlier version stays whole, nothing half done serves.

A SavedModel version is written into a hidden sibling (`.tmp-<version>-...`)
and renamed in (`tf_mlstm.fileio.Staged`); these tests break that at each
stage: the write, the rename over an earlier version, a SIGTERM in the middle
of the final export of a training run, and what an interrupted export left.
"""

import os
import pathlib
import signal

import pytest
import tensorflow as tf

from _models import TINY_TRAIN_FLAGS
from _models import run
from _models import sigterm_when
from _models import train_command
from _models import write_untrained_model_dir
from tf_mlstm import fileio
from tf_mlstm.cli import export as export_cli
from tf_mlstm.serving import saved_model

REPO = pathlib.Path(__file__).resolve().parent.parent


def _files(folder):
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(pathlib.Path(folder).rglob("*"))
        if path.is_file()
    }


def _versions(export_dir):
    """The versions an export folder offers a server (not the hidden ones being written)."""
    if not export_dir.exists():
        return []
    return sorted(name for name in os.listdir(export_dir) if not fileio.is_temp_name(name))


def _fake_save(content):
    """Stands in for `tf.saved_model.save`: a complete folder at once, without tracing."""

    def save(module, path, signatures=None):
        del module, signatures
        os.makedirs(os.path.join(path, "variables"))
        pathlib.Path(path, "saved_model.pb").write_bytes(content)

    return save


def test_a_failed_export_leaves_the_earlier_version_byte_identical_and_no_temporary(
    tmp_path, monkeypatch
):
    model_dir, _ = write_untrained_model_dir(tmp_path / "run")
    base = tmp_path / "serving"
    export = lambda: export_cli.export(export_cli.ExportConfig(str(model_dir), str(base)))
    assert export()["export_dir"] == str(base / "1")
    earlier = _files(base)

    # The disk fills while the SavedModel is written.
    def full_disk(module, path, signatures=None):
        _fake_save(b"half")(module, path, signatures)
        raise tf.errors.ResourceExhaustedError(None, None, f"{path}: No space left on device")

    monkeypatch.setattr(tf.saved_model, "save", full_disk)
    with pytest.raises(tf.errors.ResourceExhaustedError, match="No space left"):
        export()
    assert _files(base) == earlier and os.listdir(base) == ["1"]

    # Written whole, but the rename over version 1 fails once version 1 was
    # moved aside: it is moved back.
    monkeypatch.setattr(tf.saved_model, "save", _fake_save(b"new"))
    rename = tf.io.gfile.rename
    moved_aside = []

    def failing_rename(source, target, overwrite=False):
        if os.path.basename(source).startswith(f"{fileio.TMP_PREFIX}1-"):
            moved_aside.append(not os.path.exists(target))
            raise tf.errors.PermissionDeniedError(None, None, f"{target}: Permission denied")
        return rename(source, target, overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", failing_rename)
    with pytest.raises(tf.errors.PermissionDeniedError):
        export()
    assert moved_aside == [True]
    assert _files(base) == earlier and os.listdir(base) == ["1"]

    # What a killed export leaves (a half-written temporary, a version moved
    # aside between the two renames) is accepted by the next export.
    monkeypatch.setattr(tf.io.gfile, "rename", rename)
    for leftover in (".tmp-1-0123abcd", ".old-1-4567ef01"):
        (base / leftover / "variables").mkdir(parents=True)
        (base / leftover / "saved_model.pb").write_bytes(b"half")
    assert export()["export_dir"] == str(base / "1")
    assert (base / "1" / "saved_model.pb").read_bytes() == b"new"
    assert saved_model.is_export(str(base / "1"))
    assert sorted(os.listdir(base)) == [".old-1-4567ef01", ".tmp-1-0123abcd", "1"]
    saved_model.check_export_base(str(base))


@pytest.mark.slow
def test_sigterm_during_the_final_export_ends_it_and_the_same_command_exports(tmp_path):
    """SIGTERM while tf-mlstm-train exports ends the process at once (training is
    over, checkpointed and its results written); no version appears; the same
    command then exports without training again."""
    model_dir = tmp_path / "run"
    command = train_command(model_dir, *TINY_TRAIN_FLAGS, "--max_steps=4")
    export_dir = model_dir / "export"
    # results.json is written last before the export, which then takes
    # seconds (loading the checkpoint, tracing the signatures).
    code, first = sigterm_when(command, model_dir / "results.json", tmp_path / "first.txt", 120)
    assert code == -signal.SIGTERM, first[-3000:]
    assert (model_dir / "results.json").exists()
    assert _versions(export_dir) == []

    again = run(command, timeout=150)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{model_dir} already finished at step 4" in again.stderr
    assert "loss" not in again.stderr.split("already finished")[1]
    assert saved_model.is_export(str(export_dir / "4"))
    assert _versions(export_dir) == ["4"]


# Loaded at interpreter start-up (through PYTHONPATH): the final results of a
# training run begin with a SIGTERM to the process itself, so the signal lands
# after the last step's stop flags were agreed and before training returns.
_SIGTERM_WHILE_THE_RESULTS_ARE_MADE = """
import os, signal
from tf_mlstm.tasks import language_model as lm_task

_results = lm_task.LanguageModelTask.results

def _results_after_a_sigterm(self, step):
    os.kill(os.getpid(), signal.SIGTERM)
    return _results(self, step)

lm_task.LanguageModelTask.results = _results_after_a_sigterm
"""


@pytest.mark.slow
def test_sigterm_after_the_last_step_ends_the_run_once_training_returns(tmp_path):
    """A SIGTERM no step acted on (it came while the final results were made) is not
    dropped: the process ends by it once training returns, before the export; the same
    command then says the run finished and exports without training again."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(_SIGTERM_WHILE_THE_RESULTS_ARE_MADE)
    path = os.pathsep.join([str(inject), str(REPO), os.environ.get("PYTHONPATH", "")])
    model_dir = tmp_path / "run"
    command = train_command(model_dir, *TINY_TRAIN_FLAGS, "--max_steps=4")
    export_dir = model_dir / "export"

    first = run(command, timeout=150, env={"PYTHONPATH": path})
    assert first.returncode == -signal.SIGTERM, first.stderr[-3000:]
    assert "Traceback" not in first.stderr
    # Training returned (its results written), the export never began.
    assert (model_dir / "results.json").exists()
    assert not export_dir.exists()

    again = run(command, timeout=150)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{model_dir} already finished at step 4" in again.stderr
    assert "loss" not in again.stderr.split("already finished")[1]
    assert _versions(export_dir) == ["4"]
