"""Tests for the progress of long jobs and for the jobs that report it."""

import io
import logging

import pytest
import tensorflow as tf

from _models import random_model
from _models import write_untrained_model_dir
from tf_mlstm import progress
from tf_mlstm.config import ConvertConfig
from tf_mlstm.data import convert
from tf_mlstm.data import pipeline
from tf_mlstm.data import tfrecord
from tf_mlstm.progress import Progress
from tf_mlstm.progress import format_duration
from tf_mlstm.train import evaluation
from tf_mlstm.transfer import features


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def _lines(caplog, start):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


# === The helper ===


def test_format_duration():
    assert format_duration(0) == "0:00"
    assert format_duration(70.9) == "1:10"
    assert format_duration(3 * 3600 + 62) == "3:01:02"
    assert format_duration(-5) == "0:00"


def test_terminal_mode_redraws_one_line_and_ends_it():
    clock, stream = FakeClock(), io.StringIO()
    progress = Progress("Working", 100, "texts", stream=stream, terminal=True, clock=clock)
    clock.now += 0.1
    progress.update(10)
    assert stream.getvalue() == ""  # Too soon to redraw.
    clock.now += 0.15
    progress.update(25, files=12345)
    first = stream.getvalue()
    assert first.startswith("\r[=======.......................] Working: 25/100 texts (25%)")
    assert "100 texts/s, 0:00 left; 12,345 files" in first and "\n" not in first
    clock.now += 0.25
    progress.update(50, files=2)  # A shorter line: blanks are drawn over the rest.
    second = stream.getvalue()[len(first) :]
    assert second.startswith("\r[===============...............] Working: 50/100 texts (50%)")
    assert len(second) == len(first)
    progress.close()
    progress.close()  # Once only.
    final = stream.getvalue()[len(first) + len(second) :]
    assert final.startswith(f"\r[{'=' * 15}{'.' * 15}] Working: 50/100 texts (50%), in 0:00")
    assert final.endswith("\n") and final.count("\n") == 1


def test_log_mode_logs_every_interval_with_done_total_rate_and_time_left(caplog):
    caplog.set_level(logging.INFO)
    clock, stream = FakeClock(), io.StringIO()
    with Progress(
        "Working", 100, "texts", log_interval_s=30, stream=stream, terminal=False, clock=clock
    ) as progress:
        for _ in range(6):
            clock.now += 10
            progress.advance(10)
    assert stream.getvalue() == ""  # Nothing drawn, only logged.
    assert _lines(caplog, "Working") == [
        "Working: 30/100 texts (30%), 1 texts/s, 1:10 left",
        "Working: 60/100 texts (60%), 1 texts/s, 0:40 left",
        "Working: 60/100 texts (60%), in 1:00, 1 texts/s",
    ]


def test_log_mode_scales_units_and_counts(caplog):
    caplog.set_level(logging.INFO)
    clock = FakeClock()
    progress = Progress(
        "Reading", 8e6, "MB", scale=1e6, log_interval_s=1, terminal=False, clock=clock
    )
    clock.now += 2
    progress.update(2e6, records=1500)
    assert _lines(caplog, "Reading") == [
        "Reading: 2.0/8.0 MB (25%), 1.0 MB/s, 0:06 left; 1,500 records"
    ]


def test_zero_and_unknown_totals(caplog):
    caplog.set_level(logging.INFO)
    clock, stream = FakeClock(), io.StringIO()
    Progress("Nothing", 0, "texts", stream=stream, terminal=True, clock=clock).close()
    assert stream.getvalue() == (f"\r[{'=' * 30}] Nothing: 0/0 texts (100%), in 0:00, 0 texts/s\n")
    unknown = Progress("Scoring", None, "chars", log_interval_s=1, terminal=False, clock=clock)
    clock.now += 4
    unknown.update(2000)
    unknown.close()
    assert _lines(caplog, "Scoring") == [
        "Scoring: 2,000 chars, 500 chars/s",
        "Scoring: 2,000 chars, in 0:04, 500 chars/s",
    ]


def test_disabled_reports_nothing(caplog):
    caplog.set_level(logging.INFO)
    stream = io.StringIO()
    for terminal in (True, False):
        with Progress("Quiet", 10, "texts", enabled=False, stream=stream, terminal=terminal) as p:
            p.update(10)
    assert stream.getvalue() == "" and not _lines(caplog, "Quiet")


def test_bad_arguments():
    with pytest.raises(ValueError, match="total must be >= 0, got -1"):
        Progress("Working", -1, "texts")
    with pytest.raises(ValueError, match="log_interval_s and scale must be positive"):
        Progress("Working", 1, "texts", log_interval_s=0)


def test_terminal_is_asked_of_the_stream():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert Progress("Working", 1, "texts", stream=Terminal()).terminal
    assert not Progress("Working", 1, "texts", stream=io.StringIO()).terminal


# === Its users ===


def _corpus(tmp_path, count=40):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"review number {i} of the corpus\n" for i in range(count)))
    return path


def test_conversion_reports_progress_in_input_bytes(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    corpus = _corpus(tmp_path)
    stats = convert.convert(
        ConvertConfig(
            input=str(corpus),
            output_dir=str(tmp_path / "out"),
            num_shards=1,
            progress_interval_s=1e-9,
        )
    )
    lines = _lines(caplog, "Converting:")
    assert len(lines) >= 2  # At least one along the way, and the final one.
    # A corpus under a megabyte is counted in kB (0.0/0.0 MB would say nothing).
    assert " kB (" in lines[0] and "kB/s" in lines[0] and " left; " in lines[0]
    size_kb = corpus.stat().st_size / 1e3
    assert lines[-1].startswith(f"Converting: {size_kb:.1f}/{size_kb:.1f} kB (100%), in ")
    assert lines[-1].endswith(f"; {stats['records']} records")


def test_byte_totals_are_shown_in_a_unit_that_moves():
    assert progress.byte_unit(1.2e3) == ("kB", 1e3)
    assert progress.byte_unit(999_999) == ("kB", 1e3)
    assert progress.byte_unit(1e6) == ("MB", 1e6)
    assert progress.byte_unit(4e10) == ("MB", 1e6)


def test_conversion_with_max_documents_counts_records(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    convert.convert(
        ConvertConfig(
            input=str(_corpus(tmp_path)),
            output_dir=str(tmp_path / "out"),
            num_shards=1,
            max_documents=7,
        )
    )
    assert _lines(caplog, "Converting:")[-1].startswith("Converting: 7/7 records (100%), in ")


def test_featurization_reports_progress_in_chars(caplog):
    caplog.set_level(logging.INFO)
    texts = ["a short one", "a somewhat longer text", ""]
    chars = sum(len(t) for t in texts)
    featurizer = features.TextFeaturizer(
        random_model(), batch_size=1, kinds=("cell",), progress_interval_s=1e-9
    )
    featurizer(texts)
    lines = _lines(caplog, "Featurizing:")
    assert len(lines) >= 2
    assert lines[-1].startswith(f"Featurizing: {chars}/{chars} chars (100%), in ")
    assert lines[-1].endswith("; 3/3 texts")
    caplog.clear()
    featurizer(texts, progress=False)
    assert not _lines(caplog, "Featurizing:")


def test_evaluation_reports_progress_against_the_expected_chars(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    out = tmp_path / "out"
    convert.convert(
        ConvertConfig(
            input=str(_corpus(tmp_path)),
            output_dir=str(out),
            num_shards=1,
            split=(1, 1, 1),
        )
    )
    files = tfrecord.split_files(str(out), "test")
    expected = evaluation.expected_chars(files, "test")
    rows = 2
    dataset = pipeline.window_dataset(pipeline.document_dataset(files), rows, 16, finite=True)
    result = evaluation.evaluate(random_model(), dataset, expected=expected, progress=True)
    # Each row's first byte is no target.
    assert expected - rows <= result["chars"] <= expected
    line = _lines(caplog, "Evaluating:")[-1]
    assert line.startswith(f"Evaluating: {result['chars']:,}/{expected:,} chars (")
    # No stats.json: the size is unknown.
    assert evaluation.expected_chars([str(tmp_path / "elsewhere" / "x.tfrecord")], "test") is None
    # Fewer batches than the data holds bound the total.
    capped = evaluation._progress_total(dataset, 1, expected)
    assert capped == rows * 16 < expected


def test_evaluation_of_raw_files_reports_the_bytes_read_against_their_size(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    corpus = _corpus(tmp_path)
    model_dir, _ = write_untrained_model_dir(tmp_path / "m")
    result = evaluation.evaluate_data(
        str(model_dir), str(corpus), ("text",), batch_size=2, seq_length=16
    )
    line = _lines(caplog, "Evaluating:")[-1]
    size = f"{corpus.stat().st_size / 1e3:.1f}"
    assert line.startswith(f"Evaluating: {size}/{size} kB (100%), in "), line
    assert line.endswith(f"; {result['chars']:,} chars"), line


def test_evaluation_is_quiet_unless_asked(caplog):
    caplog.set_level(logging.INFO)
    documents = tf.data.Dataset.from_tensor_slices(["some text", "more text"])
    dataset = pipeline.window_dataset(documents, 2, 8, finite=True)
    evaluation.evaluate(random_model(), dataset)
    assert not _lines(caplog, "Evaluating:")
