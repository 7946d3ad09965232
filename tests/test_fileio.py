"""Atomic whole-file writes: round trips on local and non-local filesystems, no leftovers."""

import json
import os
import pathlib
import socket
import sys

import _forkserver
import pytest
import tensorflow as tf

from tf_mlstm import fileio


@pytest.mark.parametrize("root", ["local", "ram://fileio_test"])
def test_json_round_trip_replaces_and_leaves_no_temporary(tmp_path, root):
    folder = str(tmp_path / "run") if root == "local" else root + "/run"
    path = folder + "/results.json"
    fileio.write_json_atomic(path, {"step": 1})
    fileio.write_json_atomic(path, {"step": 2, "bits": 1.5})
    assert fileio.read_json(path) == {"step": 2, "bits": 1.5}
    assert tf.io.gfile.listdir(folder) == ["results.json"]


def test_failed_write_keeps_the_old_file(tmp_path):
    path = str(tmp_path / "config.json")
    fileio.write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        fileio.write_json_atomic(path, {"a": object()})
    assert json.loads((tmp_path / "config.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_read_json_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json: no such file"):
        fileio.read_json(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text('{"a": ')
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        fileio.read_json(str(tmp_path / "bad.json"))


def test_bytes_are_written_as_they_are(tmp_path):
    path = str(tmp_path / "state.tensor")
    data = bytes(range(256)) * 3
    fileio.write_text_atomic(path, b"old")
    fileio.write_text_atomic(path, data)
    assert (tmp_path / "state.tensor").read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.tensor"]


@pytest.mark.parametrize("root", ["local", "ram://fileio_staged"])
def test_staged_outputs_appear_together_or_not_at_all(tmp_path, root):
    folder = str(tmp_path) if root == "local" else root
    csv_path, plot = f"{folder}/out/scores.csv", f"{folder}/out/plot.png"
    with fileio.Staged() as staged:
        for path, data in ((csv_path, "old csv"), (plot, b"old png")):
            with tf.io.gfile.GFile(staged.path(path), "wb") as f:
                f.write(data)
    with pytest.raises(RuntimeError, match="stage 2"):
        with fileio.Staged() as staged:
            with tf.io.gfile.GFile(staged.path(csv_path), "w") as f:
                f.write("new csv")
            raise RuntimeError("stage 2 failed")
    with tf.io.gfile.GFile(csv_path, "rb") as f:
        assert f.read() == b"old csv"
    assert sorted(tf.io.gfile.listdir(f"{folder}/out")) == ["plot.png", "scores.csv"]
    with fileio.replacing(csv_path) as tmp:
        assert fileio.is_temp_name(tmp) and os.path.dirname(tmp) == os.path.dirname(csv_path)
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write("new csv")
    with tf.io.gfile.GFile(csv_path) as f:
        assert f.read() == "new csv"


def test_a_staged_folder_replaces_the_old_one_whole(tmp_path):
    target = tmp_path / "export" / "7"
    with fileio.replacing(str(target)) as tmp:
        os.makedirs(os.path.join(tmp, "variables"))
        pathlib.Path(tmp, "saved_model.pb").write_bytes(b"first")
    with fileio.replacing(str(target)) as tmp:
        os.makedirs(tmp)
        pathlib.Path(tmp, "saved_model.pb").write_bytes(b"second")
    assert sorted(os.listdir(target)) == ["saved_model.pb"]
    assert (target / "saved_model.pb").read_bytes() == b"second"
    with pytest.raises(OSError):
        with fileio.replacing(str(target)) as tmp:
            os.makedirs(tmp)
            raise OSError("disk full")
    assert os.listdir(tmp_path / "export") == ["7"]
    assert (target / "saved_model.pb").read_bytes() == b"second"


def test_a_link_at_the_final_name_is_replaced_and_its_target_never_written(tmp_path):
    """A file output and a folder output whose final names are symbolic links (to a
    file, a folder, nowhere): the link is replaced, its target byte-identical."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's text")
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    (victim_dir / "keep.txt").write_text("kept")
    out = tmp_path / "out"
    out.mkdir()
    (out / "scores.csv").symlink_to(victim)
    (out / "plot.png").symlink_to(victim_dir)
    (out / "dangling.json").symlink_to(tmp_path / "nowhere.json")
    (out / "7").symlink_to(victim_dir)
    (out / "8").symlink_to(victim)
    for name in ("scores.csv", "plot.png", "dangling.json"):
        fileio.write_text_atomic(str(out / name), f"new {name}")
    for name in ("7", "8"):
        with fileio.replacing(str(out / name)) as tmp:
            os.makedirs(tmp)
            pathlib.Path(tmp, "saved_model.pb").write_text(f"version {name}")
    assert victim.read_text() == "the user's text"
    assert sorted(os.listdir(victim_dir)) == ["keep.txt"]
    assert (victim_dir / "keep.txt").read_text() == "kept"
    assert not (tmp_path / "nowhere.json").exists()
    for name in ("scores.csv", "plot.png", "dangling.json"):
        assert not (out / name).is_symlink() and (out / name).read_text() == f"new {name}"
    for name in ("7", "8"):
        assert not (out / name).is_symlink()
        assert (out / name / "saved_model.pb").read_text() == f"version {name}"
    assert sorted(os.listdir(out)) == ["7", "8", "dangling.json", "plot.png", "scores.csv"]


def _ended_pid():
    done = _forkserver.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_the_next_writer_removes_what_an_ended_writer_left_and_spares_a_live_one(tmp_path):
    host = socket.gethostname()
    dead, other_host = _ended_pid(), "elsewhere.example"
    live = _forkserver.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        out = tmp_path / "out"
        out.mkdir()
        leftovers = {
            f".tmp-classifier.json-{host}.{dead}.0123456789abcdef": "gone",
            f".tmp-export-{host}.{dead}.0123456789abcdef/": "gone",
            f".tmp-classifier.json-{host}.{live.pid}.0123456789abcdef": "kept",
            f".tmp-classifier.json-{other_host}.{dead}.0123456789abcdef": "kept",
            f".tmp-results.json-{host}.{dead}.0123456789abcdef": "kept",  # another output
            f".old-export-{host}.{dead}.0123456789abcdef/": "restored",
        }
        for name in leftovers:
            if name.endswith("/"):
                (out / name).mkdir()
                (out / name / "saved_model.pb").write_text(name)
            else:
                (out / name).write_text(name)
        fileio.write_text_atomic(str(out / "classifier.json"), "new")
        with fileio.Staged() as staged:
            new_export = staged.path(str(out / "export"))
            # The earlier export, moved aside by a writer killed between its renames, is
            # back under its name before this writer stages its own.
            assert (out / "export" / "saved_model.pb").read_text().startswith(".old-export-")
            os.makedirs(new_export)
        kept = sorted(name.rstrip("/") for name, fate in leftovers.items() if fate == "kept")
        assert sorted(os.listdir(out)) == sorted(["classifier.json", "export", *kept])
        assert (out / "classifier.json").read_text() == "new"
        assert os.listdir(out / "export") == []
    finally:
        live.kill()
        live.wait()


def test_an_earlier_process_of_the_same_pid_counts_as_ended_a_staged_name_in_flight_not(
    tmp_path,
):
    final = str(tmp_path / "results.json")
    earlier = f"{tmp_path}/.tmp-results.json-{socket.gethostname()}.{os.getpid()}.00ff00ff00ff00ff"
    pathlib.Path(earlier).write_text("a restarted container's leftover")
    with fileio.Staged() as staged:
        in_flight = staged.path(final)
        assert not os.path.exists(earlier)
        pathlib.Path(in_flight).write_text("{}")
        fileio.clean_leftovers(final)
        assert os.path.exists(in_flight)
    assert os.listdir(tmp_path) == ["results.json"]


def test_tensorflows_checkpoint_temp_folders_are_removed(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "ckpt-1_temp").mkdir(parents=True)
    (checkpoints / "ckpt-1_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x")
    (checkpoints / "ckpt-1.index").write_bytes(b"kept")
    fileio.clean_checkpoint_temps(str(checkpoints))
    fileio.clean_checkpoint_temps(str(tmp_path / "missing"))
    assert os.listdir(checkpoints) == ["ckpt-1.index"]
