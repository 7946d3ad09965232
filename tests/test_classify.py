"""tf-mlstm-classify: stdin with bad lines skipped and counted; streaming in bounded chunks."""

import csv
import dataclasses
import io
import os
import subprocess
import sys

import numpy as np

from _models import write_untrained_model_dir
from tf_mlstm.data.text import normalize_text
from tf_mlstm.transfer import features
from tf_mlstm.transfer import logistic

TEXTS = ["A wonderful, moving film.", "Boring and far too long.", "Great.", "Dull, dull."]


def test_stdin_skips_and_counts_undecodable_lines(tmp_path):
    model_dir, classifier, x = _fitted(tmp_path)

    stdin = b"Great.\n\xff\xfe not UTF-8\n\nDull, dull.\ncaf\xc3 cut short\n"
    command = [sys.executable, "-m", "tf_mlstm.cli.classify", f"--model_dir={model_dir}"]
    command += [f"--classifier={tmp_path / 'classifier.json'}", "--input=-", "--output=-"]
    done = subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=300,
    )
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0, stderr[-3000:]
    rows = list(csv.DictReader(done.stdout.decode("utf-8").splitlines()))
    assert [(row["index"], row["line"]) for row in rows] == [("0", "1"), ("1", "4")]
    want = classifier.predict_proba(x[[2, 3]])[:, 1]
    np.testing.assert_allclose([float(row["probability"]) for row in rows], want, atol=2e-6)
    # One summary line with the counts, as for file input, and where they were.
    assert "Skipped 3 records: empty_line=1, invalid_utf8=2" in stderr
    assert "<stdin>:2: invalid UTF-8 at byte 0" in stderr
    assert "<stdin>:5: invalid UTF-8 at byte 3" in stderr


def _fitted(tmp_path):
    model_dir, model = write_untrained_model_dir(tmp_path / "m")
    texts = [normalize_text(t) for t in TEXTS] * 3
    x = features.concat_features(features.TextFeaturizer(model)(texts), ("cell",))
    labels = np.array([1, 0, 1, 0] * 3)
    classifier, _ = logistic.fit_logistic(x, labels, x, labels, ("cell",), model.hidden_size)
    classifier.save(str(tmp_path / "classifier.json"))
    return model_dir, classifier, x


class _CountingStdin:
    """A stdin whose lines are made on demand, counting how many were read."""

    def __init__(self, count):
        self.count = count
        self.read = 0

    def __iter__(self):
        for i in range(self.count):
            self.read += 1
            yield f"{TEXTS[i % len(TEXTS)]} ({i})\n".encode()


def test_classification_streams_in_chunks_of_bounded_size(tmp_path):
    from tf_mlstm.cli import classify as classify_cli

    model_dir, _, _ = _fitted(tmp_path)
    config = classify_cli.ClassifyConfig(
        model_dir=str(model_dir),
        classifier=str(tmp_path / "classifier.json"),
        input="-",
        output="-",
        chunk_texts=3,
    ).validate()
    stdin = _CountingStdin(10)
    chunks = classify_cli.classify_chunks(config, stdin=stdin)
    lines, probabilities, labels, classes = next(chunks)
    # The first chunk is classified before the input is read further: memory
    # holds one chunk, however long the input.
    assert lines == [1, 2, 3] and stdin.read == 3
    assert probabilities.shape == (3, 2) and classes == (0, 1)
    rest = list(chunks)
    assert [len(chunk[0]) for chunk in rest] == [3, 3, 1] and stdin.read == 10

    # Chunked rows equal one pass over all texts at once.
    whole = dataclasses.replace(config, chunk_texts=100)
    all_lines, all_probabilities, all_labels, _ = classify_cli.classify(
        whole, stdin=_CountingStdin(10)
    )
    chunked = np.concatenate([probabilities] + [chunk[1] for chunk in rest])
    np.testing.assert_allclose(chunked, all_probabilities, atol=1e-6)
    assert all_lines == list(range(1, 11))
    np.testing.assert_array_equal(
        np.concatenate([labels] + [chunk[2] for chunk in rest]), all_labels
    )


def test_the_csv_grows_chunk_by_chunk(tmp_path):
    from tf_mlstm.cli import classify as classify_cli

    stream = io.StringIO()
    writer = classify_cli.CsvWriter(stream, (0, 1), multilabel=False)
    writer.write([1, 2], np.array([[0.2, 0.8], [0.9, 0.1]]), np.array([1, 0]))
    assert stream.getvalue().splitlines() == [
        "index,line,probability,label",
        "0,1,0.800000,1",
        "1,2,0.100000,0",
    ]
    writer.write([5], np.array([[0.4, 0.6]]), np.array([1]))
    assert stream.getvalue().splitlines()[-1] == "2,5,0.600000,1"  # indices continue
    assert writer.rows == 3


def test_chunk_size_and_precision_are_checked_before_tensorflow(tmp_path):
    command = [sys.executable, "-m", "tf_mlstm.cli.classify", "--model_dir=m"]
    command += ["--classifier=c.json", "--input=-", "--output=-"]
    done = subprocess.run(
        [*command, "--chunk_texts=0"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "--chunk_texts" in done.stderr
    done = subprocess.run(
        [*command, "--precision=float64"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "--precision" in done.stderr
