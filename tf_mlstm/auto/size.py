"""`--hidden_size=auto`: the model's size for the run's budget, from measured rates and a law.

Each size trains on min(rate x replicas x seconds left, max_steps x batch x seq_length) chars.
"""

import dataclasses
import math
import time

from absl import logging

from tf_mlstm import errors
from tf_mlstm.auto import law as law_lib
from tf_mlstm.auto import measure
from tf_mlstm.config import choices

AUTO = choices.AUTO
# The law's source in the record when no file is given.
SHIPPED_LAW = "tf_mlstm.auto.law.REVIEWS_LAW"


@dataclasses.dataclass(frozen=True)
class SizeCandidate:
    """One size to time (for `measure.measure`): mLSTM units at one precision/XLA setting.

    Example:
    >>> from tf_mlstm.auto.size import SizeCandidate
    >>> from tf_mlstm.auto.measure import Candidate
    >>> SizeCandidate(512, Candidate("float32", True)).name
    '512 units'
    """

    units: int
    setting: measure.Candidate

    @property
    def name(self) -> str:
        """E.g. "512 units": its key in the logs."""
        return f"{self.units} units"


@dataclasses.dataclass(frozen=True)
class Rates:
    """Each size's training rate on one replica ({units: chars/s}), and how it was had.

    Attributes:
      how: "measured", "cached", "measured and cached" or "not measured".
      skipped: {units: why it has no rate}; `note`: why nothing was measured.
      setting: the `measure.Candidate.name` the rates are of.

    Example:
    >>> from tf_mlstm.auto.size import Rates
    >>> Rates({256: 9000.0}, "cached").rates
    {256: 9000.0}
    """

    rates: dict
    how: str
    seconds: float = 0.0
    skipped: dict = dataclasses.field(default_factory=dict)
    note: str = ""
    setting: str = ""


@dataclasses.dataclass(frozen=True)
class Decision:
    """The size `auto` chose (mLSTM units), how, its log line and its config.json record.

    Attributes:
      how: "measured", "cached", "measured and cached", "steps", "recorded" or "from the chief".
      seconds: time spent measuring (counted against the time budget).

    Example:
    >>> from tf_mlstm.auto.size import Decision
    >>> Decision(512, "recorded", "hidden_size=512 (auto: recorded)", {}).seconds
    0.0
    """

    units: int
    how: str
    line: str
    record: dict
    seconds: float = 0.0


def step_chars(config) -> int:
    """The characters the step budget trains on: max_steps x global batch x seq_length."""
    return config.max_steps * config.batch_size * config.seq_length


def measured_rates(
    sizes,
    setting,
    build,
    units_per_step,
    *,
    cache,
    key_of,
    max_seconds,
    allowed=True,
    not_allowed_why="",
    clock=time.perf_counter,
) -> Rates:
    """Each size's rate at `setting`, from the cache or timed now (`measure.measure`).

    Args:
      sizes: the units to rate, in the order to time them.
      setting: the `measure.Candidate` (precision, XLA) they are timed at.
      build: `build(SizeCandidate)` -> a function that runs one step.
      units_per_step: characters one replica's step trains on.
      cache: a `measure.Cache`, or None.
      key_of: `key_of(units)` -> the cache key of that size's shape.
      max_seconds, clock: see `measure.measure`.
      allowed, not_allowed_why: whether measuring is allowed (cached rates count anyway), why not.

    Returns:
      `Rates`.

    Example:
    >>> from tf_mlstm.auto.size import measured_rates
    >>> from tf_mlstm.auto.measure import Candidate
    >>> now = [0.0]
    >>> def build(candidate):  # a step of 8 units takes 0.01 s on this fake clock
    ...     def step():
    ...         now[0] += candidate.units / 800
    ...     return step
    >>> rates = measured_rates([8, 16], Candidate("float32", False), build, 100,
    ...     cache=None, key_of=str, max_seconds=60, clock=lambda: now[0])
    >>> {units: round(rate) for units, rate in rates.rates.items()}, rates.how
    ({8: 10000, 16: 5000}, 'measured')
    """
    candidates = [SizeCandidate(u, setting) for u in sizes]
    by_name = {c.name: c.units for c in candidates}
    # The size's shape is the cache key; the rate in it is the setting's, beside precision's.
    size_key, name_of = (lambda c: key_of(c.units)), (lambda c: setting.name)
    found, failed_before, missing = measure.cached_rates(candidates, cache, size_key, name_of)
    cached = {by_name[n]: r for n, r in found.items()}
    skipped = {by_name[n]: why for n, why in failed_before.items()}
    if not missing or not allowed:
        how = "cached" if cached else "not measured"
        note = "" if not missing else not_allowed_why
        return Rates(cached, how, 0.0, skipped, note, setting.name)
    logging.info(
        "Autosize: timing %s at %s (%d warm-up + %d steps each, at most %.0f s).",
        ", ".join(c.name for c in missing),
        setting.name,
        measure.WARMUP_STEPS,
        measure.TIMED_STEPS,
        max_seconds,
    )
    measured, failed, seconds = measure.measure_and_cache(
        missing, build, units_per_step, clock, max_seconds, "chars/s", cache, size_key, name_of
    )
    skipped.update({by_name[n]: why for n, why in failed.items()})
    rates = {**cached, **{by_name[n]: r for n, r in measured.items()}}
    if measured:
        how = "measured" if not cached else "measured and cached"
    else:
        how = "cached" if cached else "not measured"
    return Rates(rates, how, seconds, skipped, "", setting.name)


def decide(
    config,
    replicas,
    *,
    chief=True,
    num_workers=1,
    recorded=None,
    recorded_path="config.json",
    rates_of=None,
    agree=None,
) -> Decision:
    """The size of a `hidden_size=auto` run, on every worker.

    Args:
      config: the validated config (`hidden_size` "auto", its candidates, law and budget).
      replicas: replicas in sync (a size's characters: one replica's rate x replicas).
      chief: whether this worker decides (measures).
      num_workers: workers of the run; above one every worker calls `agree`.
      recorded, recorded_path: `rundir.recorded_hidden_size(model_dir)` or None, and its file.
      rates_of: `rates_of(sizes, max_seconds)` -> `Rates` (the chief's, with a time budget).
      agree: `agree(values)` -> the chief's values on every worker (`measure.agree_values`).

    Returns:
      The `Decision`.

    Raises:
      errors.InvalidValueError: a bad `scaling_law` file (`law.load_law`).

    Example:
    >>> from tf_mlstm.config import TrainConfig
    >>> from tf_mlstm.auto.size import decide
    >>> config = TrainConfig(hidden_size="auto", size_candidates="128,256", max_steps=100,
    ...     batch_size=32, seq_length=64).validate()
    >>> decision = decide(config, replicas=1)
    >>> decision.units, decision.how
    (256, 'steps')
    """
    if recorded is not None:
        units, record = recorded
        line = (
            f"hidden_size={units} (auto: recorded in {recorded_path}"
            f"{', chosen ' + record['how'] if record.get('how') else ''}); nothing measured"
        )
        decision = Decision(units, "recorded", line, record)
    elif chief:
        decision = _plan(config, replicas, rates_of)
    else:
        decision = None
    if num_workers > 1:
        # Every worker takes part, recorded or not: each reads its own run folder, and the
        # chief's folder is the one that counts.
        units = int(round(agree([decision.units if chief else 0])[0]))
        if not chief:
            line = f"hidden_size={units} (auto: from the chief)"
            decision = Decision(units, "from the chief", line, {})
    return decision


def _plan(config, replicas, rates_of):
    law = law_lib.load_law(config.scaling_law)
    sizes = config.size_candidate_units
    max_chars = float(step_chars(config))
    seconds_budget = config.max_minutes * 60
    if seconds_budget > 0 and rates_of is not None:
        rates = rates_of(sizes, measure.time_cap_s(config.max_minutes))
    else:
        rates = Rates({}, "not measured", note=f"{errors.setting_name('max_minutes')}=0")
    left = seconds_budget - rates.seconds
    if rates.rates and left > 0:
        run_rates = {u: r * replicas for u, r in rates.rates.items()}
        plan = law_lib.plan_size(
            law,
            run_rates,
            left,
            config.embedding_size,
            config.weight_norm,
            max_chars,
            optimize_for=config.optimize_for,
        )
        how = rates.how
    else:
        plan = law_lib.plan_size(
            law,
            dict.fromkeys(sizes),
            math.inf,
            config.embedding_size,
            config.weight_norm,
            max_chars,
            optimize_for=config.optimize_for,
        )
        how = "steps"
    source = config.scaling_law or SHIPPED_LAW
    line = plan.line
    if rates.skipped and how != "steps":
        left_out = "; ".join(f"{u} units ({why})" for u, why in sorted(rates.skipped.items()))
        line += f"; left out: {left_out}"
    record = {
        "hidden_size": plan.best.units,
        "how": how,
        "setting": rates.setting if rates.rates else None,
        "candidates": [_candidate_record(c, rates.rates.get(c.units)) for c in plan.candidates],
        "skipped": {str(u): why for u, why in rates.skipped.items()},
        "optimize_for": config.optimize_for,
        "law": law.formula(),
        "law_source": source,
        "budget": {
            "max_minutes": config.max_minutes,
            "seconds_left": round(left, 1) if seconds_budget > 0 else None,
            "max_steps": config.max_steps,
            "max_chars": int(max_chars),
        },
        "replicas": replicas,
        "seconds": round(rates.seconds, 1),
        "line": line,
        **({"note": rates.note} if rates.note else {}),
    }
    return Decision(plan.best.units, how, line, record, rates.seconds)


def _candidate_record(choice, replica_rate):
    return {
        "units": choice.units,
        "weights": choice.weights,
        "chars_per_s": None if math.isnan(choice.chars_per_s) else round(choice.chars_per_s, 1),
        "replica_chars_per_s": None if replica_rate is None else round(replica_rate, 1),
        "chars": int(choice.chars),
        "predicted": round(choice.predicted, 4),
        "extrapolated": choice.extrapolated,
    }


def unused_settings(config) -> "str | None":
    """The line for settings only `hidden_size=auto` reads, set on a run of a given size.

    `size_candidates` is left out: a recipe's flagfile sets it whatever the size.

    Args:
      config: the run's config.

    Returns:
      One line naming what does nothing, or None (an auto size, or the defaults).

    Example:
    >>> from tf_mlstm.config import TrainConfig
    >>> from tf_mlstm.auto.size import unused_settings
    >>> line = unused_settings(TrainConfig(hidden_size=512, optimize_for="transfer"))
    >>> line[:60]
    '--optimize_for=transfer does nothing: it chooses the size of'
    >>> line[60:]
    ' --hidden_size=auto, and this run has --hidden_size=512'
    >>> unused_settings(TrainConfig(hidden_size="auto", optimize_for="transfer")) is None
    True
    """
    size = getattr(config, "hidden_size", AUTO)
    if size == AUTO:
        return None
    unused = []
    if getattr(config, "optimize_for", choices.OPTIMIZE_FOR[0]) != choices.OPTIMIZE_FOR[0]:
        unused.append(f"--optimize_for={config.optimize_for}")
    if getattr(config, "scaling_law", ""):
        unused.append(f"--scaling_law={config.scaling_law}")
    if not unused:
        return None
    verb, pronoun = ("does", "it chooses") if len(unused) == 1 else ("do", "they choose")
    return (
        f"{' and '.join(unused)} {verb} nothing: {pronoun} the size of --hidden_size=auto, "
        f"and this run has --hidden_size={size}"
    )


def log(decision) -> None:
    """The one line: the choice, how it was made, the rates, predictions and alternatives."""
    if decision.how in ("recorded", "from the chief"):
        logging.info("Model size: %s.", decision.line)
        return
    how = decision.how
    if decision.how in ("measured", "measured and cached"):
        how = f"{decision.how} in {decision.seconds:.1f} s"
    if decision.record.get("setting"):
        how += f" at {decision.record['setting']}"
    logging.info("Model size (auto, %s): %s.", how, decision.line)


def rates_on_this_machine(
    config, task, per_replica_batch, replicas, build_step, sizes, max_seconds
) -> Rates:
    """The chief's `rates_of`: each size's step timed as `auto` precision times its candidates.

    Args:
      config, task: the run's config and task (its `measurement` gives the step to time).
      per_replica_batch, replicas: rows a replica trains on, and replicas in sync.
      build_step: `build_step(setting, probe, scratch, use_gpus, hidden_size)` -> one step.
      sizes, max_seconds: the units to rate, and the time cap.

    Returns:
      `Rates` at the table's prior precision/XLA (or the fixed ones).
    """
    import shutil  # pylint: disable=g-import-not-at-top
    import tempfile  # pylint: disable=g-import-not-at-top

    from tf_mlstm.auto import hardware  # pylint: disable=g-import-not-at-top

    probe = task.measurement(per_replica_batch)
    if probe is None:
        return Rates({}, "not measured", note="this task's step is not measurable")
    machine = hardware.detect()
    use_gpus = getattr(config, "num_gpus", -1) != 0
    setting = measure.candidates(machine, use_gpus, config.precision, config.jit_compile)[0]
    shape = {**probe.shape, "replicas": replicas}
    allowed = max_seconds >= measure.MIN_MEASURE_S
    why = f"{errors.setting_name('max_minutes')}={config.max_minutes:g} leaves {max_seconds:.1f} s"
    scratch = tempfile.mkdtemp(prefix="tf_mlstm_autosize_")
    try:
        return measured_rates(
            sizes,
            setting,
            lambda c: build_step(c.setting, probe, scratch, use_gpus, c.units),
            probe.units_per_step,
            cache=measure.Cache(),
            key_of=lambda units: measure.cache_key(
                machine, use_gpus, {**shape, "hidden_size": units}
            ),
            max_seconds=max_seconds,
            allowed=allowed,
            not_allowed_why=f"{why} to measure in",
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
