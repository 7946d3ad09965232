"""Importing OpenAI's released byte mLSTM: a scaled-down copy against a NumPy reference.

The release's layout (15 arrays `0.npy` .. `14.npy`: embedding, Wx, Wh as one
file per gate i/f/o/u, Wmx, Wmh, b, the gains gx, gh, gmx, gmh, and the
output layer) is written here at 16 units with an 8-wide embedding and
random values, and the imported model must compute what the released
model's equations compute, written out below in NumPy.
"""

import json
import os
import re
import sys

import _forkserver
import numpy as np
import pytest
import tensorflow as tf

from _commands import run_in_one_process
from _models import openai_release_arrays
from _models import write_openai_release
from tf_mlstm import api
from tf_mlstm.data.text import DOC_START
from tf_mlstm.models import language_model
from tf_mlstm.models import openai_weights
from tf_mlstm.transfer import features

HIDDEN = 16
EMBED = 8
TEXTS = ["Great movie!", "The plot was dull, the acting worse.", "ok"]


def _release_arrays(seed=0):
    """Random arrays in the release's layout, by name."""
    return openai_release_arrays(HIDDEN, EMBED, seed)


def _l2_normalize_columns(w):
    """The release's weight norm: w / sqrt(max(sum(w^2, axis 0), 1e-12))."""
    return w / np.sqrt(np.maximum(np.sum(w * w, axis=0), 1e-12))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _reference(arrays, byte_ids):
    """The released model's forward pass from a zero state, in float64.

    Returns:
      (hidden states [T, H], cell states [T, H], next-byte logits [T, 256]).
    """
    a = {k: np.asarray(v, np.float64) for k, v in arrays.items() if k != "wh"}
    wx = _l2_normalize_columns(a["wx"]) * a["gx"]
    wh = _l2_normalize_columns(np.concatenate(arrays["wh"], axis=1).astype(np.float64)) * a["gh"]
    wmx = _l2_normalize_columns(a["wmx"]) * a["gmx"]
    wmh = _l2_normalize_columns(a["wmh"]) * a["gmh"]
    h = np.zeros(HIDDEN)
    c = np.zeros(HIDDEN)
    hs, cs = [], []
    for byte in byte_ids:
        x = a["embedding"][byte]
        m = (x @ wmx) * (h @ wmh)
        z = x @ wx + m @ wh + a["b"]
        i, f, o, u = np.split(z, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(u)
        h = _sigmoid(o) * np.tanh(c)
        hs.append(h)
        cs.append(c)
    hs = np.array(hs)
    return hs, np.array(cs), hs @ a["out_w"] + a["out_b"]


def _framed(text):
    return [DOC_START, *text.encode("utf-8")]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """(arrays, model_dir, summary): a random release imported by the library."""
    root = tmp_path_factory.mktemp("openai")
    arrays = _release_arrays()
    weights_dir = write_openai_release(root / "model", arrays)
    summary = api.import_openai_weights(str(weights_dir), str(root / "run"))
    return arrays, root / "run", summary


def test_imported_model_computes_the_released_equations(imported):
    arrays, model_dir, summary = imported
    assert (summary["hidden_size"], summary["embedding_size"]) == (HIDDEN, EMBED)
    model = language_model.MLSTMLanguageModel.from_run(str(model_dir))
    config = model.run_config
    assert (config.hidden_size, config.embedding_size, config.weight_norm) == (HIDDEN, EMBED, True)
    for text in TEXTS:
        ids = _framed(text)
        want_h, want_c, want_logits = _reference(arrays, ids)
        logits, (h, c) = model(tf.constant([ids], tf.int32), training=False)
        outputs, _ = model.encode(tf.constant([ids], tf.int32), training=False)
        np.testing.assert_allclose(outputs[0].numpy(), want_h, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(logits[0].numpy(), want_logits, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(c[0].numpy(), want_c[-1], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(h[0].numpy(), want_h[-1], rtol=1e-5, atol=1e-5)
    # The transfer tools' features are the released model's final cell state.
    got = features.TextFeaturizer(model, batch_size=2, window=8, kinds=("cell",))(TEXTS)["cell"]
    want = np.array([_reference(arrays, _framed(text))[1][-1] for text in TEXTS])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_short_columns_are_rescaled_and_tiny_ones_refused(tmp_path):
    arrays = _release_arrays(seed=1)
    arrays["wmh"][:, 3] *= 1e-5  # squared length ~1e-10: the two epsilons differ
    weights_dir = write_openai_release(tmp_path / "model", arrays)
    model = openai_weights.build_model(openai_weights.load_openai_arrays(str(weights_dir)))
    ids = _framed(TEXTS[1])
    outputs, _ = model.encode(tf.constant([ids], tf.int32), training=False)
    np.testing.assert_allclose(outputs[0].numpy(), _reference(arrays, ids)[0], atol=1e-5)
    arrays["wx"][:, 7] = 1e-8  # squared length 8e-16: the release does not normalize it
    weights_dir = write_openai_release(tmp_path / "model2", arrays)
    with pytest.raises(ValueError, match=r"cannot represent Wx \(1.npy\) exactly: columns \[7\]"):
        openai_weights.build_model(openai_weights.load_openai_arrays(str(weights_dir)))


def test_bad_releases_give_one_clear_error(tmp_path):
    arrays = _release_arrays()
    weights_dir = write_openai_release(tmp_path / "model", arrays)
    os.remove(weights_dir / "7.npy")
    os.remove(weights_dir / "14.npy")
    with pytest.raises(FileNotFoundError, match=r"model: missing 7.npy, 14.npy of the 15"):
        openai_weights.load_openai_arrays(str(weights_dir))
    with pytest.raises(FileNotFoundError, match="nowhere: no such folder"):
        openai_weights.load_openai_arrays(str(tmp_path / "nowhere"))
    weights_dir = write_openai_release(tmp_path / "model", arrays)
    np.save(weights_dir / "4.npy", arrays["wh"][2][:, :15])
    with pytest.raises(
        ValueError,
        match=r"4.npy: shape \(16, 15\), but the recurrent kernel Wh, gate o of a 16-unit model "
        r"with a 8-wide embedding is \(16, 16\)",
    ):
        openai_weights.load_openai_arrays(str(weights_dir))
    np.save(weights_dir / "4.npy", arrays["wh"][2])
    (weights_dir / "9.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError, match=r"9.npy: not a NumPy .npy array file"):
        openai_weights.load_openai_arrays(str(weights_dir))
    gx = arrays["gx"].copy()
    gx[0] = np.nan
    np.save(weights_dir / "9.npy", gx)
    with pytest.raises(ValueError, match=r"9.npy: non-finite values in the weight-norm gain of Wx"):
        openai_weights.load_openai_arrays(str(weights_dir))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    with pytest.raises(
        ValueError, match="run: already holds checkpoints; import into a new folder"
    ):
        api.import_openai_weights(str(weights_dir), str(run))


@pytest.mark.slow
def test_import_binary(tmp_path):
    arrays = _release_arrays(seed=2)
    weights_dir = write_openai_release(tmp_path / "model", arrays)
    command = [sys.executable, "-m", "tf_mlstm.cli.import_openai", f"--weights_dir={weights_dir}"]
    # A release with a wrong array, imported by the same command into another folder: both
    # imports in one process (what is checked is each one's output, not a process start).
    bad_release = write_openai_release(tmp_path / "bad_model", arrays)
    np.save(bad_release / "13.npy", arrays["out_w"].T)
    done, bad = run_in_one_process(
        [
            command + [f"--model_dir={tmp_path / 'run'}"],
            [*command[:3], f"--weights_dir={bad_release}", f"--model_dir={tmp_path / 'run2'}"],
        ],
        tmp_path / "commands",
        timeout=300,
        env={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    assert (summary["hidden_size"], summary["embedding_size"]) == (HIDDEN, EMBED)
    model = language_model.MLSTMLanguageModel.from_run(summary["model_dir"])
    ids = _framed(TEXTS[0])
    logits, _ = model(tf.constant([ids], tf.int32))
    np.testing.assert_allclose(logits[0].numpy(), _reference(arrays, ids)[2], rtol=1e-5, atol=1e-5)

    assert bad.returncode == 1
    errors = [
        line for line in bad.stderr.splitlines() if re.match(r"E\d{4} .* \w+\.py:\d+\] ", line)
    ]
    assert len(errors) == 1, bad.stderr[-3000:]
    assert "13.npy: shape (256, 16), but the output kernel of a 16-unit model" in errors[0]
    assert not (tmp_path / "run2" / "config.json").exists()


@pytest.mark.slow
def test_an_import_that_fails_on_a_full_disk_leaves_nothing_and_the_same_command_imports(
    tmp_path,
):
    """A full disk while the checkpoint is written: one line, exit 1, nothing left in the
    run folder (TensorFlow's `ckpt-1_temp` made the rerun refuse the folder as holding
    checkpoints); with space again the same command imports."""
    from test_train import _tmpfs
    from test_train import _used_bytes

    weights_dir = write_openai_release(tmp_path / "model", _release_arrays(seed=3))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    with _tmpfs(tmp_path / "disk") as remount:
        model_dir = tmp_path / "disk" / "run"
        model_dir.mkdir()
        (tmp_path / "disk" / "filler").write_bytes(b"x" * (64 << 10))
        command = [sys.executable, "-m", "tf_mlstm.cli.import_openai"]
        command += [f"--weights_dir={weights_dir}", f"--model_dir={model_dir}"]
        remount(f"size={_used_bytes(tmp_path / 'disk')}")
        full = _forkserver.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr[-3000:]
        errors = [line for line in full.stderr.splitlines() if re.match(r"E\d{4} ", line)]
        assert len(errors) == 1 and "No space left on device" in errors[0], full.stderr[-3000:]
        assert os.listdir(model_dir) == [], os.listdir(model_dir)
        remount("size=64m")
        again = _forkserver.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert again.returncode == 0, again.stderr[-3000:]
        assert sorted(os.listdir(model_dir)) == ["checkpoints", "config.json", "openai_import.json"]
        assert not [name for name in os.listdir(model_dir / "checkpoints") if "temp" in name]
        language_model.MLSTMLanguageModel.from_run(str(model_dir))


def test_the_rerun_of_a_killed_import_replaces_what_it_left(tmp_path):
    """Killed after its checkpoints were renamed in, before config.json: the folder holds
    no model yet, and the same import writes it whole."""
    weights_dir = write_openai_release(tmp_path / "model", _release_arrays(seed=4))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "ckpt-1.index").write_bytes(b"half an import")
    (run / "openai_import.json").write_text("{}")
    summary = api.import_openai_weights(str(weights_dir), str(run))
    assert summary["checkpoint"] == str(run / "checkpoints" / "ckpt-1")
    assert sorted(os.listdir(run)) == ["checkpoints", "config.json", "openai_import.json"]
    language_model.MLSTMLanguageModel.from_run(str(run))
    with pytest.raises(ValueError, match="run: already holds config.json; import into a new"):
        api.import_openai_weights(str(weights_dir), str(run))
