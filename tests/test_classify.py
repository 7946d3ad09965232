"""tf-mlstm-classify: reading texts from stdin, with bad lines skipped and counted."""

import csv
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
    model_dir, model = write_untrained_model_dir(tmp_path / "m")
    texts = [normalize_text(t) for t in TEXTS] * 3
    x = features.concat_features(features.TextFeaturizer(model)(texts), ("cell",))
    labels = np.array([1, 0, 1, 0] * 3)
    classifier, _ = logistic.fit_logistic(x, labels, x, labels, ("cell",), model.hidden_size)
    classifier.save(str(tmp_path / "classifier.json"))

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
