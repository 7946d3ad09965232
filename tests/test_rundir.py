"""The run folder: config checks on resume, the run lock, intact checkpoints, exact state."""

import contextlib
import dataclasses
import io
import json
import logging
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import uuid

import _forkserver
import numpy as np
import pytest
import tensorflow as tf

from _models import write_untrained_model_dir
from tf_mlstm import errors
from tf_mlstm import processes
from tf_mlstm import rundir
from tf_mlstm.config import TrainConfig
from tf_mlstm.data import tfrecord
from tf_mlstm.models import language_model
from tf_mlstm.tasks.language_model import LanguageModelTask
from tf_mlstm.train import checkpointing
from tf_mlstm.train import data_files
from tf_mlstm.train.runner import Runner
from tf_mlstm.transfer.finetune import FinetuneConfig


@pytest.fixture(autouse=True)
def _release_locks():
    yield
    rundir.release_locks()


def _ram_dir(name):
    return f"ram://{name}-{uuid.uuid4().hex[:8]}"


def _fake_checkpoint(model_dir):
    tf.io.gfile.makedirs(rundir.checkpoint_dir(model_dir))
    tf.train.Checkpoint(v=tf.Variable(1.0)).write(
        os.path.join(rundir.checkpoint_dir(model_dir), "ckpt-4")
    )


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# === Layout ===


# === Configs on resume ===


def test_fresh_run_writes_its_config_and_any_change_is_fine(tmp_path):
    model_dir = str(tmp_path / "run")
    rundir.begin_run(model_dir, {rundir.CONFIG_FILE: TrainConfig(hidden_size=32)})
    assert rundir.read_config(model_dir).hidden_size == 32
    # No checkpoint yet: nothing to resume, a new shape is no conflict.
    rundir.begin_run(model_dir, {rundir.CONFIG_FILE: TrainConfig(hidden_size=64)})
    assert rundir.read_config(model_dir).hidden_size == 64


def test_resume_refuses_a_new_shape_or_precision_and_logs_safe_changes(tmp_path, caplog):
    model_dir = str(tmp_path / "run")
    saved = TrainConfig(model_dir=model_dir, hidden_size=32, max_steps=16, precision="float32")
    rundir.begin_run(model_dir, {rundir.CONFIG_FILE: saved})
    _fake_checkpoint(model_dir)
    changed = dataclasses.replace(saved, hidden_size=64, precision="mixed_bfloat16", lr=1e-3)
    # A Python caller reads the arguments' names; a binary's user, the flags'.
    for prefix, names in (("", contextlib.nullcontext()), ("--", errors.naming_flags())):
        with (
            names,
            pytest.raises(
                rundir.RunDirError,
                match=r"holds checkpoints of another model or precision \(config.json\): "
                rf"{prefix}hidden_size=64 \(saved 32\), {prefix}precision=mixed_bfloat16 "
                rf"\(saved float32\)\. Resume with the saved values, or use a new "
                rf"{prefix}model_dir\.$",
            ),
        ):
            rundir.begin_run(model_dir, {rundir.CONFIG_FILE: changed})
    assert rundir.read_config(model_dir) == saved  # untouched
    with pytest.raises(rundir.RunDirError, match=": weight_norm=False \\(saved True\\)"):
        rundir.begin_run(
            model_dir, {rundir.CONFIG_FILE: dataclasses.replace(saved, weight_norm=False)}
        )

    caplog.set_level(logging.INFO)
    longer = dataclasses.replace(saved, max_steps=24, lr=1e-3, log_every_steps=5)
    rundir.begin_run(model_dir, {rundir.CONFIG_FILE: longer})
    assert rundir.read_config(model_dir) == longer
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "(config.json): log_every_steps 25 -> 5, lr 0.005 -> 0.001, max_steps 16 -> 24" in logged
    caplog.clear()
    with errors.naming_flags():
        rundir.begin_run(model_dir, {rundir.CONFIG_FILE: dataclasses.replace(longer, lr=1e-2)})
    assert "(config.json): --lr 0.001 -> 0.01." in caplog.text


def test_finetune_resume_rules(tmp_path):
    model_dir = str(tmp_path / "tuned")
    base = TrainConfig(hidden_size=16)
    saved = FinetuneConfig(init_model_dir="a", train_data="t", model_dir=model_dir)
    configs = {rundir.CONFIG_FILE: base, rundir.FINETUNE_CONFIG_FILE: saved}
    rundir.begin_run(model_dir, configs)
    _fake_checkpoint(model_dir)
    with pytest.raises(rundir.RunDirError, match=r": lm_loss_weight=0.5 \(saved 0.0\)"):
        rundir.begin_run(
            model_dir,
            {
                **configs,
                rundir.FINETUNE_CONFIG_FILE: dataclasses.replace(saved, lm_loss_weight=0.5),
            },
        )
    with pytest.raises(rundir.RunDirError, match=r"\(config.json\): hidden_size=32 \(saved 16\)"):
        rundir.begin_run(model_dir, {**configs, rundir.CONFIG_FILE: TrainConfig(hidden_size=32)})
    rundir.begin_run(
        model_dir, {**configs, rundir.FINETUNE_CONFIG_FILE: dataclasses.replace(saved, max_steps=5)}
    )


# === The run lock ===


def _lock_path(model_dir):
    return os.path.join(model_dir, rundir.LOCK_FILE)


def test_lock_is_held_until_released_and_names_its_holder(tmp_path):
    model_dir = str(tmp_path)
    path = rundir.acquire_lock(model_dir)
    record = json.loads(open(path).read())
    assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
    assert rundir.acquire_lock(model_dir) == path  # this process already holds it
    rundir.release_locks()
    assert not os.path.exists(path)

    other_host = {"host": "elsewhere-7", "pid": 1, "started": "2026-01-02T03:04:05+00:00"}
    with open(path, "w") as f:
        json.dump(other_host, f)
    with pytest.raises(
        rundir.RunDirError,
        match=r"is in use by another run \(host elsewhere-7, pid 1, since 2026-01-02T03:04:05",
    ):
        rundir.acquire_lock(model_dir)
    assert json.loads(open(path).read()) == other_host  # left alone


def test_lock_of_a_dead_process_on_this_host_is_taken_over(tmp_path, caplog):
    gone = _forkserver.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = {"host": socket.gethostname(), "pid": int(gone.stdout), "started": "earlier"}
    path = _lock_path(str(tmp_path))
    with open(path, "w") as f:
        json.dump(stale, f)
    rundir.acquire_lock(str(tmp_path))
    assert json.loads(open(path).read())["pid"] == os.getpid()
    assert any(
        "Taking over the lock" in m and f"pid {stale['pid']}" in m for m in _warnings(caplog)
    )


def test_lock_of_a_killed_process_not_yet_reaped_is_taken_over(tmp_path, caplog):
    """A zombie holds nothing: a chief killed with its launcher, whose orphaned process
    no init reaps (a container's first process), must not keep the relaunch out."""
    zombie = subprocess.Popen(["sleep", "60"])
    try:
        start = processes.start_time(zombie.pid)
        os.kill(zombie.pid, signal.SIGKILL)
        stat = pathlib.Path(f"/proc/{zombie.pid}/stat")
        deadline = time.monotonic() + 10
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        holder = {"host": socket.gethostname(), "pid": zombie.pid, "process_start": start}
        path = _lock_path(str(tmp_path))
        with open(path, "w") as f:
            json.dump({**holder, "started": "earlier"}, f)
        rundir.acquire_lock(str(tmp_path))
        assert json.loads(open(path).read())["pid"] == os.getpid()
        assert any("Taking over the lock" in m for m in _warnings(caplog))
    finally:
        zombie.wait()


@pytest.mark.slow
def test_second_chief_on_one_model_dir_is_refused(tmp_path):
    """A live run holds the folder; a duplicate launch of the binary stops with one line."""
    holder = _forkserver.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tf_mlstm import rundir; rundir.acquire_lock(sys.argv[1]); "
            "print('locked', flush=True); sys.stdin.read()",
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        second = _forkserver.run(
            [
                sys.executable,
                "-m",
                "tf_mlstm.cli.train",
                f"--model_dir={tmp_path}",
                "--hidden_size=8",
                "--embedding_size=8",
                "--max_steps=1",
            ],
            capture_output=True,
            text=True,
            timeout=500,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        )
        assert second.returncode == 1 and "Traceback" not in second.stderr
        # absl's error lines; TensorFlow's C++ lines logged before absl starts read "E0000".
        errors = [
            line for line in second.stderr.splitlines() if line[:1] == "E" and line[:5] != "E0000"
        ]
        assert len(errors) == 1, second.stderr[-3000:]
        assert (
            f"{tmp_path} is in use by another run (host {socket.gethostname()}, "
            f"pid {holder.pid}" in errors[0]
        )
        assert not (tmp_path / rundir.CHECKPOINT_SUBDIR).exists()
        # The lock itself refuses too (the binary's checks before work answered first).
        with pytest.raises(rundir.RunDirError, match=rf"pid {holder.pid}, since "):
            rundir.acquire_lock(str(tmp_path))
    finally:
        holder.communicate("", timeout=60)
    assert not (tmp_path / rundir.LOCK_FILE).exists()  # released at exit


# === Newest intact checkpoint ===


def _three_checkpoints(directory):
    value = tf.Variable(0.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=value), directory, max_to_keep=5)
    for step in (1, 2, 3):
        value.assign(float(step))
        manager.save(checkpoint_number=step)
    return value


@pytest.mark.parametrize("damage", ["truncate", "delete_data", "delete_index"])
def test_restore_falls_back_to_the_newest_intact_checkpoint(tmp_path, caplog, damage):
    directory = str(tmp_path / "checkpoints")
    _three_checkpoints(directory)
    newest = os.path.join(directory, "ckpt-3")
    data = newest + ".data-00000-of-00001"
    if damage == "truncate":
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 2)
    else:
        os.remove(data if damage == "delete_data" else newest + ".index")
    value = tf.Variable(-1.0)
    restored = rundir.restore_checkpoint(tf.train.Checkpoint(v=value), directory)
    assert restored == os.path.join(directory, "ckpt-2") and float(value.numpy()) == 2.0
    assert any("ckpt-3 is missing or damaged" in m for m in _warnings(caplog))

    for prefix in ("ckpt-1", "ckpt-2"):
        os.remove(os.path.join(directory, prefix + ".data-00000-of-00001"))
    with pytest.raises(
        rundir.RunDirError,
        match=r"no intact checkpoint \(missing or damaged: ckpt-3, ckpt-2, ckpt-1;",
    ):
        rundir.restore_checkpoint(tf.train.Checkpoint(v=value), directory)


def test_a_first_save_killed_while_it_wrote_starts_the_run_from_the_beginning(tmp_path, caplog):
    """No save ever ended (no checkpoint state file): the damaged files are what the first
    save was writing when the run was killed; the rerun starts at step 0 with a warning.
    Once a save has ended, damage is refused as before (the test above)."""
    directory = str(tmp_path / "checkpoints")
    _three_checkpoints(directory)
    for step in (1, 2):
        for suffix in (".index", ".data-00000-of-00001"):
            os.remove(os.path.join(directory, f"ckpt-{step}{suffix}"))
    index = os.path.join(directory, "ckpt-3.index")
    with open(index, "r+b") as f:  # TensorFlow's merge of the index was under way
        f.truncate(os.path.getsize(index) // 2)
    checkpoint = tf.train.Checkpoint(v=tf.Variable(-1.0))
    with pytest.raises(rundir.RunDirError, match=r"no intact checkpoint \(missing or damaged: "):
        rundir.restore_checkpoint(checkpoint, directory)
    os.remove(os.path.join(directory, "checkpoint"))
    assert rundir.restore_checkpoint(checkpoint, directory) is None
    assert any(
        "ckpt-3 was being written when the run stopped" in m and "starting from the beginning" in m
        for m in _warnings(caplog)
    )


def test_from_run_skips_a_damaged_newest_checkpoint(tmp_path, caplog):
    model_dir, model = write_untrained_model_dir(tmp_path / "m", hidden_size=8, embedding_size=4)
    intact = [w.copy() for w in model.get_weights()]
    model.set_weights([w + 1.0 for w in intact])
    # Written without the state file's record: found by its index file.
    prefix = tf.train.Checkpoint(model=model).write(str(model_dir / "checkpoints" / "ckpt-2"))
    with open(prefix + ".data-00000-of-00001", "r+b") as f:
        f.truncate(100)
    loaded = language_model.MLSTMLanguageModel.from_run(str(model_dir))
    for got, want in zip(loaded.get_weights(), intact):
        np.testing.assert_array_equal(got, want)
    assert any(os.path.basename(prefix) in m for m in _warnings(caplog))
    with pytest.raises(rundir.RunDirError, match="ckpt-2 is missing or damaged"):
        language_model.MLSTMLanguageModel.from_run(str(model_dir), checkpoint=prefix)


# === Carried state and input position ===


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("where", ["local", "ram"])
def test_carried_state_round_trip_is_bit_exact(tmp_path, dtype, where):
    model_dir = str(tmp_path) if where == "local" else _ram_dir("state")
    rng = np.random.default_rng(0)
    states = [
        tuple(tf.cast(rng.normal(size=(3, 5)).astype(np.float32) * 10, dtype) for _ in range(2))
        for _ in range(2)
    ]
    for step in (4, 8, 12):
        checkpointing.save_carried_state(model_dir, 0, step, states, keep=2)
    names = sorted(tf.io.gfile.listdir(rundir.carried_state_dir(model_dir)))
    assert names == ["worker-0-step-12.tensor", "worker-0-step-8.tensor"]
    loaded = checkpointing.load_carried_state(model_dir, 0, 12, 2, (3, 5), dtype)
    for (h, c), (h2, c2) in zip(states, loaded):
        assert h2.dtype == dtype.as_numpy_dtype
        assert h.numpy().tobytes() == h2.tobytes() and c.numpy().tobytes() == c2.tobytes()
    # Another layout or precision: zeros, not a wrong state.
    assert checkpointing.load_carried_state(model_dir, 0, 12, 1, (3, 5), dtype) is None
    assert checkpointing.load_carried_state(model_dir, 0, 12, 2, (3, 5), tf.float64) is None
    assert checkpointing.load_carried_state(model_dir, 0, 4, 2, (3, 5), dtype) is None


def test_legacy_npz_state_still_resumes_even_in_bfloat16(tmp_path):
    h = tf.cast([[1.5, -2.25]], tf.bfloat16).numpy()
    c = tf.cast([[0.125, 3.0]], tf.bfloat16).numpy()
    buffer = io.BytesIO()
    np.savez(buffer, h0=h, c0=c)  # what earlier versions wrote
    folder = tmp_path / rundir.CARRIED_STATE_SUBDIR
    folder.mkdir()
    (folder / "worker-0-step-4.npz").write_bytes(buffer.getvalue())
    [(h2, c2)] = checkpointing.load_carried_state(str(tmp_path), 0, 4, 1, (1, 2), tf.bfloat16)
    assert h2.dtype == h.dtype and h2.tobytes() == h.tobytes() and c2.tobytes() == c.tobytes()


def test_input_position_round_trip_on_a_non_local_filesystem():
    model_dir = _ram_dir("input")
    layout = {"worker": 0, "rows": 2}
    data = tf.data.Dataset.range(100).shuffle(10, seed=1).batch(2)
    iterator = iter(data)
    for _ in range(3):
        next(iterator)
    for step in (3, 4, 5):
        checkpointing.save_input_state(model_dir, 0, step, iterator, layout, keep=2)
    expected = [next(iterator).numpy().tolist() for _ in range(3)]
    names = sorted(tf.io.gfile.listdir(rundir.input_state_dir(model_dir, 0)))
    assert [n for n in names if n.endswith(".json")] == ["step-4.json", "step-5.json"]
    resumed = iter(data)
    assert checkpointing.restore_input_state(model_dir, 0, 5, resumed, layout)
    assert [next(resumed).numpy().tolist() for _ in range(3)] == expected
    assert not checkpointing.restore_input_state(model_dir, 0, 5, iter(data), {"worker": 1})


# === A whole run on a non-local filesystem ===


def _train(config, files):
    return Runner(LanguageModelTask(config, files, []), config).train()


@pytest.mark.slow
def test_trainer_resumes_exactly_on_ram_filesystem_and_past_a_damaged_checkpoint(tmp_path, caplog):
    data = data_files.build_demo_tfrecords(str(tmp_path))
    files = tf.io.gfile.glob(os.path.join(data, "train-*"))
    base = TrainConfig(
        hidden_size=16,
        embedding_size=8,
        seq_length=16,
        batch_size=4,
        total_steps=12,
        checkpoint_every_steps=4,
        log_every_steps=4,
        eval_every_steps=0,
        sample_every_steps=0,
        precision="mixed_bfloat16",
        jit_compile="false",
    )
    whole_dir, parts_dir = _ram_dir("whole"), _ram_dir("parts")
    whole = _train(dataclasses.replace(base, model_dir=whole_dir, max_steps=12), files)
    assert not _warnings(caplog)

    _train(dataclasses.replace(base, model_dir=parts_dir, max_steps=8), files)
    resumed = _train(dataclasses.replace(base, model_dir=parts_dir, max_steps=12), files)
    assert resumed["step"] == 12
    assert resumed["weights_sha256"] == whole["weights_sha256"]
    saved = json.loads(tf.io.gfile.GFile(os.path.join(parts_dir, "results.json")).read())
    assert saved["weights_sha256"] == whole["weights_sha256"]
    assert rundir.read_config(parts_dir).max_steps == 12

    # The newest checkpoint cut short: the run resumes from the one before.
    data = os.path.join(rundir.checkpoint_dir(whole_dir), "ckpt-12.data-00000-of-00001")
    content = tf.io.gfile.GFile(data, "rb").read()
    tf.io.gfile.remove(data)  # ram:// appends to a file opened for writing
    with tf.io.gfile.GFile(data, "wb") as f:
        f.write(content[: len(content) // 2])
    caplog.set_level(logging.INFO)
    again = _train(dataclasses.replace(base, model_dir=whole_dir, max_steps=12), files)
    assert again["weights_sha256"] == whole["weights_sha256"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("ckpt-12 is missing or damaged" in m for m in messages)
    assert any(m.startswith("Resumed from") and "ckpt-8" in m for m in messages)


def test_each_kind_of_folder_is_told_by_its_own_file_and_refused_where_it_does_not_fit(tmp_path):
    def make(name, *files):
        for file in files:
            (tmp_path / name / file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / file).write_text("{}")
        return str(tmp_path / name)

    lm = make("lm", "config.json", "checkpoints/ckpt-1.index")
    ft = make("ft", "config.json", "finetune_config.json", "results.json")
    data = make("data", "stats.json")
    killed = make("killed", tfrecord.INCOMPLETE_MARKER)
    version = make("export", "7/saved_model.pb")
    new = make("new", "run.lock")  # stopped before its config was written
    kind = rundir.folder_kind
    assert kind(lm) == (rundir.LANGUAGE_MODEL_RUN, "config.json")
    assert kind(ft) == (rundir.FINETUNE_RUN, "finetune_config.json")
    assert kind(data)[0] == kind(killed)[0] == "tf-mlstm-make-tfrecords data folder"
    assert kind(version) == ("SavedModel", "7/saved_model.pb")
    assert kind(new) == kind(str(tmp_path / "missing")) == (None, None)
    train = (None, rundir.LANGUAGE_MODEL_RUN)
    for path in (lm, new, str(tmp_path / "missing")):
        rundir.check_folder_kind(path, "model_dir", "tf-mlstm-train", train)
    with pytest.raises(
        rundir.RunDirError,
        match=rf"^model_dir={data} is a tf-mlstm-make-tfrecords data folder \(it holds "
        rf"stats.json\), and tf-mlstm-train takes a new folder or a language-model run there: "
        rf"tf-mlstm-train takes it as --train_data={data}, tf-mlstm-eval as --data={data}\.$",
    ):
        rundir.check_folder_kind(data, "model_dir", "tf-mlstm-train", train)
    with pytest.raises(FileNotFoundError, match=rf"^{new}: no config.json, so no trained model"):
        rundir.check_folder_kind(new, "init_model_dir", "tf-mlstm-finetune", rundir.MODEL_RUNS)
    with pytest.raises(
        FileNotFoundError,
        match=rf"^{version}: no config.json: it is a SavedModel \(it holds 7/saved_model.pb\)",
    ):
        rundir.read_config(version)
    with pytest.raises(FileNotFoundError, match=rf"^{new}: no config.json; is it a tf-mlstm-train"):
        rundir.read_config(new)


def test_a_fine_tuning_run_writes_config_json_last(tmp_path, monkeypatch):
    """A kill between the two config files leaves no folder that reads as a language-model run."""
    written = []
    monkeypatch.setattr(rundir, "write_config", lambda d, c, name, extra=None: written.append(name))
    rundir.begin_run(
        str(tmp_path / "ft"),
        {rundir.CONFIG_FILE: TrainConfig(), rundir.FINETUNE_CONFIG_FILE: TrainConfig()},
    )
    rundir.release_locks()
    assert written == [rundir.FINETUNE_CONFIG_FILE, rundir.CONFIG_FILE]


def test_a_symlink_loop_as_a_new_run_folder_is_one_line(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ValueError, match=rf"^model_dir={loop}: a symbolic link to {loop}, which"):
        rundir.check_folder_kind(str(loop), "model_dir", "tf-mlstm-train", (None,))


# === The one gateway to a run folder's files ===


def test_results_read_back_or_none_when_there_are_none_to_read(tmp_path):
    assert rundir.read_results(str(tmp_path)) is None
    rundir.write_results(str(tmp_path), {"step": 4, "bits_per_char": 2.5})
    assert rundir.read_results(str(tmp_path)) == {"step": 4, "bits_per_char": 2.5}
    for text in ("{ cut short", "[4]"):  # not what `write_results` writes: no results
        (tmp_path / rundir.RESULTS_FILE).write_text(text)
        assert rundir.read_results(str(tmp_path)) is None


def test_only_the_run_folder_module_joins_a_run_folders_file_names_to_it():
    """Every run-folder file is read and written through rundir (preflight, below it, checks
    the names TensorFlow-free): no other module builds the path of one from a model_dir."""
    import re  # pylint: disable=import-outside-toplevel

    names = ("CONFIG_FILE", "FINETUNE_CONFIG_FILE", "RESULTS_FILE", "OPENAI_IMPORT_FILE")
    names += ("LOCK_FILE",)
    literals = [re.escape(repr(getattr(rundir, name))[1:-1]) for name in names]
    file_name = "|".join([*names, *(f"[\"']{literal}[\"']" for literal in literals)])
    joined = re.compile(r"os\.path\.join\(\s*[\w.]*model_dir\s*,\s*[\w.]*(" + file_name + ")")
    package = os.path.join(os.path.dirname(os.path.dirname(__file__)), "tf_mlstm")
    found = []
    for folder, _, files in os.walk(package):
        for name in files:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, package)
            if not name.endswith(".py") or relative in ("rundir.py", "preflight.py"):
                continue
            with open(path, encoding="utf-8") as f:
                found += [f"{relative}: {m.group(0)}" for m in joined.finditer(f.read())]
    assert not found, found
    assert joined.search("os.path.join(config.model_dir, rundir.RESULTS_FILE)")
    assert joined.search('os.path.join(model_dir, "openai_import.json")')
