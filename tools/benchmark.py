"""Throughput benchmark: training and featurization speed, FLOP rates, input pipeline, conversion.

Prints one JSON line per configuration on stdout (logs go to stderr):

  python tools/benchmark.py --hidden=1024 --batch=64 --modes=train,featurize
  python tools/benchmark.py --modes=pipeline,convert

Modes:
  train      the runner's own training step, `tf_mlstm.train.runner.Runner.train_step`, the one
             `tf-mlstm-train` runs (forward, backward, the all-reduce of gradients and
             statistics, Adam with global-norm clipping, the carried state), on one replica,
             fed random bytes by the language model's synthetic task (what --precision=auto
             times); every train line names it in `timed_step`.
  featurize  inference-only features of review texts with `tf_mlstm.transfer.features`
             (sorted by length, larger batches, no gradient bookkeeping); for `keras_lstm` the
             same windows through the LSTM's forward pass.
  pipeline   TFRecord shards to batches with `tf_mlstm.data.pipeline.lm_dataset`.
  convert    JSON lines to TFRecord shards with `tf_mlstm.data.convert` (MB/s of input).

Implementations (`--impls`): `mlstm` (this project's model) and `keras_lstm`
(`keras.layers.LSTM` with the same hidden size, byte embedding and head, trained
the same way), each with XLA off and on (`--jit`).

Every train/featurize line carries `peak_fraction`: the achieved GFLOP/s over
the machine's float32 matrix rate `matmul_gflops` (a 2048 x 2048 x 2048
product through TensorFlow), the median of samples taken before, between the
timed steps of, and after that configuration, so that on a shared machine both
see the same load; `peak_fraction_vs_max` divides by the best sample instead
(`matmul_gflops_max`, the least disturbed one), and `load_average` says how
busy the machine was. Under a mixed policy the line also carries
`matmul_gflops_compute`, the square product's rate in the compute dtype
(bfloat16 or float16), and `peak_fraction_compute` over it. `skinny_gflops` is
the rate of the step's own recurrent product shape (batch x H @ H x 4H) and
`skinny_fm_gflops` that of the feature-major orientation the mLSTM loop uses
(4H x H @ H x batch).

`matrix_fraction` (mLSTM lines) is the step's own limit: the time its matrix
products would take alone, each timed at its real shape in the policy's
compute dtype (the recurrent products per time step, the weight gradients and
the head over all rows; `mlstm_products`), over the time the step takes;
`matrix_gflops` is the rate those products reach together.

Every line also says what it ran on: `cpu_model`, `cpu_extensions` (the vector and
matrix extensions oneDNN can use: avx2, avx512f, avx512_bf16, amx_bf16, ...) and `gpus`
(name and compute capability each), from `tf_mlstm.auto.hardware`; the same summary is
logged once at the start. A number means little without them: the same step runs 5.7x
faster or slower in bfloat16 depending on whether the CPU has AMX.

FLOPs per character (multiply-adds count 2; see docs/performance.md):
  mlstm train      6 (H·H + H·4H) + 6·256·H   forward and two backward products of the
                                              recurrent matrices and the head; the input
                                              side is a gather from 256-row tables
  mlstm featurize  2 (H·H + H·4H)             forward only, no head
  lstm train       6 (H·4H + E·4H) + 6·256·H  Keras multiplies the E-wide embedding per step
  lstm featurize   2 (H·4H + E·4H)
"""

import dataclasses
import itertools
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

IMPLS = ("mlstm", "keras_lstm")
MODES = ("train", "featurize", "pipeline", "convert")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
VOCAB = 256
RESULT_KEYS = (
    "impl",
    "mode",
    "jit_compile",
    "hidden",
    "batch",
    "seq",
    "precision",
    "chars_per_s",
    "step_ms",
    "flops_per_char",
    "gflops",
    "peak_fraction",
    "matrix_fraction",
    "matmul_gflops",
    "skinny_gflops",
    "skinny_fm_gflops",
)
# What a train line's `timed_step` names: the step it timed.
TIMED_STEP = "tf_mlstm.train.runner.Runner.train_step"
# What every line (train, featurize, pipeline, convert) says about the machine.
HARDWARE_KEYS = ("cpu_model", "cpu_extensions", "gpus")


def define_flags():
    """Defines the benchmark's flags."""
    flags.DEFINE_list("hidden", None, "Hidden sizes. Default: 512,1024,4096.")
    flags.DEFINE_list(
        "batch", None, "Batch sizes (rows). Default: 32,64 (8 for H=4096 without a GPU)."
    )
    flags.DEFINE_list("seq", ["256"], "Sequence lengths (characters per row per step).")
    flags.DEFINE_list("modes", list(MODES), f"Modes, from {list(MODES)}.")
    flags.DEFINE_list("impls", list(IMPLS), f"Implementations, from {list(IMPLS)}.")
    flags.DEFINE_list(
        "precisions",
        None,
        f"Precision policies, from {list(PRECISIONS)}. Default: all three on a GPU; on a CPU "
        "float32, plus mixed_bfloat16 where the CPU has bfloat16 matrix units (AMX, AVX512-BF16).",
    )
    flags.DEFINE_list("jit", ["false", "true"], "XLA settings to measure (true/false).")
    flags.DEFINE_integer("embedding", 64, "Byte embedding width.")
    flags.DEFINE_integer("steps", 5, "Timed training steps (the median is reported).")
    flags.DEFINE_integer("warmup", 2, "Untimed training steps first (tracing, compilation).")
    flags.DEFINE_integer(
        "featurize_batch", 0, "Texts per featurization batch; 0: 4 x the training batch."
    )
    flags.DEFINE_integer(
        "featurize_batches",
        2,
        "Featurization batches per timed pass, drawn as a whole-corpus featurization forms them.",
    )
    flags.DEFINE_integer("featurize_passes", 3, "Timed featurization passes (median).")
    flags.DEFINE_integer(
        "featurize_max_chars",
        1023,
        "Texts are cut to this many bytes (0: whole texts); 1023 plus the framing byte fills "
        "four 256-byte windows.",
    )
    flags.DEFINE_string(
        "corpus",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"),
        "Review corpora folder; imdb/unsup.jsonl (conversion, pipeline) and imdb/train.jsonl "
        "(featurization texts) are used when present, else generated text.",
    )
    flags.DEFINE_integer(
        "convert_max_documents", 0, "Documents converted in `convert` mode (0: the whole file)."
    )
    flags.DEFINE_integer("pipeline_batches", 200, "Timed batches in `pipeline` mode.")
    flags.DEFINE_integer("intra_op_threads", 0, "TensorFlow intra-op threads (0: TF default).")
    flags.DEFINE_integer("inter_op_threads", 0, "TensorFlow inter-op threads (0: TF default).")
    flags.DEFINE_integer("seed", 0, "Random seed of weights and data.")
    flags.DEFINE_string("output", "", "Also append the JSON lines to this file.")


# --- helpers ------------------------------------------------------------------


def _ints(values, name):
    try:
        out = [int(v) for v in values]
    except ValueError as error:
        raise app.UsageError(f"--{name} takes integers, got {values}: {error}") from None
    if any(v <= 0 for v in out):
        raise app.UsageError(f"--{name} values must be positive, got {out}")
    return out


def _choices(values, allowed, name):
    bad = [v for v in values if v not in allowed]
    if bad:
        raise app.UsageError(f"--{name}: unknown {bad}; choose from {list(allowed)}")
    return list(values)


def _bools(values, name):
    table = {"true": True, "1": True, "false": False, "0": False}
    bad = [v for v in values if v.lower() not in table]
    if bad:
        raise app.UsageError(f"--{name}: {bad} are not true/false")
    return [table[v.lower()] for v in values]


_COMPUTE_DTYPES = {
    "float32": "float32",
    "mixed_float16": "float16",
    "mixed_bfloat16": "bfloat16",
}


def cpu_has_bfloat16_units(cpuinfo="/proc/cpuinfo"):
    """Whether the CPU multiplies bfloat16 in hardware (AMX or AVX512-BF16).

    There oneDNN runs bfloat16 products faster than float32, so `mixed_bfloat16`
    is worth measuring on the CPU too. This is wider than what `--precision=auto`
    picks bfloat16 for (AMX only, see `tf_mlstm.auto.hardware`): measuring the
    AVX512-BF16-only chips here is how that choice gets revisited.

    Args:
      cpuinfo: the cpuinfo file; a missing one means no.

    Returns:
      A bool.
    """
    from tf_mlstm.auto import hardware

    _, cpu_flags = hardware.read_cpuinfo(cpuinfo)
    return bool(cpu_flags & {"amx_bf16", "avx512_bf16"})


def _peak_rss_mb():
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def flops_per_char(impl, mode, hidden, embedding):
    """Nominal FLOPs per character (a multiply-add is 2), as in the module docstring.

    Args:
      impl: "mlstm" or "keras_lstm".
      mode: "train" or "featurize".
      hidden: H.
      embedding: the byte embedding width E.

    Returns:
      FLOPs per character (int).
    """
    h = hidden
    if impl == "mlstm":
        recurrent = h * h + h * 4 * h
    else:
        recurrent = h * 4 * h + embedding * 4 * h
    if mode == "train":
        return 6 * recurrent + 6 * VOCAB * h
    return 2 * recurrent


def mlstm_products(mode, hidden, batch, seq):
    """The matrix products of the mLSTM's step at their real shapes, with their FLOPs per slot.

    A slot is one byte position the model runs (a character, or padding when
    featurizing). The recurrent products run once per time step, feature-major
    (`layers/recurrence.py`); the weight gradients and the head once per
    sequence over all B x T rows. Their FLOPs add up to `flops_per_char`.

    Args:
      mode: "train" or "featurize".
      hidden: H.
      batch: the rows B of a step.
      seq: the time steps T.

    Returns:
      A list of ((m, k, n), FLOPs per slot).
    """
    h, rows = hidden, batch * seq
    forward = [((h, h, batch), 2 * h * h), ((4 * h, h, batch), 8 * h * h)]
    if mode != "train":
        return forward
    return forward + [
        ((h, 4 * h, batch), 8 * h * h),  # d h from the gates, each step
        ((h, h, batch), 2 * h * h),  # d h from the multiplicative path, each step
        ((h, rows, 4 * h), 8 * h * h),  # the recurrent kernels' gradients, once
        ((h, rows, h), 2 * h * h),
        ((rows, h, VOCAB), 2 * VOCAB * h),  # the head: logits, d hidden, d kernel
        ((rows, VOCAB, h), 2 * VOCAB * h),
        ((h, rows, VOCAB), 2 * VOCAB * h),
    ]


def matrix_fraction(products, rate_of, slots_per_s):
    """The step's rate over the rate its own products reach alone.

    Args:
      products: `mlstm_products`' list.
      rate_of: `rate_of((m, k, n))` is that product's GFLOP/s in the compute dtype.
      slots_per_s: the byte positions the model ran per second.

    Returns:
      Between 0 and about 1: the time the products alone would take, over the step's.

    Example:

    >>> matrix_fraction([((8, 8, 8), 100.0)], lambda shape: 1.0, 5e6)
    0.5
    """
    ideal_s_per_slot = sum(flops / (rate_of(shape) * 1e9) for shape, flops in products)
    return ideal_s_per_slot * slots_per_s


class MatrixRates:
    """float32 matrix-product rates through TensorFlow, in GFLOP/s (medians)."""

    def __init__(self, tf):
        self._tf = tf
        self._cache = {}
        self._squares = {}
        self.samples = []
        rng = np.random.RandomState(0)
        square = tf.constant(rng.randn(2048, 2048).astype("float32"))
        self._square = tf.function(lambda: tf.reduce_sum(tf.matmul(square, square)[:1, :1]))
        self._square()

    def square(self, repeats=5):
        """Rates of `repeats` 2048 x 2048 x 2048 products, also kept in `samples`."""
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            self._square().numpy()
            rates.append(2 * 2048**3 / (time.perf_counter() - start) / 1e9)
        self.samples.extend(rates)
        return rates

    def square_in(self, dtype, repeats=3):
        """Median rate of a 2048 x 2048 x 2048 product in `dtype` (e.g. bfloat16)."""
        tf = self._tf
        if dtype not in self._squares:
            square = tf.cast(tf.constant(np.random.RandomState(0).randn(2048, 2048)), dtype)
            self._squares[dtype] = tf.function(
                lambda: tf.reduce_sum(tf.cast(tf.matmul(square, square)[:1, :1], tf.float32))
            )
            self._squares[dtype]()
        rates = []
        for _ in range(repeats):
            start = time.perf_counter()
            self._squares[dtype]().numpy()
            rates.append(2 * 2048**3 / (time.perf_counter() - start) / 1e9)
        return float(np.median(rates))

    def product(self, m, k, n, dtype="float32"):
        """Median rate of `[m, k] @ [k, n]` in `dtype`, in a loop as the step runs it (cached)."""
        key = (m, k, n, dtype)
        if key not in self._cache:
            tf = self._tf
            rng = np.random.RandomState(0)
            a = tf.cast(tf.constant(rng.randn(m, k).astype("float32") / k), dtype)
            b = tf.cast(tf.constant(rng.randn(k, n).astype("float32")), dtype)
            # About 2 GFLOP per timing, between 2 and 1000 products.
            count = min(1000, max(2, int(2e9 / (2 * m * k * n))))

            @tf.function(autograph=False)
            def run():
                return tf.while_loop(
                    lambda i, total: i < count,
                    lambda i, total: (i + 1, total + tf.cast(tf.matmul(a, b)[0, 0], tf.float32)),
                    (tf.constant(0), tf.constant(0.0)),
                )[1]

            run()
            times = []
            for _ in range(3):
                start = time.perf_counter()
                run().numpy()
                times.append(time.perf_counter() - start)
            self._cache[key] = 2 * m * k * n * count / float(np.median(times)) / 1e9
        return self._cache[key]

    def skinny(self, batch, hidden):
        """(batch x H @ H x 4H, 4H x H @ H x batch) rates, in a loop as the RNN runs them."""
        return self.product(batch, hidden, 4 * hidden), self.product(4 * hidden, hidden, batch)


def _corpus_texts(path, count, max_chars, seed):
    """Up to `count` review texts from a JSON-lines file, else generated ones."""
    texts = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                text = record.get("text") or record.get("reviewText") or ""
                if text:
                    texts.append(text)
                if len(texts) >= count:
                    break
    rng = np.random.RandomState(seed)
    words = "great good bad terrible plot acting the a movie film was is and but not very".split()
    while len(texts) < count:
        texts.append(" ".join(rng.choice(words, rng.randint(20, 400))) + ".")
    if max_chars:
        texts = [t.encode("utf-8")[:max_chars].decode("utf-8", "ignore") for t in texts]
    return texts


def _featurize_texts(path, rows, batches, max_chars, seed, pool=25000):
    """`batches` batches of `rows` texts as a featurization of the whole corpus would form.

    The featurizer sorts texts by length and batches neighbours, so in a large
    corpus a batch holds texts of nearly one length and padding is small. The
    batches here are runs of `rows` consecutive texts in the length order of
    `pool` texts, centred on evenly spaced quantiles (1/4 and 3/4 for two).
    """
    if not os.path.exists(path):
        pool = 0  # Generated text: no need for a large pool.
    texts = _corpus_texts(path, max(pool, rows * batches), max_chars, seed)
    order = np.argsort([len(t.encode("utf-8")) for t in texts], kind="stable")
    centres = (np.arange(batches) + 0.5) / batches * len(texts)
    starts = np.clip(centres - rows // 2, 0, len(texts) - rows).astype(int)
    return [texts[i] for start in starts for i in order[start : start + rows]]


# --- models -------------------------------------------------------------------


def _keras_lstm_class():
    import keras
    import tensorflow as tf

    class KerasLSTMLanguageModel(keras.Model):
        """embed -> keras.layers.LSTM -> logits, the mLSTM model's layout."""

        def __init__(self, hidden_size, embedding_size, **kwargs):
            super().__init__(**kwargs)
            self.hidden_size = hidden_size
            self.embedding = keras.layers.Embedding(VOCAB, embedding_size, dtype=self.dtype_policy)
            self.lstm = keras.layers.LSTM(
                hidden_size, return_sequences=True, return_state=True, dtype=self.dtype_policy
            )
            self.head = keras.layers.Dense(VOCAB, dtype=self.dtype_policy)

        def call(self, ids, initial_state=None, training=None, valid=None):
            x = self.embedding(tf.cast(ids, tf.int32))
            seq, h, c = self.lstm(x, initial_state=initial_state, training=training, mask=valid)
            return tf.cast(self.head(seq), tf.float32), [h, c]

        def initial_state(self, batch_size):
            zeros = tf.zeros((batch_size, self.hidden_size), self.compute_dtype)
            return [zeros, zeros]

    return KerasLSTMLanguageModel


def _build_model(impl, hidden, embedding, precision, seed):
    import keras

    from tf_mlstm.models.language_model import MLSTMLanguageModel

    keras.utils.set_random_seed(seed)
    if impl == "mlstm":
        model = MLSTMLanguageModel(
            hidden_size=hidden, embedding_size=embedding, dtype=precision, name="mlstm_lm"
        )
        model.build()
        return model
    model = _keras_lstm_class()(hidden, embedding, dtype=precision, name="keras_lstm_lm")
    model(np.zeros((1, 2), np.int32))
    return model


def _train_config(hidden, batch, seq, precision, jit, model_dir):
    """The `TrainConfig` of one benchmarked training run (one replica, no time budget)."""
    from tf_mlstm.config import TrainConfig

    return TrainConfig(
        model_dir=model_dir,
        hidden_size=hidden,
        embedding_size=FLAGS.embedding,
        batch_size=batch,
        seq_length=seq,
        precision=precision,
        jit_compile="true" if jit else "false",
        seed=FLAGS.seed,
        lr=1e-3,
        clip_norm=1.0,
        max_steps=FLAGS.warmup + FLAGS.steps,
    ).validate()


def _train_task(impl, config):
    """The language model's synthetic-data task: the one `--precision=auto` times.

    For `keras_lstm`, the same task (data, loss, carried state) with the Keras
    LSTM model in place of the mLSTM, so that both train through the same step.
    """
    from tf_mlstm.tasks.language_model import SyntheticLanguageModelTask

    if impl == "mlstm":
        return SyntheticLanguageModelTask(config)

    class KerasLSTMTask(SyntheticLanguageModelTask):
        def build_model(self, context):
            self.model = _build_model(
                impl, config.hidden_size, config.embedding_size, config.precision, config.seed
            )
            return self.model, self.model.trainable_variables

    return KerasLSTMTask(config)


def build_runner(impl, hidden, batch, seq, precision, jit, model_dir):
    """A `Runner` of the language-model task on random bytes: the step users train with.

    Its step is the runner's own compiled one (`Runner.train_step`: forward
    and the hand-written sequence gradient, XLA-compiled when `jit`; the
    all-reduce of the gradients with the statistics and stop flags; the
    gradient norm; Adam with global-norm clipping; the step counters and the
    carried state), under the strategy `tf-mlstm-train` uses by default (one
    replica), fed through the runner's input iterator by the synthetic twin
    of `LanguageModelTask` (one random block of bytes, repeated).

    Args:
      impl: "mlstm" or "keras_lstm".
      hidden: units.
      batch: rows per step.
      seq: characters per row.
      precision: the precision policy.
      jit: XLA-compile the per-replica computation.
      model_dir: a scratch run folder (the runner writes nothing there unless asked to save).

    Returns:
      The `tf_mlstm.train.runner.Runner`.
    """
    from tf_mlstm.train.runner import Runner

    config = _train_config(hidden, batch, seq, precision, jit, model_dir)
    return Runner(_train_task(impl, config), config)


# --- modes --------------------------------------------------------------------


def run_train(impl, hidden, batch, seq, precision, jit, between):
    """Median time of the runner's training step (`build_runner`); returns the result fields.

    `between()` runs after each timed step (it samples the matrix rate, so that
    the rate and the steps see the same load on a shared machine).
    """
    with tempfile.TemporaryDirectory(prefix="tf_mlstm_benchmark_run_") as model_dir:
        runner = build_runner(impl, hidden, batch, seq, precision, jit, model_dir)
        times = []
        for index in range(FLAGS.warmup + FLAGS.steps):
            start = time.perf_counter()
            # It returns once the statistics are read back, as in the training loop.
            stats, _, norm, finite = runner.train_step()
            if index >= FLAGS.warmup:
                times.append(time.perf_counter() - start)
                between()
        bits, chars = (float(v) for v in stats[:2])
        del runner
    if not (finite and np.isfinite(bits)):
        raise RuntimeError(f"{impl} H={hidden}: non-finite step (|grad| {norm}, bits {bits})")
    seconds = float(np.median(times))
    return {
        "chars_per_s": batch * seq / seconds,
        "step_ms": 1e3 * seconds,
        "timed": len(times),
        "timed_step": TIMED_STEP,
        "loss": bits / max(chars, 1.0) * float(np.log(2.0)),
    }


def run_featurize(impl, hidden, batch, seq, precision, jit, between):
    """Featurization chars/s over sorted-by-length batches of review texts."""
    import tensorflow as tf

    from tf_mlstm.data import framing
    from tf_mlstm.models import featurize
    from tf_mlstm.transfer import features as features_lib

    rows = FLAGS.featurize_batch or 4 * batch
    texts = _featurize_texts(
        os.path.join(FLAGS.corpus, "imdb", "train.jsonl"),
        rows,
        FLAGS.featurize_batches,
        FLAGS.featurize_max_chars,
        FLAGS.seed,
    )
    lengths = features_lib.text_lengths(texts) + 1  # + the framing byte
    chars = int(lengths.sum())
    # Byte slots the model runs: each batch is padded to its longest text, in whole windows.
    slots = sum(
        len(batch) * -(-int(batch.max()) // seq) * seq
        for batch in np.array_split(np.sort(lengths), -(-len(lengths) // rows))
    )
    model = _build_model(impl, hidden, FLAGS.embedding, precision, FLAGS.seed)
    if impl == "mlstm":
        featurizer = features_lib.TextFeaturizer(model, rows, seq)
        if jit:
            # TextFeaturizer's computation with the model part XLA-compiled (the byte
            # encoding is string ops, which XLA does not compile).
            compiled = tf.function(
                lambda ids, valid: featurize.featurize_ids(model, ids, valid, seq),
                jit_compile=True,
            )

            @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
            def features_of(batch_texts):
                framed = framing.frame_ids_tf(batch_texts, pad_to_multiple=seq)
                return compiled(framed.ids, framed.valid)

            featurizer._features_of = features_of
        run = lambda: featurizer(texts, progress=False)
    else:
        run = _keras_featurizer(model, texts, rows, seq, jit)
    run()  # Warm-up: tracing and compilation.
    times = []
    for _ in range(FLAGS.featurize_passes):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        between()
    seconds = float(np.median(times))
    batches = -(-len(texts) // rows)
    return {
        "chars_per_s": chars / seconds,
        "step_ms": 1e3 * seconds / batches,
        "featurize_batch": rows,
        "texts": len(texts),
        "chars": chars,
        "padding_fraction": 1 - chars / slots,
        "timed": len(times),
    }


def _keras_featurizer(model, texts, rows, window, jit):
    """Windows of sorted texts through the LSTM's inference pass, the state carried."""
    import tensorflow as tf

    from tf_mlstm.data import framing
    from tf_mlstm.transfer import features as features_lib

    order = np.argsort(features_lib.text_lengths(texts), kind="stable")
    batches = [[texts[i] for i in order[s : s + rows]] for s in range(0, len(texts), rows)]

    @tf.function(jit_compile=jit)
    def run_window(ids, valid, h, c):
        _, (h, c) = model(ids, initial_state=[h, c], training=False, valid=valid > 0)
        return h, c

    def run():
        for batch_texts in batches:
            framed = framing.frame_ids_tf(tf.constant(batch_texts), pad_to_multiple=window)
            ids, valid = framed.ids, framed.valid
            h, c = model.initial_state(ids.shape[0])
            for start in range(0, ids.shape[1], window):
                h, c = run_window(
                    ids[:, start : start + window], valid[:, start : start + window], h, c
                )
            h.numpy()

    return run


def run_convert(path, output_dir):
    """Converts `path` (JSON lines) into TFRecord shards; returns the stats fields."""
    from tf_mlstm.config import ConvertConfig
    from tf_mlstm.data import convert

    config = ConvertConfig(
        input=path,
        output_dir=output_dir,
        text_key=("text", "reviewText"),
        num_shards=4,
        max_documents=FLAGS.convert_max_documents,
    )
    start = time.perf_counter()
    stats = convert.convert(config)
    seconds = time.perf_counter() - start
    return {
        "mb_per_s": stats["input_bytes"] / 1e6 / seconds,
        "input_mb": stats["input_bytes"] / 1e6,
        "records": stats["records"],
        "seconds": seconds,
        "source": os.path.basename(path),
    }


def run_pipeline(files, batch, seq):
    """Batches/s of `lm_dataset` from TFRecord shards to [batch, seq] bytes."""
    from tf_mlstm.data import pipeline

    dataset = pipeline.lm_dataset(files, batch, seq, training=True, shuffle_buffer=1024)
    iterator = iter(dataset)
    for _ in range(10):
        next(iterator)
    start = time.perf_counter()
    for _ in range(FLAGS.pipeline_batches):
        next(iterator)["inputs"].numpy()
    seconds = time.perf_counter() - start
    return {
        "chars_per_s": FLAGS.pipeline_batches * batch * seq / seconds,
        "step_ms": 1e3 * seconds / FLAGS.pipeline_batches,
        "timed": FLAGS.pipeline_batches,
    }


def _generated_jsonl(path, count, seed):
    with open(path, "w", encoding="utf-8") as f:
        for text in _corpus_texts("", count, 0, seed):
            f.write(json.dumps({"text": text}) + "\n")
    return path


# --- main ---------------------------------------------------------------------


def _emit(record):
    # The 1-minute load average: on a shared machine, other work slows both the steps and
    # the matrix-rate samples.
    record = {key: record.get(key) for key in RESULT_KEYS} | record
    record["load_average"] = os.getloadavg()[0]
    line = json.dumps(record)
    print(line, flush=True)
    if FLAGS.output:
        with open(FLAGS.output, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What the flags ask to measure."""

    modes: list
    impls: list
    precisions: list
    jits: list
    hiddens: list
    seqs: list
    batches: dict  # hidden size -> batch sizes

    def model_runs(self):
        """Every train/featurize configuration, in the order they are measured."""
        for hidden in self.hiddens:
            for batch, seq, precision, impl, jit in itertools.product(
                self.batches[hidden], self.seqs, self.precisions, self.impls, self.jits
            ):
                yield _ModelRun(impl, hidden, batch, seq, precision, jit)

    def all_batches(self):
        """The batch sizes of any hidden size, ascending."""
        return sorted({b for h in self.hiddens for b in self.batches[h]})


@dataclasses.dataclass(frozen=True)
class _ModelRun:
    """One train/featurize configuration."""

    impl: str
    hidden: int
    batch: int
    seq: int
    precision: str
    jit: bool

    @property
    def key(self):
        """What featurization and the pipeline are compared with training on (all but XLA)."""
        return (self.impl, self.hidden, self.batch, self.seq, self.precision)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import tensorflow as tf

    from tf_mlstm.auto import hardware

    _set_threads(tf)
    machine = hardware.detect()
    logging.info("Hardware: %s.", machine.describe())
    plan = _plan_from_flags(gpu=bool(machine.gpus))
    common = _common_fields(tf, machine)
    rates = MatrixRates(tf)
    train_rate = {}  # _ModelRun.key -> the fastest training chars/s measured
    with tempfile.TemporaryDirectory(prefix="tf_mlstm_benchmark_") as scratch:
        for mode in [m for m in ("train", "featurize") if m in plan.modes]:
            for model_run in plan.model_runs():
                _emit(_measure_model(mode, model_run, rates, common, train_rate))
        if "pipeline" in plan.modes or "convert" in plan.modes:
            _measure_data(plan, scratch, common, train_rate)


def _set_threads(tf):
    if FLAGS.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
    if FLAGS.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)


def _plan_from_flags(gpu):
    """The validated flags as a `_Plan`, with the defaults that depend on the machine."""
    modes = _choices(FLAGS.modes, MODES, "modes")
    impls = _choices(FLAGS.impls, IMPLS, "impls")
    default_precisions = (
        list(PRECISIONS)
        if gpu
        else ["float32", "mixed_bfloat16"]
        if cpu_has_bfloat16_units()
        else ["float32"]
    )
    precisions = _choices(FLAGS.precisions or default_precisions, PRECISIONS, "precisions")
    jits = _bools(FLAGS.jit, "jit")
    hiddens = _ints(FLAGS.hidden or ["512", "1024", "4096"], "hidden")
    seqs = _ints(FLAGS.seq, "seq")
    if FLAGS.batch:
        batches = {h: _ints(FLAGS.batch, "batch") for h in hiddens}
    else:
        batches = {h: [8] if h >= 4096 and not gpu else [32, 64] for h in hiddens}
    return _Plan(modes, impls, precisions, jits, hiddens, seqs, batches)


def _common_fields(tf, machine):
    """What every line says about the machine and the software."""
    return {
        "device": "gpu" if machine.gpus else "cpu",
        "cpu_count": os.cpu_count(),
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "tensorflow": tf.__version__,
        **machine.to_dict(),
    }


def _measure_model(mode, run, rates, common, train_rate):
    """Runs one train/featurize configuration between matrix-rate samples; returns its line."""
    rates.samples = []
    rates.square()
    logging.info(
        "%s %s H=%d batch=%d seq=%d %s jit=%s",
        run.impl,
        mode,
        run.hidden,
        run.batch,
        run.seq,
        run.precision,
        run.jit,
    )
    runner = run_train if mode == "train" else run_featurize
    between = lambda: rates.square(1)
    result = runner(run.impl, run.hidden, run.batch, run.seq, run.precision, run.jit, between)
    rates.square()
    record = _model_record(mode, run, result, rates, common)
    if mode == "train":
        train_rate[run.key] = max(train_rate.get(run.key, 0.0), result["chars_per_s"])
    elif run.key in train_rate:
        # Featurization over the fastest training step measured.
        record["train_ratio"] = result["chars_per_s"] / train_rate[run.key]
    return record


def _model_record(mode, run, result, rates, common):
    """The JSON line of a measured configuration: its rates against the machine's."""
    square = float(np.median(rates.samples))
    square_max = float(np.max(rates.samples))
    skinny, skinny_fm = rates.skinny(run.batch, run.hidden)
    compute = _COMPUTE_DTYPES[run.precision]
    # The rate the step's products could reach.
    compute_square = rates.square_in(compute) if compute != "float32" else None
    per_char = flops_per_char(run.impl, mode, run.hidden, FLAGS.embedding)
    gflops = per_char * result["chars_per_s"] / 1e9
    record = {
        "impl": run.impl,
        "mode": mode,
        "jit_compile": run.jit,
        "hidden": run.hidden,
        "batch": run.batch,
        "seq": run.seq,
        "precision": run.precision,
        "flops_per_char": per_char,
        "gflops": gflops,
        "peak_fraction": gflops / square,
        "matmul_gflops": square,
        "peak_fraction_vs_max": gflops / square_max,
        "matmul_gflops_max": square_max,
        "skinny_gflops": skinny,
        "skinny_fm_gflops": skinny_fm,
        **result,
        "peak_rss_mb": _peak_rss_mb(),
        **common,
    }
    if compute_square is not None:
        record["matmul_gflops_compute"] = compute_square
        record["peak_fraction_compute"] = gflops / compute_square
    if run.impl == "mlstm":
        # What the step reaches of its own products' rate, in its own precision.
        rows = result.get("featurize_batch", run.batch)
        products = mlstm_products(mode, run.hidden, rows, run.seq)
        slots = result["chars_per_s"] / (1 - result.get("padding_fraction", 0.0))
        rate_of = lambda shape: rates.product(*shape, dtype=compute)
        record["matrix_fraction"] = matrix_fraction(products, rate_of, slots)
        record["matrix_gflops"] = sum(f for _, f in products) / sum(
            f / rate_of(shape) for shape, f in products
        )
    return record


def _measure_data(plan, scratch, common, train_rate):
    """The conversion and the input pipeline, on the IMDB corpus or generated text."""
    source = os.path.join(FLAGS.corpus, "imdb", "unsup.jsonl")
    if not os.path.exists(source):
        count = FLAGS.convert_max_documents or 20000
        source = _generated_jsonl(os.path.join(scratch, "generated.jsonl"), count, 0)
    shards = os.path.join(scratch, "shards")
    converted = run_convert(source, shards)
    if "convert" in plan.modes:
        _emit({"impl": "tf_mlstm.data.convert", "mode": "convert", **converted, **common})
    if "pipeline" in plan.modes:
        _measure_pipelines(plan, shards, common, train_rate)


def _measure_pipelines(plan, shards, common, train_rate):
    """`lm_dataset` at every batch size and length, against the fastest training there."""
    from tf_mlstm.data import tfrecord

    files = tfrecord.split_files(shards, "train")
    for batch in plan.all_batches():
        for seq in plan.seqs:
            result = run_pipeline(files, batch, seq)
            # The fastest consumer measured at this batch and length.
            consumed = max(
                (rate for key, rate in train_rate.items() if key[2:4] == (batch, seq)),
                default=None,
            )
            _emit(
                {
                    "impl": "lm_dataset",
                    "mode": "pipeline",
                    "batch": batch,
                    "seq": seq,
                    **result,
                    "train_chars_per_s": consumed,
                    "train_ratio": result["chars_per_s"] / consumed if consumed else None,
                    **common,
                }
            )


def run():
    """Console entry point."""
    define_flags()
    app.run(main)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    run()
