r"""A measured scaling law for the mLSTM: a grid of real training runs, a fit, a size plan.

Usage (docs/scaling.md's numbers came from this command):

  tf-mlstm-make-tfrecords --input=../shared/data/amazon/books.jsonl,\
      ../shared/data/amazon/dvd.jsonl,../shared/data/imdb/unsup.jsonl \
      --text_key=reviewText,text --output_dir=data/cpu_reviews --num_shards=16
  nice -n 10 python tools/scaling_law.py --train_data=data/cpu_reviews \
      --output_dir=runs/scaling_law --sizes=128,256,512 --budgets=0.25M,0.5M,1M,2M \
      --train_flags=--precision=float32,--jit_compile=false
  python tools/scaling_law.py --output_dir=runs/scaling_law --fit_only \
      --plan_rates=128=20000,256=12000,512=6000,768=4500 --plan_minutes=30
  python tools/scaling_law.py --plan_gpus=128 --plan_gpu_tflops=125 \
      --plan_utilization=0.3 --plan_hours=4

Each grid point (an mLSTM size x a character budget) is one real
`tf-mlstm-train` run of the recipe in `--flagfile` (the 30-minute CPU recipe by
default: batch, sequence length, peak rate, decay, corpus mix) with
`--max_steps` = the budget in steps and no time limit, so the rate decays to
zero at the budget's end (a truncated long run is not a short run) and the
result does not depend on how busy the machine is. The warm-up is
`--warmup_fraction` of the steps, at most the recipe's own. Each run is then
scored as `tf-mlstm-eval` scores it (its function, in this process) on held-out
text (`--heldout`: by default Amazon
electronics reviews, a product domain the training corpus lacks; every
`--heldout_every`-th line of it, so both star classes count).

Resumable: each finished run is one JSON line in OUTPUT_DIR/results.jsonl and
is not run again; an interrupted run resumes from its checkpoint (its
`tf-mlstm-train` command is the same). Runs go cheapest first (weights x
characters), so a grid cut short is still spread over the sizes.

With at least five runs the law `loss = E + A/(N/1M)^alpha + B/(D/1M)^beta`
(N weights, D characters; `tf_mlstm.auto.law`) is fitted by least squares, and
so is each other form in `--forms` (`coupled`: Kaplan et al.'s combination of
the same two terms); the form with the lowest leave-one-out error (each run
predicted by the law fitted on all other runs, from six runs on) is used, and
each run's residual and leave-one-out error under it are printed in a
markdown table, with every fit in OUTPUT_DIR/fit.json. Then the plan: for each
size in `--plan_rates` (training chars/s on the machine in question; by
default the rates the grid's runs measured) the characters it trains on in
`--plan_minutes`, its predicted loss, and the size that minimises it. The
last line is one JSON object.

`--add_runs` trains nothing: it scores finished `tf-mlstm-train` runs (the
recipe's own 30-minute runs, say) on the same held-out sample and records them
with the grid, so that the law is fitted where the planner extrapolates. Each
must have ended its schedule (the rate decayed to zero at its last step) and
trained with the recipe's batch, sequence length, embedding, peak rate,
decay, clipping and corpus mix (one line names what differs); its size,
steps and characters come from its config.json and results.json.

A cluster (`--plan_gpus` x `--plan_gpu_tflops`, or `--cluster_flops`, at
`--plan_utilization` for `--plan_hours`) is planned in FLOPs instead, and
nothing is run: each size in `--plan_units` trains on the cluster's FLOPs
over its training FLOPs per character (`law_fitting.flops_per_char`), the law
(`--plan_law`, else OUTPUT_DIR/fit.json, else the one docs/scaling.md
fitted) predicts its loss, and one line per size (how far it lies outside
the law's fitted ranges included), the chosen one and a JSON object are
printed (docs/scaling.md, "Planning a cluster run").
"""

import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

import law_fitting
from absl import flags
from absl import logging

from tf_mlstm import errors
from tf_mlstm.auto import law as law_lib
from tf_mlstm.cli import _main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_FILE = "results.jsonl"
FIT_FILE = "fit.json"
_PROGRESS_RATE = re.compile(r"step \d+/\d+\s.*?chars/s (\d+)")
_VALIDATION = re.compile(r"validation bits/char: ([0-9.]+)")
_SUFFIXES = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}
# The flags of the recipe that the grid sets itself (each run's budget and bookkeeping).
_GRID_FLAGS = (
    "train_data",
    "model_dir",
    "hidden_size",
    "max_steps",
    "max_minutes",
    "warmup_steps",
    "eval_every_steps",
    "sample_every_steps",
    "export",
)

# Recipe lines the grid's runs do not read (each run's size is the grid's): left out of the
# settings, so a recipe that changes only them (--hidden_size=auto) keeps its grid.
_SIZE_FLAGS = ("--hidden_size=", "--size_candidates=", "--scaling_law=")

# The settings that make two runs' scores comparable (the grid's own flags aside).
_SCORE_SETTINGS = ("recipe", "heldout", "heldout_every")
# The recipe's flags that a run added with --add_runs must share (what its loss depends on).
_LOSS_FLAGS = (
    "batch_size",
    "seq_length",
    "embedding_size",
    "lr",
    "lr_decay",
    "clip_norm",
    "source_repeats",
)

FLAGS = flags.FLAGS


def _without_size_lines(settings):
    """`settings` with the recipe's `_SIZE_FLAGS` lines left out (runs recorded before too)."""
    if not isinstance(settings, dict) or not isinstance(settings.get("recipe"), list):
        return settings
    recipe = [line for line in settings["recipe"] if not str(line).startswith(_SIZE_FLAGS)]
    return {**settings, "recipe": recipe}


def define_flags():
    """Defines this tool's flags."""
    flags.DEFINE_string("output_dir", "runs/scaling_law", "Runs, logs and results go here.")
    flags.DEFINE_string("train_data", "", "TFRecord folder (tf-mlstm-make-tfrecords).")
    flags.DEFINE_string(
        "flagfile_recipe",
        os.path.join(REPO, "flags", "cpu_reviews.flags"),
        "The recipe every run trains with (batch, sequence, rate, decay, corpus mix).",
    )
    flags.DEFINE_list("train_flags", [], "More tf-mlstm-train flags for every run.")
    flags.DEFINE_string(
        "heldout",
        os.path.join(REPO, "..", "shared", "data", "amazon", "electronics.jsonl"),
        "Held-out text each run is scored on (any file tf-mlstm-eval reads).",
    )
    flags.DEFINE_string("heldout_text_key", "reviewText", "The held-out file's text field(s).")
    flags.DEFINE_integer(
        "heldout_every",
        4,
        "Score every Nth line of --heldout (1: all; a CSV keeps its header line).",
        lower_bound=1,
    )
    flags.DEFINE_list("sizes", ["128", "256", "512"], "mLSTM units of the grid.")
    flags.DEFINE_list(
        "budgets", ["0.25M", "0.5M", "1M", "2M"], "Characters per run (K, M and G suffixes)."
    )
    flags.DEFINE_float(
        "warmup_fraction",
        0.05,
        "Warm-up steps as a share of each run's steps (at most the recipe's warmup_steps).",
    )
    flags.DEFINE_integer(
        "run_timeout_s", 4 * 3600, "A run (training or scoring) stops after this.", lower_bound=1
    )
    flags.DEFINE_bool("fit_only", False, "Run nothing: fit and plan from results.jsonl.")
    flags.DEFINE_list(
        "add_runs",
        [],
        "Finished tf-mlstm-train runs (their --model_dir, e.g. the 30-minute recipe's) to "
        "score on the held-out text and fit with the grid instead of running it: each must "
        "have ended its schedule (the rate decayed to zero at its last step) and trained with "
        "the recipe's batch, sequence length, embedding, peak rate, decay, clipping and corpus "
        "mix. Trains nothing.",
    )
    flags.DEFINE_string(
        "plan_rates",
        "",
        "UNITS=CHARS_PER_S,... of the machine to plan for; empty: the rates the runs measured.",
    )
    flags.DEFINE_float("plan_minutes", 30.0, "The time budget to plan for.")
    flags.DEFINE_list(
        "forms",
        list(law_lib.FORMS),
        f"The law's forms to fit ({', '.join(law_lib.FORMS)}); the one with the lowest "
        "leave-one-out error is used (the first when there are too few runs to leave one out).",
    )
    flags.DEFINE_string(
        "plot", "", "PNG to write: held-out bits/char against characters, runs and fitted law."
    )
    flags.DEFINE_integer(
        "plan_gpus", 0, "Plan for a cluster of this many GPUs (with --plan_gpu_tflops); no runs."
    )
    flags.DEFINE_float("plan_gpu_tflops", 0.0, "Each GPU's peak TFLOP/s (V100 tensor cores: 125).")
    flags.DEFINE_float(
        "cluster_flops", 0.0, "Plan for a cluster of this peak FLOP/s (instead of --plan_gpus)."
    )
    flags.DEFINE_float(
        "plan_utilization", 0.3, "The share of the cluster's peak FLOP/s that training sustains."
    )
    flags.DEFINE_float("plan_hours", 0.0, "The cluster plan's wall-clock hours.")
    flags.DEFINE_list(
        "plan_units",
        [],
        "The cluster plan's sizes; empty: 128-16384 (2^k and 1.5 x 2^k).",
    )
    flags.DEFINE_string(
        "plan_law",
        "",
        "fit.json whose law the cluster plan uses; empty: OUTPUT_DIR/fit.json if there, "
        "else the law docs/scaling.md fitted.",
    )


# === Grid ===


def parse_chars(text):
    """`"0.25M"` -> 250000 (K, M, G suffixes; a plain number is characters)."""
    value = text.strip().lower()
    suffix = value[-1:] if value[-1:] in _SUFFIXES and value[-1:] else ""
    try:
        chars = float(value[: len(value) - len(suffix)]) * _SUFFIXES[suffix]
    except ValueError:
        chars = math.nan
    if not (math.isfinite(chars) and chars >= 1):
        raise errors.InvalidValueError(
            f"--budgets: {text!r} is not a character count (e.g. 250000, 250K or 0.25M)."
        )
    return int(round(chars))


def parse_sizes(values):
    """The --sizes list as positive integers."""
    sizes = []
    for value in values:
        try:
            size = int(value)
        except ValueError:
            size = 0
        if size <= 0:
            raise errors.InvalidValueError(f"--sizes: {value!r} is not a positive number of units.")
        sizes.append(size)
    return sizes


def read_recipe(path):
    """The recipe's flags as {name: value} (the last value of a repeated flag)."""
    if not os.path.isfile(path):
        raise errors.MissingFileError(f"--flagfile_recipe={path}: no such file.")
    recipe = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("--"):
                name, _, value = line[2:].partition("=")
                recipe[name] = value
    for name in ("batch_size", "seq_length"):
        if not recipe.get(name, "").isdigit():
            raise errors.InvalidValueError(f"--flagfile_recipe={path}: no --{name}=N line.")
    return recipe


def run_plan(units, chars, recipe, warmup_fraction):
    """One grid point's steps, warm-up and the characters it really trains on."""
    per_step = int(recipe["batch_size"]) * int(recipe["seq_length"])
    steps = max(1, math.ceil(chars / per_step))
    cap = int(recipe.get("warmup_steps", "0") or 0)
    warmup = min(cap, math.ceil(warmup_fraction * steps))
    return {"units": units, "steps": steps, "warmup_steps": warmup, "chars": steps * per_step}


def grid(sizes, budgets, recipe, warmup_fraction):
    """Every grid point, cheapest first (weights x characters)."""
    points = [run_plan(u, c, recipe, warmup_fraction) for u in sizes for c in budgets]
    points = list({(p["units"], p["steps"]): p for p in points}.values())
    return sorted(points, key=lambda p: law_lib.model_weights(p["units"]) * p["chars"])


def run_name(point):
    """The run's folder name: units and steps."""
    return f"u{point['units']}_s{point['steps']}"


def train_command(point, run_dir, config):
    """The `tf-mlstm-train` command of one grid point."""
    return [
        sys.executable,
        "-m",
        "tf_mlstm.cli.train",
        f"--flagfile={config['recipe_path']}",
        *config["train_flags"],
        f"--train_data={config['train_data']}",
        f"--model_dir={run_dir}",
        f"--hidden_size={point['units']}",
        f"--max_steps={point['steps']}",
        f"--warmup_steps={point['warmup_steps']}",
        "--max_minutes=0",
        "--eval_every_steps=0",
        "--sample_every_steps=0",
        "--noexport",
    ]


def eval_command(run_dir, heldout, text_key):
    """The `tf-mlstm-eval` command that gives a run's score (`score` runs its function)."""
    return [
        "tf-mlstm-eval",
        f"--model_dir={run_dir}",
        f"--data={heldout}",
        f"--text_key={text_key}",
    ]


def heldout_sample(path, every, output_dir):
    """Every `every`-th line of `path` (a CSV keeps its header) in `output_dir`; its path."""
    if not os.path.isfile(path):
        raise errors.MissingFileError(f"--heldout={path}: no such file.")
    if every == 1:
        return path
    name = os.path.basename(path)
    sample = os.path.join(output_dir, f"heldout_every{every}_{name}")
    if not os.path.exists(sample):
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        header = lines[:1] if name.lower().endswith(".csv") else []
        body = lines[len(header) :]
        with open(sample + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(header + body[::every])
        os.replace(sample + ".tmp", sample)
    return sample


def _run_logged(command, log_path, timeout):
    """Runs `command`, its output appended to `log_path` as it comes; returns it and seconds."""
    started = time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        offset = log.tell()
        status = subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False
        ).returncode
    with open(log_path, encoding="utf-8", errors="replace") as log:
        log.seek(offset)
        output = log.read()
    if status != 0:
        tail = output.strip().splitlines()[-1:] or [""]
        raise errors.UserError(
            f"tf-mlstm-train failed (exit status {status}): {tail[0]} (log: {log_path})"
        )
    return output, time.time() - started


def score(run_dir, heldout, text_key):
    """Held-out bits/char of a run: `tf-mlstm-eval`'s own function, in this process.

    In-process because a binary's start (TensorFlow's import, the model's
    build) costs more than scoring a small model on a busy machine; the tool
    imports TensorFlow once, for all runs.
    """
    import keras  # pylint: disable=g-import-not-at-top

    from tf_mlstm.config import EvalConfig  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train import evaluation  # pylint: disable=g-import-not-at-top

    config = EvalConfig(model_dir=run_dir, data=heldout, text_key=text_key).validate()
    started = time.time()
    result = evaluation.evaluate_config(config)
    keras.backend.clear_session()
    return result, time.time() - started


def train_and_score(point, config):
    """One grid point: trains (or resumes) it, scores it; its results line."""
    run_dir = os.path.join(config["output_dir"], "runs", run_name(point))
    log_path = os.path.join(config["output_dir"], "logs", run_name(point) + ".log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    command = train_command(point, run_dir, config)
    logging.info("training %s: %s", run_name(point), shlex.join(command))
    output, train_s = _run_logged(command, log_path, config["timeout"])
    # The first progress line includes tracing and the pipeline's fill.
    rates = [int(r) for r in _PROGRESS_RATE.findall(output)][1:]
    validation = _VALIDATION.findall(output)
    result, eval_s = score(run_dir, config["heldout"], config["text_key"])
    return {
        **point,
        "weights": law_lib.model_weights(point["units"], config["embedding_size"]),
        "heldout_bits_per_char": result["bits_per_char"],
        "heldout_chars": result["chars"],
        "validation_bits_per_char": float(validation[-1]) if validation else None,
        "chars_per_s": statistics.median(rates) if rates else None,
        "train_s": round(train_s, 1),
        "eval_s": round(eval_s, 1),
        "settings": config["settings"],
        "train_command": shlex.join(command),
        "eval_command": shlex.join(eval_command(run_dir, config["heldout"], config["text_key"])),
    }


def read_results(path, settings=None, keys=None):
    """The finished runs in `path`; with `settings`, refuses runs made with other settings.

    With `keys`, only those settings are compared; a run added with `--add_runs` is
    compared on `_SCORE_SETTINGS` (it did not train with the grid's own flags).
    """
    if not os.path.exists(path):
        return []
    results = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = (int(record["units"]), int(record["steps"]))
                float(record["heldout_bits_per_char"])
            except (ValueError, KeyError, TypeError):
                raise errors.InvalidValueError(
                    f"{path}:{number}: not a results line (JSON with units, steps, "
                    "heldout_bits_per_char)."
                ) from None
            record["settings"] = _without_size_lines(record.get("settings"))
            compared, wanted = record.get("settings"), settings
            # An added run was checked against the recipe when it was added.
            row_keys = keys or (_SCORE_SETTINGS if "added_from" in record else None)
            if row_keys and isinstance(compared, dict) and settings is not None:
                compared = {k: compared.get(k) for k in row_keys}
                wanted = {k: settings.get(k) for k in row_keys}
            if settings is not None and compared != wanted:
                raise errors.InvalidValueError(
                    f"{path}:{number}: run u{key[0]}_s{key[1]} was made with other settings "
                    f"({record.get('settings')}, now {settings}); use another --output_dir."
                )
            results.append(record)
    return results


def run_grid(config):
    """Runs every grid point not in results.jsonl; returns all finished runs."""
    path = os.path.join(config["output_dir"], RESULTS_FILE)
    results = read_results(path, config["settings"])
    done = {(r["units"], r["steps"]) for r in results}
    for point in config["points"]:
        if (point["units"], point["steps"]) in done:
            logging.info("skipping %s: finished (%s)", run_name(point), RESULTS_FILE)
            continue
        record = train_and_score(point, config)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        logging.info(
            "%s: %.4f held-out bits/char (%.0f s)",
            run_name(point),
            record["heldout_bits_per_char"],
            record["train_s"] + record["eval_s"],
        )
        results.append(record)
    return results


def _same_value(recipe_value, run_value):
    """A recipe's flag text and a run's recorded value name the same setting."""
    try:
        return math.isclose(float(recipe_value), float(run_value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return str(recipe_value) == str(run_value)


def added_run(run_dir, recipe):
    """A finished training run's grid point (its size, steps, characters), checked.

    Args:
      run_dir: the run's --model_dir.
      recipe: the recipe's flags ({name: text}) the grid trains with.

    Returns:
      {"units", "steps", "warmup_steps", "chars", "weights"} plus what results.json says.

    Raises:
      errors.MissingFileError, errors.InvalidValueError: one line naming the run and why it
        cannot count as a grid point.
    """
    from tf_mlstm import rundir  # pylint: disable=g-import-not-at-top

    if not rundir.holds(run_dir, rundir.CONFIG_FILE):
        raise errors.MissingFileError(
            f"--add_runs: {run_dir}: no {rundir.CONFIG_FILE} (not a tf-mlstm-train run)."
        )
    config = rundir.read_config(run_dir)
    results = rundir.read_results(run_dir)
    if results is None or "final_learning_rate" not in results:
        raise errors.InvalidValueError(
            f"--add_runs: {run_dir}: no {rundir.RESULTS_FILE}: the run has not ended "
            "(resume it to its end)."
        )
    step, rate = int(results["step"]), float(results["final_learning_rate"])
    if rate > 1e-6 * config.lr:
        raise errors.InvalidValueError(
            f"--add_runs: {run_dir}: its rate ended at {rate:.3g}, not 0 (step {step:,} of "
            f"{results.get('schedule_steps', '?')}, stopped by {results.get('stopped_by')}): "
            "a run cut short is not a short run; resume it to its end or leave it out."
        )
    for name in _LOSS_FLAGS:
        if name in recipe and not _same_value(recipe[name], getattr(config, name)):
            raise errors.InvalidValueError(
                f"--add_runs: {run_dir}: --{name}={getattr(config, name)}, the recipe's is "
                f"{recipe[name]}: its loss does not count with the grid's."
            )
    chars = step * config.batch_size * config.seq_length
    minutes = results.get("train_minutes")
    return {
        "units": config.hidden_size,
        "steps": step,
        "warmup_steps": config.warmup_steps,
        "chars": chars,
        "weights": law_lib.model_weights(
            config.hidden_size, config.embedding_size, weight_norm=config.weight_norm
        ),
        "validation_bits_per_char": results.get("validation_bits_per_char"),
        "run_chars_per_s": round(chars / (60 * minutes)) if minutes else None,
        "stopped_by": results.get("stopped_by"),
    }


def add_runs(config):
    """Scores each run in `config["add_runs"]` and records it; returns all finished runs.

    A run already recorded from the same folder is not scored again.
    """
    path = os.path.join(config["output_dir"], RESULTS_FILE)
    results = read_results(path, config["settings"], keys=_SCORE_SETTINGS)
    done = {r.get("added_from") for r in results}
    for run_dir in config["add_runs"]:
        if run_dir in done:
            logging.info("skipping %s: added before (%s)", run_dir, RESULTS_FILE)
            continue
        point = added_run(run_dir, config["recipe"])
        result, eval_s = score(run_dir, config["heldout"], config["text_key"])
        command = eval_command(run_dir, config["heldout"], config["text_key"])
        record = {
            **point,
            "heldout_bits_per_char": result["bits_per_char"],
            "heldout_chars": result["chars"],
            "chars_per_s": None,  # another machine's rate does not plan this one
            "eval_s": round(eval_s, 1),
            "added_from": run_dir,
            "settings": config["settings"],
            "eval_command": shlex.join(command),
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
        logging.info(
            "added %s (%d units, %s chars): %.4f held-out bits/char",
            run_dir,
            point["units"],
            f"{point['chars']:,}",
            record["heldout_bits_per_char"],
        )
        results.append(record)
    return results


# === Fit and plan ===


def fit_report(results, form="additive"):
    """The law of `form` fitted to `results`, each run's residual and leave-one-out error."""
    n = [r["weights"] for r in results]
    d = [r["chars"] for r in results]
    loss = [r["heldout_bits_per_char"] for r in results]
    if len(results) < law_fitting.MIN_RUNS:
        return None
    law = law_fitting.fit_law(n, d, loss, form)
    residuals = law.predict(n, d) - loss
    loo = (
        law_fitting.leave_one_out(n, d, loss, form) if len(results) > law_fitting.MIN_RUNS else None
    )
    return {
        "law": law,
        "residuals": [float(x) for x in residuals],
        "leave_one_out": None if loo is None else [float(x) for x in loo],
    }


def best_report(results, forms):
    """Each form's report, and the one used: the lowest leave-one-out RMS (else the first)."""
    reports = {form: fit_report(results, form) for form in forms}
    if any(r is None for r in reports.values()):
        return reports, None
    scored = [f for f in forms if reports[f]["leave_one_out"] is not None]
    if not scored:
        return reports, reports[forms[0]]
    best = min(scored, key=lambda f: law_fitting.summary(reports[f]["leave_one_out"])["rms"])
    return reports, reports[best]


def measured_rates(results):
    """Median training chars/s per size over the runs."""
    by_size = {}
    for r in results:
        if r.get("chars_per_s"):
            by_size.setdefault(r["units"], []).append(r["chars_per_s"])
    return {units: statistics.median(rates) for units, rates in sorted(by_size.items())}


def markdown_table(results, report):
    """The runs as a markdown table, with the fit's residual and leave-one-out error."""
    lines = [
        "| units | weights | steps | characters | held-out bits/char | validation bits/char "
        "| chars/s | train s | residual | leave-one-out error |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for i, r in enumerate(results):
        residual = f"{report['residuals'][i]:+.4f}" if report else ""
        loo = report["leave_one_out"] if report else None
        validation = r.get("validation_bits_per_char")
        rate = r.get("chars_per_s")
        lines.append(
            f"| {r['units']} | {r['weights']:,} | {r['steps']:,} | {r['chars']:,} "
            f"| {r['heldout_bits_per_char']:.4f} "
            f"| {'' if validation is None else f'{validation:.4f}'} "
            f"| {'' if rate is None else f'{rate:,.0f}'} "
            f"| {'(added)' if 'added_from' in r else r.get('train_s', '')} | {residual} "
            f"| {'' if loo is None else f'{loo[i]:+.4f}'} |"
        )
    return "\n".join(lines)


def plot(path, results, law):
    """Held-out bits/char against characters per size: the runs as points, the law as lines."""
    import matplotlib  # pylint: disable=g-import-not-at-top

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    low, high = law.chars_range
    chars = np.geomspace(low / 2, high * 8, 100)
    for units in sorted({r["units"] for r in results}):
        runs = [r for r in results if r["units"] == units]
        (line,) = ax.plot(
            chars, law.predict(runs[0]["weights"], chars), label=f"{units} units (law)"
        )
        ax.plot(
            [r["chars"] for r in runs],
            [r["heldout_bits_per_char"] for r in runs],
            "o",
            color=line.get_color(),
        )
    ax.set_xscale("log")
    ax.set_xlabel("characters trained on (each run decayed to zero at its end)")
    ax.set_ylabel("held-out bits/char")
    ax.set_title(law.formula(), fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# === Planning a cluster run ===


def cluster_settings(gpus, gpu_tflops, peak_flops, utilization, hours, units):
    """The cluster plan's settings from its flags, checked; None when no cluster is given.

    Args:
      gpus: --plan_gpus (0: not given).
      gpu_tflops: --plan_gpu_tflops.
      peak_flops: --cluster_flops (0: not given).
      utilization: --plan_utilization.
      hours: --plan_hours.
      units: --plan_units (strings; empty: `law_fitting.cluster_units()`).

    Returns:
      {"gpus", "gpu_tflops", "peak_flops_per_s", "utilization", "hours", "units"}, or None.

    Raises:
      errors.InvalidValueError: one line naming the flag and what is wrong.
    """
    if not gpus and not peak_flops:
        if hours:
            raise errors.InvalidValueError(
                "--plan_hours: give the cluster too (--plan_gpus and --plan_gpu_tflops, "
                "or --cluster_flops)."
            )
        return None
    if gpus and peak_flops:
        raise errors.InvalidValueError(
            "--plan_gpus and --cluster_flops: give one (the cluster as GPUs x TFLOP/s, "
            "or its peak FLOP/s)."
        )
    if gpus:
        if gpus < 0:
            raise errors.InvalidValueError(f"--plan_gpus must be positive, got {gpus}.")
        if not (math.isfinite(gpu_tflops) and gpu_tflops > 0):
            raise errors.InvalidValueError(
                f"--plan_gpu_tflops must be positive (each GPU's peak, e.g. 125 for a V100), "
                f"got {gpu_tflops}."
            )
        peak_flops = gpus * gpu_tflops * 1e12
    elif not (math.isfinite(peak_flops) and peak_flops > 0):
        raise errors.InvalidValueError(f"--cluster_flops must be positive, got {peak_flops}.")
    if not (math.isfinite(utilization) and 0 < utilization <= 1):
        raise errors.InvalidValueError(
            f"--plan_utilization must be in (0, 1] (a share of peak), got {utilization}."
        )
    if not (math.isfinite(hours) and hours > 0):
        raise errors.InvalidValueError(f"--plan_hours must be positive, got {hours}.")
    sizes = []
    for value in units:
        try:
            size = int(value)
        except ValueError:
            size = 0
        if size <= 0:
            raise errors.InvalidValueError(
                f"--plan_units: {value!r} is not a positive number of units."
            )
        sizes.append(size)
    return {
        "gpus": gpus,
        "gpu_tflops": gpu_tflops,
        "peak_flops_per_s": float(peak_flops),
        "utilization": utilization,
        "hours": hours,
        "units": tuple(sorted(set(sizes))) or law_fitting.cluster_units(),
    }


def read_law(path, output_dir):
    """The law a cluster plan uses, and where it came from.

    `path` (a fit.json), else OUTPUT_DIR/fit.json when there, else
    `law.REVIEWS_LAW` (the law docs/scaling.md fitted).
    """
    if not path:
        default = os.path.join(output_dir, FIT_FILE)
        if not os.path.exists(default):
            return law_lib.REVIEWS_LAW, "shipped: the fit in docs/scaling.md"
        path = default
    if not os.path.isfile(path):
        raise errors.MissingFileError(f"--plan_law={path}: no such file.")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except ValueError:
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("law"), dict):
        raise errors.InvalidValueError(
            f"--plan_law={path}: not this tool's {FIT_FILE} (JSON with a 'law')."
        )
    return law_lib.law_from_json(record, f"--plan_law={path}"), path


def plan_cluster(config):
    """Prints the plan for a cluster: the law, each candidate size, the choice; its object."""
    cluster = config["cluster"]
    law, source = read_law(config["plan_law"], config["output_dir"])
    peak = cluster["peak_flops_per_s"]
    sustained = peak * cluster["utilization"]
    seconds = cluster["hours"] * 3600
    flops = law_fitting.cluster_flops(peak, cluster["utilization"], cluster["hours"])
    plan = law_fitting.plan_compute(law, sustained, seconds, units=cluster["units"])
    low_n, high_n = law.weights_range
    low_d, high_d = law.chars_range
    print(f"law: {law.formula()} ({source})")
    print(
        f"  fitted on {low_n:,.0f}-{high_n:,.0f} weights and {low_d:,.0f}-{high_d:,.0f} "
        f"characters (residual RMS {law.rms:.3f})"
    )
    machines = (
        f"{cluster['gpus']} GPUs x {cluster['gpu_tflops']:g} TFLOP/s"
        if cluster["gpus"]
        else f"{peak:.3g} FLOP/s"
    )
    print(
        f"cluster: {machines} peak x {cluster['utilization']:g} utilization = "
        f"{sustained / 1e12:,.4g} TFLOP/s sustained, for {cluster['hours']:g} hours: "
        f"{flops:.3g} FLOPs"
    )
    for choice in plan.candidates:
        mark = "*" if choice is plan.best else " "
        print(f"{mark} {law_fitting.describe_choice(law, choice)}")
    print(f"chosen: {plan.line}")

    def record(choice):
        return {
            "units": choice.units,
            "weights": choice.weights,
            "flops_per_char": law_fitting.flops_per_char(choice.units),
            "chars": choice.chars,
            "predicted_bits_per_char": choice.predicted,
            "extrapolated": choice.extrapolated,
        }

    return {
        "plan": {"hidden_size": plan.best.units, "line": plan.line, **record(plan.best)},
        "cluster": {**cluster, "units": list(cluster["units"]), "flops": flops},
        "candidates": [record(c) for c in plan.candidates],
        "law": law.to_json(),
        "law_source": source,
    }


def body(config):
    """Runs the grid (unless fit_only), fits, plans; returns the final line's object."""
    if config.get("cluster"):
        return plan_cluster(config)
    if config["fit_only"]:
        path = os.path.join(config["output_dir"], RESULTS_FILE)
        if not os.path.exists(path):
            raise errors.MissingFileError(
                f"--fit_only: no {RESULTS_FILE} in --output_dir={config['output_dir']} (run the "
                "grid there first, without --fit_only, or name the folder it wrote)."
            )
        results = read_results(path)
    else:
        os.makedirs(config["output_dir"], exist_ok=True)
        config["heldout"] = heldout_sample(
            config["heldout"], config["heldout_every"], config["output_dir"]
        )
        results = add_runs(config) if config["add_runs"] else run_grid(config)
    results = sorted(results, key=lambda r: (r["units"], r["chars"]))
    reports, report = best_report(results, config["forms"])
    final = {"runs": len(results)}
    if report is None:
        print(markdown_table(results, None))
        print(f"no fit: {len(results)} runs, the law needs at least {law_fitting.MIN_RUNS}.")
        return final
    forms = {}
    for form, each in reports.items():
        forms[form] = {
            "law": each["law"].to_json(),
            "residual": law_fitting.summary(each["residuals"]),
        }
        line = f"{form}: {each['law'].formula()}  (residual RMS {each['law'].rms:.4f}"
        if each["leave_one_out"] is not None:
            forms[form]["leave_one_out"] = law_fitting.summary(each["leave_one_out"])
            line += ", leave-one-out RMS {rms:.4f}, largest {max_abs:.4f}".format(
                **forms[form]["leave_one_out"]
            )
        print(line + ")")
    law = report["law"]
    print(f"used: {law.form} (the lowest leave-one-out error)\n")
    print(markdown_table(results, report))
    final.update(forms[law.form])
    final["forms"] = forms
    with open(os.path.join(config["output_dir"], FIT_FILE), "w", encoding="utf-8") as f:
        record = {**report, "law": law.to_json()}
        json.dump({**final, "results": results, "used": record}, f, indent=1)
    if config["plot"]:
        plot(config["plot"], results, law)
    rates = config["plan_rates"] or measured_rates(results)
    if rates:
        plan = law_lib.plan_size(law, rates, config["plan_minutes"] * 60)
        print(plan.line)
        final["plan"] = {"hidden_size": plan.best.units, "line": plan.line}
    return final


def build_config():
    """The tool's settings from FLAGS, checked."""
    recipe_path = os.path.abspath(FLAGS.flagfile_recipe)
    sizes = parse_sizes(FLAGS.sizes)
    budgets = [parse_chars(b) for b in FLAGS.budgets]
    if not 0 <= FLAGS.warmup_fraction <= 1:
        raise errors.InvalidValueError(
            f"--warmup_fraction must be in [0, 1], got {FLAGS.warmup_fraction}."
        )
    if not FLAGS.plan_minutes > 0:
        raise errors.InvalidValueError(
            f"--plan_minutes must be positive, got {FLAGS.plan_minutes}."
        )
    for form in FLAGS.forms:
        if form not in law_lib.FORMS:
            raise errors.InvalidValueError(
                f"--forms: {form!r} is not one of {', '.join(law_lib.FORMS)}."
            )
    for flag in FLAGS.train_flags:
        name = flag.lstrip("-").partition("=")[0].removeprefix("no")
        if not flag.startswith("--") or name in _GRID_FLAGS:
            raise errors.InvalidValueError(
                f"--train_flags: {flag!r} is not a --flag=value the grid leaves free "
                f"(it sets {', '.join(_GRID_FLAGS)} itself)."
            )
    cluster = cluster_settings(
        FLAGS.plan_gpus,
        FLAGS.plan_gpu_tflops,
        FLAGS.cluster_flops,
        FLAGS.plan_utilization,
        FLAGS.plan_hours,
        FLAGS.plan_units,
    )
    if cluster:
        return {
            "cluster": cluster,
            "plan_law": FLAGS.plan_law,
            "output_dir": os.path.abspath(FLAGS.output_dir),
        }
    config = {
        "output_dir": os.path.abspath(FLAGS.output_dir),
        "fit_only": FLAGS.fit_only,
        "plan_rates": law_fitting.parse_rates(FLAGS.plan_rates),
        "plan_minutes": FLAGS.plan_minutes,
        "plot": FLAGS.plot,
        "forms": list(FLAGS.forms),
        "heldout": os.path.abspath(FLAGS.heldout),
        "heldout_every": FLAGS.heldout_every,
        "warmup_fraction": FLAGS.warmup_fraction,
        "text_key": FLAGS.heldout_text_key,
        "timeout": FLAGS.run_timeout_s,
        "train_flags": list(FLAGS.train_flags),
        "recipe_path": recipe_path,
    }
    if FLAGS.fit_only:
        if FLAGS.add_runs:
            raise errors.InvalidValueError(
                "--add_runs and --fit_only: give one (--add_runs scores runs, then fits)."
            )
        return config
    config["add_runs"] = [os.path.abspath(run) for run in FLAGS.add_runs]
    if FLAGS.add_runs:
        recipe = read_recipe(recipe_path)
        recipe.update(flag[2:].partition("=")[::2] for flag in FLAGS.train_flags)
        config["recipe"] = recipe
        config["settings"] = recipe_settings(recipe_path, config)
        return config
    if not FLAGS.train_data:
        raise errors.InvalidValueError("--train_data: give the TFRecord folder the runs train on.")
    if not os.path.exists(FLAGS.train_data):
        raise errors.MissingFileError(f"--train_data={FLAGS.train_data}: no such folder.")
    recipe = read_recipe(recipe_path)
    # A flag given after the recipe wins, in training as here (steps, warm-up, weights).
    recipe.update(flag[2:].partition("=")[::2] for flag in FLAGS.train_flags)
    config["train_data"] = os.path.abspath(FLAGS.train_data)
    config["embedding_size"] = int(recipe.get("embedding_size", "64"))
    config["points"] = grid(sizes, budgets, recipe, FLAGS.warmup_fraction)
    config["settings"] = recipe_settings(recipe_path, config)
    return config


def recipe_settings(recipe_path, config):
    """What makes two runs comparable: the recipe's text, the extra flags, the held-out sample."""
    with open(recipe_path, encoding="utf-8") as f:
        recipe_lines = sorted(line.strip() for line in f if line.strip().startswith("--"))
    return {
        "recipe": [line for line in recipe_lines if not line.startswith(_SIZE_FLAGS)],
        "train_flags": config["train_flags"],
        "heldout": os.path.basename(config["heldout"]),
        "heldout_every": config["heldout_every"],
        "warmup_fraction": config["warmup_fraction"],
    }


def run():
    """Entry point."""
    _main.run_binary(__name__, define_flags, body, build_config)


if __name__ == "__main__":
    run()
