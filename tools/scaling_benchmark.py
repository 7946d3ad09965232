"""Evidence for data-parallel scaling: weak scaling and large-batch convergence.

Usage (the numbers in docs/distributed.md came from the defaults):

  python tools/scaling_benchmark.py --output_dir=/tmp/scaling --plot=docs/large_batch.png

Two experiments, each a set of real `tf-mlstm-train` runs in subprocesses:

* **Weak scaling.** The same per-worker batch on 1 worker pinned to 1 core,
  then on 2 workers pinned to 1 core each (`tools/launch_local_workers.py`
  with `--cpus_per_worker=1`, multi_worker strategy in both, so the code path
  is the same), and as a control two independent 1-worker runs at once, one
  per core: the throughput two cores of this (shared) machine give without
  any communication. Global chars/s comes from the chief's progress lines (the
  characters of the whole global batch per second), leaving out the first
  `--weak_warmup_logs` lines (tracing, pipeline fill). Efficiency =
  chars/s(2 workers) / (2 x chars/s(1 worker)); it splits into the machine's
  share (control / 2 x 1 worker) and communication's (2 workers / control).
  The runs alternate
  `--weak_repeats` times and the median counts, because the cores are shared.
* **Large-batch convergence.** Runs that see the SAME number of characters
  (`--chars`): (i) a small batch at the base rate, (ii) a batch
  `--large_batch / --small_batch` times larger with the rate scaled linearly,
  and (iii), (iv), ... the same large batch with each of `--schedules`
  (a scaling rule, a warm-up share of the steps, an optional cap). Every run
  decays linearly to zero over its own steps, so only the rate differs
  between (i) and (ii). Validation bits/char at the end is the result. The
  runs go two at a time, one per core, the long small-batch run first
  (timing does not matter here, only the result).

Output: one JSON object per line on stdout for every run and summary, then
markdown tables; `--plot` gets a PNG (training bits/char against characters
seen, and the weak-scaling throughput).

Data: `--train_data` (TFRecord folder from tf-mlstm-make-tfrecords), else the
files of `--input` converted into `--output_dir/data`, else (no input files
found) the embedded demo corpus.
"""

import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

from absl import app
from absl import flags
from absl import logging

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PROGRESS = re.compile(
    r"step (\d+)/\d+\s+loss [0-9.naif]+\s+bits/char ([0-9.naif]+)\s+chars/s (\d+)"
)
_DEFAULT_INPUT = ",".join(
    os.path.join("..", "shared", "data", "amazon", f"{name}.jsonl")
    for name in ("books", "dvd", "electronics")
)
# The two cores the runs are pinned to (the weak-scaling control, and the
# small- and large-batch convergence runs side by side).
_CORE_A = 0
_CORE_B = 1


def define_flags(flag_values=None):
    """Defines this tool's flags on `flag_values` (absl's global FLAGS by default)."""
    flag_values = flags.FLAGS if flag_values is None else flag_values
    flags.DEFINE_string(
        "output_dir",
        "runs/scaling_benchmark",
        "Runs, data and logs go here.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "train_data",
        "",
        "TFRecord folder with train-*/validation-* shards; empty: --input.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "input",
        _DEFAULT_INPUT,
        "Corpus files converted when --train_data is empty (relative to the repository); "
        "when none exists, the embedded demo corpus is used.",
        flag_values=flag_values,
    )
    flags.DEFINE_list(
        "experiments", ["weak", "convergence"], "Which experiments to run.", flag_values=flag_values
    )
    flags.DEFINE_string(
        "plot",
        "",
        "PNG to write (e.g. docs/large_batch.png); empty: no plot.",
        flag_values=flag_values,
    )
    flags.DEFINE_string(
        "markdown", "", "Also write the markdown tables to this file.", flag_values=flag_values
    )
    # Weak scaling.
    flags.DEFINE_integer(
        "weak_hidden_size", 256, "mLSTM units for weak scaling.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "weak_batch_per_worker",
        64,
        "Rows per worker (the global batch grows).",
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "weak_seq_length", 64, "BPTT length for weak scaling.", flag_values=flag_values
    )
    flags.DEFINE_integer("weak_steps", 200, "Steps per weak-scaling run.", flag_values=flag_values)
    flags.DEFINE_integer(
        "weak_log_every", 20, "Steps per measured window.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "weak_warmup_logs", 3, "Progress windows left out as warm-up.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "weak_repeats",
        2,
        "Repeats of the 1-worker, 2-worker, control sequence (medians count).",
        flag_values=flag_values,
    )
    # Convergence.
    flags.DEFINE_integer(
        "hidden_size", 256, "mLSTM units for the convergence runs.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "seq_length", 64, "BPTT length for the convergence runs.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "small_batch", 8, "The small (base) global batch.", flag_values=flag_values
    )
    flags.DEFINE_integer("large_batch", 128, "The large global batch.", flag_values=flag_values)
    flags.DEFINE_float(
        "chars",
        1e7,
        "Training characters per run (the same for every run).",
        flag_values=flag_values,
    )
    flags.DEFINE_float("base_lr", 2e-3, "Adam rate at --small_batch.", flag_values=flag_values)
    flags.DEFINE_list(
        "schedules",
        ["linear:0.1", "sqrt:0.1"],
        "Large-batch schedules to compare with plain linear scaling, each "
        "SCALING:WARMUP_FRACTION[:CAP]: SCALING (none, linear, sqrt) of --base_lr by "
        "large/small batch, warm-up share of the steps, optional cap on the peak rate.",
        flag_values=flag_values,
    )
    flags.DEFINE_integer("seed", 0, "Seed of every run.", flag_values=flag_values)


# === Running tf-mlstm-train ===


def _train_args(model_dir, train_data, **overrides):
    args = {
        "model_dir": model_dir,
        "train_data": train_data,
        "embedding_size": 64,
        "jit_compile": "false",
        "precision": "float32",
        "eval_every_steps": 0,
        "sample_every_steps": 0,
        "keep_checkpoints": 1,
    }
    args.update(overrides)
    return [f"--{k}={v}" for k, v in args.items()]


def _single_core_env(core):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env["TF_NUM_INTEROP_THREADS"] = env["TF_NUM_INTRAOP_THREADS"] = "1"
    return env, (lambda: os.sched_setaffinity(0, {core})) if _can_pin(core) else None


def _can_pin(core):
    return hasattr(os, "sched_getaffinity") and core in os.sched_getaffinity(0)


def _start(command, log_path, env, preexec=None):
    log = open(log_path, "w")  # pylint: disable=consider-using-with
    proc = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec
    )
    proc.log_file = log
    return proc


def _finish(proc, what):
    code = proc.wait()
    proc.log_file.close()
    if code != 0:
        with open(proc.log_file.name) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{what} failed with status {code}; log {proc.log_file.name}:\n{tail}")
    with open(proc.log_file.name) as f:
        return f.read()


def _progress(log, prefix=""):
    """[(step, train bits/char, chars/s)] from the progress lines of `log`."""
    rows = []
    for line in log.splitlines():
        if not line.startswith(prefix):
            continue
        match = _PROGRESS.search(line)
        if match:
            rows.append((int(match.group(1)), float(match.group(2)), float(match.group(3))))
    return rows


def _emit(record):
    print(json.dumps(record, sort_keys=True), flush=True)


# === Data ===


def resolve_data(output_dir, train_data, inputs):
    """The TFRecord folder to train on (see the module docstring)."""
    if train_data:
        return train_data
    files = [p for spec in inputs.split(",") for p in glob.glob(os.path.join(REPO, spec))]
    data_dir = os.path.join(output_dir, "data")
    if os.path.exists(os.path.join(data_dir, "stats.json")):
        return data_dir
    if files:
        command = [
            sys.executable,
            "-m",
            "tf_mlstm.cli.make_tfrecords",
            f"--input={','.join(sorted(files))}",
            f"--output_dir={data_dir}",
            "--num_shards=8",
            "--split=100,1,1",
        ]
        subprocess.run(command, cwd=REPO, check=True, capture_output=True)
        return data_dir
    logging.warning("No input files match %s: using the embedded demo corpus.", inputs)
    from tf_mlstm.train import data_files  # pylint: disable=g-import-not-at-top

    return data_files.build_demo_tfrecords(data_dir)


# === Weak scaling ===


def _weak_command(output_dir, data, name, workers):
    model_dir = os.path.join(output_dir, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    return [
        sys.executable,
        os.path.join(REPO, "tools", "launch_local_workers.py"),
        f"--num_workers={workers}",
        "--cpus_per_worker=1",
        "--",
        sys.executable,
        "-m",
        "tf_mlstm.cli.train",
        *_train_args(
            model_dir,
            data,
            hidden_size=FLAGS.weak_hidden_size,
            seq_length=FLAGS.weak_seq_length,
            batch_size=FLAGS.weak_batch_per_worker * workers,
            max_steps=FLAGS.weak_steps,
            log_every_steps=FLAGS.weak_log_every,
            checkpoint_every_steps=FLAGS.weak_steps,
            distribution_strategy="multi_worker",
            lr=1e-3,
        ),
    ]


def _measured_rate(log, name):
    rows = _progress(log, prefix="[worker 0]")[FLAGS.weak_warmup_logs :]
    if not rows:
        raise RuntimeError(f"{name}: no progress lines after warm-up; raise --weak_steps")
    # Equal characters per window: the overall rate is the harmonic mean.
    return len(rows) / sum(1.0 / r[2] for r in rows), len(rows) * FLAGS.weak_log_every


def _weak_run(output_dir, data, kind, repeat):
    """One measurement: kind is "1w", "2w" or "2x1w" (two independent 1-worker runs)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    if kind == "2x1w":
        # The control: both cores busy with the same work but no all-reduce,
        # so 2w / 2x1w isolates the cost of communication from that of
        # sharing the machine (other processes, memory bandwidth, caches).
        procs = []
        for core in (_CORE_A, _CORE_B):
            name = f"weak_{kind}_r{repeat}_core{core}"
            pin = (lambda c=core: os.sched_setaffinity(0, {c})) if _can_pin(core) else None
            command = _weak_command(output_dir, data, name, 1)
            procs.append((name, _start(command, os.path.join(output_dir, name + ".log"), env, pin)))
        rates = [_measured_rate(_finish(proc, name), name) for name, proc in procs]
        rate, steps = sum(r for r, _ in rates), rates[0][1]
        name, workers, batch = f"weak_{kind}_r{repeat}", 2, FLAGS.weak_batch_per_worker
    else:
        workers = int(kind[0])
        name, batch = f"weak_{kind}_r{repeat}", FLAGS.weak_batch_per_worker * workers
        command = _weak_command(output_dir, data, name, workers)
        log = _finish(_start(command, os.path.join(output_dir, name + ".log"), env), name)
        rate, steps = _measured_rate(log, name)
    record = {
        "experiment": "weak_scaling",
        "run": name,
        "kind": kind,
        "workers": workers,
        "cores": workers,
        "global_batch": batch,
        "per_worker_batch": FLAGS.weak_batch_per_worker,
        "hidden_size": FLAGS.weak_hidden_size,
        "seq_length": FLAGS.weak_seq_length,
        "measured_steps": steps,
        "chars_per_s": round(rate, 1),
    }
    _emit(record)
    return record


def weak_scaling(output_dir, data):
    """Alternating 1-worker, 2-worker and control runs; returns (runs, summary)."""
    runs = []
    for repeat in range(FLAGS.weak_repeats):
        for kind in ("1w", "2w", "2x1w"):
            runs.append(_weak_run(output_dir, data, kind, repeat))
    median = {
        kind: statistics.median(r["chars_per_s"] for r in runs if r["kind"] == kind)
        for kind in ("1w", "2w", "2x1w")
    }
    summary = {
        "experiment": "weak_scaling_summary",
        "chars_per_s_1_worker": round(median["1w"], 1),
        "chars_per_s_2_workers": round(median["2w"], 1),
        "chars_per_s_2_independent": round(median["2x1w"], 1),
        "speedup": round(median["2w"] / median["1w"], 3),
        "efficiency": round(median["2w"] / (2 * median["1w"]), 3),
        # What two cores give this work without any communication, and what
        # the all-reduce keeps of it.
        "machine_efficiency": round(median["2x1w"] / (2 * median["1w"]), 3),
        "communication_efficiency": round(median["2w"] / median["2x1w"], 3),
    }
    _emit(summary)
    return runs, summary


# === Convergence ===


def parse_schedule(spec):
    """`SCALING:WARMUP_FRACTION[:CAP]` -> (scaling, warmup_fraction, cap or 0.0).

    Raises:
      ValueError: a malformed spec, an unknown scaling, a warm-up share outside
        [0, 1) or a negative cap.
    """
    parts = spec.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError("expected 2 or 3 fields")
        scaling, warmup = parts[0].strip(), float(parts[1])
        cap = float(parts[2]) if len(parts) == 3 else 0.0
    except ValueError as e:
        raise ValueError(
            f"--schedules: {spec!r} is not SCALING:WARMUP_FRACTION[:CAP] ({e}), "
            "e.g. linear:0.1 or sqrt:0.1:6e-3"
        ) from None
    if scaling not in ("none", "linear", "sqrt"):
        raise ValueError(f"--schedules: {spec!r}: scaling must be none, linear or sqrt")
    if not 0 <= warmup < 1 or cap < 0:
        raise ValueError(f"--schedules: {spec!r}: warm-up share in [0, 1) and cap >= 0 needed")
    return scaling, warmup, cap


def convergence_specs():
    """The runs: [(name, label, train flag overrides)], small batch first."""
    small, large = FLAGS.small_batch, FLAGS.large_batch
    per_step = FLAGS.seq_length
    small_steps = int(round(FLAGS.chars / (small * per_step)))
    ratio = large // small
    large_steps = max(small_steps // ratio, 1)
    small_steps = large_steps * ratio  # the same characters exactly
    common = dict(
        hidden_size=FLAGS.hidden_size,
        seq_length=FLAGS.seq_length,
        lr=FLAGS.base_lr,
        lr_base_batch=small,
        lr_decay="linear",
        seed=FLAGS.seed,
    )
    # One progress line per equal number of characters in every run.
    small_log = max(large_steps // 40, 1) * ratio
    large_common = dict(
        common, batch_size=large, max_steps=large_steps, log_every_steps=small_log // ratio
    )
    specs = [
        (
            "small_base",
            f"(i) batch {small}, base rate",
            dict(
                common,
                batch_size=small,
                max_steps=small_steps,
                lr_scaling="none",
                log_every_steps=small_log,
            ),
        ),
        (
            "large_linear",
            f"(ii) batch {large}, linear scaling",
            dict(large_common, lr_scaling="linear"),
        ),
    ]
    for index, spec in enumerate(FLAGS.schedules):
        scaling, warmup, cap = parse_schedule(spec)
        numeral = ("iii", "iv", "v", "vi", "vii", "viii")[index % 6]
        label = f"({numeral}) batch {large}, {scaling} scaling, warm-up {warmup:g}"
        overrides = dict(
            large_common,
            lr_scaling=scaling,
            warmup_steps=int(round(warmup * large_steps)),
        )
        if cap:
            overrides["max_lr"] = cap
            label += f", cap {cap:g}"
        specs.append((f"large_schedule_{index}", label, overrides))
    return specs


def _peak(spec):
    ratio = spec["batch_size"] / spec["lr_base_batch"]
    factor = {"none": 1.0, "linear": ratio, "sqrt": ratio**0.5}[spec["lr_scaling"]]
    peak = spec["lr"] * factor
    return min(peak, spec["max_lr"]) if spec.get("max_lr") else peak


def convergence(output_dir, data):
    """Runs the convergence runs two at a time, one per core; returns their records."""
    specs = convergence_specs()

    def run(name, label, spec, core):
        model_dir = os.path.join(output_dir, name)
        shutil.rmtree(model_dir, ignore_errors=True)
        overrides = dict(spec, checkpoint_every_steps=spec["max_steps"])
        command = [
            sys.executable,
            "-m",
            "tf_mlstm.cli.train",
            *_train_args(model_dir, data, **overrides),
        ]
        env, preexec = _single_core_env(core)
        started = time.monotonic()
        proc = _start(command, os.path.join(output_dir, name + ".log"), env, preexec)
        log = _finish(proc, name)
        with open(os.path.join(model_dir, "results.json")) as f:
            results = json.load(f)
        chars_per_step = spec["batch_size"] * spec["seq_length"]
        curve = [(step * chars_per_step, bpc) for step, bpc, _ in _progress(log)]
        record = {
            "experiment": "convergence",
            "run": name,
            "label": label,
            "batch_size": spec["batch_size"],
            "steps": spec["max_steps"],
            "train_chars": spec["max_steps"] * chars_per_step,
            "peak_lr": _peak(spec),
            "lr_scaling": spec["lr_scaling"],
            "warmup_steps": spec.get("warmup_steps", 0),
            "validation_bits_per_char": round(results["validation_bits_per_char"], 4),
            "final_train_bits_per_char": curve[-1][1] if curve else None,
            "skipped_steps": results["skipped_steps"],
            "minutes": round((time.monotonic() - started) / 60, 2),
            "curve": curve,
        }
        _emit({k: v for k, v in record.items() if k != "curve"})
        return record

    # The long small-batch run starts first on one core; the large-batch runs
    # take turns on the other, and on the first core once it is free.
    pending = list(specs)
    records, errors = {}, []
    lock = threading.Lock()

    def worker(core):
        while True:
            with lock:
                if not pending or errors:
                    return
                name, label, spec = pending.pop(0)
            try:
                records[name] = run(name, label, spec, core)
            except Exception as e:  # pylint: disable=broad-except
                errors.append(e)
                return

    threads = [threading.Thread(target=worker, args=(core,)) for core in (_CORE_A, _CORE_B)]
    for thread in threads:
        thread.start()
        time.sleep(1.0)  # The small-batch run takes the first core.
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [records[name] for name, _, _ in specs]


# === Report ===


def markdown(weak, convergence_runs):
    """Markdown tables of the results."""
    lines = []
    if weak:
        runs, summary = weak
        per = FLAGS.weak_batch_per_worker
        lines += [
            "| configuration | global batch | global chars/s (median) | vs. ideal 2x |",
            "|---|---|---|---|",
            f"| 1 worker, 1 core | {per} | {summary['chars_per_s_1_worker']:.0f} | |",
            f"| 2 workers, 1 core each, all-reduce | {2 * per} | "
            f"{summary['chars_per_s_2_workers']:.0f} | **{100 * summary['efficiency']:.0f}%** "
            "(weak-scaling efficiency) |",
            f"| control: 2 independent 1-worker runs, 1 core each, no all-reduce | {per} + {per} "
            f"| {summary['chars_per_s_2_independent']:.0f} | "
            f"{100 * summary['machine_efficiency']:.0f}% (what the shared machine allows) |",
            "",
            f"Communication efficiency (2 workers / control): "
            f"{100 * summary['communication_efficiency']:.0f}%. Per run (chars/s): "
            + ", ".join(f"{r['run']} {r['chars_per_s']:.0f}" for r in runs),
            "",
        ]
    if convergence_runs:
        lines += [
            "| run | batch | steps | train chars | peak lr | warmup | skipped | "
            "final train bits/char | validation bits/char |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in convergence_runs:
            lines.append(
                f"| {r['label']} | {r['batch_size']} | {r['steps']} | {r['train_chars']:,} | "
                f"{r['peak_lr']:.2e} | {r['warmup_steps']} | {r['skipped_steps']} | "
                f"{r['final_train_bits_per_char']:.3f} | **{r['validation_bits_per_char']:.3f}** |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(path, weak, convergence_runs):
    """Writes the PNG: convergence curves (and the weak-scaling bars)."""
    import matplotlib  # pylint: disable=g-import-not-at-top

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

    panels = int(bool(convergence_runs)) + int(bool(weak))
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.2), squeeze=False)
    axes = list(axes[0])
    if convergence_runs:
        ax = axes.pop(0)
        for r in convergence_runs:
            xs = [c / 1e6 for c, _ in r["curve"]]
            ys = [b for _, b in r["curve"]]
            line = ax.plot(xs, ys, label=f"{r['label']}: val {r['validation_bits_per_char']:.3f}")
            ax.scatter(
                [r["train_chars"] / 1e6],
                [r["validation_bits_per_char"]],
                color=line[0].get_color(),
                marker="*",
                s=90,
                zorder=3,
            )
        ax.set_xlabel("training characters (millions)")
        ax.set_ylabel("bits/char (train window; * = validation)")
        ax.set_ylim(top=min(8.0, ax.get_ylim()[1]))
        ax.set_title(f"Same characters, {FLAGS.hidden_size}-unit mLSTM, seq {FLAGS.seq_length}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if weak:
        ax = axes.pop(0)
        _, summary = weak
        one, two = summary["chars_per_s_1_worker"], summary["chars_per_s_2_workers"]
        control = summary["chars_per_s_2_independent"]
        names = ["1 worker", "2 workers\n(all-reduce)", "2 independent\n(no all-reduce)"]
        ax.bar(names, [one, two, control], color=["tab:gray", "tab:blue", "tab:orange"])
        ax.bar(names[1:], [2 * one, 2 * one], fill=False, linestyle="--", label="ideal (2x)")
        ax.set_ylabel("global chars/s")
        ax.set_title(f"Weak scaling, 1 core per worker: {100 * summary['efficiency']:.0f}%")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


FLAGS = flags.FLAGS


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    unknown = set(FLAGS.experiments) - {"weak", "convergence"}
    if unknown:
        raise app.UsageError(f"--experiments: unknown {sorted(unknown)}; use weak, convergence")
    if FLAGS.large_batch % FLAGS.small_batch:
        raise app.UsageError("--large_batch must be a multiple of --small_batch")
    try:
        for spec in FLAGS.schedules:
            parse_schedule(spec)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    output_dir = os.path.abspath(FLAGS.output_dir)
    os.makedirs(output_dir, exist_ok=True)
    data = resolve_data(output_dir, FLAGS.train_data, FLAGS.input)
    _emit({"experiment": "setup", "train_data": data, "cores": len(os.sched_getaffinity(0))})
    weak = weak_scaling(output_dir, data) if "weak" in FLAGS.experiments else None
    runs = convergence(output_dir, data) if "convergence" in FLAGS.experiments else None
    text = markdown(weak, runs)
    print(text)
    if FLAGS.markdown:
        with open(FLAGS.markdown, "w") as f:
            f.write(text)
    if FLAGS.plot:
        plot(FLAGS.plot, weak, runs)
        logging.info("Plot written to %s", FLAGS.plot)


if __name__ == "__main__":
    define_flags()
    app.run(main)
