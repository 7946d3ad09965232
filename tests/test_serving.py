"""The SavedModel signatures: generate, classify, and serving without tf_mlstm."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from _models import random_model
from _models import tiny_trained_model_dir
from tf_mlstm.cli import export as export_cli
from tf_mlstm.data.text import DOC_START
from tf_mlstm.data.text import normalize_text
from tf_mlstm.export import saved_model
from tf_mlstm.models import sampling
from tf_mlstm.transfer import features
from tf_mlstm.transfer import logistic

TEXTS = [
    "A wonderful, moving film.<br /><br />Loved it.",
    "Boring and far too long. " * 20,
    "caf\u00e9 \u2014 meh &amp; worse",
]


@pytest.fixture(scope="module")
def small_model():
    return random_model(seed=5)


def _fit_classifier(model, texts, labels):
    featurized = features.TextFeaturizer(model, batch_size=8)(texts)
    x = features.concat_features(featurized, ("max", "cell_min"))
    classifier, _ = logistic.fit_logistic(
        x, labels, x, labels, ("max", "cell_min"), model.hidden_size
    )
    return classifier


def test_left_aligned_prompts_end_in_the_state_of_each_prompt_alone(small_model):
    prompts = tf.constant(["hi", "", "a longer prompt"])
    ids = saved_model.left_aligned_ids(prompts).numpy()
    assert ids.shape == (3, 16)
    assert ids[1].tolist() == [DOC_START] * 16
    assert bytes(ids[0, -3:].tolist()) == b"\nhi" and set(ids[0, :-3]) == {DOC_START}
    _, (h, c) = small_model.encode(ids, training=False, return_sequences=False)
    for row, prompt in enumerate(["hi", "", "a longer prompt"]):
        alone = np.array([[DOC_START] + list(prompt.encode())])
        _, (h1, c1) = small_model.encode(alone, training=False, return_sequences=False)
        np.testing.assert_allclose(h[row], h1[0], atol=1e-6)
        np.testing.assert_allclose(c[row], c1[0], atol=1e-6)


def test_generated_text_stops_at_the_end_of_the_review():
    ids = tf.constant([[72, 105, DOC_START, 65], [0xC3, 0xA9, 0xC3, sampling.PAD_ID]])
    text = saved_model.generated_text(ids).numpy()
    assert text[0] == b"Hi"
    assert text[1].decode("utf-8") == "\u00e9\ufffd"


def test_generate_signature_matches_sample_text(small_model):
    module = saved_model.ServingModule(small_model)
    assert "classify" not in module.signatures()
    args = (tf.constant(40), tf.constant(0.8), tf.constant(11, tf.int64))
    out = module.generate(tf.constant(["Great"]), *args)["text"].numpy()
    want = sampling.sample_text(small_model, "Great", 40, 0.8, seed=11, stop_at_doc_end=True)
    assert out[0].decode("utf-8") == want
    again = module.generate(tf.constant(["Great", "Awful film"]), *args)["text"].numpy()
    assert again.shape == (2,) and again[0] == out[0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="temperature must be > 0"):
        module.generate(tf.constant(["x"]), tf.constant(5), tf.constant(0.0), args[2])


@pytest.mark.slow
def test_classify_signature_matches_the_python_classifier(small_model):
    texts = [normalize_text(t) for t in TEXTS] * 2
    classifier = _fit_classifier(small_model, texts, np.array([1, 0, 0, 1, 0, 1]))
    module = saved_model.ServingModule(small_model, classifier=classifier.serving_head())
    assert sorted(module.signatures()) == [
        "classify",
        "featurize",
        "generate",
        "score",
        "serving_default",
    ]
    out = module.classify(tf.constant(TEXTS))
    x = features.concat_features(
        features.TextFeaturizer(small_model)(texts[:3]), ("max", "cell_min")
    )
    np.testing.assert_allclose(out["probability"], classifier.predict_proba(x), atol=1e-5)
    np.testing.assert_array_equal(out["label"], classifier.predict(x))
    np.testing.assert_allclose(out["neuron"], x[:, classifier.neuron.index], atol=1e-6)


def test_classifier_head_must_fit_the_model(small_model):
    head = saved_model.ClassifierHead(("cell",), np.zeros(8), np.ones(8), np.zeros(8), 0.0)
    with pytest.raises(ValueError, match="mean has shape \\(8,\\), but a 16-unit model"):
        saved_model.ServingModule(small_model, classifier=head)
    head = saved_model.ClassifierHead(("last",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
    with pytest.raises(ValueError, match="feature kinds \\['last'\\]"):
        saved_model.ServingModule(small_model, classifier=head)


# Runs in a fresh interpreter that imports only TensorFlow (and TensorFlow
# Text, whose NormalizeUTF8 op the graph uses): what a serving process has.
_SERVE = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    export_dir, texts = sys.argv[1], json.loads(sys.argv[2])
    try:
        tf.saved_model.load(export_dir)
        needs_text_ops = False
    except Exception as e:  # the op is unknown until tensorflow_text registers it
        needs_text_ops = "NormalizeUTF8" in str(e)
    import tensorflow_text  # noqa: F401
    loaded = tf.saved_model.load(export_dir)
    sig = loaded.signatures
    text = tf.constant(texts)
    feats = sig["featurize"](text=text)
    score = sig["score"](text=text)
    classify = sig["classify"](text=text)
    generate = sig["generate"](
        prompt=tf.constant(["This movie", ""]),
        length=tf.constant(30),
        temperature=tf.constant(1.0),
        seed=tf.constant(3, tf.int64),
    )
    print(json.dumps({
        "signatures": sorted(sig),
        "needs_text_ops": needs_text_ops,
        "imported_tf_mlstm": any(m.startswith("tf_mlstm") for m in sys.modules),
        "featurize": {k: v.numpy().tolist() for k, v in feats.items()},
        "bits_per_char": score["bits_per_char"].numpy().tolist(),
        "chars": score["chars"].numpy().tolist(),
        "probability": classify["probability"].numpy().tolist(),
        "label": classify["label"].numpy().tolist(),
        "neuron": classify["neuron"].numpy().tolist(),
        "generated": [t.decode("utf-8") for t in generate["text"].numpy()],
    }))
    """)


@pytest.mark.slow
def test_saved_model_serves_in_a_fresh_process(tmp_path_factory, tmp_path):
    model_dir = tiny_trained_model_dir(tmp_path_factory)
    model, _ = saved_model.load_trained_model(str(model_dir))
    texts = [normalize_text(t) for t in TEXTS] * 2
    classifier = _fit_classifier(model, texts, np.array([1, 0, 0, 1, 0, 1]))
    classifier.save(str(tmp_path / "classifier.json"))
    export_dir = str(tmp_path / "export" / "1")
    signatures = export_cli.export(
        export_cli.ExportConfig(str(model_dir), export_dir, str(tmp_path / "classifier.json"))
    )
    assert signatures == ["classify", "featurize", "generate", "score", "serving_default"]
    meta = json.loads((tmp_path / "export" / "1" / "assets.extra" / "meta.json").read_text())
    assert meta["classifier"]["feature_kinds"] == ["max", "cell_min"]

    done = subprocess.run(
        [sys.executable, "-c", _SERVE, export_dir, json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=""),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    served = json.loads(done.stdout.strip().splitlines()[-1])
    assert served["signatures"] == signatures
    assert not served["imported_tf_mlstm"]
    print("SavedModel needs tensorflow_text ops:", served["needs_text_ops"])

    hidden = model.hidden_size
    ours = features.TextFeaturizer(model)(texts[:3])
    for kind in features.FEATURE_KINDS:
        assert np.shape(served["featurize"][kind]) == (3, hidden)
        np.testing.assert_allclose(served["featurize"][kind], ours[kind], atol=1e-5)
    bits = np.array(served["bits_per_char"])
    assert bits.shape == (3,) and np.all((bits > 0) & (bits < 9))
    assert served["chars"] == [float(len(t.encode("utf-8"))) for t in texts[:3]]
    x = features.concat_features(ours, classifier.feature_kinds)
    np.testing.assert_allclose(served["probability"], classifier.predict_proba(x), atol=1e-5)
    assert served["label"] == classifier.predict(x).tolist()
    np.testing.assert_allclose(served["neuron"], x[:, classifier.neuron.index], atol=1e-5)
    assert len(served["generated"]) == 2
    assert all(len(t.encode("utf-8")) <= 30 * 3 for t in served["generated"])
    want = sampling.sample_text(model, "This movie", 30, 1.0, seed=3, stop_at_doc_end=True)
    assert served["generated"][0] == want
