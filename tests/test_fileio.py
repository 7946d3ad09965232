"""Atomic whole-file writes: round trips on local and non-local filesystems, no leftovers."""

import json

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
