"""Tests for the TFRecord schema and writer, the converter and its binary."""

import bisect
import dataclasses
import gzip
import hashlib
import json
import math
import os
import pathlib
import sys
import time

import _forkserver
import pytest
import tensorflow as tf
from absl import app
from absl import flags

from tf_mlstm import errors
from tf_mlstm.cli import make_tfrecords
from tf_mlstm.config import ConvertConfig
from tf_mlstm.data import convert
from tf_mlstm.data import readers
from tf_mlstm.data import tfrecord
from tf_mlstm.data.readers import Document

REPO = pathlib.Path(__file__).resolve().parents[1]


def _read_records(files):
    """Returns the parsed records of TFRecord files as Python tuples, in file order."""
    dataset = tf.data.TFRecordDataset(files, compression_type=tfrecord.compression_type(files))
    return [
        (r["text"].numpy().decode("utf-8"), int(r["label"]), float(r["rating"]))
        for r in dataset.map(tfrecord.parse_example)
    ]


def _docs(n, source="docs.jsonl"):
    return [
        Document(f"doc {i}", label=i % 2, rating=float(i), source=source, line=i + 1)
        for i in range(n)
    ]


def _reference_place(source, line, num_train_shards, weights):
    """Where the documented rule puts a document: (split, shard), computed here from scratch.

    BLAKE2b-128 of "<base name>\\n<line>"; its first 8 bytes (big-endian) as a
    fraction of 2**64 pick the split by its share of the weights, the next 8
    modulo the split's shard count the shard.
    """
    name = os.path.basename(source)
    digest = hashlib.blake2b(f"{name}\n{line}".encode(), digest_size=16).digest()
    high, low = int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")
    split = bisect.bisect_right(
        [sum(weights[: i + 1]) for i in range(3)], high * sum(weights) // 2**64
    )
    counts = tfrecord.split_shard_counts(num_train_shards, weights)
    return tfrecord.SPLITS[split], low % counts[tfrecord.SPLITS[split]]


def _reference_counts(identities, num_train_shards, weights):
    """Records per split that `_reference_place` gives `identities` ((source, line) pairs)."""
    counts = dict.fromkeys(tfrecord.SPLITS, 0)
    for source, line in identities:
        counts[_reference_place(source, line, num_train_shards, weights)[0]] += 1
    return counts


def test_make_example_round_trip_with_unknowns():
    serialized = [
        tfrecord.make_example(
            Document("caf\u00e9 \U0001f600", label=1, rating=4.5, source="d/books.jsonl")
        ),
        tfrecord.make_example(Document("no label")),
    ]
    single = [tfrecord.parse_example(tf.constant(s)) for s in serialized]
    assert single[0]["text"].numpy().decode() == "caf\u00e9 \U0001f600"
    assert int(single[0]["label"]) == 1 and float(single[0]["rating"]) == 4.5
    assert single[0]["source"].numpy() == b"d/books.jsonl" and single[1]["source"].numpy() == b""
    assert int(single[1]["label"]) == tfrecord.UNKNOWN_LABEL == -1
    assert math.isnan(float(single[1]["rating"]))


def test_parse_defaults_for_records_without_label_or_rating():
    example = tf.train.Example()
    example.features.feature["text"].bytes_list.value.append(b"bare")
    parsed = tfrecord.parse_example(example.SerializeToString())
    assert int(parsed["label"]) == -1 and math.isnan(float(parsed["rating"]))
    assert parsed["source"].numpy() == b""


def test_shard_names_and_counts():
    assert tfrecord.shard_name("train", 3, 100) == "train-00003-of-00100.tfrecord"
    assert tfrecord.shard_name("test", 0, 1, "GZIP") == "test-00000-of-00001.tfrecord.gz"
    assert tfrecord.split_shard_counts(100, (1000, 1, 1)) == {
        "train": 100,
        "validation": 1,
        "test": 1,
    }
    assert tfrecord.split_shard_counts(100, (90, 5, 5)) == {
        "train": 100,
        "validation": 6,
        "test": 6,
    }


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_writer_round_trip(tmp_path, compression):
    docs = _docs(60)
    with tfrecord.ShardedWriter(str(tmp_path), 3, (4, 1, 1), compression) as writer:
        for doc in docs:
            writer.write(doc)
    suffix = ".tfrecord.gz" if compression else ".tfrecord"
    assert sorted(os.listdir(tmp_path)) == [
        f"test-00000-of-00001{suffix}",
        f"train-00000-of-00003{suffix}",
        f"train-00001-of-00003{suffix}",
        f"train-00002-of-00003{suffix}",
        f"validation-00000-of-00001{suffix}",
    ]
    records = []
    for split in tfrecord.SPLITS:
        records += _read_records(tfrecord.split_files(str(tmp_path), split))
    assert sorted(records) == sorted((d.text, d.label, d.rating) for d in docs)
    stats = writer.split_stats()
    expected = _reference_counts([(d.source, d.line) for d in docs], 3, (4, 1, 1))
    assert {s: v["records"] for s, v in stats.items()} == expected
    assert expected["validation"] and expected["test"]  # The test sees every split.
    assert sum(v["bytes"] for v in stats.values()) == sum(len(d.text) for d in docs)


def test_each_document_goes_to_the_shard_its_source_and_line_hash_to(tmp_path):
    docs = _docs(40)
    with tfrecord.ShardedWriter(str(tmp_path / "a"), 2, (2, 1, 1)) as writer:
        splits = [writer.write(doc) for doc in docs]
    places = [_reference_place(d.source, d.line, 2, (2, 1, 1)) for d in docs]
    assert splits == [split for split, _ in places]
    for split, paths in writer.paths.items():
        for shard, path in enumerate(paths):
            # In the order written.
            assert [t for t, _, _ in _read_records([path])] == [
                d.text for d, place in zip(docs, places) if place == (split, shard)
            ], path
    # Another order, another folder of the same base name, other documents
    # alongside: each document lands in the same shard.
    others = [Document(f"other {i}", source="elsewhere/other.jsonl", line=i + 1) for i in range(25)]
    moved = [dataclasses.replace(d, source="moved/docs.jsonl") for d in reversed(docs)]
    with tfrecord.ShardedWriter(str(tmp_path / "b"), 2, (2, 1, 1)) as second:
        for doc in [d for pair in zip(moved, others) for d in pair] + moved[len(others) :]:
            second.write(doc)
    for split, paths in writer.paths.items():
        for path, again in zip(paths, second.paths[split]):
            mine = {t for t, _, _ in _read_records([path])}
            theirs = {t for t, _, _ in _read_records([again])}
            assert mine == theirs - {d.text for d in others}, path


def test_paper_split_shares_in_expectation_and_balanced_shards(tmp_path):
    writer = tfrecord.ShardedWriter(str(tmp_path), 4)
    with writer:
        splits = [writer.write(Document("x", source="c.txt", line=i + 1)) for i in range(20040)]
    # 20 validation and 20 test documents expected (binomial: 4.5 standard deviations is ±20).
    assert 5 <= splits.count("validation") <= 40 and 5 <= splits.count("test") <= 40
    stats = writer.split_stats()
    assert stats["train"]["records"] == splits.count("train")
    assert stats["validation"]["shards"] == stats["test"]["shards"] == 1
    # The train documents spread over the 4 shards: within 5% of a quarter each.
    counts = [sum(1 for _ in tf.data.TFRecordDataset(p)) for p in writer.paths["train"]]
    assert sum(counts) == stats["train"]["records"]
    assert all(abs(count - sum(counts) / 4) < 0.05 * sum(counts) / 4 for count in counts), counts


def test_empty_splits_still_get_a_file(tmp_path):
    with tfrecord.ShardedWriter(str(tmp_path), 2) as writer:
        writer.write(Document("only one"))
    assert writer.split_stats()["validation"]["records"] == 0
    assert _read_records(tfrecord.split_files(str(tmp_path), "validation")) == []


def test_writer_refuses_stale_shards_but_overwrites_its_own(tmp_path):
    for _ in range(2):  # Same layout twice: overwritten, fine.
        with tfrecord.ShardedWriter(str(tmp_path), 2) as writer:
            writer.write(Document("a"))
    with pytest.raises(FileExistsError, match=r"already holds 2 other shard files"):
        tfrecord.ShardedWriter(str(tmp_path), 3).open()


def test_writer_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="num_train_shards must be >= 1"):
        tfrecord.ShardedWriter(str(tmp_path), 0)
    with pytest.raises(ValueError, match="split_weights must be 3 positive integers"):
        tfrecord.ShardedWriter(str(tmp_path), 1, (10, 0, 1))
    with pytest.raises(ValueError, match="compression must be None or 'GZIP'"):
        tfrecord.ShardedWriter(str(tmp_path), 1, compression="ZLIB")
    with pytest.raises(RuntimeError, match="before open"):
        tfrecord.ShardedWriter(str(tmp_path), 1).write(Document("x"))


def test_split_files_and_compression_type(tmp_path):
    with tfrecord.ShardedWriter(str(tmp_path), 3) as writer:
        writer.write(Document("x"))
    train = tfrecord.split_files(str(tmp_path), "train")
    assert [os.path.basename(f) for f in train] == [
        f"train-0000{i}-of-00003.tfrecord" for i in range(3)
    ]
    assert tfrecord.split_files(f"{tmp_path}/train-0000[12]*", "train") == train[1:]
    assert tfrecord.compression_type(train) == ""
    assert tfrecord.compression_type(["a.tfrecord.gz"]) == "GZIP"
    with pytest.raises(ValueError, match="mixed gzip and uncompressed"):
        tfrecord.compression_type(["a.tfrecord.gz", "b.tfrecord"])
    with pytest.raises(FileNotFoundError, match=r"no train TFRecord files match .*nothing"):
        tfrecord.split_files(f"{tmp_path}/nothing*", "train")
    with pytest.raises(ValueError, match="split must be one of"):
        tfrecord.split_files(str(tmp_path), "dev")


# === Flags and config ===


def _flag_values(*args):
    flag_values = flags.FlagValues()
    make_tfrecords.define_flags(flag_values)
    flag_values(["make_tfrecords", *args])
    return flag_values


def test_config_from_flags(tmp_path):
    config = make_tfrecords.config_from_flags(
        _flag_values(
            "--input=a.jsonl,b.csv",
            f"--output_dir={tmp_path}",
            "--text_key=reviewText, text",
            "--split=98,1,1",
            "--gzip",
        )
    )
    assert config.text_keys == ("reviewText", "text")
    assert config.split == (98, 1, 1)
    assert config.gzip and config.num_shards == 100 and config.max_documents == 0
    assert config.stats_path == os.path.join(str(tmp_path), "stats.json")
    with pytest.raises(AttributeError):
        config.num_shards = 3  # Frozen.


def test_the_cli_offers_what_the_readers_take():
    flag_values = _flag_values("--input=a.jsonl", "--output_dir=out")
    assert tuple(flag_values["text_mode"].parser.enum_values) == readers.TEXT_MODES
    assert flag_values["max_document_bytes"].default == readers.DEFAULT_MAX_DOCUMENT_BYTES


@pytest.mark.parametrize("split", ["1000,1", "1000,0,1", "a,b,c", "10,-1,1", "1,\u00b2,1", ""])
def test_bad_split_flag_is_a_usage_error(split):
    flag_values = _flag_values("--input=a.jsonl", "--output_dir=out", f"--split={split}")
    with pytest.raises(app.UsageError, match="--split must be three positive integers"):
        make_tfrecords.config_from_flags(flag_values)


def test_bad_text_key_flag_is_a_usage_error():
    flag_values = _flag_values("--input=a.jsonl", "--output_dir=out", "--text_key= , ")
    with pytest.raises(app.UsageError, match="--text_key must name at least one key"):
        make_tfrecords.config_from_flags(flag_values)


def test_convert_max_documents(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"line {i}\n" for i in range(50)), encoding="utf-8")
    stats = convert.convert(
        ConvertConfig(
            input=str(corpus), output_dir=str(tmp_path / "out"), num_shards=2, max_documents=7
        )
    )
    assert stats["records"] == 7
    assert stats["warnings"] == [
        "the validation split received no documents (7 in all, split weights (1000, 1, 1))",
        "the test split received no documents (7 in all, split weights (1000, 1, 1))",
    ]


# === The binary, end to end ===


def _run_binary(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    return _forkserver.run(
        [sys.executable, "-m", "tf_mlstm.cli.make_tfrecords", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _error_lines(stderr):
    """The binary's absl error lines ("E1231 12:00:00.000 ... _main.py:12] ...").

    TensorFlow's own start-up lines (such as a failed CUDA probe) are left out.
    """
    return [line for line in stderr.splitlines() if line.startswith("E") and " _main.py:" in line]


@pytest.mark.slow
def test_binary_end_to_end(tmp_path):
    jsonl = tmp_path / "reviews.jsonl"
    jsonl.write_bytes(
        b"".join(
            json.dumps({"reviewText": f"Review {i}<br />nice", "overall": 5.0}).encode() + b"\n"
            for i in range(20)
        )
        + b'{"reviewText": "broken\n'
        + b'{"summary": "no text"}\n'
    )
    csv_path = tmp_path / "sst.csv"
    csv_path.write_text('label,sentence\n1,"Sentence, one"\n0,two\n', encoding="utf-8")
    out = tmp_path / "out"
    start = time.monotonic()
    result = _run_binary(
        f"--input={jsonl},{tmp_path}/*.csv",
        f"--output_dir={out}",
        "--num_shards=2",
        "--split=4,1,1",
        "--gzip",
    )
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records"] == 22
    assert stats["inputs"] == [str(jsonl), str(csv_path)]
    assert stats["input_bytes"] == jsonl.stat().st_size + csv_path.stat().st_size
    assert stats["splits"]["train"]["shards"] == 2
    # JSON lines 1-20 are reviews (21, 22 skipped); the CSV records start at lines 2 and 3.
    identities = [(str(jsonl), line) for line in range(1, 21)] + [
        (str(csv_path), 2),
        (str(csv_path), 3),
    ]
    assert {s: v["records"] for s, v in stats["splits"].items()} == _reference_counts(
        identities, 2, (4, 1, 1)
    )
    assert stats["bytes"] == sum(v["bytes"] for v in stats["splits"].values())
    assert stats["skipped"]["total"] == 2
    assert stats["skipped"]["by_reason"] == {"malformed_json": 1, "missing_text_key": 1}
    assert stats["skipped"]["examples"]["missing_text_key"][0].startswith(f"{jsonl}:22: ")
    assert stats["compression"] == "GZIP" and stats["warnings"] == []
    assert 0 < stats["seconds"] < elapsed  # in seconds, timed inside the binary's run
    # The skip summary is logged with file:line examples.
    assert f"{jsonl}:21: malformed JSON" in result.stderr
    texts = []
    for split in tfrecord.SPLITS:
        texts += [t for t, _, _ in _read_records(tfrecord.split_files(str(out), split))]
    assert sorted(texts) == sorted(
        [f"Review {i} nice" for i in range(20)] + ["Sentence, one", "two"]
    )


def test_binary_missing_input_is_one_error_line(tmp_path):
    missing = tmp_path / "missing.jsonl"
    result = _run_binary(f"--input={missing}", f"--output_dir={tmp_path / 'out'}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and errors[0].endswith(f"input file not found: {missing}")


@pytest.mark.slow
def test_binary_all_bad_input_fails_in_one_line_and_leaves_nothing_behind(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": \n{"other": 1}\n\xff\xfe\n')
    out = tmp_path / "out"
    result = _run_binary(f"--input={bad}", f"--output_dir={out}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = _error_lines(result.stderr)
    assert len(errors) == 1, result.stderr[-3000:]
    assert "no documents written from 1 input files: 3 records skipped {" in errors[0]
    assert "'invalid_utf8': 1, 'malformed_json': 1, 'missing_text_key': 1}" in errors[0]
    assert f"the first: {bad}:" in errors[0] and errors[0].endswith(f"{out} is as it was")
    # The folder it made is gone, so the corrected retry needs no --overwrite.
    assert not out.exists()
    bad.write_text('{"text": "a fine review"}\n' * 5)
    again = _run_binary(f"--input={bad}", f"--output_dir={out}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((out / "stats.json").read_text())["records"] == 5

    # A folder that was there (empty) before stays, emptied of the attempt.
    made = tmp_path / "made"
    made.mkdir()
    result = _run_binary(f"--input={bad}", "--text_key=body", f"--output_dir={made}")
    assert result.returncode == 1 and os.listdir(made) == []


def test_shared_amazon_electronics(tmp_path, shared_data):
    corpus = shared_data / "amazon" / "electronics.jsonl"
    config = make_tfrecords.config_from_flags(
        _flag_values(
            f"--input={corpus}",
            f"--output_dir={tmp_path}",
            "--text_key=reviewText,text",
            "--num_shards=4",
        )
    )
    stats = convert.convert(config)
    assert stats["records"] == 2000
    assert stats["skipped"]["total"] == 0
    expected = _reference_counts([(str(corpus), line) for line in range(1, 2001)], 4, (1000, 1, 1))
    assert {s: v["records"] for s, v in stats["splits"].items()} == expected
    written = json.loads((tmp_path / "stats.json").read_text())
    assert written["records"] == 2000
    ratings = [r for _, _, r in _read_records(tfrecord.split_files(str(tmp_path), "train"))]
    assert len(ratings) == expected["train"] and set(ratings) <= {1.0, 2.0, 4.0, 5.0}


# === Bounded open files, complete-or-refused output folders ===


def _shard_contents(writer):
    return {
        os.path.basename(path): [t for t, _, _ in _read_records([path])]
        for paths in writer.paths.values()
        for path in paths
    }


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_writer_through_part_files_writes_the_same_shards(tmp_path, compression):
    docs = _docs(500)
    direct = tfrecord.ShardedWriter(str(tmp_path / "direct"), 7, (10, 1, 1), compression)
    with direct:
        direct_splits = [direct.write(doc) for doc in docs]
    # Three shard files open at most, and a spill every few hundred bytes.
    parted = tfrecord.ShardedWriter(
        str(tmp_path / "parted"), 7, (10, 1, 1), compression, max_open_files=3, spill_bytes=600
    )
    assert parted.spills and not direct.spills
    with parted:
        parted_splits = [parted.write(doc) for doc in docs]
        assert len(os.listdir(tmp_path / "parted" / tfrecord.SPILL_SUBDIR)) > 9 * 2
    assert parted_splits == direct_splits
    assert _shard_contents(parted) == _shard_contents(direct)
    assert sorted(os.listdir(tmp_path / "parted")) == sorted(os.listdir(tmp_path / "direct"))
    assert parted.split_stats() == direct.split_stats()


def test_writer_through_part_files_discards_them_on_error(tmp_path):
    with pytest.raises(RuntimeError, match="input broke"):
        with tfrecord.ShardedWriter(str(tmp_path), 5, max_open_files=2, spill_bytes=100) as w:
            for doc in _docs(50):
                w.write(doc)
            raise RuntimeError("input broke")
    assert os.listdir(tmp_path) == []


def _convert(tmp_path, inputs, out, **kwargs):
    kwargs.setdefault("num_shards", 2)
    return convert.convert(ConvertConfig(input=str(inputs), output_dir=str(out), **kwargs))


def test_convert_refuses_a_non_empty_folder_unless_overwrite(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"line {i}\n" for i in range(30)), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    with pytest.raises(FileExistsError, match=r"out is not empty \(1 entries, such as notes\.md\)"):
        _convert(tmp_path, corpus, out)
    assert os.listdir(out) == ["notes.md"]  # Untouched.
    _convert(tmp_path, corpus, out, overwrite=True, split=(1, 1, 1))
    first = sorted(os.listdir(out))
    assert "validation-00000-of-00002.tfrecord" in first
    assert tfrecord.INCOMPLETE_MARKER not in first
    # A Python caller reads the argument's name; a binary's user, the flag's.
    with pytest.raises(FileExistsError, match=r"\): pass overwrite to replace its data"):
        _convert(tmp_path, corpus, out)
    with errors.naming_flags(), pytest.raises(FileExistsError, match="pass --overwrite to"):
        _convert(tmp_path, corpus, out)
    # Another layout: the old shards go, the user's file stays.
    stats = _convert(tmp_path, corpus, out, overwrite=True, num_shards=3, max_documents=6)
    assert sorted(os.listdir(out)) == [
        "notes.md",
        "stats.json",
        "test-00000-of-00001.tfrecord",
        *[f"train-0000{i}-of-00003.tfrecord" for i in range(3)],
        "validation-00000-of-00001.tfrecord",
    ]
    assert stats["records"] == 6
    assert json.loads((out / "stats.json").read_text())["records"] == 6


def _tree(folder):
    """Every entry under `folder`, hidden ones included, by its path inside it."""
    return {
        str(path.relative_to(folder)): path.read_bytes() if path.is_file() else "folder"
        for path in sorted(folder.rglob("*"))
    }


def test_a_failed_overwrite_leaves_the_earlier_data_byte_identical(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"text": f"review {i}"}) + "\n" for i in range(50)))
    out = tmp_path / "out"
    _convert(tmp_path, good, out)
    before = _tree(out)
    cut = tmp_path / "cut.jsonl.gz"
    data = gzip.compress(good.read_bytes() * 40)
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(readers.InputError, match="truncated or corrupt gzip"):
        _convert(tmp_path, f"{good},{cut}", out, overwrite=True, interleave_inputs=False)
    # The new shards were staged; the old data set is as it was, and readable.
    assert _tree(out) == before
    assert tfrecord.split_files(str(out), "train")
    # No documents at all (a wrong text key): the same.
    with pytest.raises(convert.NoDocumentsError, match=rf"{out} is as it was$"):
        _convert(tmp_path, good, out, overwrite=True, text_key=("body",))
    assert _tree(out) == before
    # A successful overwrite replaces it, and leaves no staging folder behind.
    _convert(tmp_path, f"{good},{good}", out, overwrite=True)
    assert json.loads((out / "stats.json").read_text())["records"] == 50
    assert not [name for name in os.listdir(out) if name.startswith(".")]


def test_a_conversion_that_fills_the_disk_leaves_the_earlier_data_byte_identical(tmp_path):
    """A full disk while the new shards are staged: the staging folder goes and the
    earlier data set is byte-identical, hidden entries included; with space again the
    same conversion replaces it."""
    from test_train import _tmpfs
    from test_train import _used_bytes

    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"text": f"review {i}"}) + "\n" for i in range(50)))
    more = tmp_path / "more.jsonl"
    more.write_text("".join(json.dumps({"text": f"review {i} " * 8}) + "\n" for i in range(3000)))
    with _tmpfs(tmp_path / "disk") as remount:
        out = tmp_path / "disk" / "out"
        _convert(tmp_path, good, out)
        before = _tree(out)
        # Room for the small files (the in-progress marker), not for the new shards.
        remount(f"size={_used_bytes(tmp_path / 'disk') + (8 << 10)}")
        with pytest.raises((OSError, tf.errors.ResourceExhaustedError), match="No space left"):
            _convert(tmp_path, more, out, overwrite=True)
        assert _tree(out) == before
        assert tfrecord.split_files(str(out), "train")
        remount("size=64m")
        _convert(tmp_path, more, out, overwrite=True)
        assert json.loads((out / "stats.json").read_text())["records"] == 3000
        assert not [name for name in os.listdir(out) if name.startswith(".")]


def test_a_killed_conversion_leaves_a_folder_that_is_refused(tmp_path, monkeypatch):
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"text": f"review {i}"}) + "\n" for i in range(50)))
    out = tmp_path / "out"
    _convert(tmp_path, good, out)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # what a kill leaves: nothing cleaned up

    # Killed with every new shard staged, just before the old ones go.
    monkeypatch.setattr(convert, "_abandon", lambda *args: None)
    monkeypatch.setattr(convert, "_remove_old", killed)
    with pytest.raises(KeyboardInterrupt):
        _convert(tmp_path, good, out, overwrite=True)
    assert tfrecord.INCOMPLETE_MARKER in os.listdir(out)
    for spec in (str(out), f"{out}/train-*"):
        with pytest.raises(tfrecord.IncompleteDataError, match=rf"{out}: incomplete TFRecord data"):
            tfrecord.split_files(spec, "train")
    # The rerun with --overwrite clears what the killed one left.
    monkeypatch.undo()
    _convert(tmp_path, good, out, overwrite=True)
    assert tfrecord.split_files(str(out), "train")
    assert not [name for name in os.listdir(out) if name.startswith(".")]


def test_nonempty_files_and_unreadable_shards(tmp_path):
    with tfrecord.ShardedWriter(str(tmp_path), 4) as writer:
        for doc in _docs(2):
            writer.write(doc)
    train = writer.paths["train"]
    filled = sorted({_reference_place(d.source, d.line, 4, (1000, 1, 1))[1] for d in _docs(2)})
    assert tfrecord.nonempty_files(train) == [train[i] for i in filled]
    with tfrecord.ShardedWriter(str(tmp_path / "gz"), 3, compression="GZIP") as writer:
        writer.write(Document("one", source="one.txt", line=1))
    gzipped = writer.paths["train"]
    shard = _reference_place("one.txt", 1, 3, (1000, 1, 1))[1]
    assert tfrecord.nonempty_files(gzipped) == [gzipped[shard]]
    bad = tmp_path / "gz" / "bad.tfrecord.gz"
    bad.write_bytes(b"not gzip at all, just text")
    with pytest.raises(ValueError, match=r"bad\.tfrecord\.gz: not a readable GZIP TFRecord file"):
        tfrecord.nonempty_files([*gzipped, str(bad)])


def _examples(path):
    """The records of a gzip shard as protos (map order in bytes varies between processes).

    A plain iterator: faster than tf.data over hundreds of files.
    """
    options = tf.io.TFRecordOptions(compression_type="GZIP")
    return [
        tf.train.Example.FromString(record)
        for record in tf.compat.v1.io.tf_record_iterator(str(path), options)
    ]


def _limit_open_files(count):
    import resource  # pylint: disable=g-import-not-at-top

    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


@pytest.mark.slow
def test_binary_writes_300_shards_under_256_open_files(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"document {i}\n" for i in range(700)), encoding="utf-8")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    result = _forkserver.run(
        [
            sys.executable,
            "-m",
            "tf_mlstm.cli.make_tfrecords",
            f"--input={corpus}",
            f"--output_dir={out}",
            "--num_shards=300",
            "--split=100,1,1",
            "--gzip",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_open_files(256),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    names = sorted(os.listdir(out))
    assert len(names) == 300 + 3 + 3 + 1  # Shards of each split, and stats.json.
    assert tfrecord.SPILL_SUBDIR not in names and tfrecord.INCOMPLETE_MARKER not in names
    # The same records in the same shards as with every shard open.
    with tfrecord.ShardedWriter(str(tmp_path / "direct"), 300, (100, 1, 1), "GZIP") as writer:
        for i in range(700):
            writer.write(Document(f"document {i}", source=str(corpus), line=i + 1))
    assert not writer.spills
    for paths in writer.paths.values():
        for path in paths:
            name = os.path.basename(path)
            assert _examples(out / name) == _examples(path), name
    assert [t for t, _, _ in _read_records([str(out / "train-00007-of-00300.tfrecord.gz")])] == [
        f"document {i}"
        for i in range(700)
        if _reference_place(str(corpus), i + 1, 300, (100, 1, 1)) == ("train", 7)
    ]
    assert json.loads((out / "stats.json").read_text())["records"] == 700


@pytest.mark.slow
def test_binary_skips_and_reports_bad_records_and_refuses_a_full_folder(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": "first", "label": 1}) + "\n")
        f.write('{"text": "huge label", "label": 99999999999999999999}\n')
        f.write(json.dumps({"text": "x" * (3 << 20), "label": 0}) + "\n")
        f.write(json.dumps({"text": "last", "label": 0}) + "\n")
    csv_path = tmp_path / "b.csv"
    csv_path.write_text('label,text\n1,ok\n0,"open quote\n1,after\n', encoding="utf-8")
    out = tmp_path / "out"
    args = [
        f"--input={jsonl},{csv_path}",
        f"--output_dir={out}",
        "--num_shards=1",
        "--label_key=label",
        "--max_document_bytes=100000",
    ]
    result = _run_binary(*args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records"] == 4  # first, last, ok, after.
    assert stats["skipped"]["by_reason"] == {
        "bad_label": 1,
        "record_too_long": 1,
        "unterminated_quote": 1,
    }
    assert f"{jsonl}:3: line of 3,145,7" in result.stderr  # Logged with file and line.
    assert f"{csv_path}:3: quoted field still open" in result.stderr

    # The rerun rule of every binary (preflight.refuse_existing), before TensorFlow starts.
    again = _run_binary(*args)
    assert again.returncode == 1 and "Traceback" not in again.stderr
    lines = [line for line in again.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and (
        f"--output_dir={out} already holds 4 entries, such as stats.json: pass --overwrite "
        "to replace it, or choose another" in lines[0]
    ), again.stderr
