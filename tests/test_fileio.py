"""Atomic whole-file writes: round trips on local and non-local filesystems, no leftovers."""

import json
import os
import pathlib

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
