"""`--precision=auto` and `--jit_compile=auto` measured: time each candidate, keep the fastest."""

import dataclasses
import datetime
import hashlib
import json
import os
import time
from typing import Self

from absl import logging

from tf_mlstm import errors
from tf_mlstm import fileio
from tf_mlstm.auto import hardware
from tf_mlstm.errors import setting_name as _name

CACHE_FILE = "autotune.json"
# Untimed first steps of a candidate (tracing, XLA compilation), then timed ones.
WARMUP_STEPS = 2
TIMED_STEPS = 3
# Measuring stops after this long whatever the budget (candidates left are skipped).
MAX_MEASURE_S = 60.0
# ... and after this fraction of a --max_minutes budget.
BUDGET_FRACTION = 0.05
# Below this cap a budget is too short to measure in; the table decides.
MIN_MEASURE_S = 5.0
# Why a candidate has no rate when the time cap, not a failure, left it out.
NOT_MEASURED = "not measured"
# Without a time budget, a run measures only when it has this many times the
# steps measuring takes (shorter runs, tests among them, use the table).
MIN_STEPS_FACTOR = 10

# CPU flags with which bfloat16 is worth timing: the AVX512-BF16 dot product
# (Cooper Lake, Zen 4/5), AMX tiles (Sapphire Rapids on), and AArch64's BF16
# extension (Graviton 3/4, Neoverse V1/V2).
BFLOAT16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
# bfloat16 matrix units on NVIDIA GPUs arrived with Ampere.
BFLOAT16_GPU_CAPABILITY = (8, 0)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One setting to time: a precision policy and whether the step is XLA-compiled.

    Example:
    >>> from tf_mlstm.auto.measure import Candidate
    >>> Candidate("mixed_bfloat16", jit=False).name
    'mixed_bfloat16/xla_off'
    >>> Candidate.from_name("float32/xla_on")
    Candidate(precision='float32', jit=True)
    """

    precision: str
    jit: bool

    @property
    def name(self) -> str:
        """E.g. "mixed_bfloat16/xla_off": its rate's key in logs, cache and config.json."""
        return f"{self.precision}/xla_{'on' if self.jit else 'off'}"

    @classmethod
    def from_name(cls, name) -> Self:
        precision, _, xla = name.partition("/")
        return cls(precision, xla == "xla_on")


@dataclasses.dataclass(frozen=True)
class Choice:
    """What `auto` chose (a `Candidate`), how and from which rates.

    Attributes:
      how: "measured", "cached", "measured and cached", "table", "only candidate", "from the chief".
      rates: {candidate name: `unit`s per second}; `skipped`: {candidate name: why no rate}.
      seconds: time spent measuring now (0 when cached).
      note: why the table decided, when it did.

    Example:
    >>> from tf_mlstm.auto.measure import Candidate, Choice
    >>> rates = {"float32/xla_on": 8999.0, "float32/xla_off": 8512.0}
    >>> choice = Choice(Candidate("float32", True), "measured", rates, seconds=22.0)
    >>> choice.record()["precision"], choice.record()["jit_compile"]
    ('float32', True)
    """

    candidate: Candidate
    how: str
    rates: dict = dataclasses.field(default_factory=dict)
    skipped: dict = dataclasses.field(default_factory=dict)
    unit: str = "chars/s"
    seconds: float = 0.0
    note: str = ""

    def reason(self) -> str:
        """A phrase for the log line: the rates that decided, or why none did."""
        if not self.rates:
            return f"{self.how}{': ' + self.note if self.note else ''}"
        rates = ", ".join(
            f"{name} {rate:,.0f}"
            for name, rate in sorted(self.rates.items(), key=lambda item: -item[1])
        )
        return f"{self.how} ({rates} {self.unit})"

    def record(self) -> dict:
        """JSON-ready summary for config.json (`autotune` key)."""
        return {
            "precision": self.candidate.precision,
            "jit_compile": self.candidate.jit,
            "how": self.how,
            "rates": {name: round(rate, 1) for name, rate in self.rates.items()},
            "unit": self.unit,
            "skipped": dict(self.skipped),
            "seconds": round(self.seconds, 1),
            **({"note": self.note} if self.note else {}),
        }


@dataclasses.dataclass(frozen=True)
class StepMeasurement:
    """How a task's step is timed (see `runner.Task.measurement`).

    Attributes:
      make_task: `make_task(config)` -> a task of the same step on synthetic batches.
      shape: what the step's speed depends on besides the machine, for the cache key.
      units_per_step: characters one replica's step processes.

    Example:
    >>> from tf_mlstm.auto.measure import StepMeasurement
    >>> shape = {"units": 768, "rows": 64, "seq": 64}
    >>> measurement = StepMeasurement(make_task=None, shape=shape, units_per_step=64 * 64)
    >>> measurement.units_per_step
    4096
    """

    make_task: object
    shape: dict
    units_per_step: float


# === Candidates ===


def native_precisions(machine, use_gpus=True) -> list[str]:
    """The precision policies `machine` computes natively, float32 first.

    Args:
      machine, use_gpus: a `hardware.Hardware`, and whether the run uses its GPUs.

    Returns:
      A list of policy names.
    """
    if use_gpus and machine.gpus:
        capabilities = [gpu.compute_capability for gpu in machine.gpus]
        precisions = ["float32"]
        # Every replica runs one policy: every GPU must have the units.
        if all(gpu.has_tensor_cores for gpu in machine.gpus):
            precisions.append("mixed_float16")
        if all(c is not None and tuple(c) >= BFLOAT16_GPU_CAPABILITY for c in capabilities):
            precisions.append("mixed_bfloat16")
        return precisions
    if machine.cpu_flags & BFLOAT16_CPU_FLAGS:
        return ["float32", "mixed_bfloat16"]
    return ["float32"]


def candidates(
    machine, use_gpus=True, precision=hardware.AUTO, jit=hardware.AUTO
) -> list[Candidate]:
    """The settings `auto` times, the table's choice (the prior) first.

    Args:
      machine, use_gpus: a `hardware.Hardware`, and whether the run uses its GPUs.
      precision: "auto" or a fixed policy (explicit, or recorded by the run).
      jit: "auto", "true" or "false".

    Returns:
      A list of `Candidate`, the prior first (so a time cap never leaves it out).
    """
    prior, _ = hardware.resolve_precision(precision, machine, use_gpus)
    precisions = native_precisions(machine, use_gpus) if precision == hardware.AUTO else [prior]
    if prior not in precisions:
        precisions.insert(0, prior)
    result = []
    for name in [prior] + [p for p in precisions if p != prior]:
        table_jit, _ = hardware.resolve_jit(jit, name, machine, use_gpus)
        jits = [table_jit, not table_jit] if jit == hardware.AUTO else [table_jit]
        result.extend(Candidate(name, on) for on in jits)
    return result


# === Cache ===


def cache_path() -> str:
    """`$XDG_CACHE_HOME/tf_mlstm/autotune.json`, or under `~/.cache` without it."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "tf_mlstm", CACHE_FILE)


def machine_kind(machine, use_gpus=True) -> str:
    """What a cached rate is valid for: the GPUs, or the CPU model, flags and cores."""
    if use_gpus and machine.gpus:
        return "gpu: " + ", ".join(
            f"{g.name} ({g.to_dict()['compute_capability'] or 'unknown'})" for g in machine.gpus
        )
    flags = hashlib.sha256(" ".join(sorted(machine.cpu_flags)).encode()).hexdigest()[:12]
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count()
    return f"cpu: {machine.cpu_model} (flags {flags}, {cores} cores)"


def cache_key(machine, use_gpus, shape) -> str:
    """The cache key of `shape` (a dict) on `machine` with this TensorFlow."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    return json.dumps(
        {"machine": machine_kind(machine, use_gpus), "tensorflow": tf.__version__, **shape},
        sort_keys=True,
    )


class Cache:
    """Measured rates by key, in one JSON file; an unreadable file counts as empty.

    Args:
      path: the JSON file (created on the first `put`); None: `cache_path()`.

    Example:
    >>> from tf_mlstm.auto.measure import Cache
    >>> cache = Cache("autotune.json")
    >>> cache.put("key", {"float32/xla_on": 7280.0}, {}, "chars/s")
    >>> Cache("autotune.json").get("key")["rates"]
    {'float32/xla_on': 7280.0}
    """

    def __init__(self, path=None):
        self.path = path or cache_path()

    def _read(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                entries = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            logging.warning("Autotune cache %s unreadable (%s); measuring again.", self.path, e)
            return {}
        return entries if isinstance(entries, dict) else {}

    def get(self, key) -> dict | None:
        """The entry of `key` ({"rates": ..., "failed": ...}), or None."""
        entry = self._read().get(key)
        return entry if isinstance(entry, dict) else None

    def put(self, key, rates, failed, unit) -> None:
        """Merges measured `rates` and `failed` candidates into `key`'s entry."""
        entries = self._read()
        entry = entries.get(key) if isinstance(entries.get(key), dict) else {}
        entry.setdefault("rates", {}).update(rates)
        entry.setdefault("failed", {}).update(failed)
        for name in rates:
            entry["failed"].pop(name, None)
        entry["unit"] = unit
        entry["measured"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        entries[key] = entry
        # A read-only home or cache folder: the run goes on, the next one
        # measures again. The writes go through TensorFlow's filesystem, whose
        # refusals are its own error types, not OSError.
        try:
            with fileio.write_errors(self.path):
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                fileio.write_json_atomic(self.path, entries)
        except errors.WriteError as e:
            logging.warning("Autotune cache %s not written (%s).", self.path, e.__cause__ or e)


# === Measuring and choosing ===


def time_cap_s(max_minutes) -> float:
    """Seconds measuring may take: `BUDGET_FRACTION` of a budget, at most `MAX_MEASURE_S`."""
    if max_minutes > 0:
        return min(MAX_MEASURE_S, BUDGET_FRACTION * max_minutes * 60)
    return MAX_MEASURE_S


def worth_measuring(max_minutes, max_steps, count) -> tuple[bool, str]:
    """Whether a run may spend time timing `count` candidates; else (False, why).

    Args:
      max_minutes, max_steps: the run's time budget (0: none) and step budget.
      count: the number of candidates.

    Returns:
      (bool, phrase saying why not, or "").
    """
    if max_minutes > 0:
        cap = time_cap_s(max_minutes)
        if cap < MIN_MEASURE_S:
            return False, f"{_name('max_minutes')}={max_minutes:g} leaves {cap:.1f} s to measure in"
        return True, ""
    needed = MIN_STEPS_FACTOR * count * (WARMUP_STEPS + TIMED_STEPS)
    if max_steps < needed:
        return False, (
            f"{_name('max_steps')}={max_steps} is too short to pay for measuring (< {needed})"
        )
    return True, ""


def measure(
    candidates_, build, units_per_step, clock=time.perf_counter, max_seconds=60.0, unit="chars/s"
) -> tuple[dict[str, float], dict[str, str], float]:
    """Times each candidate's step; skips those that fail, and those past the time cap.

    Args:
      candidates_: `Candidate`s, in the order to measure them.
      build: `build(candidate)` -> a function that runs one step to completion.
      units_per_step, unit: what one step processes (characters), and its rate's unit.
      clock: seconds, monotonic (`time.perf_counter`; tests pass a fake).
      max_seconds: measuring stops after this long; the first candidate is always measured.

    Returns:
      (rates {name: units/s}, failed {name: why}, seconds spent).
    """
    start = clock()
    rates, failed = {}, {}
    for candidate in candidates_:
        if (rates or failed) and clock() - start >= max_seconds:
            failed[candidate.name] = f"{NOT_MEASURED}: the {max_seconds:.0f} s cap was spent"
            continue
        try:
            step = build(candidate)
            for _ in range(WARMUP_STEPS):
                step()
            began, steps = clock(), 0
            for _ in range(TIMED_STEPS):
                step()
                steps += 1
                if rates and clock() - start >= max_seconds:
                    break
            elapsed = clock() - began
        # Any failure (an op XLA cannot compile, memory, a missing kernel)
        # only means this candidate is unusable here: the others still count.
        except Exception as e:  # pylint: disable=broad-except
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e) else ''}"
            logging.warning("Autotune: %s failed and is skipped (%s).", candidate.name, why)
            failed[candidate.name] = why
            continue
        # Drop this candidate's model before the next one is built (memory).
        step = None
        rates[candidate.name] = units_per_step * steps / max(elapsed, 1e-9)
        logging.info("Autotune: %s %s %s.", candidate.name, f"{rates[candidate.name]:,.0f}", unit)
    return rates, failed, clock() - start


def cached_rates(candidates_, cache, key_of, name_of=lambda c: c.name) -> tuple:
    """What the cache knows of `candidates_`: their rates, their failures, and the rest.

    Args:
      candidates_: things to time, each with a `name`.
      cache: a `Cache`, or None.
      key_of, name_of: a candidate's cache key (None: not cached), and its name in that entry.

    Returns:
      ({name: rate}, {name: why it failed}, [candidates neither holds]), keyed by `c.name`.
    """
    rates, skipped, missing = {}, {}, []
    for c in candidates_:
        key = key_of(c) if cache is not None else None
        entry = (cache.get(key) if key is not None else None) or {}
        if name_of(c) in entry.get("rates", {}):
            rates[c.name] = float(entry["rates"][name_of(c)])
        elif name_of(c) in entry.get("failed", {}):
            skipped[c.name] = entry["failed"][name_of(c)]
        else:
            missing.append(c)
    return rates, skipped, missing


def measure_and_cache(
    missing,
    build,
    units_per_step,
    clock,
    max_seconds,
    unit,
    cache,
    key_of,
    name_of=lambda c: c.name,
) -> tuple[dict[str, float], dict[str, str], float]:
    """`measure`s `missing`, and caches each rate and each failure (not a time cap's skip).

    Args:
      missing: what to time (`cached_rates`'s third part).
      build, units_per_step, clock, max_seconds, unit: see `measure`.
      cache, key_of, name_of: see `cached_rates`.

    Returns:
      `measure`'s (rates, failed, seconds), keyed by `c.name`.
    """
    measured, failed, seconds = measure(missing, build, units_per_step, clock, max_seconds, unit)
    by_key = {}
    for c in missing:
        why = failed.get(c.name, "")
        if why.startswith(NOT_MEASURED):
            # Skipped only for time, not measured: the next run tries it.
            logging.info("Autotune: %s %s.", c.name, why)
            continue
        key = key_of(c) if cache is not None else None
        if key is not None and (c.name in measured or why):
            rates, fails = by_key.setdefault(key, ({}, {}))
            if c.name in measured:
                rates[name_of(c)] = measured[c.name]
            else:
                fails[name_of(c)] = why
    for key, (rates, fails) in by_key.items():
        cache.put(key, rates, fails, unit)
    return measured, failed, seconds


def choose(
    candidates_,
    build,
    units_per_step,
    *,
    cache=None,
    key=None,
    clock=time.perf_counter,
    max_seconds=MAX_MEASURE_S,
    allowed=True,
    not_allowed_why="",
    unit="chars/s",
) -> Choice:
    """The fastest of `candidates_`, from the cache or measured now.

    Args:
      candidates_: `Candidate`s, the prior first.
      build, units_per_step, clock, max_seconds: see `measure`.
      cache, key: a `Cache` (or None), and the key (`cache_key`).
      allowed, not_allowed_why: whether measuring is allowed (`worth_measuring`), and why not;
        if not, a complete cache entry still decides, else the prior does.
      unit: what the rates count.

    Returns:
      A `Choice`.
    """
    candidates_ = list(candidates_)
    if len(candidates_) == 1:
        return Choice(candidates_[0], "only candidate", note="one native setting")
    rates, skipped, missing = cached_rates(candidates_, cache, lambda _: key)
    if rates and (not missing or not allowed):
        best = max(rates, key=rates.get)
        return Choice(Candidate.from_name(best), "cached", rates, skipped, unit)
    if not allowed:
        return Choice(candidates_[0], "table", note=not_allowed_why)
    logging.info(
        "Autotune: timing %s (%d warm-up + %d steps each, at most %.0f s).",
        ", ".join(c.name for c in missing),
        WARMUP_STEPS,
        TIMED_STEPS,
        max_seconds,
    )
    measured, failed, seconds = measure_and_cache(
        missing, build, units_per_step, clock, max_seconds, unit, cache, lambda _: key
    )
    rates.update(measured)
    skipped.update(failed)
    if not rates:
        return Choice(
            candidates_[0], "table", {}, skipped, unit, seconds, "every candidate failed to run"
        )
    best = max(rates, key=rates.get)
    how = "measured" if len(measured) == len(rates) else "measured and cached"
    return Choice(Candidate.from_name(best), how, rates, skipped, unit, seconds)


# === Workers agree ===


def encode(candidate) -> list[float]:
    """A candidate as two floats (precision index + 1, XLA), for a collective."""
    return [float(hardware.PRECISIONS.index(candidate.precision) + 1), float(candidate.jit)]


def decode(values) -> Candidate:
    """`encode`'s inverse: the `Candidate` in two floats.

    Raises:
      ValueError: the values name no precision (the chief sent nothing).
    """
    index = int(round(values[0])) - 1
    if not 0 <= index < len(hardware.PRECISIONS):
        raise ValueError(f"no precision in the chief's message {list(values)}")
    return Candidate(hardware.PRECISIONS[index], bool(round(values[1])))


def agree_values(sum_over_replicas, values, chief, local_replicas) -> list[float]:
    """Every worker's copy of the chief's `values` (floats), by one SUM all-reduce.

    Every worker must call this at the same point.

    Args:
      sum_over_replicas: `sum_over_replicas(value_of)` -> `value_of(replica_context)` summed
        over the run's replicas (`train.strategy.sum_over_replicas` on its strategy).
      values: the chief's list of floats (on other workers only its length counts).
      chief, local_replicas: whether this worker is the chief, and its replicas.

    Returns:
      The chief's values.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    values = [float(v) for v in values] if chief else [0.0] * len(values)

    def mine(context):
        first = tf.equal(context.replica_id_in_sync_group % local_replicas, 0)
        return tf.constant(values, tf.float32) * tf.cast(first, tf.float32)

    return sum_over_replicas(mine).numpy().tolist()


def agree(sum_over_replicas, choice, chief, local_replicas) -> Choice:
    """Every worker's copy of the chief's `choice` (`agree_values` of its encoding).

    Args:
      sum_over_replicas: the run's all-reduce (see `agree_values`).
      choice: the chief's `Choice` (ignored on other workers).
      chief, local_replicas: whether this worker is the chief, and its replicas.

    Returns:
      The chief's `Choice` (on other workers how="from the chief", no rates).
    """
    values = encode(choice.candidate) if chief else [0.0, 0.0]
    candidate = decode(agree_values(sum_over_replicas, values, chief, local_replicas))
    if chief:
        return choice
    return Choice(candidate, "from the chief")
