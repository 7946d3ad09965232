"""Input pipeline: contiguous rows, exact coverage, replica slicing, shards."""

import numpy as np
import pytest
import tensorflow as tf

from tf_mlstm.data import pipeline
from tf_mlstm.data import tfrecord
from tf_mlstm.data.readers import Document
from tf_mlstm.data.text import DOC_START


def _docs(count, seed=0):
    rng = np.random.RandomState(seed)
    words = ["good", "bad", "blender", "noisy", "five", "stars", "returned", "it"]
    return [" ".join(rng.choice(words, rng.randint(1, 40))) + f" #{i}" for i in range(count)]


def _rows(batches, key="inputs"):
    """Concatenates each row's windows over the batches."""
    return [b"".join(bytes(b[key][r]) for b in batches) for r in range(len(batches[0][key]))]


def test_rows_are_contiguous_streams_of_whole_documents():
    texts = _docs(60)
    ds = pipeline.window_dataset(tf.data.Dataset.from_tensor_slices(texts), 4, 16, finite=True)
    batches = [{k: v.numpy() for k, v in b.items()} for b in ds]
    for b in batches:
        # Targets are the inputs shifted by one, across batch boundaries too.
        assert b["inputs"].shape == (4, 16)
    inputs = _rows(batches)
    targets = _rows(batches, "targets")
    weights = [np.concatenate([b["weights"][r] for b in batches]) for r in range(4)]
    seen = []
    for r in range(4):
        real = int(weights[r].sum())
        # Weights are 1 for a prefix, then padding.
        assert weights[r][:real].all() and not weights[r][real:].any()
        stream = inputs[r][:1] + targets[r][:real]
        assert inputs[r][1:real] == targets[r][: real - 1]
        assert stream[0] == DOC_START
        seen += stream[1:].split(bytes([DOC_START]))
    # Every document appears exactly once, whole.
    assert sorted(s.decode() for s in seen) == sorted(texts)


def test_rows_stay_balanced_and_buffers_bounded():
    texts = ["x" * 500] + _docs(200, seed=1)
    ds = pipeline.window_dataset(tf.data.Dataset.from_tensor_slices(texts), 8, 32, finite=True)
    batches = [b for b in ds]
    real = sum(float(tf.reduce_sum(b["weights"])) for b in batches)
    framed = sum(len(t.encode()) + 1 for t in texts)
    # Each row's first byte is an input only; every other byte is scored once.
    assert real == framed - 8
    # Padding only in the final flush windows: at most one doc + window per row.
    padding = sum(float(tf.reduce_sum(1 - b["weights"])) for b in batches)
    assert padding <= 8 * (500 + 32)


def _write_shards(tmp_path, count=40, shards=4, compression=None):
    texts = _docs(count, seed=3)
    with tfrecord.ShardedWriter(
        str(tmp_path), num_train_shards=shards, split_weights=(10, 1, 1), compression=compression
    ) as writer:
        for i, t in enumerate(texts):
            writer.write(Document(text=t, label=None, rating=None, source="x", line=i + 1))
    return tfrecord.split_files(str(tmp_path), "train")


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_lm_dataset_from_shards(tmp_path, compression):
    files = _write_shards(tmp_path, compression=compression)
    ds = pipeline.lm_dataset(files, 3, 16, training=True, seed=1)
    batch = next(iter(ds))
    assert batch["inputs"].shape == (3, 16) and batch["inputs"].dtype == tf.uint8
    assert float(tf.reduce_min(batch["weights"])) == 1.0
    # Finite pass scores every byte of the split once.
    finite = pipeline.lm_dataset(files, 3, 16, training=False)
    scored = sum(float(tf.reduce_sum(b["weights"])) for b in finite)
    texts = [
        t.numpy()
        for f in files
        for t in tf.data.TFRecordDataset(f, compression_type=compression or "").map(
            lambda r: tfrecord.parse_example(r)["text"]
        )
    ]
    assert scored == sum(len(t) + 1 for t in texts) - 3


def test_input_context_splits_shards(tmp_path):
    files = _write_shards(tmp_path, shards=4)
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(2, pipeline_id, 2)
        docs = pipeline.document_dataset(files, context)
        seen.append({t.numpy() for t in docs})
    assert not seen[0] & seen[1]
    context = tf.distribute.InputContext(8, 0, 8)
    with pytest.raises(ValueError, match="cannot feed 8 input pipelines"):
        pipeline.document_dataset(files, context)


def test_no_files_is_a_clear_error():
    with pytest.raises(ValueError, match="no TFRecord files"):
        pipeline.document_dataset([])
