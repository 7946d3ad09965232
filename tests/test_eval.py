"""tf-mlstm-eval: bits/char on TFRecord splits and raw corpora, clear errors."""

import json
import os
import re
import sys

import _forkserver
import numpy as np
import pytest
import tensorflow as tf

import _models
import tf_mlstm
from tf_mlstm.config import ConvertConfig
from tf_mlstm.data import convert
from tf_mlstm.data import framing
from tf_mlstm.data import tfrecord
from tf_mlstm.models import featurize
from tf_mlstm.train import evaluation

TEXTS = [
    "Great kettle, boils fast and looks nice on the counter.",
    "Broke after a week. Returned it.",
    "The story drags in the middle but the ending is worth it!",
]


def _eval(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return _forkserver.run(
        [sys.executable, "-m", "tf_mlstm.cli.eval", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_raw_corpus_and_tfrecords_agree_with_per_document_scores(tmp_path):
    model_dir, model = _models.write_untrained_model_dir(tmp_path / "m")
    corpus = tmp_path / "reviews.jsonl"
    corpus.write_text("".join(json.dumps({"reviewText": t}) + "\n" for t in TEXTS))
    # Per-document reference: each text scored alone from a fresh state.
    ids, valid, _, _ = framing.frame_ids_tf(tf.constant(TEXTS), pad_to_multiple=8)
    bits, chars = featurize.score_ids(model, ids, valid, window=8)
    want = float(tf.reduce_sum(bits) / tf.reduce_sum(chars))
    # In a stream, each document's framing byte is also predicted (except the
    # first of each row): the stream scores one more byte per later document.
    raw = evaluation.evaluate_data(
        str(model_dir), str(corpus), ["reviewText"], batch_size=1, seq_length=16
    )
    assert raw["chars"] == int(tf.reduce_sum(chars)) + len(TEXTS) - 1
    assert 0.8 * want < raw["bits_per_char"] < 1.2 * want
    # The same corpus converted to TFRecords gives the same figure.
    convert.convert(
        ConvertConfig(
            input=str(corpus),
            output_dir=str(tmp_path / "tf"),
            num_shards=1,
            split=(1, 1, 1),
        )
    )
    proc = _eval(
        f"--model_dir={model_dir}",
        f"--data={tmp_path / 'tf'}",
        "--split=train",
        "--batch_size=1",
        "--seq_length=16",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"bits_per_char", "chars"}
    # The train split's documents, in their order, as a raw corpus.
    texts = [
        record["text"].decode()
        for record in tf.data.TFRecordDataset(tfrecord.split_files(str(tmp_path / "tf"), "train"))
        .map(tfrecord.parse_example)
        .as_numpy_iterator()
    ]
    assert texts and set(texts) <= set(TEXTS)
    subset = tmp_path / "train.jsonl"
    subset.write_text("".join(json.dumps({"reviewText": t}) + "\n" for t in texts))
    raw = evaluation.evaluate_data(
        str(model_dir), str(subset), ["reviewText"], batch_size=1, seq_length=16
    )
    assert result["chars"] == raw["chars"]
    assert result["bits_per_char"] == pytest.approx(raw["bits_per_char"], rel=1e-5)


def test_stream_score_matches_one_document(tmp_path):
    model_dir, model = _models.write_untrained_model_dir(tmp_path / "m")
    corpus = tmp_path / "one.txt"
    corpus.write_text(TEXTS[0] + "\n")
    ids, valid, _, _ = framing.frame_ids_tf(tf.constant(TEXTS[:1]), pad_to_multiple=8)
    bits, chars = featurize.score_ids(model, ids, valid, window=8)
    got = evaluation.evaluate_data(
        str(model_dir), str(corpus), ["text"], batch_size=2, seq_length=8
    )
    np.testing.assert_allclose(got["bits_per_char"], float(bits[0] / chars[0]), rtol=1e-5)
    assert got["chars"] == int(chars[0])


def test_missing_data_is_one_error_line(tmp_path):
    model_dir, _ = _models.write_untrained_model_dir(tmp_path / "m")
    proc = _eval(f"--model_dir={model_dir}", f"--data={tmp_path / 'absent.jsonl'}")
    assert proc.returncode == 1
    assert "absent.jsonl" in proc.stderr and "Traceback" not in proc.stderr
    proc = _eval(f"--model_dir={tmp_path / 'nomodel'}", f"--data={tmp_path}")
    assert proc.returncode == 1 and "config.json" in proc.stderr


def test_bad_raw_corpus_is_one_error_line(tmp_path):
    import gzip  # pylint: disable=g-import-not-at-top

    model_dir, _ = _models.write_untrained_model_dir(tmp_path / "m")
    data = gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in TEXTS * 300).encode())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.jsonl\.gz: truncated or corrupt gzip file"):
        evaluation.evaluate_data(str(model_dir), str(cut), ["text"], batch_size=2, seq_length=8)
    columns = tmp_path / "cols.csv"
    columns.write_text("label,body\n1,hello\n")
    proc = _eval(f"--model_dir={model_dir}", f"--data={columns}", "--text_key=text")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    errors = [
        line for line in proc.stderr.splitlines() if line.startswith("E") and " _main.py:" in line
    ]
    assert len(errors) == 1 and errors[0].endswith(
        f"{columns}: no text column: none of ['text'] in its header, which has the columns "
        "['label', 'body']"
    )


def _converted(tmp_path):
    """TEXTS converted by the library into `tmp_path/tf`, one shard a split (all in train)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "tf"
    convert.convert(
        ConvertConfig(input=str(corpus), output_dir=str(out), num_shards=1, split=(1000, 1, 1))
    )
    return out


def test_empty_or_incomplete_tfrecord_folder_is_refused(tmp_path):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    model_dir, _ = _models.write_untrained_model_dir(tmp_path / "m")
    out = _converted(tmp_path)
    assert json.loads((out / "stats.json").read_text())["splits"]["test"]["records"] == 0
    with pytest.raises(ValueError, match=rf"no records to score: the 1 test shards of {out}"):
        evaluation.evaluate_data(str(model_dir), str(out), ["text"])  # 3 documents, none in test.
    (out / tfrecord.INCOMPLETE_MARKER).write_text("")
    with pytest.raises(tfrecord.IncompleteDataError, match=rf"{out}: incomplete TFRecord data"):
        evaluation.evaluate_data(str(model_dir), str(out), ["text"], split="train")


def _example(**features):
    """A serialized `tf.train.Example` of `features` (name -> a list of bytes or of ints)."""
    example = tf.train.Example()
    for name, values in features.items():
        kind = "bytes_list" if isinstance(values[0], bytes) else "int64_list"
        getattr(example.features.feature[name], kind).value.extend(values)
    return example.SerializeToString()


# Another tool's records in a converted folder, and what the one line says after the shard
# and record.
_FOREIGN_RECORDS = {
    "another feature name": (
        _example(body=[b"Fine."], label=[1]),
        r" has no feature 'text' \(it has: body, label\)",
    ),
    "text of another type": (
        _example(text=[3]),
        r": feature 'text' holds int64 values, where tf-mlstm-make-tfrecords writes bytes",
    ),
    "not an Example": (b"just text, not a proto", r" is not a tf\.train\.Example"),
}


@pytest.mark.parametrize("case", sorted(_FOREIGN_RECORDS))
def test_a_converted_folder_of_foreign_records_is_refused_naming_shard_record_and_problem(
    tmp_path, case
):
    record, problem = _FOREIGN_RECORDS[case]
    model_dir, _ = _models.write_untrained_model_dir(tmp_path / "m")
    out = _converted(tmp_path)
    # The conversion's folder (stats.json and all) with another tool's shard in it.
    shard = sorted(out.glob("train-*"))[0]
    with tf.io.TFRecordWriter(str(shard)) as writer:
        writer.write(record)
        writer.write(_example(text=[b"A record of the schema after it."]))
    match = re.escape(f"{shard}: record 1") + problem
    with pytest.raises(tf_mlstm.UserError, match=match):
        tf_mlstm.evaluate(
            tf_mlstm.EvalConfig(model_dir=str(model_dir), data=str(out), split="train")
        )
    run = tmp_path / "run"
    with pytest.raises(tf_mlstm.UserError, match=match):
        tf_mlstm.pretrain(tf_mlstm.TrainConfig(model_dir=str(run), train_data=str(out)))
    assert not (run / "checkpoints").exists()
