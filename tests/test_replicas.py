"""The runner's step across replicas, precisions and XLA, checked on numbers that would change.

Adam hides the scale of a gradient (its first update is about lr * sign(g)),
so weights after a step cannot tell a doubled or halved gradient from the
right one. These tests read the gradient a run applied back from Adam's
first moment after one step (m = (1 - beta_1) g) and compare it, and the
step's logged norm, between one and two replicas on the same global batch,
between float32, mixed_float16 and a float16 all-reduce, and with clipping.

Then the real runner (`Runner.train`) with two replicas in this process (the
one-machine multi-GPU path, on two logical CPU devices), each carrying its
own rows' recurrent state: a run stopped after a checkpoint resumes to the
weights of the uninterrupted run; with XLA on it ends where the graph step
does.
"""

import dataclasses
import logging
import pathlib
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from _models import tiny_train_config
from tf_mlstm.data import tfrecord
from tf_mlstm.tasks.language_model import LanguageModelTask
from tf_mlstm.train import optimizer as optimizer_lib
from tf_mlstm.train.runner import Runner

HIDDEN, ROWS, SEQ = 16, 4, 16
MIRRORED = {"distribution_strategy": "mirrored"}

pytestmark = pytest.mark.slow


def _config(model_dir, data_dir, **overrides):
    values = dict(hidden_size=HIDDEN, batch_size=ROWS, seq_length=SEQ, clip_norm=0.0, max_steps=4)
    return tiny_train_config(model_dir, data_dir, checkpoint_every_steps=2, **values | overrides)


def _trainer(config):
    files = tfrecord.split_files(config.train_data, "train")
    return Runner(LanguageModelTask(config, files, []), config)


# === The gradient of one step ===


@dataclasses.dataclass
class FirstStep:
    """What the first step of a run did."""

    replicas: int
    bits: float  # summed over the global batch
    chars: float
    norm: float  # as the runner logs it
    applied: list  # the gradients Adam applied, per variable
    loss_scale: float | None


def _applied_gradients(optimizer):
    adam = getattr(optimizer, "inner_optimizer", optimizer)  # under a LossScaleOptimizer
    return [m.numpy() / (1.0 - adam.beta_1) for m in adam._momentums]


def _global_norm(arrays):
    return float(np.sqrt(sum(np.sum(np.square(a, dtype=np.float64)) for a in arrays)))


def _assert_gradients_close(got, want, tolerance):
    """Equal up to `tolerance` times the largest gradient entry."""
    atol = tolerance * max(float(np.max(np.abs(w))) for w in want)
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, rtol=0, atol=atol, err_msg=f"variable {index}")


@pytest.fixture(scope="module")
def first_step(mirrored_on_cpus, demo_tfrecords, tmp_path_factory):
    """first_step(**config overrides) -> `FirstStep`, one run per setting."""
    cache = {}

    def run(**overrides):
        key = tuple(sorted(overrides.items()))
        if key not in cache:
            model_dir = tmp_path_factory.mktemp("first_step") / "run"
            trainer = _trainer(_config(model_dir, demo_tfrecords, **overrides))
            (bits, chars), stop, norm, finite = trainer.train_step()
            assert finite and stop is None
            scale = optimizer_lib.loss_scale(trainer.optimizer)
            cache[key] = FirstStep(
                replicas=trainer.strategy.num_replicas_in_sync,
                bits=float(bits),
                chars=float(chars),
                norm=norm,
                applied=_applied_gradients(trainer.optimizer),
                loss_scale=None if scale is None else float(scale.numpy()),
            )
        return cache[key]

    return run


def test_two_replicas_apply_the_gradient_of_one_on_the_same_global_batch(first_step):
    one, two = first_step(), first_step(**MIRRORED)
    assert (one.replicas, two.replicas) == (1, 2)
    # The same characters: replica r gets rows 2r and 2r + 1 of the batch.
    assert one.chars == two.chars == ROWS * SEQ
    assert two.bits == pytest.approx(one.bits, rel=1e-6)
    # The replicas' sum is the global mean gradient: not twice it, not half.
    assert two.norm == pytest.approx(one.norm, rel=1e-6)
    _assert_gradients_close(two.applied, one.applied, 1e-6)
    # Without clipping the logged norm is the norm of what was applied.
    assert _global_norm(one.applied) == pytest.approx(one.norm, rel=1e-5)
    assert _global_norm(two.applied) == pytest.approx(two.norm, rel=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        {"precision": "mixed_float16"},
        {"precision": "mixed_float16", "allreduce_dtype": "float16", **MIRRORED},
    ],
    ids=["mixed_float16", "float16_all_reduce_2_replicas"],
)
def test_loss_scaled_steps_apply_the_float32_gradient(first_step, overrides):
    reference, got = first_step(), first_step(**overrides)
    assert got.replicas == (2 if overrides.get("distribution_strategy") else 1)
    # The gradients were computed 2**15 times larger; the step unscaled them
    # before logging their norm and before Adam saw them.
    assert got.loss_scale == 2.0**15 and reference.loss_scale is None
    assert got.norm == pytest.approx(reference.norm, rel=1e-3)
    _assert_gradients_close(got.applied, reference.applied, 1e-3)


def test_clipping_applies_the_gradient_scaled_to_clip_norm_and_logs_the_norm_before(first_step):
    raw = first_step()
    clip_norm = raw.norm / 4
    clipped = first_step(clip_norm=clip_norm)
    assert clipped.norm == pytest.approx(raw.norm, rel=1e-6)
    assert _global_norm(clipped.applied) == pytest.approx(clip_norm, rel=1e-5)
    _assert_gradients_close(clipped.applied, [g * clip_norm / raw.norm for g in raw.applied], 1e-6)


# === Two replicas through the training loop: checkpoint and exact resume ===


@pytest.fixture(scope="module")
def whole_run(mirrored_on_cpus, demo_tfrecords, tmp_path_factory):
    """whole_run(jit_compile) -> (config, trainer, results) of 4 steps on two replicas."""
    cache = {}

    def run(jit_compile):
        if jit_compile not in cache:
            model_dir = tmp_path_factory.mktemp("whole") / "run"
            config = _config(model_dir, demo_tfrecords, jit_compile=jit_compile, **MIRRORED)
            trainer = _trainer(config)
            cache[jit_compile] = (config, trainer, trainer.train())
        return cache[jit_compile]

    return run


_STEP_IN_NAME = re.compile(r"(?:ckpt|step)-(\d+)")


def _as_of_step(model_dir, copy, step):
    """A copy of a run folder as it was when `step` was checkpointed (a crash after it)."""
    shutil.copytree(model_dir, copy)
    (copy / "results.json").unlink()
    (copy / "checkpoints" / "checkpoint").unlink()  # names the newest checkpoint
    for path in list(copy.rglob("*")):
        match = _STEP_IN_NAME.search(path.name)
        if path.is_file() and match and int(match.group(1)) > step:
            path.unlink()
    return copy


def _carried_state(model_dir, step):
    """The saved [replicas, (h, c), rows, units] state of worker 0."""
    data = (model_dir / "carried_state" / f"worker-0-step-{step}.tensor").read_bytes()
    return tf.io.parse_tensor(data, tf.float32).numpy()


def _weights(model):
    return [w.numpy() for w in model.weights]


def test_two_replicas_resume_to_the_weights_of_an_uninterrupted_run(whole_run, tmp_path, caplog):
    config, whole, results = whole_run("false")
    assert whole.strategy.num_replicas_in_sync == 2
    assert results["step"] == 4 and results["stopped_by"] == "max_steps"
    model_dir = _as_of_step(pathlib.Path(config.model_dir), tmp_path / "run", 2)

    resumed = _trainer(dataclasses.replace(config, model_dir=str(model_dir)))
    assert resumed.restore() == str(model_dir / "checkpoints" / "ckpt-2")
    # Each replica carried the state of its own rows, and gets it back.
    saved = _carried_state(model_dir, 2)
    assert saved.shape == (2, 2, ROWS // 2, HIDDEN)
    assert not np.allclose(saved[0], saved[1], atol=1e-3)
    h, c = (resumed.strategy.experimental_local_results(v) for v in resumed.run_state.carried)
    for replica in range(2):
        np.testing.assert_array_equal(np.stack([h[replica], c[replica]]), saved[replica])

    caplog.set_level(logging.WARNING, logger="absl")
    again = resumed.train()
    assert again["step"] == 4 and "restarts" not in caplog.text, caplog.text
    for want, got in zip(_weights(whole.model), _weights(resumed.model), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert again["weights_sha256"] == results["weights_sha256"]


def test_xla_trains_two_replicas_like_the_graph_step(whole_run):
    _, graph, _ = whole_run("false")
    _, xla, results = whole_run("true")
    assert xla.jit and not graph.jit and xla.strategy.num_replicas_in_sync == 2
    assert results["step"] == 4 and results["skipped_steps"] == 0
    for want, got in zip(_weights(graph.model), _weights(xla.model), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
