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


def _write_shards(tmp_path, count=40, shards=4, compression=None, sources=("x",)):
    texts = _docs(count, seed=3)
    with tfrecord.ShardedWriter(
        str(tmp_path), num_train_shards=shards, split_weights=(10, 1, 1), compression=compression
    ) as writer:
        for i, t in enumerate(texts):
            source = sources[i % len(sources)]
            writer.write(Document(text=t, label=None, rating=None, source=source, line=i + 1))
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


def test_source_repeats_oversample_matching_documents(tmp_path):
    sources = ("corpora/amazon/books.jsonl", "corpora/imdb/unsup.jsonl", "notes.txt")
    files = _write_shards(tmp_path, count=60, sources=sources)
    plain = [t.numpy() for t in pipeline.document_dataset(files)]
    rules = pipeline.parse_source_repeats("*/amazon/*=3, notes.tx?=2, *.txt=5")
    repeated = [t.numpy() for t in pipeline.document_dataset(files, source_repeats=rules)]
    parsed = [tfrecord.parse_example(r) for r in tf.data.TFRecordDataset(files)]
    by_source = {p["text"].numpy(): p["source"].numpy().decode() for p in parsed}
    # Amazon x3, the first matching rule for notes.txt (x2), IMDB once.
    want = {"corpora/amazon/books.jsonl": 3, "corpora/imdb/unsup.jsonl": 1, "notes.txt": 2}
    assert sorted(repeated) == sorted(t for t in plain for _ in range(want[by_source[t]]))
    # Training applies them; the finite validation pass does not.
    train = pipeline.lm_dataset(files, 2, 16, training=True, source_repeats=rules)
    assert next(iter(train))["inputs"].shape == (2, 16)
    finite = pipeline.lm_dataset(files, 2, 16, training=False, source_repeats=rules)
    scored = sum(float(tf.reduce_sum(b["weights"])) for b in finite)
    assert scored == sum(len(t) + 1 for t in plain) - 2


def test_source_census_counts_matches(tmp_path):
    files = _write_shards(tmp_path, count=40, shards=1, sources=("a/amazon/x.jsonl", "b.jsonl"))
    rules = pipeline.parse_source_repeats("*/amazon/*=4,nothing*=2")
    read, named, matches = pipeline.source_census(files, rules, records=10)
    assert (read, named) == (10, 10)
    first = [tfrecord.parse_example(r)["source"].numpy() for r in tf.data.TFRecordDataset(files)]
    amazon = first[:10].count(b"a/amazon/x.jsonl")
    assert 0 < amazon < 10 and matches == {"*/amazon/*": amazon, "nothing*": 0}


@pytest.mark.parametrize("spec", ["amazon", "a=0", "=3", "a=two", "a=-1"])
def test_bad_source_repeats_are_clear_errors(spec):
    with pytest.raises(ValueError, match="is not PATTERN=COUNT"):
        pipeline.parse_source_repeats(spec)


def test_source_repeats_empty_is_no_rules():
    assert pipeline.parse_source_repeats("") == ()
    assert pipeline.parse_source_repeats(" a*=2 ,") == (("a*", 2),)


def test_trainer_refuses_source_repeats_on_records_without_sources(tmp_path):
    from tf_mlstm.config import TrainConfig  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    files = _write_shards(tmp_path / "data", count=20, shards=1, sources=("",))
    config = TrainConfig(
        model_dir=str(tmp_path / "run"),
        hidden_size=8,
        embedding_size=4,
        seq_length=8,
        batch_size=2,
        jit_compile="false",
        source_repeats="*/amazon/*=4",
    ).validate()
    with pytest.raises(ValueError, match="name their source file.*train-00000-of-00001"):
        Runner(LanguageModelTask(config, files, []), config)
    with pytest.raises(ValueError, match="source_repeats: 'amazon' is not PATTERN=COUNT"):
        TrainConfig(source_repeats="amazon").validate()


def test_oversampled_training_input_resumes_exactly_from_a_checkpoint(tmp_path):
    sources = ("corpora/amazon/books.jsonl", "corpora/imdb/unsup.jsonl")
    files = _write_shards(tmp_path / "data", count=60, sources=sources)
    rules = pipeline.parse_source_repeats("*/amazon/*=3")
    dataset = pipeline.lm_dataset(files, 2, 16, training=True, seed=3, source_repeats=rules)
    iterator = iter(dataset)
    for _ in range(5):
        next(iterator)
    checkpoint = tf.train.Checkpoint(iterator=iterator)
    path = checkpoint.save(str(tmp_path / "input" / "ckpt"))
    want = [next(iterator)["inputs"].numpy() for _ in range(4)]
    resumed = iter(pipeline.lm_dataset(files, 2, 16, training=True, seed=3, source_repeats=rules))
    tf.train.Checkpoint(iterator=resumed).restore(path)
    got = [next(resumed)["inputs"].numpy() for _ in range(4)]
    np.testing.assert_array_equal(np.stack(got), np.stack(want))


def _first_batches(dataset, count, timeout=60):
    """Up to `count` batches, read in a thread: a hang fails the test instead of stalling it."""
    import threading  # pylint: disable=g-import-not-at-top

    out = []

    def read():
        out.extend(b["inputs"].numpy() for b in dataset.take(count))
        out.append("done")

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout)
    assert out and out[-1] == "done", f"no end after {timeout} s: the input pipeline spins"
    return out[:-1]


def test_training_input_over_empty_shards_ends_instead_of_spinning(tmp_path):
    with tfrecord.ShardedWriter(str(tmp_path), 3) as writer:
        pass
    files = writer.paths["train"]
    assert _first_batches(pipeline.lm_dataset(files, 2, 16, training=True), 1) == []


def test_training_input_skips_empty_shards_and_repeats_the_rest(tmp_path):
    files = _write_shards(tmp_path, count=3, shards=6)  # Three shards at least stay empty.
    filled = [path for path in files if any(True for _ in tf.data.TFRecordDataset(path))]
    assert filled and len(filled) <= 3
    assert tfrecord.nonempty_files(files) == filled
    batches = _first_batches(pipeline.lm_dataset(files, 2, 8, training=True, seed=1), 200)
    assert len(batches) == 200  # Repeats the few documents for ever.
