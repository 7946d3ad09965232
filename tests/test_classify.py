"""tf-mlstm-classify: stdin with bad lines skipped and counted; streaming in bounded chunks;
an earlier output kept through any failure; a classifier bound to the weights it was fitted on."""

import csv
import dataclasses
import io
import os
import re
import sys

import _forkserver
import numpy as np
import pytest

from _models import write_untrained_model_dir
from tf_mlstm.data.text import normalize_text
from tf_mlstm.transfer import features
from tf_mlstm.transfer.probe import fit as fit_lib
from tf_mlstm.transfer.probe import logistic

TEXTS = ["A wonderful, moving film.", "Boring and far too long.", "Great.", "Dull, dull."]


def test_stdin_skips_and_counts_undecodable_lines(tmp_path):
    model_dir, classifier, x = _fitted(tmp_path)

    stdin = b"Great.\n\xff\xfe not UTF-8\n\nDull, dull.\ncaf\xc3 cut short\n"
    command = [sys.executable, "-m", "tf_mlstm.cli.classify", f"--model_dir={model_dir}"]
    command += [f"--classifier={tmp_path / 'classifier.json'}", "--input=-", "--output=-"]
    done = _forkserver.run(
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
    classifier, _ = fit_lib.fit_logistic(x, labels, x, labels, ("cell",), model.hidden_size)
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
    from tf_mlstm.transfer import predict

    stream = io.StringIO()
    writer = predict.PredictionsCsv(stream, (0, 1), multilabel=False)
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
    done = _forkserver.run(
        [*command, "--chunk_texts=0"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "--chunk_texts" in done.stderr
    done = _forkserver.run(
        [*command, "--precision=float64"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "--precision" in done.stderr


def _write_reviews(tmp_path):
    with open(tmp_path / "reviews.csv", "w", newline="") as f:
        csv.writer(f).writerows([["review"], *([text] for text in TEXTS)])


def _config(tmp_path, model_dir, **overrides):
    from tf_mlstm.cli import classify as classify_cli

    values = dict(
        model_dir=str(model_dir),
        classifier=str(tmp_path / "classifier.json"),
        input=str(tmp_path / "reviews.csv"),
        output=str(tmp_path / "scores.csv"),
        text_key=("review",),
        overwrite=True,  # the tests rerun into the same CSV on purpose
    )
    values.update(overrides)
    return classify_cli.ClassifyConfig(**values).validate()


def test_progress_counts_the_input_against_its_size(tmp_path, caplog):
    from tf_mlstm.cli import classify as classify_cli

    model_dir, _, _ = _fitted(tmp_path)
    _write_reviews(tmp_path)
    size = (tmp_path / "reviews.csv").stat().st_size
    caplog.set_level("INFO")
    classify_cli.classify(_config(tmp_path, model_dir, chunk_texts=2))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Classifying")]
    # The final line: all of the file's bytes, of a total known up front, and the texts.
    shown = f"{size / 1e3:,.1f}"
    assert re.fullmatch(
        rf"Classifying: {shown}/{shown} kB \(100%\), in \d+:\d\d, .* kB/s; {len(TEXTS)} texts",
        lines[-1],
    ), lines
    # Standard input has no size: its count of texts, without a total.
    caplog.clear()
    stdin = _CountingStdin(5)
    classify_cli.classify(_config(tmp_path, model_dir, input="-", output="-"), stdin=stdin)
    final = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Classifying")]
    assert final[-1].startswith("Classifying: 5 texts, in "), final


def test_a_failure_at_any_stage_leaves_an_earlier_csv_byte_identical(tmp_path):
    from tf_mlstm.cli import classify as classify_cli

    model_dir, _, _ = _fitted(tmp_path)
    _write_reviews(tmp_path)
    classify_cli.main(_config(tmp_path, model_dir))
    earlier = (tmp_path / "scores.csv").read_bytes()
    assert earlier.startswith(b"index,line,probability,label\n") and earlier.count(b"\n") == 5
    stages = {
        "wrong model": (dict(model_dir=str(tmp_path / "nowhere")), FileNotFoundError, "nowhere"),
        "missing input": (dict(input=str(tmp_path / "gone.csv")), FileNotFoundError, "gone.csv"),
        "wrong text key": (dict(text_key=("text",)), ValueError, "no text column"),
        "broken classifier": (
            dict(classifier=str(tmp_path / "reviews.csv")),
            ValueError,
            "not JSON",
        ),
    }
    for stage, (overrides, error, match) in stages.items():
        with pytest.raises(error, match=match):
            folder = overrides.pop("model_dir", model_dir)
            classify_cli.main(_config(tmp_path, folder, **overrides))
        assert (tmp_path / "scores.csv").read_bytes() == earlier, stage

    class Broken(RuntimeError):
        pass

    # Midway: the second chunk fails after the first one's rows were written.
    chunks = classify_cli.classify_chunks

    def failing(config, stdin=None):
        generator = chunks(config, stdin)
        yield next(generator)
        raise Broken("disk gone")

    classify_cli.classify_chunks = failing
    try:
        with pytest.raises(Broken):
            classify_cli.main(_config(tmp_path, model_dir, chunk_texts=2))
    finally:
        classify_cli.classify_chunks = chunks
    assert (tmp_path / "scores.csv").read_bytes() == earlier
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_classifier_refuses_other_weights_of_the_same_size(tmp_path, caplog):
    from tf_mlstm import rundir
    from tf_mlstm.cli import classify as classify_cli

    model_dir, classifier, _ = _fitted(tmp_path)
    _, model = write_untrained_model_dir(model_dir, seed=0)  # the same weights again
    fingerprint = rundir.weights_checksum(model.weights)
    recorded = classifier.fitted_on(fingerprint, "float32")
    recorded.save(str(tmp_path / "classifier.json"))
    record = logistic.LogisticClassifier.load(str(tmp_path / "classifier.json"))
    assert (record.head.weights_sha256, record.head.precision) == (fingerprint, "float32")
    other_dir, other = write_untrained_model_dir(tmp_path / "other", seed=1)
    assert other.hidden_size == model.hidden_size
    _write_reviews(tmp_path)

    classify_cli.main(_config(tmp_path, model_dir))  # its own model: fine
    with pytest.raises(
        rundir.OtherModelError,
        match=rf"classifier {tmp_path}/classifier.json was fitted on other model weights "
        rf"\(sha256 {fingerprint}\) than those of {other_dir} \(\w{{16}}\): give the "
        "model_dir it was fitted on, .* or pass allow_other_model",
    ):
        classify_cli.main(_config(tmp_path, other_dir))
    caplog.set_level("WARNING")
    classify_cli.main(_config(tmp_path, other_dir, allow_other_model=True))
    assert "applied anyway (allow_other_model)" in caplog.text


def test_classify_featurizes_in_the_precision_of_the_fit(tmp_path, monkeypatch):
    from tf_mlstm.cli import classify as classify_cli
    from tf_mlstm.models import language_model

    model_dir, classifier, _ = _fitted(tmp_path)
    classifier.fitted_on(precision="mixed_bfloat16").save(str(tmp_path / "classifier.json"))
    _write_reviews(tmp_path)
    asked = []

    class Loaded(Exception):
        pass

    def recording(model_dir, checkpoint=None, precision="float32"):
        asked.append(precision)
        raise Loaded  # what it computes in is all this test asks

    monkeypatch.setattr(language_model.MLSTMLanguageModel, "from_run", recording)
    for precision in (None, "float32"):
        with pytest.raises(Loaded):
            classify_cli.main(_config(tmp_path, model_dir, precision=precision))
    assert asked == ["mixed_bfloat16", "float32"]
    assert not (tmp_path / "scores.csv").exists()


@pytest.mark.slow
def test_the_cli_answers_another_model_in_one_line_and_keeps_the_csv(tmp_path):
    from tf_mlstm import rundir

    model_dir, classifier, _ = _fitted(tmp_path)
    _, model = write_untrained_model_dir(model_dir, seed=0)
    fingerprint = rundir.weights_checksum(model.weights)
    classifier.fitted_on(fingerprint).save(str(tmp_path / "classifier.json"))
    other_dir, _ = write_untrained_model_dir(tmp_path / "other", seed=1)
    _write_reviews(tmp_path)
    (tmp_path / "scores.csv").write_bytes(b"an earlier result\n")
    command = [sys.executable, "-m", "tf_mlstm.cli.classify", f"--model_dir={other_dir}"]
    command += [f"--classifier={tmp_path / 'classifier.json'}", "--text_key=review"]
    command += [f"--input={tmp_path / 'reviews.csv'}", f"--output={tmp_path / 'scores.csv'}"]
    command += ["--overwrite"]  # past the rerun rule, to the check of the weights
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = _forkserver.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [
        line for line in done.stderr.splitlines() if line.startswith("E") and " _main.py:" in line
    ]
    assert len(errors) == 1 and "was fitted on other model weights" in errors[0], errors
    assert (tmp_path / "scores.csv").read_bytes() == b"an earlier result\n"
    forced = _forkserver.run(
        [*command, "--allow_other_model"], capture_output=True, text=True, env=env, timeout=300
    )
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert "applied anyway (--allow_other_model)" in forced.stderr
    assert (tmp_path / "scores.csv").read_text().startswith("index,line,probability,label")


def test_an_output_that_is_the_input_is_refused_in_one_line_before_any_work(tmp_path):
    """`--output=` the `--input` (by its name, another spelling, or a link) is one line,
    exit 1, before the model loads: the texts stay as they were."""
    _write_reviews(tmp_path)
    texts = (tmp_path / "reviews.csv").read_bytes()
    (tmp_path / "link.csv").symlink_to(tmp_path / "reviews.csv")
    command = [sys.executable, "-m", "tf_mlstm.cli.classify", f"--model_dir={tmp_path / 'm'}"]
    command += [f"--classifier={tmp_path / 'classifier.json'}", "--text_key=review"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for given, output in (
        (str(tmp_path / "reviews.csv"), str(tmp_path / "reviews.csv")),
        (str(tmp_path / "*.csv"), str(tmp_path / "." / "reviews.csv")),
        (str(tmp_path / "reviews.csv"), str(tmp_path / "link.csv")),
    ):
        done = _forkserver.run(
            [*command, f"--input={given}", f"--output={output}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr[-3000:]
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, done.stderr[-3000:]
        refused = r"--output would overwrite the --input file \S*(reviews|link)\.csv"
        assert re.search(refused, lines[0]), lines[0]
        assert "tensorflow" not in done.stderr.lower()
        assert (tmp_path / "reviews.csv").read_bytes() == texts
        assert (tmp_path / "link.csv").is_symlink()
