"""tf-mlstm-train end to end: outputs, exact resume after SIGKILL, budgets."""

import contextlib
import dataclasses
import json
import os
import pathlib
import re
import resource
import signal
import subprocess
import sys
import time

import _forkserver
import pytest
from conftest import skip_unless_ci

from _commands import run_in_one_process
from _models import PINNED_FLAGS
from tf_mlstm import errors
from tf_mlstm.config import TrainConfig

REPO = pathlib.Path(__file__).resolve().parent.parent
# Pinned (float32, XLA off): a test that gives --precision later overrides it. No
# final export (seconds a run) unless a test asks for it with --export.
TINY = [
    *PINNED_FLAGS,
    "--noexport",
    "--hidden_size=32",
    "--embedding_size=16",
    "--seq_length=32",
    "--batch_size=8",
    "--eval_every_steps=0",
    "--sample_every_steps=0",
    "--log_every_steps=1",
    "--checkpoint_every_steps=4",
    "--total_steps=16",
]
_STEP_LINE = re.compile(r"step (\d+)/\d+\s+loss ([0-9.]+)")


def _train_cmd(model_dir, *extra):
    return [sys.executable, "-m", "tf_mlstm.cli.train", f"--model_dir={model_dir}", *TINY, *extra]


def _run(cmd, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = _forkserver.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO, errors="replace"
    )
    return proc


def _losses(log):
    return {int(m.group(1)): float(m.group(2)) for m in _STEP_LINE.finditer(log)}


def test_demo_flagfile_states_the_defaults():
    defaults = dataclasses.asdict(TrainConfig())
    for line in (REPO / "flags" / "demo.flags").read_text().splitlines():
        if line.startswith("--"):
            name, value = line[2:].split("=", 1)
            want = defaults[name]
            assert str(want) == value or (isinstance(want, float) and float(value) == want), name


def test_bad_flag_is_one_clear_line(tmp_path):
    proc = _run(_train_cmd(tmp_path / "m", "--precision=float64"))
    assert proc.returncode != 0
    assert "--precision" in proc.stderr and "Traceback" not in proc.stderr
    proc = _run(_train_cmd(tmp_path / "m", "--train_data=" + str(tmp_path / "nothing")))
    assert proc.returncode != 0
    assert "--train_data: input file or folder not found: " in proc.stderr
    assert "Traceback" not in proc.stderr


def _checkpoint_steps(model_dir):
    return sorted(
        int(p.name[len("ckpt-") : -len(".index")])
        for p in (model_dir / "checkpoints").glob("ckpt-*.index")
    )


def _committed_checkpoint(model_dir):
    """Whether the checkpoint state file lists a checkpoint: its save has ended (the
    `.index` file appears while the save still writes it)."""
    state = model_dir / "checkpoints" / "checkpoint"
    try:
        return "model_checkpoint_path" in state.read_text()
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_train_writes_everything_and_resumes_exactly_after_sigkill(tmp_path, precision):
    """Killed at a checkpoint with steps left, the same command ends with identical weights.

    The carried recurrent state is saved in the compute dtype, so this holds
    for 16-bit states too.
    """
    whole = _run(
        _train_cmd(tmp_path / "whole", "--max_steps=16", f"--precision={precision}", "--export")
    )
    assert whole.returncode == 0, whole.stderr[-3000:]
    reference = _losses(whole.stderr)
    assert sorted(reference) == list(range(1, 17))

    model_dir = tmp_path / "whole"
    results = json.loads((model_dir / "results.json").read_text())
    assert results["step"] == 16 and results["validation_bits_per_char"] > 0
    config = json.loads((model_dir / "config.json").read_text())
    assert config["hidden_size"] == 32 and config["precision"] == precision
    # Versioned by the final step, as TensorFlow Serving loads it.
    assert os.listdir(model_dir / "export") == ["16"]
    assert (model_dir / "export" / "16" / "saved_model.pb").exists()
    # The run's own export spares the batching's timing (tf-mlstm-export's, for a server).
    extra = model_dir / "export" / "16" / "assets.extra"
    assert json.loads((extra / "meta.json").read_text())["batching"] is None
    assert sorted(p.name for p in extra.iterdir()) == [
        "meta.json",
        "models.config",
        "tf_serving_warmup_requests",
    ]
    assert list((model_dir / "train").glob("events.out.tfevents.*"))
    assert '"validation_bits_per_char"' in whole.stdout.splitlines()[-1]
    assert not (model_dir / "run.lock").exists()
    if precision == "float32":
        _check_a_rerun_changes_nothing(model_dir, whole)

    # The same run with a budget it cannot reach (the schedule is fixed by
    # --total_steps), killed as soon as its first checkpoint is written: it
    # always has steps left, and the kill lands at a checkpoint boundary or
    # within the next interval.
    killed_dir = tmp_path / "killed"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = _forkserver.Popen(
        _train_cmd(killed_dir, "--max_steps=1000000", f"--precision={precision}"),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not _committed_checkpoint(killed_dir) and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = _checkpoint_steps(killed_dir)
    assert saved and max(saved) < 16, f"checkpoints at the kill: {saved}"
    assert (killed_dir / "run.lock").exists()  # the killed chief never released it
    # What TensorFlow's saver leaves when the kill lands inside a save: the rerun removes it.
    half_saved = killed_dir / "checkpoints" / f"ckpt-{max(saved) + 1}_temp"
    half_saved.mkdir(exist_ok=True)
    (half_saved / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"half")

    resumed = _run(_train_cmd(killed_dir, "--max_steps=16", f"--precision={precision}"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resumed from {killed_dir / 'checkpoints'}/ckpt-{max(saved)}" in resumed.stderr
    assert "Taking over the lock" in resumed.stderr
    assert "--max_steps 1000000 -> 16" in resumed.stderr
    assert "restarts from zeros" not in resumed.stderr
    assert not list((killed_dir / "checkpoints").glob("*_temp"))
    after = _losses(resumed.stderr)
    assert min(after) == max(saved) + 1 and max(after) == 16
    for step, loss in after.items():
        assert loss == pytest.approx(reference[step], abs=2e-4), step
    # Same data position, same carried state, same weights: bit-identical.
    final = json.loads((killed_dir / "results.json").read_text())
    assert final["step"] == 16 and final["weights_sha256"] == results["weights_sha256"]
    assert "export_dir" not in final and not (killed_dir / "export").exists()  # --noexport


def _tree(folder):
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _check_a_rerun_changes_nothing(model_dir, whole):
    """The same command again: it says the run is finished and leaves every file as it was."""
    before = _tree(model_dir)
    again = _run(_train_cmd(model_dir, "--max_steps=16", "--precision=float32", "--export"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{model_dir} already finished at step 16 (--max_steps=16)" in again.stderr
    assert not _losses(again.stderr)
    assert _tree(model_dir) == before
    last = json.loads(again.stdout.splitlines()[-1])
    assert last["finished_earlier"] is True
    assert last["weights_sha256"] == json.loads(whole.stdout.splitlines()[-1])["weights_sha256"]


@contextlib.contextmanager
def _tmpfs(mount_point):
    """A real filesystem of our own (root only): full, resized or read-only on demand.

    Without root, or where mounting is refused, the test skips on a developer's
    machine and fails in CI, which must prove the refused write.
    """
    mount_point.mkdir()
    if os.geteuid() != 0:
        skip_unless_ci("mounting a tmpfs needs root")
    made = _forkserver.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if made.returncode:
        skip_unless_ci(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield lambda options: _forkserver.run(
            ["mount", "-o", f"remount,{options}", str(mount_point)], check=True
        )
    finally:
        _forkserver.run(["umount", "-l", str(mount_point)], check=False)


def test_the_tmpfs_fault_test_fails_in_ci_where_it_cannot_mount(tmp_path, monkeypatch):
    # Not root: a developer's run skips the refused-write test, CI fails it.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="mounting a tmpfs needs root"):
        with _tmpfs(tmp_path / "developer"):
            pass
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="needs root; CI=true, so the test fails"):
        with _tmpfs(tmp_path / "ci"):
            pass


def _used_bytes(mount_point):
    stats = os.statvfs(mount_point)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


@pytest.mark.slow
def test_a_refused_write_is_one_line_the_checkpoint_intact_and_the_same_command_resumes(
    tmp_path,
):
    """A file-size limit, a full disk, a read-only filesystem: one line naming the run
    folder, exit 1, no traceback; the last checkpoint as it was; the rerun resumes."""
    with _tmpfs(tmp_path / "disk") as remount:
        model_dir = tmp_path / "disk" / "run"
        first = _run(_train_cmd(model_dir, "--max_steps=4"))
        assert first.returncode == 0, first.stderr[-3000:]
        assert _checkpoint_steps(model_dir) == [4]
        checkpoint = {p.name: p.read_bytes() for p in (model_dir / "checkpoints").iterdir()}
        command = _train_cmd(model_dir, "--max_steps=8")

        def refused(expected, **kwargs):
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
            proc = _forkserver.run(
                command, capture_output=True, text=True, env=env, cwd=REPO, timeout=300, **kwargs
            )
            errors = [line for line in proc.stderr.splitlines() if line.startswith("E1")]
            assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
            assert len(errors) == 1 and str(model_dir) in errors[0], proc.stderr[-3000:]
            assert expected in errors[0], errors[0]
            assert {
                p.name: p.read_bytes() for p in (model_dir / "checkpoints").iterdir()
            } == checkpoint

        def file_size_limit():
            resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

        refused("File too large", preexec_fn=file_size_limit)
        # Room for the run's small files, not for another checkpoint.
        remount(f"size={_used_bytes(tmp_path / 'disk') + (64 << 10)}")
        refused("No space left on device")
        remount("ro")
        refused("Read-only file system")

        remount("rw,size=64m")
        resumed = _run(command)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"Resumed from {model_dir / 'checkpoints'}/ckpt-4" in resumed.stderr
        assert min(_losses(resumed.stderr)) == 5
        assert json.loads((model_dir / "results.json").read_text())["step"] == 8


@pytest.mark.slow
def test_time_budget_stops_cleanly_then_evaluates_and_exports(tmp_path):
    proc = _run(_train_cmd(tmp_path / "m", "--max_steps=100000", "--max_minutes=0.15", "--export"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "m" / "results.json").read_text())
    assert results["stopped_by"] == "time" and 0 < results["step"] < 100000
    assert "validation_bits_per_char" in results
    assert (tmp_path / "m" / "export" / str(results["step"]) / "saved_model.pb").exists()


@pytest.mark.slow
def test_budget_schedule_finishes_its_decay_where_the_step_schedule_is_cut(tmp_path):
    # A schedule planned for far more steps than 15 seconds hold: the step
    # schedule is cut near its peak; the budget plan cools the rate down to
    # zero at the deadline. Both run side by side, so they see the same machine.
    common = ["--max_steps=100000", "--total_steps=0", "--max_minutes=0.25", "--lr=0.004"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    procs = {
        mode: _forkserver.Popen(
            _train_cmd(tmp_path / mode, *common, f"--schedule_length={mode}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for mode in ("budget", "steps")
    }
    results, logs = {}, {}
    for mode, proc in procs.items():
        _, logs[mode] = proc.communicate(timeout=300)
        assert proc.returncode == 0, logs[mode][-3000:]
        results[mode] = json.loads((tmp_path / mode / "results.json").read_text())
    for result in results.values():
        assert result["stopped_by"] == "time" and result["step"] >= 30, results
    cut, planned = results["steps"], results["budget"]
    assert "schedule_steps" not in cut and cut["final_learning_rate"] > 0.9 * 0.004
    # The plan ends within a few steps of where the budget stopped the run.
    assert planned["schedule_steps"] < 1.2 * planned["step"]
    # Re-planned at every step, the plan's end meets the last step: the rate is down to
    # (nearly) zero there, not merely lower.
    assert planned["final_learning_rate"] < 0.02 * 0.004, planned
    assert "schedule ends at" in logs["budget"] and "schedule ends at" not in logs["steps"]


# === Right data in the right split, checked before training ===

SMALL = [
    "--hidden_size=16",
    "--embedding_size=8",
    "--seq_length=16",
    "--batch_size=4",
    "--max_steps=4",
    "--total_steps=4",
    "--eval_every_steps=0",
    "--sample_every_steps=0",
    "--log_every_steps=2",
    "--checkpoint_every_steps=4",
]


def _shards(folder, docs, num_shards=2, split=(4, 1, 1)):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.data.readers import Document  # pylint: disable=g-import-not-at-top

    with tfrecord.ShardedWriter(str(folder), num_shards, split) as writer:
        for i in range(docs):
            writer.write(Document(f"review number {i} was quite good"))
    return writer.paths


def _resolve(train_data, validation_data="", model_dir="unused"):
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top

    config = TrainConfig(
        train_data=str(train_data), validation_data=validation_data, model_dir=str(model_dir)
    )
    return data_files.resolve_data(config)


def test_glob_train_data_validates_on_the_validation_split_not_the_training_files(tmp_path):
    paths = _shards(tmp_path / "data", 12, num_shards=3)
    train, validation = _resolve(f"{tmp_path}/data/train-*")
    assert train == paths["train"] and validation == paths["validation"]
    assert _resolve(tmp_path / "data") == (train, validation)
    # A Python caller reads the argument's name; a binary's user, the flag's.
    with pytest.raises(ValueError, match=r"^train_data=.* takes in 2 held-out shards such as "):
        _resolve(f"{tmp_path}/data/*.tfrecord")
    with errors.naming_flags(), pytest.raises(ValueError, match=r"^--train_data=.* takes in 2 "):
        _resolve(f"{tmp_path}/data/*.tfrecord")


def test_empty_shards_are_left_out_and_all_empty_is_an_error(tmp_path, caplog):
    paths = _shards(tmp_path / "some", 2, num_shards=4, split=(1000, 1, 1))
    train, validation = _resolve(tmp_path / "some")
    filled = [path for path in paths["train"] if os.path.getsize(path)]
    assert train == filled and validation == [] and 1 <= len(filled) <= 2
    assert f"{4 - len(filled)} of the 4 train shards of" in caplog.text
    assert "hold no records: training without validation" in caplog.text
    _shards(tmp_path / "none", 0)
    with pytest.raises(ValueError, match=rf"no training records: every train shard of {tmp_path}"):
        _resolve(tmp_path / "none")
    with pytest.raises(ValueError, match="no training records"):
        _resolve(f"{tmp_path}/none/train-*")


def test_incomplete_conversion_is_refused_before_training(tmp_path):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    _shards(tmp_path / "data", 12)
    (tmp_path / "data" / tfrecord.INCOMPLETE_MARKER).write_text("")
    proc = _run(_train_cmd(tmp_path / "m", f"--train_data={tmp_path / 'data'}"), timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"{tmp_path / 'data'}: incomplete TFRecord data" in proc.stderr
    assert "re-run tf-mlstm-make-tfrecords" in proc.stderr


def test_raw_training_text_is_one_line_naming_the_conversion_that_runs(tmp_path):
    # What tf-mlstm-eval reads (JSON lines, CSV, text) training refuses
    # before it creates anything, with the command that converts it.
    corpus = tmp_path / "reviews.csv"
    corpus.write_text(
        '"text","stars"\n' + "".join(f'"review {i} was fine",{i}\n' for i in range(40))
    )
    proc = _run(_train_cmd(tmp_path / "m", f"--train_data={corpus}"), timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("E1")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-3000:]
    assert f"--train_data={corpus} names raw corpus files ({corpus})" in errors[0]
    assert not (tmp_path / "m").exists()
    command = re.search(r"`(tf-mlstm-make-tfrecords [^`]+)`", errors[0]).group(1)
    output = re.search(r"then pass --train_data=(\S+)$", errors[0]).group(1)
    assert output == str(tmp_path / "reviews_tfrecords")
    # The command, pasted, converts; training then accepts what it wrote.
    binary, *args = command.split()
    assert binary == "tf-mlstm-make-tfrecords"
    converted = _run([sys.executable, "-m", "tf_mlstm.cli.make_tfrecords", *args], timeout=120)
    assert converted.returncode == 0, converted.stderr[-3000:]
    train, _ = _resolve(output)
    assert train and all(path.startswith(output) for path in train)


def test_raw_text_without_a_default_text_field_names_the_fields_to_choose_from(tmp_path):
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top

    corpus = tmp_path / "posts.jsonl"
    corpus.write_text('{"id": 1, "body": "hello there"}\n')
    with pytest.raises(ValueError, match=r"--text_key=<the text field, one of: id, body> "):
        data_files.check_converted("validation_data", str(corpus))
    lists = f"{corpus},{corpus}"
    with pytest.raises(ValueError, match=rf"--output_dir={tmp_path}/posts_tfrecords`"):
        data_files.check_converted("train_data", lists)
    # The command to run names flags; the setting is named as its reader wrote it.
    output = f"{tmp_path}/posts_tfrecords"
    with pytest.raises(ValueError, match=rf"^train_data={lists} .*then pass train_data={output}$"):
        data_files.check_converted("train_data", lists)
    with (
        errors.naming_flags(),
        pytest.raises(
            ValueError, match=rf"^--train_data={lists} .*then pass --train_data={output}$"
        ),
    ):
        data_files.check_converted("train_data", lists)


def test_tfrecord_data_is_told_from_raw_files_by_content_not_only_by_name(tmp_path):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    paths = _shards(tmp_path / "data", 6, num_shards=1)
    renamed = tmp_path / "shard-without-suffix"
    renamed.write_bytes(pathlib.Path(paths["train"][0]).read_bytes())
    (tmp_path / "notes.txt").write_text("plain text, several lines of it\n" * 3)
    (tmp_path / "short.txt").write_text("Ok\n")  # shorter than a record's 16 bytes of framing
    (tmp_path / "empty.tfrecord-like").write_bytes(b"")
    assert tfrecord.is_tfrecord_data(str(tmp_path / "data"))
    assert tfrecord.is_tfrecord_data(f"{tmp_path}/data/train-*")
    assert tfrecord.is_tfrecord_data(str(renamed))
    assert not tfrecord.is_tfrecord_data(str(tmp_path / "notes.txt"))
    assert not tfrecord.is_tfrecord_data(str(tmp_path / "short.txt"))
    assert tfrecord.is_tfrecord_data(str(tmp_path / "empty.tfrecord-like"))
    assert not tfrecord.is_tfrecord_data(f"{tmp_path}/*.txt")
    assert not tfrecord.is_tfrecord_data(f"{renamed},{tmp_path / 'notes.txt'}")
    # The checksum of the framing read in Python is TensorFlow's, for the data too.
    record = renamed.read_bytes()
    length = int.from_bytes(record[:8], "little")
    stored = int.from_bytes(record[12 + length : 16 + length], "little")
    assert tfrecord.masked_crc32c(record[12 : 12 + length]) == stored


@pytest.mark.slow
def test_empty_training_shards_fail_at_once_and_empty_validation_still_exports(tmp_path):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    _shards(tmp_path / "empty", 0)
    # Three documents, all train: the validation shard is empty.
    _shards(tmp_path / "data", 3, num_shards=1, split=(1000, 1, 1))
    # A converted folder whose shard holds another tool's Examples (`body`, not `text`).
    foreign = _shards(tmp_path / "foreign", 3, num_shards=1, split=(1000, 1, 1))["train"][0]
    example = tf.train.Example()
    example.features.feature["body"].bytes_list.value.append(b"Another tool's review.")
    with tf.io.TFRecordWriter(foreign) as writer:
        writer.write(example.SerializeToString())
    train = f"--train_data={tmp_path / 'data'}/train-*"
    refused, other_schema, proc = run_in_one_process(
        [
            _train_cmd(tmp_path / "m0", f"--train_data={tmp_path / 'empty'}"),
            _train_cmd(tmp_path / "m1", f"--train_data={tmp_path / 'foreign'}"),
            [sys.executable, "-m", "tf_mlstm.cli.train", f"--model_dir={tmp_path / 'm'}", train]
            + SMALL,
        ],
        tmp_path / "commands",
        timeout=300,
    )
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    expected = f"no training records: every train shard of {tmp_path / 'empty'} is empty"
    assert expected in refused.stderr
    assert not (tmp_path / "m0" / "checkpoints").exists()
    assert refused.seconds < 120
    # The whole stderr is the one line, naming the shard, the record and the feature.
    lines = other_schema.stderr.splitlines()
    assert other_schema.returncode == 1 and len(lines) == 1, other_schema.stderr[-3000:]
    assert f"{foreign}: record 1 has no feature 'text' (it has: body)" in lines[0]
    assert not (tmp_path / "m1" / "checkpoints").exists()

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "hold no records: training without validation" in proc.stderr
    results = json.loads((tmp_path / "m" / "results.json").read_text())
    assert results["step"] == 4 and "validation_bits_per_char" not in results
    assert results["validation"] == "none: no validation shards with records"
    assert (tmp_path / "m" / "export" / "4" / "saved_model.pb").exists()


def test_epochs_become_steps_from_the_converted_byte_counts(tmp_path, caplog):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top

    data = data_files.build_demo_tfrecords(str(tmp_path / "demo"))
    stats = json.loads((pathlib.Path(data) / "stats.json").read_text())["splits"]["train"]
    files = tfrecord.split_files(data, "train")
    config = TrainConfig(train_data=data, batch_size=8, seq_length=32, epochs=2.5).validate()
    caplog.set_level("INFO")
    planned = data_files.steps_for_epochs(config, files)
    assert planned.max_steps == -(-int(2.5 * stats["bytes"]) // (8 * 32))
    # The log names the arguments to a Python caller, the flags to a binary's user.
    assert f"epochs=2.5: {stats['bytes']} training characters" in caplog.text
    assert f"a step -> max_steps={planned.max_steps}." in caplog.text
    assert "--epochs" not in caplog.text
    with errors.naming_flags():
        data_files.steps_for_epochs(config, files)
    assert f"--epochs=2.5: {stats['bytes']} training characters" in caplog.text
    assert data_files.steps_for_epochs(dataclasses.replace(config, epochs=0), files) == (
        dataclasses.replace(config, epochs=0)
    )
    # Half the shards of the folder: half the characters.
    half = data_files.steps_for_epochs(config, files[: len(files) // 2])
    assert half.max_steps == pytest.approx(planned.max_steps / 2, abs=1)
    (pathlib.Path(data) / "stats.json").unlink()
    with pytest.raises(ValueError, match="no stats.json to count the train characters from"):
        data_files.steps_for_epochs(config, files)
