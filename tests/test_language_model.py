"""The language model: sequence gradient, carried state, resets, inference."""

import keras
import numpy as np
import tensorflow as tf

from _models import write_untrained_model_dir
from tf_mlstm.data import framing
from tf_mlstm.data.text import DOC_START
from tf_mlstm.layers import MLSTMCell
from tf_mlstm.models import featurize
from tf_mlstm.models import sampling
from tf_mlstm.models.backbone import MLSTMBackbone
from tf_mlstm.models.classifier import MLSTMClassifier
from tf_mlstm.models.language_model import MLSTMLanguageModel
from tf_mlstm.models.language_model import bits_per_char_from_logits


def _model(hidden=16, embedding=8, seed=0):
    keras.utils.set_random_seed(seed)
    model = MLSTMLanguageModel(hidden_size=hidden, embedding_size=embedding)
    model.build()
    return model


def _ids(rng, batch, steps):
    # Printable bytes only: no DOC_START resets unless a test places one.
    return rng.randint(32, 127, size=(batch, steps)).astype("int32")


def test_sequence_gradient_matches_autodiff_through_keras_rnn():
    model = _model()
    rng = np.random.RandomState(0)
    ids = _ids(rng, 3, 12)
    targets = _ids(rng, 3, 12)
    h0 = tf.constant(rng.randn(3, 16).astype("float32") * 0.3)
    c0 = tf.constant(rng.randn(3, 16).astype("float32") * 0.3)
    rnn = keras.layers.RNN(model.mlstm.cell, return_sequences=True, return_state=True)

    def reference_loss():
        x = model.embedding(ids)
        seq, h, c = rnn(x, initial_state=[h0, c0])
        logits = model.head(seq)
        bits, _ = bits_per_char_from_logits(logits, targets)
        return bits + tf.reduce_sum(h * c)

    def fast_loss():
        logits, (h, c) = model(ids, initial_state=[h0, c0], training=True)
        bits, _ = bits_per_char_from_logits(logits, targets)
        return bits + tf.reduce_sum(h * c)

    variables = model.trainable_variables
    grads = []
    for fn in (reference_loss, fast_loss):
        with tf.GradientTape() as tape:
            tape.watch([h0, c0])
            value = fn()
        grads.append(tape.gradient(value, variables + [h0, c0]))
    for var, ref, got in zip(variables + [h0, c0], *grads):
        np.testing.assert_allclose(
            tf.convert_to_tensor(got),
            tf.convert_to_tensor(ref),
            atol=2e-5,
            rtol=1e-4,
            err_msg=getattr(var, "name", ""),
        )


def test_carried_state_equals_one_pass():
    model = _model()
    rng = np.random.RandomState(1)
    ids = _ids(rng, 2, 40)
    ids[0, 17] = DOC_START
    targets = _ids(rng, 2, 40)
    logits, _ = model(ids)
    whole, chars = bits_per_char_from_logits(logits, targets)
    state, pieces = None, 0.0
    for start in range(0, 40, 8):
        logits, state = model(ids[:, start : start + 8], initial_state=state, training=True)
        bits, _ = bits_per_char_from_logits(logits, targets[:, start : start + 8])
        pieces += float(bits)
    np.testing.assert_allclose(pieces, float(whole), rtol=1e-5)
    assert float(chars) == 80


def test_doc_start_resets_state():
    model = _model()
    doc = np.frombuffer(b"\ngreat blender", np.uint8).astype("int32")[None]
    before = np.frombuffer(b"\nterrible, broke after a week ", np.uint8)
    stream = np.concatenate([before.astype("int32")[None], doc], axis=1)
    alone, _ = model(doc)
    after, _ = model(stream)
    np.testing.assert_allclose(after[:, -doc.shape[1] :], alone, atol=1e-5)


def test_features_do_not_depend_on_the_batch():
    model = _model()
    texts = [
        "Loved it.",
        "Arrived broken and the seller never answered. Avoid this one at all costs, seriously." * 3,
        "ok",
    ]
    ids, valid, _, _ = framing.frame_ids_tf(tf.constant(texts), pad_to_multiple=16)
    batched = featurize.featurize_ids(model, ids, valid, window=16)
    for index, text in enumerate(texts):
        ids1, valid1, _, _ = framing.frame_ids_tf(tf.constant([text]), pad_to_multiple=16)
        alone = featurize.featurize_ids(model, ids1, valid1, window=16)
        for kind in featurize.FEATURE_KINDS:
            np.testing.assert_allclose(
                batched[kind][index], alone[kind][0], atol=1e-5, err_msg=kind
            )


def test_final_cell_feature_equals_model_state():
    model = _model()
    text = "Works as advertised, five stars."
    ids, valid, _, _ = framing.frame_ids_tf(tf.constant([text]), pad_to_multiple=8)
    features = featurize.featurize_ids(model, ids, valid, window=8)
    raw = np.frombuffer(b"\n" + text.encode(), np.uint8).astype("int32")[None]
    _, (h, c) = model(raw)
    np.testing.assert_allclose(features["cell"], c, atol=1e-5)
    np.testing.assert_allclose(features["hidden"], h, atol=1e-5)


def test_score_matches_the_training_loss():
    model = _model()
    text = "The handle snapped off on day two."
    ids, valid, _, _ = framing.frame_ids_tf(tf.constant([text, "short"]), pad_to_multiple=8)
    bits, chars = featurize.score_ids(model, ids, valid, window=8)
    raw = np.frombuffer(b"\n" + text.encode(), np.uint8).astype("int32")[None]
    logits, _ = model(raw[:, :-1])
    want, count = bits_per_char_from_logits(logits, raw[:, 1:])
    np.testing.assert_allclose(bits[0], want, rtol=1e-5)
    assert chars.numpy().tolist() == [float(count), 5.0]


def test_sampling_is_seeded_and_clamping_holds_the_unit():
    model = _model()
    prompt = tf.constant([[DOC_START, ord("I")]], tf.int32)
    first = sampling.sample_ids(model, prompt, 20, seed=3)
    again = sampling.sample_ids(model, prompt, 20, seed=3)
    other = sampling.sample_ids(model, prompt, 20, seed=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    # Clamped: the held unit's cell value is the given one after every byte.
    held, trace = sampling.sample_ids(
        model, prompt, 10, seed=3, neuron=5, neuron_value=0.75, trace_unit=5
    )
    assert held.shape == (1, 10)
    np.testing.assert_array_equal(trace, np.full((1, 10), 0.75, np.float32))
    # sample_text frames the prompt and decodes what sample_ids draws for it.
    text = sampling.sample_text(model, "Great", 5, temperature=0.5, seed=1)
    great = tf.constant([[DOC_START, *b"Great"]], tf.int32)
    ids = sampling.sample_ids(model, great, 5, temperature=0.5, seed=1)
    assert text == sampling.ids_to_text(ids[0]) and len(ids[0]) == 5


def test_model_config_round_trip():
    model = MLSTMLanguageModel(
        hidden_size=12, embedding_size=4, weight_norm=False, dtype="mixed_bfloat16", name="lm"
    )
    config = model.get_config()
    clone = MLSTMLanguageModel.from_config(config)
    assert clone.get_config() == config
    assert (clone.hidden_size, clone.embedding_size, clone.weight_norm) == (12, 4, False)
    assert clone.name == "lm" and clone.dtype_policy.name == "mixed_bfloat16"
    assert isinstance(clone.mlstm.cell, MLSTMCell) and clone.mlstm.cell.weight_norm is False


# === The backbone and the checkpoint layout ===

# The checkpoint keys of every run so far: the layers directly under the model.
CHECKPOINT_KEYS = [
    "model/embedding/_embeddings/.ATTRIBUTES/VARIABLE_VALUE",
    "model/head/_kernel/.ATTRIBUTES/VARIABLE_VALUE",
    "model/head/bias/.ATTRIBUTES/VARIABLE_VALUE",
    *(
        f"model/mlstm/cell/{name}/.ATTRIBUTES/VARIABLE_VALUE"
        for name in (
            "bias",
            "gain_h",
            "gain_mh",
            "gain_mx",
            "gain_x",
            "kernel_h",
            "kernel_mh",
            "kernel_mx",
            "kernel_x",
        )
    ),
]


def test_checkpoints_keep_the_layout_of_earlier_runs(tmp_path):
    model = MLSTMLanguageModel(hidden_size=8, embedding_size=4)
    model.build()
    prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
    keys = sorted(key for key, _ in tf.train.list_variables(prefix))
    assert keys == sorted(["_CHECKPOINTABLE_OBJECT_GRAPH", *CHECKPOINT_KEYS])
    # A checkpoint written with that layout, without any backbone object, restores whole.
    keras.utils.set_random_seed(7)
    other = MLSTMLanguageModel(hidden_size=8, embedding_size=4)
    other.build()
    layout = tf.train.Checkpoint(
        embedding=other.backbone.embedding, mlstm=other.backbone.mlstm, head=other.head
    )
    old = tf.train.Checkpoint(model=layout).write(str(tmp_path / "old"))
    tf.train.Checkpoint(model=model).read(old).assert_consumed()
    for got, want in zip(model.weights, other.weights, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_the_language_model_is_a_head_on_its_backbone():
    model = _model()
    ids = tf.constant(_ids(np.random.RandomState(3), 2, 9))
    hidden, state = model.backbone(ids)
    logits, model_state = model(ids)
    np.testing.assert_allclose(logits.numpy(), model.head(hidden).numpy(), rtol=1e-6)
    for got, want in zip(model_state, state, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert model.embedding is model.backbone.embedding and model.mlstm is model.backbone.mlstm
    assert model.backbone.trainable_weights == model.trainable_weights[:-2]


def test_two_tasks_on_one_backbone_share_it():
    backbone = MLSTMBackbone(hidden_size=8, embedding_size=4, dtype="mixed_bfloat16")
    model = MLSTMLanguageModel(backbone)
    model.build()
    classifier = MLSTMClassifier(model, 1, "mean")
    # The backbone given, not one rebuilt from its sizes: its variables, its policy.
    assert model.backbone is backbone and classifier.encoder.backbone is backbone
    assert model.dtype_policy.name == "mixed_bfloat16"
    assert {id(w) for w in backbone.weights} <= {id(w) for w in classifier.weights}
    # The config keeps the sizes, so a saved model rebuilds the same network.
    config = model.get_config()
    assert (config["hidden_size"], config["embedding_size"], config["weight_norm"]) == (8, 4, True)


def test_from_run_loads_the_run_s_model_config_and_checkpoint(tmp_path):
    model_dir, written = write_untrained_model_dir(tmp_path / "m", hidden_size=8, embedding_size=4)
    loaded = MLSTMLanguageModel.from_run(str(model_dir), precision="mixed_bfloat16")
    assert loaded.dtype_policy.name == "mixed_bfloat16" and loaded.backbone.hidden_size == 8
    assert loaded.run_config.hidden_size == 8
    assert loaded.run_checkpoint == str(model_dir / "checkpoints" / "ckpt-1")
    for got, want in zip(loaded.weights, written.weights, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
