"""Batch classification with RunInference (`tf-mlstm-classify-beam`) against tf-mlstm-classify.

A small model and a fitted classifier are exported as a SavedModel; the
pipeline applies its `classify` signature to two input files (in this
process, and on two local worker processes) and every row, joined back by
its file and line, must carry the numbers the single-process
`tf-mlstm-classify` gives the same text. A file that cannot be read ends
the run with one error line naming it, and no output.
"""

import gzip
import json
import os
import socket
import sys

import numpy as np
import pytest

from _models import run

pytest.importorskip(
    "apache_beam",
    reason="Apache Beam is not installed: the [beam] extra (pip install -e '.[dev,beam]')",
)

from _models import write_untrained_model_dir  # noqa: E402
from tf_mlstm import errors  # noqa: E402
from tf_mlstm.beam import inference  # noqa: E402
from tf_mlstm.cli import classify as classify_cli  # noqa: E402
from tf_mlstm.cli import classify_beam  # noqa: E402
from tf_mlstm.cli import export as export_cli  # noqa: E402
from tf_mlstm.data import readers  # noqa: E402
from tf_mlstm.data.text import normalize_text  # noqa: E402
from tf_mlstm.transfer import features  # noqa: E402
from tf_mlstm.transfer.probe import fit as fit_lib  # noqa: E402

TEXTS = ["A wonderful, moving film.", "Boring and far too long.", "Great.", "Dull, dull."]
TWO_WORKERS = ("--direct_num_workers=2", "--direct_running_mode=multi_processing")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(model_dir, classifier.json, SavedModel folder, the two input files, the model)."""
    tmp_path = tmp_path_factory.mktemp("beam_inference")
    model_dir, model = write_untrained_model_dir(tmp_path / "m")
    texts = [normalize_text(t) for t in TEXTS] * 3
    x = features.concat_features(features.TextFeaturizer(model)(texts), ("cell",))
    fitted, _ = fit_lib.fit_logistic(
        x, np.array([1, 0, 1, 0] * 3), x, np.array([1, 0, 1, 0] * 3), ("cell",), 16
    )
    classifier = str(tmp_path / "classifier.json")
    fitted.save(classifier)
    done = export_cli.export(
        export_cli.ExportConfig(str(model_dir), str(tmp_path / "export"), classifier)
    )
    jsonl = tmp_path / "reviews.jsonl"
    lines = [json.dumps({"text": f"{TEXTS[i % 4]} Take {i}."}) for i in range(30)]
    lines[4] = '{"text": "cut'  # skipped: malformed_json
    jsonl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    csv_path = tmp_path / "more.csv"
    csv_path.write_text(
        "sentence\n" + "".join(f'"{TEXTS[i % 4]}, once more ({i})"\n' for i in range(17)),
        encoding="utf-8",
    )
    return str(model_dir), classifier, done["export_dir"], [str(jsonl), str(csv_path)], model


def _single_process(model_dir, classifier, inputs):
    """{(file, line): (probabilities, label)} from tf-mlstm-classify's library path."""
    found = {}
    for path in inputs:
        config = classify_cli.ClassifyConfig(
            model_dir, classifier, path, "-", text_key=("text", "sentence")
        ).validate()
        lines, probabilities, labels, _ = classify_cli.classify(config)
        for line, row, label in zip(lines, probabilities, labels):
            found[(path, line)] = (row, label)
    return found


def _rows(prefix):
    folder = os.path.dirname(prefix)
    rows = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith(os.path.basename(prefix)) and name.endswith(".jsonl"):
            for line in open(os.path.join(folder, name), encoding="utf-8"):
                row = json.loads(line)
                assert (row["input"], row["line"]) not in rows
                rows[(row["input"], row["line"])] = row
    return rows


def _assert_same_numbers(rows, single):
    assert sorted(rows) == sorted(single)
    for key, (probabilities, label) in single.items():
        row = rows[key]
        np.testing.assert_allclose(row["probabilities"], probabilities, atol=1e-5, err_msg=key)
        np.testing.assert_allclose(row["probability"], probabilities[1], atol=1e-5)
        assert row["label"] == label and row["classes"] == ["0", "1"], key


def test_runinference_gives_the_numbers_of_tf_mlstm_classify(exported, tmp_path):
    model_dir, classifier, export_dir, inputs, _ = exported
    single = _single_process(model_dir, classifier, inputs)
    assert len(single) == 29 + 17
    prefix = str(tmp_path / "out" / "scores")
    done = inference.classify_with_beam(
        export_dir,
        ",".join(inputs),
        prefix,
        "DirectRunner",
        text_keys=("text", "sentence"),
        batch_size=8,
        num_shards=3,
    )
    assert done["texts"] == 46 and done["skipped"] == {"malformed_json": 1}
    assert [os.path.basename(path) for path in done["outputs"]] == [
        f"scores-0000{i}-of-00003.jsonl" for i in range(3)
    ]
    _assert_same_numbers(_rows(prefix), single)


def test_two_local_workers_and_the_featurize_signature(exported, tmp_path):
    _, _, export_dir, inputs, model = exported
    prefix = str(tmp_path / "out" / "features")
    args = ["--saved_model", export_dir, f"--input={','.join(inputs)}", f"--output={prefix}"]
    result = run(
        [sys.executable, "-m", "tf_mlstm.cli.classify_beam", *args, "--signature=featurize"]
        + ["--text_key=text,sentence", "--runner=DirectRunner", *TWO_WORKERS],
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["texts"] == 46
    rows = _rows(prefix)
    assert len(rows) == 46
    assert {"input", "line", "cell", "hidden", "mean", "max"} <= set(rows[(inputs[0], 1)])
    # The cell state is the classifier's feature: the single-process featurizer's numbers.
    texts = [normalize_text(f"{TEXTS[i % 4]} Take {i}.") for i in (0, 1, 29)]
    want = features.TextFeaturizer(model)(texts)["cell"]
    got = [rows[(inputs[0], line)]["cell"] for line in (1, 2, 30)]
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_the_binary_passes_beam_flags_and_refuses_unknown_ones(tmp_path):
    kept, beam = classify_beam.split_pipeline_args(
        ["x", "--saved_model=s", "--input=i", "--output=o", "--runner=FlinkRunner"]
        + ["--flink_master=localhost:8081", "--signature=featurize"]
    )
    assert beam == ["--flink_master=localhost:8081"] and "--signature=featurize" in kept
    # Paths that pass the checks before work (tf_mlstm/preflight.py), which come first.
    saved_model, texts = tmp_path / "s", tmp_path / "i.jsonl"
    saved_model.mkdir()
    (saved_model / "saved_model.pb").write_bytes(b"pb")
    texts.write_text('{"text": "Fine."}\n', encoding="utf-8")
    result = run(
        [sys.executable, "-m", "tf_mlstm.cli.classify_beam", f"--saved_model={saved_model}"]
        + [f"--input={texts}", f"--output={tmp_path / 'o'}", "--runner=DirectRunner"]
        + ["--batch=3"],
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "tf-mlstm-classify-beam: unknown flag --batch: neither a flag of this binary nor a "
        "Beam pipeline option (--help lists the flags)"
    )


def _last_line(stderr):
    return [line for line in stderr.splitlines() if line.strip()][-1]


@pytest.mark.parametrize("workers", [(), TWO_WORKERS], ids=["in_process", "two_workers"])
def test_a_corrupt_input_is_one_error_line_and_no_output(exported, tmp_path, workers):
    _, _, export_dir, inputs, _ = exported
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"text": "Fine."}\n' * 500)[:-20])
    out = tmp_path / "out"
    out.mkdir()
    # An earlier run's output of the very name this run would write.
    earlier = out / "scores-00000-of-00001.jsonl"
    earlier.write_bytes(b'{"input": "earlier", "line": 1}\n')
    # What a killed run left: its staging folder, named by its host and (ended) pid.
    ended = run([sys.executable, "-c", "import os; print(os.getpid())"], timeout=60)
    killed = out / f".tmp-scores-{socket.gethostname()}.{int(ended.stdout)}.0123456789abcdef"
    (killed / "failed").mkdir(parents=True)
    result = run(
        [sys.executable, "-m", "tf_mlstm.cli.classify_beam", f"--saved_model={export_dir}"]
        + [f"--input={inputs[0]},{broken},{inputs[1]}", f"--output={out / 'scores'}"]
        + ["--text_key=text,sentence", "--num_output_shards=1", "--runner=DirectRunner"]
        + ["--overwrite"]  # past the rerun rule, to the broken input
        + list(workers),
        timeout=240,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = _last_line(result.stderr)
    assert " _main.py:" in last, result.stderr[-3000:]  # absl's error line of the binary
    assert last.split("] ", 1)[1] == (
        f"{broken}: truncated or corrupt gzip file (Compressed file ended before the "
        "end-of-stream marker was reached) (1 of 3 input files could not be read; nothing "
        f"was written to {out / 'scores'}-*.jsonl)"
    )
    # No shard of this run, no staging left; the earlier output byte for byte.
    assert os.listdir(out) == [earlier.name]
    assert earlier.read_bytes() == b'{"input": "earlier", "line": 1}\n'


@pytest.mark.slow
def test_an_output_prefix_naming_a_folder_names_the_argument_or_the_flag(tmp_path):
    # A Python caller reads the argument's name; a binary's user, the flag's.
    folder = f"{tmp_path}/"
    with pytest.raises(ValueError, match=r"^output '.*' names a folder; give a prefix"):
        inference.classify_with_beam("unused", "unused.csv", folder, "DirectRunner")
    with errors.naming_flags(), pytest.raises(ValueError, match=r"^--output '.*' names a folder"):
        inference.classify_with_beam("unused", "unused.csv", folder, "DirectRunner")


def test_an_output_over_an_input_is_one_line_before_the_pipeline(tmp_path):
    earlier = tmp_path / "scores-00000-of-00001.jsonl"
    earlier.write_bytes(b'{"text": "a text to classify"}\n')
    (tmp_path / "saved_model.pb").write_bytes(b"pb")  # passes the checks before work
    result = run(
        [sys.executable, "-m", "tf_mlstm.cli.classify_beam", f"--saved_model={tmp_path}"]
        + [f"--input={tmp_path / '*.jsonl'}", f"--output={tmp_path / 'scores'}"]
        + ["--runner=DirectRunner"],
        timeout=120,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"tf-mlstm-classify-beam: --output would overwrite the --input file {earlier}; write the "
        "output to another file (--help lists the flags)"
    ]
    assert earlier.read_bytes() == b'{"text": "a text to classify"}\n'


def test_files_without_the_text_column_fail_naming_the_first(exported, tmp_path):
    _, _, export_dir, inputs, _ = exported
    untitled = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for path in untitled:
        path.write_text("label,body\n1,Fine.\n", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(readers.InputError) as failed:
        inference.classify_with_beam(
            export_dir,
            ",".join([inputs[1], *map(str, untitled)]),
            str(out / "scores"),
            "DirectRunner",
            text_keys=("text", "sentence"),
        )
    assert str(failed.value) == (
        f"{untitled[0]}: no text column: none of ['text', 'sentence'] in its header, which has "
        f"the columns ['label', 'body'] (2 of 3 input files could not be read; nothing was "
        f"written to {out / 'scores'}-*.jsonl)"
    )
    assert os.listdir(out) == []


def test_a_missing_saved_model_is_one_line_before_the_pipeline(exported, tmp_path):
    _, _, export_dir, inputs, _ = exported
    with pytest.raises(FileNotFoundError, match="no SavedModel there"):
        inference.classify_with_beam(
            str(tmp_path / "nothing"), inputs[0], str(tmp_path / "o" / "s"), "DirectRunner"
        )
    with pytest.raises(ValueError, match=r"has no 'summarize' signature \(it has \['classify', "):
        inference.check_saved_model(export_dir, "summarize")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "saved_model.pb").write_bytes(b"not a protocol buffer")
    with pytest.raises(ValueError, match=r"saved_model.pb: not a readable SavedModel"):
        inference.check_saved_model(str(damaged), "classify")
    assert not (tmp_path / "o").exists()
