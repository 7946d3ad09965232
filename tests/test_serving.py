"""The SavedModel export and signatures: versioned safe export, serving limits, empty
requests, score against the library, and serving without tf_mlstm."""

import dataclasses
import json
import os
import pathlib
import re
import sys
import textwrap

import _forkserver
import numpy as np
import pytest
import tensorflow as tf

from _models import random_model
from _models import run_without_tf_mlstm
from _models import tiny_trained_model_dir
from _models import write_untrained_model_dir
from tf_mlstm import errors
from tf_mlstm.cli import export as export_cli
from tf_mlstm.data import framing
from tf_mlstm.data.text import DOC_START
from tf_mlstm.data.text import normalize_text
from tf_mlstm.models import language_model
from tf_mlstm.models import sampling
from tf_mlstm.models.head_arrays import ClassifierHead
from tf_mlstm.models.language_model import bits_per_char_from_logits
from tf_mlstm.rundir import CHECKPOINT_SUBDIR
from tf_mlstm.serving import saved_model
from tf_mlstm.serving import server_config
from tf_mlstm.train import evaluation
from tf_mlstm.transfer import features
from tf_mlstm.transfer import ngrams
from tf_mlstm.transfer.probe import fit as fit_lib
from tf_mlstm.transfer.probe import threshold as threshold_lib


def _tf_text_version():
    import tensorflow_text  # pylint: disable=import-outside-toplevel

    return tensorflow_text.__version__


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
    classifier, _ = fit_lib.fit_logistic(
        x, labels, x, labels, ("max", "cell_min"), model.hidden_size
    )
    return classifier


def test_left_aligned_prompts_end_in_the_state_of_each_prompt_alone(small_model):
    prompts = tf.constant(["hi", "", "a longer prompt"])
    ids = framing.frame_ids_tf(prompts, "left", pad_id=DOC_START).ids.numpy()
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
    module = saved_model.ServingModule(small_model, classifier=classifier.head)
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
    np.testing.assert_allclose(out["probabilities"], classifier.predict_proba(x), atol=1e-5)
    np.testing.assert_allclose(out["probability"], classifier.predict_proba(x)[:, 1], atol=1e-5)
    np.testing.assert_array_equal(out["label"], classifier.predict(x))
    assert out["classes"].numpy().tolist() == [[b"0", b"1"]] * 3
    np.testing.assert_allclose(out["neuron"], x[:, classifier.neuron.index], atol=1e-6)


@pytest.mark.slow
def test_classify_signature_serves_k_classes_and_several_labels(small_model):
    texts = [normalize_text(t) for t in TEXTS] * 4
    x = features.concat_features(features.TextFeaturizer(small_model)(texts), ("cell",))
    names = np.array(["neg", "mid", "pos"] * 4, object)  # one class per text of TEXTS
    three, _ = fit_lib.fit_logistic(x, names, x, names, ("cell",), 16, penalty="l2")
    several = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]] * 4)
    labels, _ = fit_lib.fit_logistic(
        x, several, x, several, ("cell",), 16, penalty="l2", classes=("a", "b", "c")
    )
    for classifier, predicted in ((three, "label"), (labels, "labels")):
        module = saved_model.ServingModule(small_model, classifier=classifier.head)
        out = module.classify(tf.constant(TEXTS))
        assert sorted(out) == sorted(["probabilities", "classes", predicted])
        want = classifier.predict_proba(x[:3])
        np.testing.assert_allclose(out["probabilities"], want, atol=1e-5)
        assert (
            out["classes"].numpy().tolist()
            == [[c.encode() for c in classifier.head.head_spec.classes]] * 3
        )
        got = out[predicted].numpy()
        if predicted == "label":
            got = got.astype(str)
        np.testing.assert_array_equal(got, classifier.predict(x[:3]))


def test_classifier_head_must_fit_the_model(small_model):
    head = ClassifierHead(("cell",), np.zeros(8), np.ones(8), np.zeros(8), 0.0)
    with pytest.raises(ValueError, match="mean has shape \\(8,\\), but a 16-unit model"):
        saved_model.ServingModule(small_model, classifier=head)
    head = ClassifierHead(("last",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
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
        "probabilities": classify["probabilities"].numpy().tolist(),
        "label": classify["label"].numpy().tolist(),
        "neuron": classify["neuron"].numpy().tolist(),
        "generated": [t.decode("utf-8") for t in generate["text"].numpy()],
    }))
    """)


@pytest.mark.slow
def test_saved_model_serves_in_a_fresh_process(tmp_path_factory, tmp_path):
    model_dir = tiny_trained_model_dir(tmp_path_factory)
    model = language_model.MLSTMLanguageModel.from_run(str(model_dir))
    texts = [normalize_text(t) for t in TEXTS] * 2
    classifier = _fit_classifier(model, texts, np.array([1, 0, 0, 1, 0, 1]))
    classifier.save(str(tmp_path / "classifier.json"))
    done = export_cli.export(
        export_cli.ExportConfig(
            str(model_dir), str(tmp_path / "export"), str(tmp_path / "classifier.json")
        )
    )
    signatures = done["signatures"]
    assert signatures == ["classify", "featurize", "generate", "score", "serving_default"]
    # The trained run ended at step 20: that is the version.
    export_dir = done["export_dir"]
    assert export_dir == str(tmp_path / "export" / "20")
    meta = json.loads((tmp_path / "export" / "20" / "assets.extra" / "meta.json").read_text())
    assert meta["classifier"]["feature_kinds"] == ["max", "cell_min"]

    served = run_without_tf_mlstm(_SERVE, [export_dir, json.dumps(TEXTS)], tmp_path)
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
    x = features.concat_features(ours, classifier.head.feature_kinds)
    np.testing.assert_allclose(served["probabilities"], classifier.predict_proba(x), atol=1e-5)
    np.testing.assert_allclose(served["probability"], classifier.predict_proba(x)[:, 1], atol=1e-5)
    assert served["label"] == classifier.predict(x).tolist()
    np.testing.assert_allclose(served["neuron"], x[:, classifier.neuron.index], atol=1e-5)
    assert len(served["generated"]) == 2
    assert all(len(t.encode("utf-8")) <= 30 * 3 for t in served["generated"])
    want = sampling.sample_text(model, "This movie", 30, 1.0, seed=3, stop_at_doc_end=True)
    assert served["generated"][0] == want


def _model_dir_at_step(model_dir, step):
    """An untrained model folder whose newest checkpoint is at global `step`."""
    model_dir, model = write_untrained_model_dir(model_dir)
    checkpoint = tf.train.Checkpoint(model=model, step=tf.Variable(step, dtype=tf.int64))
    manager = tf.train.CheckpointManager(checkpoint, str(model_dir / CHECKPOINT_SUBDIR), 5)
    manager.save(checkpoint_number=step)
    return model_dir, model


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_an_export_computes_in_float32_unless_asked(tmp_path, monkeypatch):
    """Whatever precision the classifier's features were fitted in: the export is for
    servers, and float32 is what every CPU runs at speed (bfloat16 is emulated where the
    CPU has no units for it); --precision asks for another."""
    model_dir, model = write_untrained_model_dir(tmp_path / "run")
    texts = [normalize_text(t) for t in TEXTS] * 2
    classifier = _fit_classifier(model, texts, np.array([1, 0, 0, 1, 0, 1]))
    classifier.fitted_on(precision="mixed_bfloat16").save(str(tmp_path / "classifier.json"))
    asked = []

    def recording(*args, precision, **kwargs):
        asked.append(precision)
        return {}

    monkeypatch.setattr(saved_model, "export_trained_model", recording)
    for precision in (None, "mixed_bfloat16"):
        config = export_cli.ExportConfig(
            str(model_dir), str(tmp_path / "export"), str(tmp_path / "classifier.json")
        )
        export_cli.export(dataclasses.replace(config, precision=precision))
    assert asked == ["float32", "mixed_bfloat16"]


def test_export_never_touches_a_folder_it_did_not_write(tmp_path):
    model_dir, _ = _model_dir_at_step(tmp_path / "run", 42)
    before = _tree(tmp_path)
    for target in (model_dir, tmp_path, model_dir / CHECKPOINT_SUBDIR):
        # As the binary runs it (errors.naming_flags): the refusal names the flag.
        with pytest.raises(ValueError, match="not a tf-mlstm-export SavedModel") as error:
            with errors.naming_flags():
                export_cli.export(export_cli.ExportConfig(str(model_dir), str(target)))
        assert str(error.value).startswith(f"--export_dir={target}: ")
        assert "\n" not in str(error.value)
    assert _tree(tmp_path) == before

    # Versioned by the checkpoint's global step, written beside and renamed in.
    base = tmp_path / "serving"
    done = export_cli.export(export_cli.ExportConfig(str(model_dir), str(base), max_text_bytes=64))
    assert done["version"] == 42 and done["export_dir"] == str(base / "42")
    assert os.listdir(base) == ["42"]
    assert (base / "42" / "saved_model.pb").exists()
    meta = json.loads((base / "42" / "assets.extra" / "meta.json").read_text())
    assert meta["version"] == 42 and meta["serving_default"] == "featurize"
    # It describes itself: what a server installs, its config as JSON, no path of this machine.
    assert meta["requires"] == {"tensorflow": tf.__version__, "tensorflow-text": _tf_text_version()}
    assert meta["config"]["hidden_size"] == 16 and meta["config"]["model_dir"] == "run"
    assert str(tmp_path) not in json.dumps(meta)
    assert meta["limits"] == {
        "max_generate_length": export_cli.ExportConfig("", "").max_generate_length,
        "max_text_bytes": 64,
    }
    # Its own export is recognized: exporting again replaces version 42.
    (base / "42" / "stale").write_text("")
    export_cli.export(export_cli.ExportConfig(str(model_dir), str(base)))
    assert os.listdir(base) == ["42"] and not (base / "42" / "stale").exists()
    # Anything else in the base folder is not touched.
    (base / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="serving: holds 'notes.txt', not a tf-mlstm-export"):
        export_cli.export(export_cli.ExportConfig(str(model_dir), str(base)))
    assert (base / "notes.txt").read_text() == "mine" and (base / "42" / "saved_model.pb").exists()
    # A version folder given as the folder of versions (the old layout) is refused too.
    with pytest.raises(ValueError, match="42: is itself a tf-mlstm-export SavedModel"):
        export_cli.export(export_cli.ExportConfig(str(model_dir), str(base / "42")))
    assert (base / "42" / "saved_model.pb").exists()


def test_export_binary_refuses_the_current_folder_with_one_line(tmp_path):
    model_dir, _ = write_untrained_model_dir(tmp_path / "run")
    before = _tree(tmp_path)
    done = _forkserver.run(
        [sys.executable, "-m", "tf_mlstm.cli.export", f"--model_dir={model_dir}", "--export_dir=."],
        capture_output=True,
        text=True,
        cwd=str(model_dir),
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line[:1] == "E" and line[:5] != "E0000"]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "--export_dir=.: holds 'checkpoints', not a tf-mlstm-export SavedModel" in errors[0]
    assert _tree(tmp_path) == before


def test_export_flags_must_be_positive():
    defaults = export_cli.ExportConfig("m", "e")
    assert defaults.max_text_bytes == saved_model.DEFAULT_MAX_TEXT_BYTES
    assert defaults.max_generate_length == saved_model.DEFAULT_MAX_GENERATE_LENGTH
    with pytest.raises(ValueError, match="max_text_bytes must be positive, got 0"):
        export_cli.ExportConfig("m", "e", max_text_bytes=0).validate()
    with pytest.raises(ValueError, match="max_generate_length must be positive, got -1"):
        export_cli.ExportConfig("m", "e", max_generate_length=-1).validate()


def test_serving_default_is_what_the_export_is_for(small_model):
    """A client that names no signature gets `classify` from an export with a classifier."""
    plain = saved_model.ServingModule(small_model)
    assert plain.default_signature == "featurize"
    assert plain.signatures()["serving_default"] is plain.featurize
    head = ClassifierHead(("cell",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
    with_head = saved_model.ServingModule(small_model, classifier=head)
    assert with_head.default_signature == "classify"
    assert with_head.signatures()["serving_default"] is with_head.classify


def test_a_request_of_another_shape_names_the_input_and_the_shape_expected(small_model):
    head = ClassifierHead(("cell",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
    module = saved_model.ServingModule(small_model, classifier=head)
    for name in ("featurize", "score", "classify"):
        for text in (tf.constant("one text"), tf.constant([["a", "b"]])):
            with pytest.raises(
                tf.errors.InvalidArgumentError,
                match=rf"{name}: `text` must be a batch of strings of shape \[N\]",
            ):
                getattr(module, name)(text)
    assert module.classify(tf.constant(["a", "b"]))["probabilities"].shape == (2, 2)


def test_bytes_that_are_not_utf8_text_fail_the_request_naming_the_index(small_model):
    head = ClassifierHead(("cell",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
    module = saved_model.ServingModule(small_model, classifier=head)
    texts = tf.constant(["fine", "caf\u00e9 \ufffd ok".encode(), b"\xff\xfe bad \xc3\x28 bytes"])
    for name in ("featurize", "score", "classify"):
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=rf"{name}: `text` holds bytes that are not UTF-8 text, at index\] \[2\]",
        ):
            getattr(module, name)(texts)
    with pytest.raises(tf.errors.InvalidArgumentError, match="generate: `prompt` holds bytes"):
        module.generate(texts[2:], tf.constant(2), tf.constant(1.0), tf.constant(1, tf.int64))
    # Valid UTF-8, U+FFFD included, is served.
    assert module.classify(texts[:2])["probabilities"].shape == (2, 2)


def test_the_export_s_warmup_records_are_one_request_per_signature_that_each_serves(
    small_model, tmp_path
):
    """TensorFlow Serving runs assets.extra/tf_serving_warmup_requests as it loads a version:
    read back, they are one PredictionLog per signature, within the export's limits, and
    each request's inputs run through the loaded SavedModel's signature."""
    from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top

    head = ClassifierHead(("cell",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
    module = saved_model.ServingModule(
        small_model, classifier=head, max_text_bytes=8, max_generate_length=4
    )
    export_dir = saved_model.export_saved_model(module, str(tmp_path / "export"), 3)
    path = os.path.join(export_dir, saved_model.WARMUP_FILE)
    logs = []
    for record in tf.data.TFRecordDataset(path):
        logs.append(prediction_log_pb2.PredictionLog.FromString(record.numpy()))
    names = [log.predict_log.request.model_spec.signature_name for log in logs]
    assert names == sorted(module.signatures()) and len(logs) <= 1000
    loaded = tf.saved_model.load(export_dir)
    for name, log in zip(names, logs):
        request = log.predict_log.request
        inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
        outputs = loaded.signatures[name](**inputs)
        assert all(value.shape[:1] == (1,) for value in outputs.values()), name
    assert tf.make_ndarray(logs[0].predict_log.request.inputs["text"]).tolist() == [b"Great."]


def test_the_export_writes_the_server_s_batching_measured_here_and_a_model_config(
    small_model, tmp_path
):
    """Beside the SavedModel: TensorFlow Serving's batching parameters, chosen from rates
    timed on this machine (recorded in meta.json), and a model config entry for a
    multi-model server, each parsed back in its server's format."""
    from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.config import model_server_config_pb2  # pylint: disable=g-import-not-at-top

    module = saved_model.ServingModule(small_model, window=32)
    export_dir = saved_model.export_saved_model(module, str(tmp_path / "reviews"), 3)
    config = text_format.Parse(
        pathlib.Path(export_dir, server_config.MODEL_CONFIG_FILE).read_text(),
        model_server_config_pb2.ModelServerConfig(),
    )
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == (
        "reviews",
        "/models/reviews",
        "tensorflow",
    )
    text = pathlib.Path(export_dir, server_config.BATCHING_FILE).read_text()
    values = dict(re.findall(r"^(\w+) \{ value: (\d+) \}$", text, re.MULTILINE))
    allowed = [int(size) for size in re.findall(r"^allowed_batch_sizes: (\d+)$", text, re.M)]
    assert set(values) == {
        "max_batch_size",
        "batch_timeout_micros",
        "num_batch_threads",
        "max_enqueued_batches",
    }
    assert len(text.splitlines()) == len(values) + len(allowed)
    record = json.loads(pathlib.Path(export_dir, saved_model.META_FILE).read_text())["batching"]
    assert int(values["max_batch_size"]) == record["max_batch_size"] == allowed[-1]
    assert allowed == [4**i for i in range(len(allowed))]
    assert int(values["num_batch_threads"]) == os.cpu_count()
    assert 100 <= int(values["batch_timeout_micros"]) <= 100_000
    assert record["text_bytes"] == 32 and set(record["texts_per_second"]) >= {"1", "4"}


def test_the_batch_size_is_the_smallest_near_the_best_rate():
    now = [0.0]

    def call(size):  # a fixed cost per call up to 5 texts, then 2 ms a text
        now[0] += max(0.01, 0.002 * size)

    batching = server_config.measure_batching(call, 256, threads=3, clock=lambda: now[0])
    rates = {1: 100.0, 4: 400.0, 16: 500.0, 64: 500.0}
    assert batching.texts_per_second == pytest.approx(rates)
    assert batching.max_batch_size == 16 and batching.allowed_batch_sizes == (1, 4, 16)
    assert batching.batch_timeout_micros == 3200  # a tenth of a batch of 16's 32 ms
    assert (batching.num_batch_threads, batching.max_enqueued_batches) == (3, 3)
    now[0] = 0.0
    short = server_config.measure_batching(call, 256, budget_s=0.1, clock=lambda: now[0])
    assert max(short.texts_per_second) == 16  # past 0.1 s once 16 is measured


def _documented_requests():
    """[(signature name, request body)] of every REST request docs/serving.md shows (curl -d)."""
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "serving.md").read_text()
    bodies = [json.loads(body) for body in re.findall(r"curl -d '(.*?)'", text, re.DOTALL)]
    return [(body.get("signature_name", "serving_default"), body) for body in bodies]


def _as_tensorflow_serving_feeds(signature, body):
    """A REST body's inputs as TensorFlow Serving gives them to `signature`: the row format
    (`instances`) stacked per input, the columnar (`inputs`) as they are, each in its dtype."""
    specs = signature.structured_input_signature[1]
    if "instances" in body:
        rows = body["instances"]
        if all(not isinstance(row, dict) for row in rows):
            (name,) = specs  # a signature of one input takes bare values
            columns = {name: rows}
        else:
            columns = {name: [row[name] for row in rows] for name in specs}
    else:
        columns = body["inputs"]
    return {name: tf.constant(value, dtype=specs[name].dtype) for name, value in columns.items()}


def test_the_documented_rest_requests_are_served_by_their_signatures(small_model, tmp_path):
    """Each request body docs/serving.md shows, fed to the loaded SavedModel as TensorFlow
    Serving feeds it, is answered by its signature with the outputs the docs describe."""
    head = ClassifierHead(("cell",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
    module = saved_model.ServingModule(small_model, classifier=head)
    loaded = tf.saved_model.load(saved_model.export_saved_model(module, str(tmp_path), 1))
    requests = _documented_requests()
    assert {name for name, _ in requests} == {"featurize", "score", "classify", "generate"}
    for name, body in requests:
        feeds = _as_tensorflow_serving_feeds(loaded.signatures[name], body)
        outputs = loaded.signatures[name](**feeds)
        rows = len(body.get("instances") or body["inputs"]["prompt"])
        assert all(value.shape[0] == rows for value in outputs.values()), name
        expected = {
            "featurize": set(features.FEATURE_KINDS),
            "score": {"bits_per_char", "chars"},
            "classify": {"probabilities", "classes", "label", "probability", "neuron"},
            "generate": {"text"},
        }[name]
        assert set(outputs) == expected, name


def test_the_documented_grpc_client_is_served_by_the_signatures(small_model, tmp_path, monkeypatch):
    """The gRPC client docs/serving.md shows runs as written; its requests, answered by the
    loaded SavedModel as TensorFlow Serving answers them, give the outputs it names."""
    import grpc  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top

    head = ClassifierHead(("cell",), np.zeros(16), np.ones(16), np.zeros(16), 0.0)
    module = saved_model.ServingModule(small_model, classifier=head)
    loaded = tf.saved_model.load(saved_model.export_saved_model(module, str(tmp_path), 1))
    asked = []

    class Server:
        def __init__(self, channel):
            del channel

        def Predict(self, request, timeout):  # noqa: N802 (the stub's name)
            assert request.model_spec.name == "mlstm" and timeout > 0
            signature = loaded.signatures[request.model_spec.signature_name]
            asked.append(request.model_spec.signature_name)
            inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
            response = predict_pb2.PredictResponse()
            for name, value in signature(**inputs).items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
            return response

    monkeypatch.setattr(grpc, "insecure_channel", lambda target: target)
    monkeypatch.setattr(prediction_service_pb2_grpc, "PredictionServiceStub", Server)
    text = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "serving.md").read_text()
    (client,) = re.findall(r"### gRPC.*?```python\n(.*?)```", text, re.DOTALL)
    namespace = {}
    exec(compile(client, "docs/serving.md", "exec"), namespace)  # noqa: S102
    assert asked == ["featurize", "score", "classify", "generate"]
    assert set(namespace["features"]) == set(features.FEATURE_KINDS)
    assert namespace["features"]["cell"].shape == (2, small_model.hidden_size)
    assert namespace["scores"]["bits_per_char"].shape == (2,)
    assert namespace["classified"]["probabilities"].shape == (2, 2)
    assert namespace["generated"].shape == (2,)


def test_signatures_enforce_the_export_limits(small_model):
    module = saved_model.ServingModule(small_model, max_text_bytes=12, max_generate_length=5)
    args = (tf.constant(0.8), tf.constant(11, tf.int64))
    too_long = tf.constant(["short", "x" * 13])
    for name in ("featurize", "score"):
        with pytest.raises(
            tf.errors.InvalidArgumentError, match=f"{name}: a text is longer than max_text_bytes=12"
        ):
            getattr(module, name)(too_long)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="generate: a prompt is longer than max_text_bytes=12"
    ):
        module.generate(too_long, tf.constant(3), *args)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match="generate: length must be <= max_generate_length=5",
    ):
        module.generate(tf.constant(["hi"]), tf.constant(6), *args)
    # At the limits: 12 bytes (6 two-byte characters), 5 generated bytes.
    assert module.score(tf.constant(["\u00e9" * 6]))["chars"].numpy().tolist() == [12.0]
    assert module.generate(tf.constant(["hi"]), tf.constant(5), *args)["text"].shape == (1,)


def test_empty_batches_and_empty_texts(small_model):
    texts = [normalize_text(t) for t in TEXTS] * 2
    classifier = _fit_classifier(small_model, texts, np.array([1, 0, 0, 1, 0, 1]))
    module = saved_model.ServingModule(small_model, classifier=classifier.head)
    none = tf.constant([], tf.string)
    for kind, value in module.featurize(none).items():
        assert value.shape == (0, small_model.hidden_size), kind
    assert {k: v.shape for k, v in module.score(none).items()} == {
        "bits_per_char": (0,),
        "chars": (0,),
    }
    assert {k: v.shape for k, v in module.classify(none).items()} == {
        "probabilities": (0, 2),
        "classes": (0, 2),
        "probability": (0,),
        "label": (0,),
        "neuron": (0,),
    }
    args = (tf.constant(5), tf.constant(1.0), tf.constant(1, tf.int64))
    assert module.generate(none, *args)["text"].shape == (0,)

    # An empty text has nothing to score or classify: the request fails naming its index,
    # as the Python API refuses it and the binaries skip it.
    for signature, request, index in (("score", ["", "ab"], 0), ("classify", ["ab", ""], 1)):
        with pytest.raises(
            tf.errors.InvalidArgumentError,
            match=re.escape(
                f"{signature}: `text` is empty after normalization, nothing to {signature}, at "
                f"index] [{index}]"
            ),
        ):
            getattr(module, signature)(tf.constant(request))
    assert np.isfinite(module.score(tf.constant(["ab"]))["bits_per_char"][0])
    # Its features are those of the document-start byte alone.
    _, (h, c) = small_model.encode(np.array([[DOC_START]]), training=False)
    features_of_empty = module.featurize(tf.constant([""]))
    np.testing.assert_allclose(features_of_empty["cell"], c, atol=1e-6)
    np.testing.assert_allclose(features_of_empty["hidden"], h, atol=1e-6)


def test_score_equals_the_library_bits_per_char(tmp_path):
    model_dir, model = write_untrained_model_dir(tmp_path / "m", seed=3)
    text = normalize_text(TEXTS[0] + " " + TEXTS[2])
    assert len(text.encode("utf-8")) > 3 * 16  # several windows, the state carried
    module = saved_model.ServingModule(model, window=16)  # kept: tf.function holds it weakly
    scored = module.score(tf.constant([text, "short"]))

    ids = np.array([[DOC_START] + list(text.encode("utf-8"))])
    logits, _ = model(ids[:, :-1], training=False)
    bits, chars = bits_per_char_from_logits(logits, ids[:, 1:])
    assert scored["chars"][0] == chars == len(text.encode("utf-8"))
    np.testing.assert_allclose(scored["bits_per_char"][0], bits / chars, rtol=0, atol=1e-5)

    # The tf-mlstm-eval path over the same text as a one-line file.
    (tmp_path / "one.txt").write_text(text + "\n", encoding="utf-8")
    result = evaluation.evaluate_data(
        str(model_dir), str(tmp_path / "one.txt"), ("text",), batch_size=1, seq_length=16
    )
    assert result["chars"] == len(text.encode("utf-8"))
    np.testing.assert_allclose(scored["bits_per_char"][0], result["bits_per_char"], atol=1e-5)


# Loads an export made with small limits in a process without tf_mlstm and
# sends it the requests the limits and the empty cases are about.
_SERVE_LIMITS = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    sig = tf.saved_model.load(sys.argv[1]).signatures
    out = {"imported_tf_mlstm": any(m.startswith("tf_mlstm") for m in sys.modules)}
    gen = dict(temperature=tf.constant(1.0), seed=tf.constant(3, tf.int64))
    requests = {
        "long_text": lambda: sig["score"](text=tf.constant(["ok", "x" * 25])),
        "long_prompt": lambda: sig["generate"](
            prompt=tf.constant(["x" * 25]), length=tf.constant(2), **gen),
        "long_generate": lambda: sig["generate"](
            prompt=tf.constant(["hi"]), length=tf.constant(9), **gen),
        # A text not in a list, and a list of lists: the shapes a JSON request gets wrong.
        "scalar_text": lambda: sig["score"](text=tf.constant("one text")),
        "nested_texts": lambda: sig["featurize"](text=tf.constant([["a"], ["b"]])),
        "scalar_prompt": lambda: sig["generate"](
            prompt=tf.constant("hi"), length=tf.constant(2), **gen),
        "not_utf8": lambda: sig["score"](text=tf.constant([b"fine", b"\\xff\\xfe bad \\xc3\\x28"])),
        "empty_text": lambda: sig["score"](text=tf.constant(["fine", ""])),
    }
    for name, request in requests.items():
        try:
            request()
            out[name] = "accepted"
        except tf.errors.InvalidArgumentError as e:
            out[name] = e.message
    none = tf.constant([], tf.string)
    out["empty_featurize"] = {k: v.shape.as_list() for k, v in sig["featurize"](text=none).items()}
    out["empty_score"] = {k: v.shape.as_list() for k, v in sig["score"](text=none).items()}
    out["empty_generate"] = sig["generate"](
        prompt=none, length=tf.constant(8), **gen)["text"].shape.as_list()
    out["at_limit"] = sig["generate"](
        prompt=tf.constant(["x" * 24]), length=tf.constant(8), **gen)["text"].shape.as_list()
    print(json.dumps(out))
    """)


@pytest.mark.slow
def test_limits_and_empty_requests_in_a_fresh_process(tmp_path):
    model_dir, _ = _model_dir_at_step(tmp_path / "run", 7)
    done = export_cli.export(
        export_cli.ExportConfig(
            str(model_dir), str(tmp_path / "serving"), max_text_bytes=24, max_generate_length=8
        )
    )
    out = run_without_tf_mlstm(_SERVE_LIMITS, [done["export_dir"]], tmp_path)
    assert not out["imported_tf_mlstm"]
    assert "score: a text is longer than max_text_bytes=24" in out["long_text"]
    assert "generate: a prompt is longer than max_text_bytes=24" in out["long_prompt"]
    assert "generate: length must be <= max_generate_length=8" in out["long_generate"]
    shape = "must be a batch of strings of shape [N]"
    assert f"score: `text` {shape}" in out["scalar_text"]
    assert f"featurize: `text` {shape}" in out["nested_texts"]
    assert f"generate: `prompt` {shape}" in out["scalar_prompt"]
    assert "score: `text` holds bytes that are not UTF-8 text, at index] [1]" in out["not_utf8"]
    assert out["empty_featurize"] == {k: [0, 16] for k in features.FEATURE_KINDS}
    assert out["empty_score"] == {"bits_per_char": [0], "chars": [0]}
    assert out["empty_generate"] == [0]
    assert (
        "score: `text` is empty after normalization, nothing to score, at index] [1]"
        in out["empty_text"]
    )
    assert out["at_limit"] == [1]


def test_training_refuses_an_export_folder_it_did_not_write_before_it_trains(tmp_path):
    from tf_mlstm import api  # pylint: disable=g-import-not-at-top
    from tf_mlstm.config import TrainConfig  # pylint: disable=g-import-not-at-top

    (tmp_path / "run" / "export").mkdir(parents=True)
    (tmp_path / "run" / "export" / "notes.txt").write_text("mine")
    config = TrainConfig(model_dir=str(tmp_path / "run"), hidden_size=8, max_steps=1)
    with pytest.raises(ValueError, match="export: holds 'notes.txt', not a tf-mlstm-export"):
        api.pretrain(config)
    # Refused before anything was trained or written.
    assert _tree(tmp_path / "run") == ["export", "export/notes.txt"]


# Texts with punctuation, case and Unicode the n-gram tokens must agree on.
NGRAM_TEXTS = [
    "A GREAT film, great cast!",
    "Dull... dull &amp; DULL; a dull film.",
    "Caf\u00e9 CR\u00c8ME \u2014 great \U0001f600 na\u00efve stra\u00dfe",
    "\u0130stanbul, \u03a3\u039f\u03a6\u0399\u0391: a great_film?",
    "",
]
# What the classify signature is sent: an empty text has nothing to classify.
SERVED_NGRAM_TEXTS = [text for text in NGRAM_TEXTS if text]


def _ngram_classifier(model, kinds, labels):
    texts = [normalize_text(t) for t in NGRAM_TEXTS] * 2
    vocabulary, fitted = ngrams.fit_vocabulary(texts)
    computed = {"tfidf": fitted}
    if len(kinds) > 1:
        computed.update(features.TextFeaturizer(model, batch_size=8)(texts))
    x = features.concat_features(computed, kinds)
    classifier, _ = fit_lib.fit_logistic(
        x, labels, x, labels, kinds, model.hidden_size, penalty="l2", ngrams=vocabulary
    )
    return classifier


def _python_probabilities(classifier, model, texts):
    """What tf-mlstm-classify computes for raw `texts`."""
    texts = [normalize_text(t) for t in texts]
    computed = {"tfidf": classifier.ngrams.transform(texts)}
    if classifier.head.model_kinds:
        computed.update(features.TextFeaturizer(model)(texts))
    return classifier.predict_proba(
        features.concat_features(computed, classifier.head.feature_kinds)
    )


def test_classify_signature_computes_ngrams_from_the_stored_vocabulary(small_model):
    labels = np.array(["neg", "pos", "mid", "pos", "neg"] * 2, object)
    classifier = _ngram_classifier(small_model, ("tfidf",), labels)
    assert classifier.head.head_spec.kind == "multiclass" and len(classifier.ngrams) > 5
    module = saved_model.ServingModule(small_model, classifier=classifier.head)
    out = module.classify(tf.constant(SERVED_NGRAM_TEXTS + ["unseen words only"]))
    want = _python_probabilities(
        classifier, small_model, SERVED_NGRAM_TEXTS + ["unseen words only"]
    )
    np.testing.assert_allclose(out["probabilities"], want, atol=1e-5)
    assert out["label"].numpy().astype(str).tolist() == list(
        classifier.head.head_spec.classes[i] for i in np.argmax(want, 1)
    )
    head = classifier.head
    bad = dataclasses.replace(head, ngram_terms=head.ngram_terms[:-1])
    with pytest.raises(ValueError, match="IDF values for"):
        saved_model.ServingModule(small_model, classifier=bad)
    with pytest.raises(ValueError, match="the tfidf kind \\(last\\) and a vocabulary go together"):
        saved_model.ServingModule(small_model, classifier=dataclasses.replace(head, ngram_terms=()))


_SERVE_CLASSIFY = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # noqa: F401
    out = tf.saved_model.load(sys.argv[1]).signatures["classify"](
        text=tf.constant(json.loads(sys.argv[2])))
    print(json.dumps({
        "imported_tf_mlstm": any(m.startswith("tf_mlstm") for m in sys.modules),
        "probabilities": out["probabilities"].numpy().tolist(),
        "neuron": out["neuron"].numpy().tolist(),
    }))
    """)


@pytest.mark.slow
def test_model_features_and_ngrams_serve_in_a_fresh_process(tmp_path):
    model_dir, _ = _model_dir_at_step(tmp_path / "run", 3)
    model = language_model.MLSTMLanguageModel.from_run(str(model_dir))
    classifier = _ngram_classifier(model, ("max", "tfidf"), np.array([1, 0, 1, 0, 0] * 2))
    classifier.save(str(tmp_path / "classifier.json"))
    done = export_cli.export(
        export_cli.ExportConfig(
            str(model_dir), str(tmp_path / "export"), str(tmp_path / "classifier.json")
        )
    )
    served = run_without_tf_mlstm(
        _SERVE_CLASSIFY, [done["export_dir"], json.dumps(SERVED_NGRAM_TEXTS)], tmp_path
    )
    assert not served["imported_tf_mlstm"]
    want = _python_probabilities(classifier, model, SERVED_NGRAM_TEXTS)
    np.testing.assert_allclose(served["probabilities"], want, atol=1e-5)
    texts = [normalize_text(t) for t in SERVED_NGRAM_TEXTS]
    x = features.concat_features(
        {"tfidf": classifier.ngrams.transform(texts), **features.TextFeaturizer(model)(texts)},
        classifier.head.feature_kinds,
    )
    np.testing.assert_allclose(
        served["neuron"], threshold_lib.column(x, classifier.neuron.index), atol=1e-5
    )
    # tf-mlstm-classify reads the same classifier file to the same numbers.
    from tf_mlstm.cli import classify as classify_cli  # pylint: disable=g-import-not-at-top

    (tmp_path / "new.txt").write_text("\n".join(NGRAM_TEXTS[:4]) + "\n", encoding="utf-8")
    _, probabilities, _, _ = classify_cli.classify(
        classify_cli.ClassifyConfig(
            str(model_dir), str(tmp_path / "classifier.json"), str(tmp_path / "new.txt"), "-"
        ).validate()
    )
    np.testing.assert_allclose(probabilities, want[:4], atol=1e-6)


def test_a_symlink_loop_as_export_dir_is_one_line_not_a_traceback(tmp_path):
    model_dir, _ = write_untrained_model_dir(tmp_path / "run")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ValueError, match=r"loop: a symbolic link to .*loop, which leads nowhere"):
        saved_model.check_export_base(str(tmp_path / "loop"))
    done = _forkserver.run(
        [
            sys.executable,
            "-m",
            "tf_mlstm.cli.export",
            f"--model_dir={model_dir}",
            f"--export_dir={tmp_path / 'loop'}",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=300,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("\n") == 1
    loop = tmp_path / "loop"
    assert f"] --export_dir={loop}: a symbolic link to {loop}, which" in done.stderr
