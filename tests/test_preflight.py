"""Checks before work (tf_mlstm/preflight.py): a mistake in a path is one line before any work.

Every binary checks its inputs, its outputs, the kind of its run folders and
a resumed run's model before it loads a model, measures (autotune), reads
data or imports TensorFlow. The binaries run in-process here with their work
made to fail the test, so a check that came later (after autotune, after the
model loaded, after the work) fails it; a few run as console scripts to show
that TensorFlow never starts.
"""

import importlib
import json
import logging
import os
import pathlib
import socket
import subprocess
import sys
import textwrap

import pytest
from absl import flags
from absl import logging as absl_logging

from tf_mlstm import errors
from tf_mlstm import preflight
from tf_mlstm import processes
from tf_mlstm.cli import _flags
from tf_mlstm.cli import _main
from tf_mlstm.config import FinetuneConfig
from tf_mlstm.config import TrainConfig

REPO = pathlib.Path(__file__).resolve().parent.parent
FLAGS = flags.FLAGS


@pytest.fixture
def run_in_process(monkeypatch, caplog):
    """Runs `tf-mlstm-<module> args...` in this process; returns (exit status, error lines).

    Only the binary's checks before work may run: its body, and a config function (which
    may load a model, measure it or read data), fail the test.
    """
    run_body = _main.run_body

    def checks_only(step, argument):
        if getattr(step, "__name__", "") != "check_before_work":
            raise AssertionError(f"{step.__name__} ran: the work began before the checks ended")
        return run_body(step, argument)

    monkeypatch.setattr(_main, "run_body", checks_only)
    # quiet_tensorflow sets the log level in the environment; monkeypatch puts it back.
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))

    def run(module, *args):
        binary = importlib.import_module(f"tf_mlstm.cli.{module}")
        known, aliases = set(FLAGS), dict(_flags.DEPRECATED_ALIASES)
        monkeypatch.setattr(sys, "argv", [f"tf-mlstm-{module.replace('_', '-')}", *args])
        caplog.clear()
        try:
            with caplog.at_level(logging.ERROR, logger=absl_logging.ABSLLogger.root.name):
                with pytest.raises(SystemExit) as stop:
                    binary.run()
        finally:
            FLAGS.unparse_flags()
            for name in set(FLAGS) - known:
                delattr(FLAGS, name)
            _flags.DEPRECATED_ALIASES.clear()
            _flags.DEPRECATED_ALIASES.update(aliases)
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        return stop.value.code, lines

    return run


def _write(path, text=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _lm_run(folder, **settings):
    """A language-model run folder as training leaves it: config.json and a checkpoint."""
    _write(folder / "config.json", TrainConfig(**settings).to_json())
    _write(folder / "checkpoints" / "ckpt-3.index", "i")
    return folder


def _finetune_run(folder, **settings):
    _lm_run(folder)
    _write(folder / "finetune_config.json", FinetuneConfig(**settings).to_json())
    _write(folder / "results.json", '{"step": 3}')
    return folder


@pytest.fixture
def places(tmp_path):
    """A model run, a fine-tuning run, a classifier, a labeled CSV, a data folder, a file."""
    return {
        "t": tmp_path,
        "lm": _lm_run(tmp_path / "lm", hidden_size=64, precision="float32"),
        "ft": _finetune_run(tmp_path / "ft", head_hidden=8, precision="float32"),
        "clf": _write(tmp_path / "transfer" / "classifier.json", "{}"),
        "csv": _write(tmp_path / "x.csv", "sentence,label\nfine,1\n"),
        "data": _write(tmp_path / "data" / "stats.json", "{}").parent,
        "file": _write(tmp_path / "notes.txt", "a file\n"),
        "folder": _write(tmp_path / "scores" / "kept.txt", "kept\n").parent,
        "busy": _busy(_lm_run(tmp_path / "busy")),
    }


def _busy(folder):
    """A run folder whose lock a live process (this one's parent) holds."""
    holder = os.getppid()
    record = {
        "host": socket.gethostname(),
        "pid": holder,
        "process_start": processes.start_time(holder),
        "started": "2026-01-01T00:00:00+00:00",
        "command": "tf-mlstm-train --model_dir=runs/r1",
    }
    _write(folder / "run.lock", json.dumps(record))
    return folder


# binary, flags ({lm}, {csv}, ... are the places above), the one line it must print.
_CASES = {
    # The issue's three: a classify --output that is a folder was met after every text was
    # classified (naming a hidden temporary file), a missing --train_data after the model
    # loaded, a --hidden_size that mismatches the run after autotune.
    "classify_output_folder": (
        "classify",
        ["--model_dir={lm}", "--classifier={clf}", "--input={csv}", "--output={folder}"],
        "--output={folder} is a folder; give the path of the file to write, e.g. "
        "{folder}/scores.csv",
    ),
    "classify_output_folder_overwrite": (
        "classify",
        ["--model_dir={lm}", "--classifier={clf}", "--input={csv}", "--output={t}", "--overwrite"],
        "--output={t} is a folder; give the path of the file to write",
    ),
    "transfer_missing_train_data": (
        "transfer",
        ["--model_dir={lm}", "--train_data={t}/missing.csv", "--output_dir={t}/o"],
        "--train_data: input file not found: {t}/missing.csv",
    ),
    "train_resume_hidden_size": (
        "train",
        ["--model_dir={lm}", "--hidden_size=128"],
        "{lm} holds checkpoints of another model or precision (config.json): "
        "--hidden_size=128 (saved 64). Resume with the saved values, or use a new --model_dir.",
    ),
    "train_resume_precision": (
        "train",
        ["--model_dir={lm}", "--hidden_size=64", "--precision=mixed_bfloat16"],
        "--precision=mixed_bfloat16 (saved float32)",
    ),
    "train_missing_data": (
        "train",
        ["--model_dir={t}/new", "--train_data={t}/shards/train-*"],
        "--train_data: input pattern matches no files: {t}/shards/train-*",
    ),
    "train_model_dir_under_a_file": (
        "train",
        ["--model_dir={file}/run"],
        "--model_dir={file}/run: {file} is a file, so the folder cannot be made there",
    ),
    "train_folder_in_use": (
        "train",
        ["--model_dir={busy}"],
        "{busy} is in use by another run (host ",
    ),
    "train_wrong_kind": (
        "train",
        ["--model_dir={ft}"],
        "--model_dir={ft} is a fine-tuning run (it holds finetune_config.json), and "
        "tf-mlstm-train takes a new folder or a language-model run there",
    ),
    "finetune_output_is_the_input": (
        "finetune",
        ["--init_model_dir={lm}", "--model_dir={lm}", "--train_data={csv}"],
        "--model_dir={lm} is a language-model run (it holds config.json), and "
        "tf-mlstm-finetune takes a new folder or a fine-tuning run there",
    ),
    "finetune_resume_head": (
        "finetune",
        ["--init_model_dir={lm}", "--model_dir={ft}", "--train_data={csv}", "--head_hidden=16"],
        "{ft} holds checkpoints of another model or precision (finetune_config.json): "
        "--head_hidden=16 (saved 8)",
    ),
    "finetune_missing_test_data": (
        "finetune",
        ["--init_model_dir={lm}", "--model_dir={t}/f", "--train_data={csv}", "--test_data={t}/t"],
        "--test_data: input file not found: {t}/t",
    ),
    "finetune_init_missing": (
        "finetune",
        ["--init_model_dir={t}/none", "--model_dir={t}/f", "--train_data={csv}"],
        "--init_model_dir={t}/none does not exist, so no trained model (config.json) is there",
    ),
    "eval_missing_data": (
        "eval",
        ["--model_dir={lm}", "--data={t}/held_out"],
        "--data: input file or folder not found: {t}/held_out",
    ),
    "eval_data_folder_as_model": (
        "eval",
        ["--model_dir={data}", "--data={data}"],
        "{data}: no config.json: it is a tf-mlstm-make-tfrecords data folder (it holds "
        "stats.json), not a trained model",
    ),
    "export_dir_is_a_file": (
        "export",
        ["--model_dir={lm}", "--export_dir={file}"],
        "--export_dir={file} is a file, not a folder",
    ),
    "generate_missing_classifier": (
        "generate",
        ["--model_dir={lm}", "--classifier={t}/none.json"],
        "--classifier: classifier file not found: {t}/none.json",
    ),
    "visualize_output_is_a_file": (
        "visualize",
        ["--model_dir={lm}", "--neuron=0", "--input=Fine.", "--output_dir={file}"],
        "--output_dir={file} is a file, not a folder",
    ),
    "visualize_classifier_is_a_folder": (
        "visualize",
        ["--model_dir={lm}", "--classifier={folder}", "--input=Fine.", "--output_dir={t}/v"],
        "--classifier={folder} is a folder, not a classifier file",
    ),
    "import_into_a_run": (
        "import_openai",
        ["--weights_dir={folder}", "--model_dir={lm}"],
        "--model_dir={lm} is a language-model run (it holds config.json), and "
        "tf-mlstm-import-openai takes a new folder there",
    ),
    "make_tfrecords_output_is_a_file": (
        "make_tfrecords",
        ["--input={csv}", "--output_dir={file}"],
        "--output_dir={file} is a file, not a folder",
    ),
    "classify_beam_export_base": (
        "classify_beam",
        [
            "--saved_model={t}/export",
            "--input={csv}",
            "--output={t}/o/part",
            "--runner=DirectRunner",
        ],
        "--saved_model={t}/export: no SavedModel there (no saved_model.pb); give the version "
        "folder that tf-mlstm-export wrote ({t}/export/7)",
    ),
    "classify_beam_output_folder": (
        "classify_beam",
        [
            "--saved_model={t}/export/7",
            "--input={csv}",
            "--output={folder}",
            "--runner=DirectRunner",
        ],
        "--output={folder} is a folder; give a prefix of file names in it, e.g. {folder}/part",
    ),
    "preset_into_a_run": (
        "preset",
        ["--model_dir={lm}", "--preset_dir={ft}", "--overwrite"],
        "--preset_dir={ft} is a fine-tuning run (it holds finetune_config.json), and "
        "tf-mlstm-preset takes a new folder or a tf_mlstm preset there",
    ),
    "preset_as_the_model": (
        "preset",
        ["--model_dir={t}/p", "--preset_dir={t}/q"],
        "--model_dir={t}/p is a tf_mlstm preset (it holds metadata.json), not a run folder: "
        "in Python, tf_mlstm.load('{t}/p') loads it",
    ),
    "transfer_output_is_the_model": (
        "transfer",
        ["--model_dir={lm}", "--train_data={csv}", "--output_dir={lm}", "--overwrite"],
        "--output_dir={lm} is a model folder (it holds config.json); writing here would "
        "replace the run's results.json",
    ),
}


def _names(places):
    return {name: str(value) for name, value in places.items()}


@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_mistake_in_a_path_is_one_line_before_any_work(case, places, run_in_process):
    _write(places["t"] / "export" / "7" / "saved_model.pb", "pb")
    _write(places["t"] / "p" / "metadata.json", "{}")
    _write(places["t"] / "p" / "config.json", "{}")
    module, args, expected = _CASES[case]
    names = _names(places)
    before = sorted(str(p) for p in places["t"].rglob("*"))
    status, lines = run_in_process(module, *(arg.format(**names) for arg in args))
    assert status == 1, lines
    assert len(lines) == 1 and expected.format(**names) in lines[0], lines
    assert sorted(str(p) for p in places["t"].rglob("*")) == before  # nothing written


def test_every_binary_checks_before_work():
    """Each binary defines its checks (or the table above has no case for it)."""
    from tf_mlstm.cli import main

    for module in main.binaries().values():
        binary = importlib.import_module(module)
        assert callable(getattr(binary, "check_before_work", None)), module
    assert {module for module, _, _ in _CASES.values()} == {
        module.rsplit(".", 1)[1] for module in main.binaries().values()
    }


def test_a_resume_with_the_saved_values_or_auto_passes(places, run_in_process):
    """A resume that keeps the model passes the checks (and reaches the work)."""
    with pytest.raises(AssertionError, match="the work began"):
        run_in_process("train", f"--model_dir={places['lm']}", "--hidden_size=64")
    # auto precision: a resumed run keeps the precision its config records.
    preflight.check_resume(
        str(places["lm"]), {"hidden_size": 64, "precision": "auto"}, preflight.CONFIG_FILE
    )
    # A fine-tuning run's list settings compare by their names (a flag's list, a saved string).
    preflight.check_resume(
        str(places["ft"]),
        {"features": ["cell"], "label_key": ["label"], "lm_loss_weight": 0.0},
        preflight.FINETUNE_CONFIG_FILE,
    )


def test_a_run_folder_without_checkpoints_starts_afresh_with_any_shape(tmp_path):
    run = tmp_path / "run"
    _write(run / "config.json", TrainConfig(hidden_size=64).to_json())
    preflight.check_resume(str(run), {"hidden_size": 128}, preflight.CONFIG_FILE)


def test_an_output_where_nothing_can_be_written_is_one_line(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # A read-only folder, as a user other than root sees it (root may write anywhere).
    monkeypatch.setattr(
        preflight.os,
        "access",
        lambda path, mode: (
            real_access(path, mode) and not (os.fspath(path) == str(locked) and mode & os.W_OK)
        ),
    )
    with pytest.raises(ValueError, match=rf"^output={locked}/s.csv: cannot write in {locked}"):
        preflight.check_output_file("output", f"{locked}/s.csv")
    with pytest.raises(ValueError, match=rf"^output_dir={locked}: cannot write in it"):
        preflight.check_output_dir("output_dir", str(locked))
    with pytest.raises(ValueError, match=rf"^output_dir={locked}/a/b: cannot write in"):
        preflight.check_output_dir("output_dir", f"{locked}/a/b")
    preflight.check_output_dir("output_dir", str(tmp_path / "free"))


def test_inputs_stdin_and_globs(tmp_path):
    a = _write(tmp_path / "a.jsonl", "{}\n")
    preflight.check_input_files("input", f"-, {a},{tmp_path}/*.jsonl")
    with pytest.raises(ValueError, match=rf"^input: input is a directory: {tmp_path} \(give"):
        preflight.check_input_files("input", str(tmp_path))
    preflight.check_input_files("data", str(tmp_path), folders=True)
    # A Python caller reads the argument's name; a binary's user, the flag's.
    with pytest.raises(FileNotFoundError, match=r"^input: input pattern matches no files"):
        preflight.check_input_files("input", f"{tmp_path}/*.csv")
    with errors.naming_flags(), pytest.raises(FileNotFoundError, match=r"^--input: input pattern"):
        preflight.check_input_files("input", f"{tmp_path}/*.csv")


# Run as a console script: the user's error comes before TensorFlow is imported.
_CONSOLE = textwrap.dedent(
    """
    import atexit, sys
    atexit.register(lambda: print("tensorflow imported:", "tensorflow" in sys.modules,
                                  file=sys.stderr))
    sys.argv[0] = "/usr/bin/tf-mlstm-{name}"
    from tf_mlstm.cli.{module} import run
    sys.exit(run())
    """
)


@pytest.mark.parametrize(
    "case",
    ["classify_output_folder", "transfer_missing_train_data", "train_resume_hidden_size"],
)
def test_the_issues_mistakes_are_answered_before_tensorflow_starts(case, places):
    module, args, expected = _CASES[case]
    names = _names(places)
    code = _CONSOLE.format(name=module.replace("_", "-"), module=module)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    # A fresh interpreter: a forked one (tests/_forkserver.py) has TensorFlow imported.
    done = subprocess.run(
        [sys.executable, "-c", code, *(arg.format(**names) for arg in args)],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(REPO)),
        timeout=120,
        cwd=places["t"],
    )
    assert done.returncode == 1 and done.stdout == "", done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert lines[-1] == "tensorflow imported: False", done.stderr[-3000:]
    [line] = lines[:-1]
    assert f"] {expected.format(**names)}" in line, line


def test_the_checks_import_no_tensorflow():
    code = "import sys; import tf_mlstm.preflight; print('tensorflow' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
    )
    assert done.stdout.strip() == "False", done.stderr[-2000:]
