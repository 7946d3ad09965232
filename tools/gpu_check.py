"""GPU acceptance run: one command, one JSON summary of what a GPU machine does with this project.

  python tools/gpu_check.py      # a GPU machine, the paper's sizes

Sized to finish in under 8 minutes on one modern GPU; not yet timed on one (no GPU was at hand
when it was written), so read `wall_s` in the summary and shrink --steps/--demo_steps if needed.

Everything runs through the project's own training code (`tf_mlstm.train.runner.Runner` with the
language model's task: the step, optimizer, loss scaling and all-reduce that `tf-mlstm-train`
uses) and its featurizer (`tf_mlstm.transfer.features.TextFeaturizer`), on the embedded demo
corpus, and checks:

  train       chars/s and peak GPU memory (`get_memory_info('GPU:0')['peak']`) of the training
              step at H = 4096, 256 rows per GPU, 256 characters, in --precision (mixed_float16
              with XLA and dynamic loss scaling) and, in the same process, --baseline_precision
              (float32); the speed-up between them.
  featurize   chars/s of featurizing review texts with a 4096-unit model in --precision.
  mirrored    with 2+ replicas: a few steps under MirroredStrategy over all of them and the same
              steps on one device with the same global batch log equal gradient norms at every
              step (relative difference <= --grad_norm_rtol: Adam's update would hide a gradient
              off by a constant factor, the norm does not) and end with equal weights (largest
              absolute difference <= --weights_atol, float32).
  demo        a --demo_steps run on the demo corpus in --precision: the loss falls (the mean of
              the last tenth of the steps below --loss_drop x the mean of the first tenth), the
              loss scale stays finite and >= --min_loss_scale, and at most --max_skipped_fraction
              of the steps were skipped for non-finite gradients.

The last line on stdout is the JSON summary; `passed` is true when every check held, and the
exit status is 1 otherwise. All sizes are flags, so the same checks run on a CPU at tiny sizes
(tests/test_gpu_check.py); without GPUs, --cpu_replicas=2 splits the CPU into two logical
devices for the mirrored check (the strategy factory places "mirrored" on GPUs only, so the
check hands the trainer a MirroredStrategy over those devices itself).
"""

import contextlib
import gc
import glob
import json
import os
import resource
import sys
import tempfile
import time

import numpy as np
from absl import app
from absl import flags
from absl import logging

FLAGS = flags.FLAGS
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
CHECKS = ("train", "featurize", "mirrored", "demo")


def define_flags():
    """Defines the acceptance run's flags (defaults: the paper's sizes on GPUs)."""
    flags.DEFINE_list("checks", list(CHECKS), f"Which checks to run, from {list(CHECKS)}.")
    flags.DEFINE_integer("hidden", 4096, "mLSTM units of the speed and featurization runs.")
    flags.DEFINE_integer("batch", 256, "Rows per replica (GPU) of the speed runs.")
    flags.DEFINE_integer("seq", 256, "Characters per row per step (truncated BPTT).")
    flags.DEFINE_integer("embedding", 64, "Byte embedding width.")
    flags.DEFINE_integer("steps", 6, "Timed training steps per precision (median reported).")
    flags.DEFINE_integer("warmup", 2, "Untimed steps first (tracing, XLA compilation).")
    flags.DEFINE_enum("precision", "mixed_float16", PRECISIONS, "The fast policy under test.")
    flags.DEFINE_enum(
        "baseline_precision", "float32", PRECISIONS, "The policy it is compared with."
    )
    flags.DEFINE_enum("jit_compile", "true", ["true", "false"], "XLA-compile the step.")
    flags.DEFINE_integer("replicas", 0, "GPUs to use (0: all visible).")
    flags.DEFINE_integer(
        "cpu_replicas",
        0,
        "Without GPUs: split the CPU into this many logical devices for the mirrored check "
        "(0: skip that check on a CPU).",
    )
    flags.DEFINE_integer("featurize_batch", 256, "Texts per featurization call.")
    flags.DEFINE_integer("featurize_window", 256, "Bytes per featurization call.")
    flags.DEFINE_integer("featurize_texts", 2048, "Texts featurized per timed pass.")
    flags.DEFINE_integer("featurize_passes", 3, "Timed featurization passes (median).")
    flags.DEFINE_integer("check_hidden", 512, "mLSTM units of the mirrored check.")
    flags.DEFINE_integer("check_batch", 16, "Rows per replica of the mirrored check.")
    flags.DEFINE_integer("check_seq", 64, "Characters per row of the mirrored check.")
    flags.DEFINE_integer("check_steps", 3, "Steps of the mirrored check.")
    flags.DEFINE_float(
        "weights_atol",
        1e-5,
        "Largest absolute weight difference allowed between the mirrored and the one-device "
        "run (float32: the all-reduce only changes the order of the gradient sums).",
    )
    flags.DEFINE_float(
        "grad_norm_rtol",
        1e-4,
        "Largest relative difference allowed between the mirrored and the one-device run's "
        "gradient norm at each step.",
    )
    flags.DEFINE_integer("demo_steps", 300, "Steps of the demo-corpus run.")
    flags.DEFINE_integer("demo_hidden", 256, "mLSTM units of the demo run (the demo recipe's).")
    flags.DEFINE_integer("demo_batch", 32, "Global rows of the demo run.")
    flags.DEFINE_integer("demo_seq", 128, "Characters per row of the demo run.")
    flags.DEFINE_float("demo_lr", 5e-3, "Peak learning rate of the demo run.")
    flags.DEFINE_float(
        "loss_drop", 0.9, "The demo loss must end below this fraction of where it started."
    )
    flags.DEFINE_float(
        "min_loss_scale", 1.0, "Lowest acceptable dynamic loss scale (below: collapsing)."
    )
    flags.DEFINE_float(
        "max_skipped_fraction", 0.05, "Largest share of demo steps skipped as non-finite."
    )
    flags.DEFINE_string("work_dir", "", "Scratch folder for the runs (default: a temporary one).")
    flags.DEFINE_integer("seed", 0, "Random seed.")


# --- helpers ------------------------------------------------------------------


def _scalars(summary_dir, tag):
    """{step: value} of a scalar the trainer wrote to TensorBoard under `summary_dir`."""
    import tensorflow as tf

    values = {}
    for path in sorted(glob.glob(os.path.join(summary_dir, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[int(event.step)] = float(tf.make_ndarray(value.tensor))
    return values


@contextlib.contextmanager
def _cpu_devices_as_replicas(devices):
    """Lets "mirrored" with no GPUs mirror over the given logical CPU devices."""
    from tf_mlstm.train import strategy as strategy_lib

    factory = strategy_lib.get_distribution_strategy

    def stand_in(strategy="default", num_gpus=None, **kwargs):
        if strategy == "mirrored" and num_gpus == 0:
            return strategy_lib.mirrored_strategy(devices)
        return factory(strategy, num_gpus=num_gpus, **kwargs)

    strategy_lib.get_distribution_strategy = stand_in
    try:
        yield
    finally:
        strategy_lib.get_distribution_strategy = factory


class Memory:
    """Peak memory of one stretch of work: the GPU allocator's, or the process's on a CPU."""

    def __init__(self, gpus):
        self.gpu = bool(gpus)
        self.source = (
            "tf.config.experimental.get_memory_info('GPU:0')['peak']"
            if self.gpu
            else "process peak RSS (ru_maxrss; never decreases)"
        )

    def reset(self):
        import tensorflow as tf

        gc.collect()
        if self.gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")

    def peak_mb(self):
        import tensorflow as tf

        if self.gpu:
            return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _train_config(model_dir, **overrides):
    from tf_mlstm.config import TrainConfig

    values = dict(
        model_dir=model_dir,
        embedding_size=FLAGS.embedding,
        jit_compile=FLAGS.jit_compile,
        seed=FLAGS.seed,
        log_every_steps=1,  # one TensorBoard point per step: rates, losses, loss scale
        eval_every_steps=0,
        sample_every_steps=0,
        checkpoint_every_steps=10**9,  # only the final checkpoint
        keep_checkpoints=1,
        shuffle_buffer=64,
    )
    values.update(overrides)
    return TrainConfig(**values).validate()


def _train(config, train_files):
    """Trains on the project's runner; returns (results, runner, per-step scalars)."""
    from tf_mlstm.tasks.language_model import LanguageModelTask
    from tf_mlstm.train.runner import Runner

    trainer = Runner(LanguageModelTask(config, train_files, []), config)
    results = trainer.train()
    summary_dir = os.path.join(config.model_dir, "train")
    scalars = {
        tag: _scalars(summary_dir, tag)
        for tag in ("loss", "chars_per_second", "loss_scale", "gradient_norm")
    }
    return results, trainer, scalars


# --- checks -------------------------------------------------------------------


def check_speed(precision, strategy, num_gpus, replicas, train_files, work_dir, memory):
    """Training chars/s and peak memory of the big step in `precision`."""
    config = _train_config(
        os.path.join(work_dir, f"speed_{precision}"),
        hidden_size=FLAGS.hidden,
        batch_size=FLAGS.batch * replicas,
        seq_length=FLAGS.seq,
        precision=precision,
        max_steps=FLAGS.warmup + FLAGS.steps,
        distribution_strategy=strategy,
        num_gpus=num_gpus,
    )
    memory.reset()
    results, trainer, scalars = _train(config, train_files)
    peak = memory.peak_mb()
    rates = [rate for step, rate in sorted(scalars["chars_per_second"].items())]
    timed = rates[FLAGS.warmup :] or rates
    chars_per_s = float(np.median(timed))
    del trainer
    scales = list(scalars["loss_scale"].values())
    return {
        "chars_per_s": chars_per_s,
        "step_ms": 1e3 * config.batch_size * config.seq_length / chars_per_s,
        "peak_memory_mb": peak,
        "loss_scale": scales[-1] if scales else None,
        "skipped_steps": results["skipped_steps"],
        "final_loss": list(scalars["loss"].values())[-1],
        "timed_steps": len(timed),
    }


def check_featurize(precision, texts, memory):
    """Featurization chars/s of a randomly initialized H-unit model in `precision`."""
    import keras

    from tf_mlstm.models.language_model import MLSTMLanguageModel
    from tf_mlstm.transfer import features as features_lib

    keras.utils.set_random_seed(FLAGS.seed)
    model = MLSTMLanguageModel(
        hidden_size=FLAGS.hidden, embedding_size=FLAGS.embedding, dtype=precision
    )
    model.build()
    featurizer = features_lib.TextFeaturizer(
        model, FLAGS.featurize_batch, FLAGS.featurize_window, kinds=("cell",)
    )
    chars = int((features_lib.text_lengths(texts) + 1).sum())  # + the framing byte each
    memory.reset()
    featurizer(texts, progress=False)  # tracing
    times = []
    for _ in range(FLAGS.featurize_passes):
        start = time.perf_counter()
        out = featurizer(texts, progress=False)
        times.append(time.perf_counter() - start)
    if not np.all(np.isfinite(out["cell"])):
        raise RuntimeError("featurization produced non-finite features")
    return {
        "precision": precision,
        "chars_per_s": chars / float(np.median(times)),
        "texts": len(texts),
        "chars": chars,
        "batch": FLAGS.featurize_batch,
        "window": FLAGS.featurize_window,
        "peak_memory_mb": memory.peak_mb(),
    }


def check_mirrored(replicas, num_gpus, train_files, work_dir):
    """Gradient norms and weights of a few mirrored steps vs. one device, same global batch."""
    global_batch = FLAGS.check_batch * replicas
    weights, norms = {}, {}
    for strategy in ("one_device", "mirrored"):
        config = _train_config(
            os.path.join(work_dir, f"equal_{strategy}"),
            hidden_size=FLAGS.check_hidden,
            batch_size=global_batch,
            seq_length=FLAGS.check_seq,
            precision="float32",
            max_steps=FLAGS.check_steps,
            distribution_strategy=strategy,
            num_gpus=(1 if num_gpus else 0) if strategy == "one_device" else num_gpus,
        )
        _, trainer, scalars = _train(config, train_files)
        if strategy == "mirrored" and trainer.strategy.num_replicas_in_sync != replicas:
            raise RuntimeError(
                f"mirrored check ran on {trainer.strategy.num_replicas_in_sync} replicas, "
                f"expected {replicas}"
            )
        weights[strategy] = [np.asarray(w, np.float64) for w in trainer.model.get_weights()]
        norms[strategy] = [norm for _, norm in sorted(scalars["gradient_norm"].items())]
        del trainer
    one, mirrored = weights["one_device"], weights["mirrored"]
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(one, mirrored))
    moved = max(float(np.max(np.abs(a))) for a in one)
    if len(norms["one_device"]) != FLAGS.check_steps or len(norms["mirrored"]) != FLAGS.check_steps:
        raise RuntimeError(
            f"mirrored check: expected {FLAGS.check_steps} gradient norms, got {norms}"
        )
    norm_diff = max(abs(m - o) / o for o, m in zip(norms["one_device"], norms["mirrored"]))
    return {
        "replicas": replicas,
        "global_batch": global_batch,
        "steps": FLAGS.check_steps,
        "precision": "float32",
        "max_abs_weight_diff": diff,
        "tolerance": FLAGS.weights_atol,
        "largest_weight": moved,
        "weights_equal": diff <= FLAGS.weights_atol,
        "grad_norms": norms,
        "max_grad_norm_rel_diff": norm_diff,
        "grad_norm_rtol": FLAGS.grad_norm_rtol,
        "grad_norms_equal": norm_diff <= FLAGS.grad_norm_rtol,
    }


def check_demo(precision, num_gpus, train_files, work_dir):
    """A --demo_steps run on the demo corpus: loss falls, loss scale sane, few skips."""
    config = _train_config(
        os.path.join(work_dir, "demo"),
        hidden_size=FLAGS.demo_hidden,
        batch_size=FLAGS.demo_batch,
        seq_length=FLAGS.demo_seq,
        lr=FLAGS.demo_lr,
        precision=precision,
        max_steps=FLAGS.demo_steps,
        num_gpus=min(num_gpus, 1),
        distribution_strategy="one_device",
    )
    results, trainer, scalars = _train(config, train_files)
    del trainer
    losses = [loss for _, loss in sorted(scalars["loss"].items())]
    tenth = max(1, len(losses) // 10)
    first, last = float(np.mean(losses[:tenth])), float(np.mean(losses[-tenth:]))
    scales = [scale for _, scale in sorted(scalars["loss_scale"].items())]
    scaled = bool(scales)
    scale_ok = (not scaled) or (
        bool(np.all(np.isfinite(scales))) and min(scales) >= FLAGS.min_loss_scale
    )
    skipped = results["skipped_steps"]
    return {
        "steps": results["step"],
        "precision": precision,
        "hidden": FLAGS.demo_hidden,
        "loss_first_tenth": first,
        "loss_last_tenth": last,
        "loss_falls": last < FLAGS.loss_drop * first,
        "loss_scaling": scaled,
        "loss_scale_min": min(scales) if scaled else None,
        "loss_scale_final": scales[-1] if scaled else None,
        "loss_scale_ok": scale_ok,
        "skipped_steps": skipped,
        "skipped_ok": skipped <= FLAGS.max_skipped_fraction * results["step"],
        "chars_per_s": float(np.median(list(scalars["chars_per_second"].values()))),
    }


# --- main ---------------------------------------------------------------------


def _demo_texts(count):
    from tf_mlstm.data import demo
    from tf_mlstm.data.text import normalize_text

    with open(demo.DEMO_CORPUS, encoding="utf-8") as f:
        lines = [normalize_text(line) for line in f if line.strip()]
    return [lines[i % len(lines)] for i in range(count)]


def _check_flags():
    positive = (
        "hidden", "batch", "seq", "embedding", "steps", "featurize_batch", "featurize_window",
        "featurize_texts", "featurize_passes", "check_hidden", "check_batch", "check_seq",
        "check_steps", "demo_steps", "demo_hidden", "demo_batch", "demo_seq",
    )  # fmt: skip
    for name in positive:
        if FLAGS[name].value <= 0:
            raise app.UsageError(f"--{name} must be positive, got {FLAGS[name].value}")
    for name in ("warmup", "replicas", "cpu_replicas"):
        if FLAGS[name].value < 0:
            raise app.UsageError(f"--{name} must be >= 0, got {FLAGS[name].value}")
    unknown = [name for name in FLAGS.checks if name not in CHECKS]
    if unknown:
        raise app.UsageError(f"--checks: unknown {unknown}; choose from {list(CHECKS)}")
    if FLAGS.demo_steps < 10:
        raise app.UsageError("--demo_steps must be >= 10 to compare first and last tenths")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    _check_flags()
    begin = time.monotonic()
    import tensorflow as tf

    from tf_mlstm.auto import hardware
    from tf_mlstm.data import tfrecord
    from tf_mlstm.train import data_files

    machine = hardware.detect()
    gpus = len(machine.gpus)
    if FLAGS.replicas > gpus:
        raise app.UsageError(f"--replicas={FLAGS.replicas} but {gpus} GPUs are visible")
    num_gpus = FLAGS.replicas or gpus
    cpu_devices = []
    if not gpus and FLAGS.cpu_replicas > 1:
        # Before anything starts the runtime: logical devices are fixed at start-up.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * FLAGS.cpu_replicas
        )
        cpu_devices = [f"/cpu:{i}" for i in range(FLAGS.cpu_replicas)]
    logging.info("Hardware: %s.", machine.describe())
    memory = Memory(machine.gpus)
    replicas = max(num_gpus, 1)
    strategy = "mirrored" if num_gpus > 1 else "one_device"
    summary = {
        "hardware": machine.to_dict(),
        "tensorflow": tf.__version__,
        "replicas": replicas,
        "memory_source": memory.source,
    }
    failures = []
    with tempfile.TemporaryDirectory(prefix="tf_mlstm_gpu_check_") as scratch:
        work_dir = FLAGS.work_dir or scratch
        data_dir = data_files.build_demo_tfrecords(os.path.join(work_dir, "demo_data"))
        train_files = tfrecord.split_files(data_dir, "train")

        if "train" in FLAGS.checks:
            train = {
                "hidden": FLAGS.hidden,
                "batch_per_replica": FLAGS.batch,
                "seq": FLAGS.seq,
                "jit_compile": FLAGS.jit_compile == "true",
            }
            for precision in (FLAGS.precision, FLAGS.baseline_precision):
                logging.info(
                    "Speed: %s, H=%d, %d rows/replica.", precision, FLAGS.hidden, FLAGS.batch
                )
                train[precision] = check_speed(
                    precision, strategy, num_gpus, replicas, train_files, work_dir, memory
                )
            fast, base = train[FLAGS.precision], train[FLAGS.baseline_precision]
            train["speedup"] = fast["chars_per_s"] / base["chars_per_s"]
            summary["train"] = train

        if "featurize" in FLAGS.checks:
            logging.info("Featurization: %s, H=%d.", FLAGS.precision, FLAGS.hidden)
            summary["featurize"] = check_featurize(
                FLAGS.precision, _demo_texts(FLAGS.featurize_texts), memory
            )

        mirror_replicas = num_gpus if gpus else len(cpu_devices)
        if "mirrored" in FLAGS.checks and mirror_replicas >= 2:
            logging.info("Mirrored vs one device: %d replicas.", mirror_replicas)
            stand_in = (
                _cpu_devices_as_replicas(cpu_devices) if cpu_devices else contextlib.nullcontext()
            )
            with stand_in:
                summary["mirrored"] = check_mirrored(
                    mirror_replicas, num_gpus, train_files, work_dir
                )
            if not summary["mirrored"]["grad_norms_equal"]:
                failures.append("mirrored gradient norms differ from the one-device run")
            if not summary["mirrored"]["weights_equal"]:
                failures.append("mirrored weights differ from the one-device run")
        elif "mirrored" in FLAGS.checks:
            summary["mirrored"] = {"skipped": "needs 2+ GPUs (or --cpu_replicas=2 on a CPU)"}

        if "demo" in FLAGS.checks:
            logging.info("Demo run: %d steps in %s.", FLAGS.demo_steps, FLAGS.precision)
            summary["demo"] = check_demo(FLAGS.precision, num_gpus, train_files, work_dir)
            for key, what in (
                ("loss_falls", "demo loss did not fall"),
                ("loss_scale_ok", "demo loss scale non-finite or collapsing"),
                ("skipped_ok", "too many skipped demo steps"),
            ):
                if not summary["demo"][key]:
                    failures.append(what)
    summary["failures"] = failures
    summary["passed"] = not failures
    summary["wall_s"] = time.monotonic() - begin
    print(json.dumps(summary, sort_keys=True), flush=True)
    if failures:
        sys.exit(1)


def run():
    """Console entry point."""
    define_flags()
    app.run(main)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run()
