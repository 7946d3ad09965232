"""The Beam converter (`tf-mlstm-make-tfrecords --runner=...`) against the single-process one.

Both are run on the same inputs and compared shard by shard and document by
document: the same records in the same shards, the same stats and skip
counts, whether the pipeline runs in this process or on two local worker
processes (DirectRunner multi-processing).
"""

import gzip
import json
import math
import os
import sys

import pytest

from _models import run

pytest.importorskip(
    "apache_beam",
    reason="Apache Beam is not installed: the [beam] extra (pip install -e '.[dev,beam]')",
)

import tensorflow as tf  # noqa: E402
from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from tf_mlstm import errors  # noqa: E402
from tf_mlstm.beam import convert as beam_convert  # noqa: E402
from tf_mlstm.cli import make_tfrecords  # noqa: E402
from tf_mlstm.config import ConvertConfig  # noqa: E402
from tf_mlstm.data import convert  # noqa: E402
from tf_mlstm.data import demo  # noqa: E402
from tf_mlstm.data import readers  # noqa: E402
from tf_mlstm.data import tfrecord  # noqa: E402

TWO_WORKERS = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")
# What differs between two conversions of the same corpus.
_TIMING_KEYS = ("seconds", "input_mb_per_second", "output_dir")


def _records(path):
    dataset = tf.data.TFRecordDataset(str(path), tfrecord.compression_type([str(path)]))
    return [record.numpy() for record in dataset]


def _documents(record):
    example = tf.train.Example.FromString(record)
    feature = example.features.feature
    return (
        feature["source"].bytes_list.value[0].decode(),
        feature["text"].bytes_list.value[0].decode(),
        feature["label"].int64_list.value[0],
        # NaN (no rating) as None, which compares equal to itself.
        None if math.isnan(rating := feature["rating"].float_list.value[0]) else rating,
    )


def _shards(folder):
    """{shard file name: its records} of a converted folder."""
    return {
        name: _records(os.path.join(folder, name))
        for name in sorted(os.listdir(folder))
        if tfrecord.TFRECORD_SUFFIX in name
    }


def _config(inputs, out, **kwargs):
    kwargs.setdefault("num_shards", 3)
    kwargs.setdefault("split", (8, 1, 1))
    return ConvertConfig(input=inputs, output_dir=str(out), **kwargs)


def _both(inputs, tmp_path, pipeline_args=(), **kwargs):
    """(single-process stats, Beam stats); folders tmp_path/single and tmp_path/beam."""
    single = convert.convert(_config(inputs, tmp_path / "single", **kwargs))
    beam = beam_convert.convert_with_beam(
        _config(inputs, tmp_path / "beam", **kwargs), "DirectRunner", pipeline_args
    )
    return single, beam


def _assert_same_output(single, beam, tmp_path):
    """The same shards, each with the same documents; the same stats."""
    for key in _TIMING_KEYS:
        single.pop(key), beam.pop(key)
    assert beam == single
    written = json.loads((tmp_path / "beam" / "stats.json").read_text())
    assert {k: v for k, v in written.items() if k not in _TIMING_KEYS} == single
    ones, beams = _shards(tmp_path / "single"), _shards(tmp_path / "beam")
    assert list(beams) == list(ones)
    for name, records in ones.items():
        # Document by document; the order within a shard is the reading order
        # for one, the document key's for the other.
        assert sorted(map(_documents, beams[name])) == sorted(map(_documents, records)), name
    assert sorted(os.listdir(tmp_path / "beam")) == sorted(os.listdir(tmp_path / "single"))
    for split in tfrecord.SPLITS:
        assert tfrecord.split_files(str(tmp_path / "beam"), split)


def test_the_demo_corpus_converts_to_the_same_shards(tmp_path):
    single, beam = _both(demo.DEMO_CORPUS, tmp_path, num_shards=4, split=demo.DEMO_SPLIT)
    assert single["records"] == 269 and all(s["records"] for s in single["splits"].values())
    _assert_same_output(single, beam, tmp_path)


def _messy_corpus(tmp_path):
    """Three files of three formats, each with bad records of several kinds."""
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [
        json.dumps({"text": f"Review {i}: fine &amp; good", "rating": i % 10}) for i in range(60)
    ]
    lines[3] = '{"text": "cut off'
    lines[7] = "[1, 2]"
    lines[11] = json.dumps({"summary": "no text"})
    lines[13] = json.dumps({"text": "   "})
    lines[17] = ""
    (folder / "a.jsonl").write_bytes(
        "\n".join(lines).encode() + b"\n" + b'{"text": "bad \xff byte"}\n'
    )
    rows = ["label,sentence"] + [f'{i % 2},"Sentence {i}, quoted"' for i in range(40)]
    rows[5] = "1,too,many,fields"
    rows[9] = "0,"
    with gzip.open(folder / "b.csv.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")
    (folder / "c.txt").write_text(
        "".join(f"plain line {i}\n" if i % 9 else "\n" for i in range(50)), encoding="utf-8"
    )
    return f"{folder}/a.jsonl,{folder}/*.csv.gz,{folder}/c.txt"


def test_bad_records_are_skipped_and_counted_alike_on_two_workers(tmp_path):
    inputs = _messy_corpus(tmp_path)
    # Read one file after another, the single-process converter keeps the
    # first skip examples in file order, as the Beam one adds them up.
    single, beam = _both(
        inputs,
        tmp_path,
        TWO_WORKERS,
        text_key=("text", "sentence"),
        interleave_inputs=False,
        gzip=True,
    )
    assert single["skipped"]["by_reason"] == {
        "bad_csv_row": 1,
        "empty_line": 7,
        "empty_text": 1,
        "invalid_utf8": 1,
        "malformed_json": 1,
        "missing_text_key": 2,
        "not_json_object": 1,
    }
    _assert_same_output(single, beam, tmp_path)
    # On one worker in this process, the very same bytes as on two.
    again = beam_convert.convert_with_beam(
        _config(inputs, tmp_path / "again", text_key=("text", "sentence"), gzip=True),
        "DirectRunner",
    )
    assert again["skipped"] == beam["skipped"]
    assert _shards(tmp_path / "again") == _shards(tmp_path / "beam")


def test_a_slice_of_a_shared_corpus_converts_to_the_same_shards(tmp_path, shared_data, monkeypatch):
    # Readers write their records out in many sorted runs, which the shard writers merge.
    monkeypatch.setattr(beam_convert, "_RUN_BYTES", 100_000)
    slice_dir = tmp_path / "slice"
    slice_dir.mkdir()
    with open(shared_data / "imdb" / "unsup.jsonl", "rb") as f:
        (slice_dir / "unsup.jsonl").write_bytes(b"".join(next(f) for _ in range(1500)))
    inputs = f"{slice_dir}/unsup.jsonl,{shared_data}/amazon/electronics.jsonl"
    single, beam = _both(
        inputs, tmp_path, num_shards=5, split=(50, 1, 1), text_key=("reviewText", "text")
    )
    assert single["records"] == 3500 and single["skipped"]["total"] == 0
    _assert_same_output(single, beam, tmp_path)


def test_a_failed_pipeline_leaves_the_data_set_as_it_was(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("".join(f"line {i}\n" for i in range(30)), encoding="utf-8")
    out = tmp_path / "out"
    convert.convert(_config(str(good), out))
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(gzip.compress(b"line\n" * 1000)[:-30])
    inputs = f"{good},{broken}"
    with pytest.raises(readers.InputError) as single_error:
        convert.convert(_config(inputs, tmp_path / "single"))
    with pytest.raises(readers.InputError) as beam_error:
        beam_convert.convert_with_beam(_config(inputs, out, overwrite=True), "DirectRunner")
    # The single-process converter's one line, naming the file.
    assert str(beam_error.value) == str(single_error.value)
    assert f"{broken}: truncated or corrupt gzip file" in str(beam_error.value)
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before


def test_a_killed_launcher_leaves_a_folder_training_refuses(tmp_path, monkeypatch):
    good = tmp_path / "good.txt"
    good.write_text("".join(f"line {i}\n" for i in range(30)), encoding="utf-8")
    out = tmp_path / "out"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # What a kill leaves: nothing cleaned up.

    # Killed once the pipeline has written every shard, before the commit.
    monkeypatch.setattr(convert, "_abandon", lambda *args: None)
    monkeypatch.setattr(convert, "_conversion_stats", killed)
    with pytest.raises(KeyboardInterrupt):
        beam_convert.convert_with_beam(_config(str(good), out), "DirectRunner")
    with pytest.raises(tfrecord.IncompleteDataError) as refused:
        tfrecord.split_files(str(out), "train")
    assert str(refused.value) == (
        f"{out}: incomplete TFRecord data (its conversion did not finish; "
        "_CONVERSION_INCOMPLETE is still there): re-run tf-mlstm-make-tfrecords into it "
        "with --overwrite"
    )
    monkeypatch.undo()
    beam_convert.convert_with_beam(_config(str(good), out, overwrite=True), "DirectRunner")
    assert tfrecord.split_files(str(out), "train")
    assert not [name for name in os.listdir(out) if name.startswith((".", "_"))]


def test_max_documents_is_refused_under_a_runner(tmp_path):
    # A Python caller reads the arguments' names; a binary's user, the flags'.
    config = _config(demo.DEMO_CORPUS, tmp_path, max_documents=5)
    with pytest.raises(ValueError, match=r"^max_documents cannot be used with runner: "):
        beam_convert.convert_with_beam(config, "DirectRunner")
    with (
        errors.naming_flags(),
        pytest.raises(ValueError, match=r"^--max_documents cannot be used with --runner: "),
    ):
        beam_convert.convert_with_beam(config, "DirectRunner")
    assert not os.listdir(tmp_path)


# === The binary ===


def _flag_values(*args):
    flag_values = flags.FlagValues()
    make_tfrecords.define_flags(flag_values)
    flag_values(["make_tfrecords", *args])
    return flag_values


def test_flags_it_does_not_define_go_to_beam_only_with_a_runner():
    argv = [
        "tf-mlstm-make-tfrecords",
        "--input=a.jsonl",
        "--output_dir",
        "out",
        "--nogzip",
        "--runner=DataflowRunner",
        "--project",
        "my-project",
        "--temp_location=gs://bucket/tmp",
        "--verbosity=1",
    ]
    kept, beam = make_tfrecords.split_pipeline_args(argv)
    assert kept == [*argv[:5], "--runner=DataflowRunner", "--verbosity=1"]
    assert beam == ["--project", "my-project", "--temp_location=gs://bucket/tmp"]
    without = ["tf-mlstm-make-tfrecords", "--input=a", "--output_dir=o", "--project=p"]
    assert make_tfrecords.split_pipeline_args(without) == (without, [])
    job = make_tfrecords.job_from_flags(
        _flag_values(*kept[1:-1]), ["--flink_master=localhost:8081"]
    )
    assert job.runner == "DataflowRunner" and job.pipeline_args == (
        "--flink_master=localhost:8081",
    )
    assert job.config == make_tfrecords.config_from_flags(_flag_values(*kept[1:5]))
    with pytest.raises(app.UsageError, match=r"^unknown flag --num_shard: neither a flag of "):
        make_tfrecords.job_from_flags(_flag_values(*kept[1:-1]), ["--num_shard=3"])


def test_a_runner_without_beam_installed_is_one_line(monkeypatch):
    import importlib.util  # pylint: disable=g-import-not-at-top

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "apache_beam" else find_spec(name, *args),
    )
    flag_values = _flag_values("--input=a", "--output_dir=o", "--runner=DirectRunner")
    with pytest.raises(app.UsageError) as error:
        make_tfrecords.job_from_flags(flag_values)
    assert str(error.value) == (
        "--runner needs Apache Beam, which is not installed: pip install tf_mlstm[beam]"
    )
    # Without --runner, nothing of Beam is needed.
    assert isinstance(
        make_tfrecords.job_from_flags(_flag_values("--input=a", "--output_dir=o")),
        ConvertConfig,
    )


def test_the_binary_runs_on_two_local_workers(tmp_path):
    out = tmp_path / "out"
    args = [f"--input={demo.DEMO_CORPUS}", f"--output_dir={out}", "--num_shards=4"]
    result = run(
        [sys.executable, "-m", "tf_mlstm.cli.make_tfrecords", *args, "--split=16,1,1"]
        + ["--runner=DirectRunner", *TWO_WORKERS],
        timeout=150,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    single = convert.convert(
        _config(demo.DEMO_CORPUS, tmp_path / "single", num_shards=4, split=demo.DEMO_SPLIT)
    )
    written = json.loads((out / "stats.json").read_text())
    assert written["splits"] == single["splits"] and written["records"] == 269
    beams = _shards(out)
    for name, records in _shards(tmp_path / "single").items():
        assert sorted(beams.pop(name)) == sorted(records), name  # Records are deterministic bytes.
    assert not beams
    # The import of tf_mlstm and the single-process converter never load Beam.
    check = run(
        [
            sys.executable,
            "-c",
            "import sys, tf_mlstm; from tf_mlstm.cli import make_tfrecords; "
            "from tf_mlstm.data import convert; print('apache_beam' in sys.modules)",
        ],
        timeout=120,
    )
    assert check.stdout.strip() == "False", check.stderr[-2000:]
