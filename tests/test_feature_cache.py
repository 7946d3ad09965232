"""The transfer feature cache: nothing featurized twice, nothing damaged trusted, bounded.

`tf_mlstm.transfer.feature_cache` keeps each split's model features in the
user's cache folder; `run_transfer` reads them back in any run that would
compute the same numbers. These tests count the featurizer's calls through
real transfers of a tiny untrained model, and drive the cache itself for its
faults: a damaged entry, the size cap, a folder that refuses writes, two
processes writing at once.
"""

import csv
import dataclasses
import errno
import json
import logging
import os
import pathlib
import subprocess
import sys
import textwrap

import _forkserver
import numpy as np
import pytest

from _models import write_untrained_model_dir
from tf_mlstm import errors
from tf_mlstm.transfer import experiment
from tf_mlstm.transfer import feature_cache
from tf_mlstm.transfer import features

REPO = pathlib.Path(__file__).resolve().parent.parent
HIT = "read from the cache"


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """A cache folder of each test's own (the session's is shared by every test)."""
    home = tmp_path / "cache_home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv(feature_cache.CAP_ENV, raising=False)
    return home / "tf_mlstm" / "features"


@pytest.fixture
def calls(monkeypatch):
    """The number of texts of each featurizer call, in order."""
    seen = []
    call = features.TextFeaturizer.__call__

    def counted(self, texts, progress=None):
        seen.append(len(texts))
        return call(self, texts, progress=progress)

    monkeypatch.setattr(features.TextFeaturizer, "__call__", counted)
    return seen


def _write_reviews(path, rows, seed):
    rng = np.random.default_rng(seed)
    words = (["awful", "dull", "boring"], ["great", "superb", "lovely"])
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "sentence"])
        for i in range(rows):
            writer.writerow([i % 2, f"The film was {rng.choice(words[i % 2])}."])
    return str(path)


@pytest.fixture
def transfer(tmp_path):
    """run_transfer on small review splits; keyword arguments change the config."""
    model_dir, _ = write_untrained_model_dir(tmp_path / "m")
    base = experiment.TransferConfig(
        model_dir=str(model_dir),
        train_data=_write_reviews(tmp_path / "train.csv", 24, 0),
        validation_data=_write_reviews(tmp_path / "val.csv", 10, 1),
        test_data=_write_reviews(tmp_path / "test.csv", 10, 2),
        text_key="sentence",
        output_dir=str(tmp_path / "out"),
        features="cell,mean",
        c_grid=(1.0,),
        num_labeled=(),
        progress=False,
        overwrite=True,
    )

    def run(**values):
        return experiment.run_transfer(dataclasses.replace(base, **values))

    run.config = base
    return run


def _hits(caplog):
    return [r.getMessage() for r in caplog.records if HIT in r.getMessage()]


# === Reruns read, changes miss ===


@pytest.mark.slow
def test_a_rerun_reads_every_split_from_the_cache_and_fits_the_same(
    transfer, calls, caplog, cache_home
):
    caplog.set_level(logging.INFO)
    first = transfer()
    assert calls == [24, 10, 10] and not _hits(caplog)
    assert len(list(cache_home.glob(f"*{feature_cache.SUFFIX}"))) == 3
    # Another C grid, the same features: nothing featurized, one line per split.
    again = transfer(c_grid=(0.5, 1.0))
    assert calls == [24, 10, 10]
    hits = _hits(caplog)
    assert [line.split()[4] for line in hits] == ["train", "val", "test"]
    assert all(str(cache_home) in line for line in hits)
    assert again["featurize"]["train"]["cached"] is True
    # The same run again gives the same classifier, bit for bit.
    same = transfer()
    assert calls == [24, 10, 10]
    for key in ("metrics", "top_units", "C"):
        assert same[key] == first[key], key
    # Fewer kinds than an entry holds are read from it.
    fewer = transfer(features="cell")
    assert calls == [24, 10, 10] and fewer["feature_kinds"] == ["cell"]


@pytest.mark.slow
def test_a_changed_input_file_or_other_weights_featurize_again(transfer, calls, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    transfer()
    assert calls == [24, 10, 10]
    # One word of the training file edited, its size and rows as they were: the training
    # texts are featurized again, validation and test read.
    train = pathlib.Path(transfer.config.train_data)
    text = train.read_text()
    train.write_text(text.replace("The film was", "The show was", 1))
    assert len(train.read_text()) == len(text)
    transfer()
    assert calls[3:] == [24]
    assert [line.split()[4] for line in _hits(caplog)] == ["val", "test"]
    # The same texts, a model of other weights: every split again.
    other, _ = write_untrained_model_dir(tmp_path / "other", seed=1)
    transfer(model_dir=str(other))
    assert calls[4:] == [24, 10, 10]


def test_the_key_follows_what_changes_the_numbers():
    texts = ["a film", "another"]
    key = _cache("unused").key(texts)
    assert _cache("elsewhere").key(texts) == key  # where it lives is no part of it
    assert _cache("unused", weights="b" * 16).key(texts) != key
    others = [
        feature_cache.FeatureCache("a" * 16, {"hidden_size": 4}, precision, window)
        for precision, window in (("mixed_bfloat16", 256), ("float32", 128))
    ]
    others.append(feature_cache.FeatureCache("a" * 16, {"hidden_size": 8}, "float32", 256))
    assert len({cache.key(texts) for cache in others} | {key}) == 4
    # The texts: their content and order, not only their lengths and count.
    for changed in (["a fill", "another"], ["another", "a film"], ["a film", "another", ""]):
        assert _cache("unused").key(changed) != key
    assert _cache("unused").key(["a film" + "another"]) != _cache("unused").key(texts)


def test_an_interrupted_transfer_keeps_the_splits_it_finished(transfer, monkeypatch, caplog):
    call = features.TextFeaturizer.__call__
    seen = []

    def interrupted_at_the_test_split(self, texts, progress=None):
        seen.append(len(texts))
        if len(seen) == 3:
            raise KeyboardInterrupt
        return call(self, texts, progress=progress)

    monkeypatch.setattr(features.TextFeaturizer, "__call__", interrupted_at_the_test_split)
    with pytest.raises(KeyboardInterrupt):
        transfer()
    caplog.set_level(logging.INFO)
    seen.clear()
    monkeypatch.setattr(
        features.TextFeaturizer,
        "__call__",
        lambda self, texts, progress=None: seen.append(len(texts)) or call(self, texts, progress),
    )
    transfer()
    assert seen == [10]  # the test split alone
    assert [line.split()[4] for line in _hits(caplog)] == ["train", "val"]


@pytest.mark.slow
def test_without_the_cache_every_run_featurizes_and_keeps_nothing(
    transfer, calls, caplog, cache_home
):
    caplog.set_level(logging.INFO)
    transfer(feature_cache=False)
    assert not cache_home.exists()
    # Kept by a run with the cache, then not read without it.
    transfer()
    transfer(feature_cache=False)
    assert calls == [24, 10, 10] * 3 and not _hits(caplog)


@pytest.mark.slow
def test_the_binary_s_nofeature_cache_flag_bypasses_the_cache(transfer, tmp_path, cache_home):
    transfer()  # fills the cache
    config = transfer.config
    command = [
        sys.executable,
        "-m",
        "tf_mlstm.cli.transfer",
        f"--model_dir={config.model_dir}",
        f"--train_data={config.train_data}",
        f"--validation_data={config.validation_data}",
        "--text_key=sentence",
        f"--output_dir={tmp_path / 'cli'}",
        "--features=cell,mean",
        "--c_grid=1",
        "--num_labeled=",
        "--precision=float32",
        "--nofeature_cache",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    entries = sorted(cache_home.iterdir())
    done = _forkserver.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert HIT not in done.stderr and done.stderr.count("Featurized ") == 2, done.stderr[-3000:]
    assert sorted(cache_home.iterdir()) == entries


# === Damage, the cap, refused writes ===


def _features(rows=5, columns=4, seed=0, kinds=("cell", "mean")):
    rng = np.random.default_rng(seed)
    return {kind: rng.normal(size=(rows, columns)).astype(np.float32) for kind in kinds}


def _cache(folder, cap=None, weights="a" * 16):
    return feature_cache.FeatureCache(
        weights, {"hidden_size": 4}, "float32", 256, folder=str(folder), cap=cap
    )


TEXTS = ["one", "two", "three", "", "caf\u00e9"]


def _damage_payload(path):
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x40
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-7])


def _garble_header(path):
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"rows": 5', b'"rows": 6'))


@pytest.mark.parametrize("damage", [_damage_payload, _truncate, _garble_header])
def test_a_damaged_entry_is_computed_again_with_one_warning_never_used(tmp_path, caplog, damage):
    cache = _cache(tmp_path)
    stored = _features()
    path = pathlib.Path(cache.put(TEXTS, stored, "train"))
    got = cache.get(TEXTS, ("cell", "mean"), "train")
    for kind in stored:
        np.testing.assert_array_equal(got[kind], stored[kind])
    damage(path)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cache.get(TEXTS, ("cell",), "train") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"Feature cache entry {path} is damaged (")
    assert warnings[0].endswith("computing the train features again.")
    assert not path.exists()  # never read again
    # Stored again, it serves.
    cache.put(TEXTS, stored, "train")
    np.testing.assert_array_equal(cache.get(TEXTS, ("mean",))["mean"], stored["mean"])


def test_a_damaged_entry_in_a_transfer_is_featurized_again(transfer, calls, caplog, cache_home):
    transfer()
    (train,) = [
        path
        for path in cache_home.glob(f"*{feature_cache.SUFFIX}")
        if json.loads(path.read_bytes().split(b"\n")[1])["rows"] == 24
    ]
    _damage_payload(train)
    caplog.set_level(logging.INFO)
    transfer()
    assert calls == [24, 10, 10, 24]
    assert sum("is damaged" in r.getMessage() for r in caplog.records) == 1
    assert len(_hits(caplog)) == 2


def test_the_size_cap_removes_the_least_recently_used_entries(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO)
    cache = _cache(tmp_path)
    texts = {name: [name, "x", name, "x", name] for name in "abcd"}
    paths = {"a": pathlib.Path(cache.put(texts["a"], _features(seed=0)))}
    cache.cap = int(2.5 * paths["a"].stat().st_size)  # room for two entries
    os.utime(paths["a"], (1000.0, 1000.0))
    paths["b"] = pathlib.Path(cache.put(texts["b"], _features(seed=1)))
    os.utime(paths["b"], (1001.0, 1001.0))
    assert cache.get(texts["a"], ("cell",)) is not None  # a is now the most recently used
    paths["c"] = pathlib.Path(cache.put(texts["c"], _features(seed=2)))
    assert not paths["b"].exists() and paths["a"].exists() and paths["c"].exists()
    assert "1 least recently used entries" in caplog.text
    assert cache.get(texts["b"], ("cell",)) is None
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= cache.cap
    # An entry larger than the cap is not stored.
    assert cache.put(texts["d"], _features(columns=400)) is None
    assert len(list(tmp_path.iterdir())) == 2
    # 0 stores nothing; a cap that is not a number is one clear error.
    assert _cache(tmp_path / "none", cap=0).put(texts["a"], _features()) is None
    assert not (tmp_path / "none").exists()
    monkeypatch.setenv(feature_cache.CAP_ENV, "lots")
    with pytest.raises(errors.InvalidValueError, match="TF_MLSTM_FEATURE_CACHE_MB must be"):
        feature_cache.cap_bytes()
    monkeypatch.setenv(feature_cache.CAP_ENV, "1.5")
    assert feature_cache.cap_bytes() == 1_500_000
    monkeypatch.delenv(feature_cache.CAP_ENV)
    assert feature_cache.cap_bytes() == feature_cache.DEFAULT_CAP_MB * 10**6


@pytest.mark.parametrize("code", [errno.EROFS, errno.ENOSPC, errno.EACCES])
def test_a_cache_folder_that_refuses_writes_is_a_warning_and_reads_still_serve(
    tmp_path, monkeypatch, caplog, code
):
    cache = _cache(tmp_path)
    kept = _features(seed=1)
    cache.put(["kept"] * 5, kept)

    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(feature_cache, "open", refuse, raising=False)
    monkeypatch.setattr(feature_cache.os, "utime", refuse)
    with caplog.at_level(logging.WARNING):
        assert cache.put(TEXTS, _features()) is None
    assert f"Feature cache {tmp_path} not written (" in caplog.text
    assert os.strerror(code) in caplog.text
    assert sorted(p.name.startswith(".") for p in tmp_path.iterdir()) == [False]
    monkeypatch.undo()
    monkeypatch.setattr(feature_cache.os, "utime", refuse)
    got = cache.get(["kept"] * 5, ("cell",))
    np.testing.assert_array_equal(got["cell"], kept["cell"])


def test_a_transfer_whose_cache_folder_cannot_be_made_warns_and_finishes(
    transfer, calls, caplog, cache_home
):
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text("a file where the folder belongs")
    caplog.set_level(logging.INFO)
    results = transfer()
    assert results["test_accuracy"] is not None and calls == [24, 10, 10]
    # Only the cache's own warnings (TensorFlow may warn of retracing in the same run).
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    warnings = [line for line in warned if line.startswith("Feature cache ")]
    assert len(warnings) == 3, warned
    assert all(f"{cache_home} not written" in line for line in warnings)
    assert cache_home.is_file()


_WRITER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from tf_mlstm.transfer import feature_cache

    folder, ready, name = sys.argv[1:]
    cache = feature_cache.FeatureCache("w" * 16, {"hidden_size": 64}, "float32", 256,
                                       folder=folder)
    texts = [f"text {i}" for i in range(2000)]
    rng = np.random.default_rng(0)  # both writers store the same features
    features = {"cell": rng.normal(size=(2000, 64)).astype(np.float32)}
    # Both start together, then write and read the same entry for two seconds.
    open(os.path.join(ready, name), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(ready)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    end, rounds = time.monotonic() + 2.0, 0
    while time.monotonic() < end:
        cache.put(texts, features)
        got = cache.get(texts, ("cell",))
        assert got is not None and np.array_equal(got["cell"], features["cell"])
        rounds += 1
    print("ok", rounds)
    """
)


@pytest.mark.slow
def test_two_processes_writing_the_same_entry_leave_it_whole(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    folder, ready = tmp_path / "cache", tmp_path / "ready"
    ready.mkdir()
    procs = [
        _forkserver.Popen(
            [sys.executable, "-c", _WRITER, str(folder), str(ready), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("a", "b")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.startswith("ok "), err[-3000:]
        assert "damaged" not in err and "not written" not in err, err[-3000:]
    names = [p.name for p in folder.iterdir()]
    assert len(names) == 1 and names[0].endswith(feature_cache.SUFFIX), names
