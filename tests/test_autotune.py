"""`auto` precision and XLA by measurement: candidates, choice, cache, time cap, workers agree.

The choice is tested with a fake clock: each candidate's step advances it by a
set cost, so which one wins is known. The real runs are tiny and check the
wiring (the runner's own step is timed, config.json records the choice and
rates, the cache serves the next run, exact resume and seeding untouched).
"""

import functools
import json
import logging
import re

import numpy as np
import pytest
import tensorflow as tf
from test_hardware import AMX_XEON
from test_hardware import AVX2_EPYC
from test_hardware import AVX512_BF16_EPYC
from test_hardware import GRAVITON
from test_hardware import H100
from test_hardware import P100
from test_hardware import V100
from test_hardware import _machine

from _models import tiny_train_config
from tf_mlstm import errors
from tf_mlstm.auto import measure
from tf_mlstm.auto.measure import Candidate

F32_ON, F32_OFF = Candidate("float32", True), Candidate("float32", False)
BF16_ON, BF16_OFF = Candidate("mixed_bfloat16", True), Candidate("mixed_bfloat16", False)
F16_ON, F16_OFF = Candidate("mixed_float16", True), Candidate("mixed_float16", False)


class FakeClock:
    """A clock that moves only when a fake step runs: step costs are known exactly."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def fake_build(clock, costs, built=None):
    """`build` for `measure.measure`: candidate -> a step costing `costs[name]` seconds.

    A cost that is an exception is raised instead (a candidate that fails to compile).
    """

    def build(candidate):
        if built is not None:
            built.append(candidate.name)
        cost = costs[candidate.name]
        if isinstance(cost, Exception):
            raise cost

        def step():
            clock.now += cost

        return step

    return build


def choose_faked(candidates, costs, clock, built=None, units=100, **options):
    """`measure.choose` of `candidates` with the steps of `fake_build` on `clock`."""
    return measure.choose(
        candidates, fake_build(clock, costs, built), units, clock=clock, **options
    )


def test_candidates_are_what_the_hardware_runs_natively_with_the_prior_first():
    # AVX2 only: bfloat16 is emulated there, so float32 only; XLA on is the prior.
    assert measure.candidates(_machine(AVX2_EPYC)) == [F32_ON, F32_OFF]
    # AVX512-BF16 without AMX: the prior is float32, bfloat16 is measured too.
    assert measure.candidates(_machine(AVX512_BF16_EPYC)) == [F32_ON, F32_OFF, BF16_OFF, BF16_ON]
    assert measure.candidates(_machine(AMX_XEON)) == [BF16_OFF, BF16_ON, F32_ON, F32_OFF]
    assert measure.candidates(_machine(GRAVITON))[2:] == [BF16_OFF, BF16_ON]
    # GPUs: float16 with tensor cores, bfloat16 from compute capability 8.0.
    assert measure.candidates(_machine(AVX2_EPYC, [H100])) == [
        F16_ON,
        F16_OFF,
        F32_ON,
        F32_OFF,
        BF16_ON,
        BF16_OFF,
    ]
    assert measure.native_precisions(_machine(AVX2_EPYC, [V100])) == ["float32", "mixed_float16"]
    assert measure.native_precisions(_machine(AVX2_EPYC, [V100, P100])) == ["float32"]
    # --num_gpus=0: the CPU's candidates.
    assert measure.candidates(_machine(AVX2_EPYC, [H100]), use_gpus=False) == [F32_ON, F32_OFF]
    # A fixed precision (explicit or recorded) or XLA setting leaves the other to measure.
    assert measure.candidates(_machine(AMX_XEON), precision="float32") == [F32_ON, F32_OFF]
    assert measure.candidates(_machine(AVX512_BF16_EPYC), jit="false") == [F32_OFF, BF16_OFF]


def test_the_faster_candidate_wins_and_the_rates_are_logged(caplog):
    clock = FakeClock()
    costs = {F32_ON.name: 0.4, F32_OFF.name: 0.5, BF16_OFF.name: 0.25, BF16_ON.name: 0.8}
    with caplog.at_level(logging.INFO):
        choice = measure.choose(
            [F32_ON, F32_OFF, BF16_OFF, BF16_ON], fake_build(clock, costs), 1000, clock=clock
        )
    assert choice.candidate == BF16_OFF and choice.how == "measured"
    # Rates from the timed steps only (the warm-up steps are excluded): 1000 chars / cost.
    assert choice.rates == pytest.approx({name: 1000 / cost for name, cost in costs.items()})
    total = (measure.WARMUP_STEPS + measure.TIMED_STEPS) * sum(costs.values())
    assert choice.seconds == pytest.approx(total)
    assert "Autotune: mixed_bfloat16/xla_off 4,000 chars/s." in caplog.text
    assert choice.reason().startswith("measured (mixed_bfloat16/xla_off 4,000, float32/xla_on")
    record = choice.record()
    assert record["precision"] == "mixed_bfloat16" and record["jit_compile"] is False
    assert record["rates"]["float32/xla_on"] == 2500.0


def test_the_cache_is_used_the_second_time(tmp_path):
    cache = measure.Cache(str(tmp_path / "cache" / "autotune.json"))
    clock = FakeClock()
    costs = {F32_ON.name: 0.5, F32_OFF.name: 0.4}
    built = []
    first = measure.choose(
        [F32_ON, F32_OFF], fake_build(clock, costs, built), 100, cache=cache, key="k", clock=clock
    )
    assert first.candidate == F32_OFF and built == [F32_ON.name, F32_OFF.name]
    again = measure.choose(
        [F32_ON, F32_OFF], fake_build(clock, costs, built), 100, cache=cache, key="k", clock=clock
    )
    assert again.candidate == F32_OFF and again.how == "cached" and again.seconds == 0
    assert again.rates == pytest.approx(first.rates)
    assert len(built) == 2  # nothing built, compiled or timed the second time
    # A candidate the cache does not know is measured alone, its rate merged with the
    # cached ones.
    costs[BF16_OFF.name] = 0.1
    more = choose_faked([F32_ON, F32_OFF, BF16_OFF], costs, clock, built, cache=cache, key="k")
    assert built[2:] == [BF16_OFF.name]
    assert more.candidate == BF16_OFF and more.how == "measured and cached"
    # A damaged cache file counts as empty, with a warning.
    (tmp_path / "cache" / "autotune.json").write_text("{not json")
    assert cache.get("k") is None


def test_cache_key_names_machine_kind_tensorflow_and_shape(monkeypatch, tmp_path):
    shape = {"hidden_size": 768, "rows": 64, "seq_length": 64, "replicas": 1}
    key = json.loads(measure.cache_key(_machine(AVX2_EPYC), True, shape))
    assert key["tensorflow"] == tf.__version__ and key["hidden_size"] == 768
    assert key["machine"].startswith("cpu: AMD EPYC 7B12 (flags ")
    gpu = json.loads(measure.cache_key(_machine(AVX2_EPYC, [H100]), True, shape))
    assert gpu["machine"] == "gpu: NVIDIA H100 80GB HBM3 (9.0)"
    # CPUs of one model with other flags are other kinds.
    assert measure.machine_kind(_machine(AVX2_EPYC)) != measure.machine_kind(
        _machine(AVX2_EPYC.replace("sha_ni", ""))
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert measure.cache_path() == str(tmp_path / "tf_mlstm" / "autotune.json")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert measure.cache_path().endswith("/.cache/tf_mlstm/autotune.json")


def test_a_failing_candidate_is_skipped_with_a_warning(tmp_path, caplog):
    cache = measure.Cache(str(tmp_path / "autotune.json"))
    clock = FakeClock()
    costs = {
        BF16_OFF.name: 0.3,
        BF16_ON.name: tf.errors.InvalidArgumentError(None, None, "XLA compilation failed\nmore"),
        F32_ON.name: 0.2,
    }
    built = []
    with caplog.at_level(logging.WARNING):
        choice = choose_faked(
            [BF16_OFF, BF16_ON, F32_ON], costs, clock, built, cache=cache, key="k"
        )
    assert choice.candidate == F32_ON
    assert "Autotune: mixed_bfloat16/xla_on failed and is skipped (InvalidArgumentError: XLA " in (
        caplog.text
    )
    assert choice.skipped == {BF16_ON.name: "InvalidArgumentError: XLA compilation failed"}
    # The failure is cached too: the next run does not compile it again.
    again = measure.choose(
        [BF16_OFF, BF16_ON, F32_ON], fake_build(clock, costs, built), 10, cache=cache, key="k"
    )
    assert again.how == "cached" and len(built) == 3
    # Nothing runs: the prior, said so.
    everything_fails = {F32_ON.name: RuntimeError("no"), F32_OFF.name: RuntimeError("no")}
    choice = measure.choose([F32_ON, F32_OFF], fake_build(clock, everything_fails), 10)
    assert (choice.candidate, choice.how, choice.note) == (
        F32_ON,
        "table",
        "every candidate failed to run",
    )


def test_time_cap_measures_the_prior_first_and_skips_the_rest_uncached(tmp_path):
    cache = measure.Cache(str(tmp_path / "autotune.json"))
    clock = FakeClock()
    costs = {F32_ON.name: 3.0, F32_OFF.name: 1.0, BF16_OFF.name: 0.1}
    choice = measure.choose(
        [F32_ON, F32_OFF, BF16_OFF],
        fake_build(clock, costs),
        10,
        cache=cache,
        key="k",
        clock=clock,
        max_seconds=10,
    )
    # The prior's 5 steps take 15 s > 10 s: it is kept whole, the others never start.
    assert choice.candidate == F32_ON and list(choice.rates) == [F32_ON.name]
    assert choice.skipped[F32_OFF.name].startswith("not measured: the 10 s cap was spent")
    assert json.loads((tmp_path / "autotune.json").read_text())["k"]["failed"] == {}
    assert measure.time_cap_s(30) == 60 and measure.time_cap_s(10) == 30
    assert measure.time_cap_s(0) == measure.MAX_MEASURE_S


def test_short_runs_use_the_table_unless_the_cache_knows():
    assert measure.worth_measuring(30, 10**6, 4) == (True, "")
    assert measure.worth_measuring(0, 600, 4) == (True, "")
    allowed, why = measure.worth_measuring(0, 10, 2)
    assert not allowed and why == "max_steps=10 is too short to pay for measuring (< 100)"
    with errors.naming_flags():  # a binary's user reads the flag
        assert measure.worth_measuring(0, 10, 2)[1].startswith("--max_steps=10 is too short")
    assert not measure.worth_measuring(1, 10**6, 2)[0]  # 3 s of a 1-minute budget
    clock = FakeClock()
    build = fake_build(clock, {})  # would fail: nothing may be built
    choice = measure.choose(
        [F32_ON, F32_OFF], build, 1, clock=clock, allowed=False, not_allowed_why=why
    )
    assert (choice.candidate, choice.how, choice.note) == (F32_ON, "table", why)
    assert measure.choose([F32_OFF], build, 1).how == "only candidate"


def test_the_choice_travels_as_two_numbers_and_only_the_chiefs_counts(mirrored_on_cpus):
    for candidate in (F32_ON, F32_OFF, BF16_OFF, F16_ON):
        assert measure.decode(measure.encode(candidate)) == candidate
    with pytest.raises(ValueError, match="no precision in the chief's message"):
        measure.decode([0.0, 0.0])
    from tf_mlstm.train import strategy as strategy_lib  # pylint: disable=g-import-not-at-top

    # Two replicas in this process: only the chief's first one contributes, so the
    # sum is the chief's value, not twice it.
    strategy = strategy_lib.get_distribution_strategy("mirrored")
    assert strategy.num_replicas_in_sync == 2
    # The runner's all-reduce, as it hands it to the auto settings (`auto.settings.Layout`).
    sum_over_replicas = functools.partial(strategy_lib.sum_over_replicas, strategy)
    chosen = measure.Choice(BF16_OFF, "measured", {BF16_OFF.name: 1.0})
    assert measure.agree(sum_over_replicas, chosen, True, 2) is chosen
    # A non-chief worker with no chief in the sum would receive nothing: refused.
    with pytest.raises(ValueError, match="no precision"):
        measure.agree(sum_over_replicas, None, False, 2)


# === Real runs (tiny) ===


def _train(config, files):
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    trainer = Runner(LanguageModelTask(config, files, []), config)
    return trainer, trainer.train()


@pytest.mark.slow
def test_a_run_measures_its_own_step_records_it_and_the_next_run_uses_the_cache(
    tmp_path, demo_tfrecords, caplog, monkeypatch
):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    # A cache of its own: another test of this session may have timed one of the candidates
    # at the same shape, and then only the other would be timed here.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = tfrecord.split_files(demo_tfrecords, "train")
    # A budget (so measuring is allowed) the two steps never reach; XLA on and off. The
    # cap is raised: on a busy machine the first XLA compilation alone can spend 60 s.
    monkeypatch.setattr(measure, "MAX_MEASURE_S", 600.0)
    tiny = dict(max_steps=2, max_minutes=300, jit_compile="auto", checkpoint_every_steps=2)
    config = tiny_train_config(tmp_path / "a", demo_tfrecords, **tiny)
    with caplog.at_level(logging.INFO):
        trainer, results = _train(config, files)
    assert "Autotune: timing float32/xla_on, float32/xla_off" in caplog.text
    recorded = json.loads((tmp_path / "a" / "config.json").read_text())
    record = recorded["autotune"]
    assert record["how"] == "measured" and record["unit"] == "chars/s"
    assert set(record["rates"]) == {"float32/xla_on", "float32/xla_off"}
    best = max(record["rates"], key=record["rates"].get)
    assert best == f"float32/xla_{'on' if recorded['jit_compile'] == 'true' else 'off'}"
    assert re.search(r"Precision float32 \(float32: measured \(float32/xla_", caplog.text)

    # Same shape: from the cache, nothing timed; the same weights as a run told the
    # choice outright (measuring leaves the seeding and the data untouched).
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _, cached = _train(tiny_train_config(tmp_path / "b", demo_tfrecords, **tiny), files)
    assert "Autotune: timing" not in caplog.text
    assert json.loads((tmp_path / "b" / "config.json").read_text())["autotune"]["how"] == "cached"
    told = dict(tiny, jit_compile=recorded["jit_compile"])
    _, explicit = _train(tiny_train_config(tmp_path / "c", demo_tfrecords, **told), files)
    assert results["weights_sha256"] == cached["weights_sha256"] == explicit["weights_sha256"]
    assert "autotune" not in json.loads((tmp_path / "c" / "config.json").read_text())


@pytest.mark.slow
def test_a_resumed_run_keeps_its_recorded_precision(tmp_path, demo_tfrecords, monkeypatch):
    from tf_mlstm.auto import hardware  # pylint: disable=g-import-not-at-top
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    files = tfrecord.split_files(demo_tfrecords, "train")
    started = tiny_train_config(
        tmp_path / "r", demo_tfrecords, precision="mixed_bfloat16", max_steps=2
    )
    _train(started, files)
    # On a machine where bfloat16 is a candidate and would win, auto still resumes in it...
    monkeypatch.setattr(hardware, "detect", lambda: _machine(AVX512_BF16_EPYC))
    seen = []
    monkeypatch.setattr(
        measure,
        "candidates",
        lambda machine, use_gpus, precision, jit: seen.append(precision) or [BF16_OFF],
    )
    resumed = tiny_train_config(tmp_path / "r", demo_tfrecords, precision="auto", max_steps=4)
    trainer, results = _train(resumed, files)
    assert seen == ["mixed_bfloat16"]  # only the recorded precision is a candidate
    assert trainer.config.precision == "mixed_bfloat16" and results["step"] == 4
    assert np.isfinite(results["final_learning_rate"])


# === Model size: --hidden_size=auto (tf_mlstm.auto.size) ===


def _auto_config(**overrides):
    from tf_mlstm.config import TrainConfig  # pylint: disable=g-import-not-at-top

    values = dict(
        hidden_size="auto",
        size_candidates="256,512,1024",
        batch_size=64,
        seq_length=64,
        max_steps=100000,
        max_minutes=30.0,
    )
    return TrainConfig(**{**values, **overrides}).validate()


def _never(*args):
    raise AssertionError(f"measured {args}")


# Rates (one replica) under which the fastest size is not the best for 30 minutes.
AUTO_RATES = {256: 12000.0, 512: 8000.0, 1024: 1500.0}


def test_auto_size_is_the_lowest_predicted_loss_for_the_time_left_not_the_fastest():
    from tf_mlstm.auto import law as law_lib  # pylint: disable=g-import-not-at-top
    from tf_mlstm.auto import size  # pylint: disable=g-import-not-at-top

    caps = []

    def rates_of(sizes, cap):
        caps.append((sizes, cap))
        return size.Rates(dict(AUTO_RATES), "measured", 60.0, setting="float32/xla_on")

    decision = size.decide(_auto_config(), replicas=2, rates_of=rates_of)
    assert caps == [((256, 512, 1024), measure.time_cap_s(30.0))]
    # Measuring's 60 s come off the budget; two replicas train at twice one's rate.
    left = 30 * 60 - 60
    predicted = {
        u: law_lib.REVIEWS_LAW.predict(law_lib.model_weights(u), r * 2 * left)
        for u, r in AUTO_RATES.items()
    }
    assert decision.units == min(predicted, key=predicted.get) == 512
    assert decision.how == "measured" and decision.seconds == 60.0
    assert decision.line.startswith(
        f"hidden_size=512 for 29 minutes or 409.6M chars: 512 units: {predicted[512]:.3f}"
    )
    assert "16,000 chars/s" in decision.line and "alternatives 256 units" in decision.line
    record = decision.record
    assert record["budget"]["seconds_left"] == left and record["setting"] == "float32/xla_on"
    assert [c["replica_chars_per_s"] for c in record["candidates"]] == list(AUTO_RATES.values())
    assert [c["chars"] for c in record["candidates"]] == [
        int(r * 2 * left) for r in AUTO_RATES.values()
    ]
    assert record["law"] == law_lib.REVIEWS_LAW.formula()
    assert record["law_source"] == size.SHIPPED_LAW and record["line"] == decision.line
    assert record["optimize_for"] == "bits"

    # For transfer: the widest size predicted within the margin of the lowest loss. With
    # 1024 units at 3,500 chars/s that is 1024 (0.049 above 512's); at 1,500 it stays 512.
    def faster_1024(sizes, cap):
        return size.Rates({**AUTO_RATES, 1024: 3500.0}, "measured", 60.0)

    transfer = _auto_config(optimize_for="transfer")
    wide = size.decide(transfer, replicas=2, rates_of=faster_1024)
    assert wide.units == 1024 and wide.record["optimize_for"] == "transfer"
    assert ", for transfer (the largest within 0.15 bits/char of the lowest, 512 units)" in (
        wide.line
    )
    assert size.decide(_auto_config(), replicas=2, rates_of=faster_1024).units == 512
    assert size.decide(transfer, replicas=2, rates_of=rates_of).units == 512

    # A size the cap (or a failure) left out is named in the line, and is no candidate.
    def capped(sizes, cap):
        spent = {1024: f"{measure.NOT_MEASURED}: the 90 s cap was spent"}
        return size.Rates({256: 12000.0, 512: 8000.0}, "measured", 90.0, spent)

    short = size.decide(_auto_config(), replicas=1, rates_of=capped)
    assert short.line.endswith("; left out: 1024 units (not measured: the 90 s cap was spent)")
    assert [c["units"] for c in short.record["candidates"]] == [256, 512]
    # The step budget caps the characters: at 10 steps every size trains on the same few.
    few = size.decide(_auto_config(max_steps=10), replicas=2, rates_of=rates_of)
    assert few.units == 1024 and {c["chars"] for c in few.record["candidates"]} == {10 * 64 * 64}


def test_auto_size_without_a_time_budget_measures_nothing_and_takes_the_steps_characters():
    from tf_mlstm.auto import size  # pylint: disable=g-import-not-at-top

    decision = size.decide(
        _auto_config(max_minutes=0.0, max_steps=500), replicas=1, rates_of=_never
    )
    assert decision.units == 1024 and decision.how == "steps" and decision.seconds == 0
    assert "law favours the largest" in decision.line and "not measured" in decision.line
    assert decision.record["budget"]["max_chars"] == 500 * 64 * 64


def test_a_resume_keeps_the_recorded_size_and_workers_take_the_chiefs():
    from tf_mlstm.auto import size  # pylint: disable=g-import-not-at-top

    recorded = (512, {"how": "measured", "hidden_size": 512})
    kept = size.decide(_auto_config(), replicas=1, recorded=recorded, rates_of=_never)
    assert (kept.units, kept.how, kept.record) == (512, "recorded", recorded[1])
    assert "nothing measured" in kept.line
    # A worker measures nothing and takes what the chief sends (one all-reduce).
    sent = []

    def agree(values):
        sent.append(values)
        return [768.0]

    worker = size.decide(
        _auto_config(), replicas=4, chief=False, num_workers=2, rates_of=_never, agree=agree
    )
    assert (worker.units, worker.how, sent) == (768, "from the chief", [[0]])
    assert worker.line == "hidden_size=768 (auto: from the chief)"


def test_auto_size_rates_come_from_the_cache_and_a_failing_size_is_skipped(tmp_path):
    from tf_mlstm.auto import size  # pylint: disable=g-import-not-at-top

    cache = measure.Cache(str(tmp_path / "autotune.json"))
    clock = FakeClock()
    costs = {
        "8 units": 0.01,
        "16 units": errors.InvalidValueError("out of memory"),
        "32 units": 0.04,
    }

    def rates(built):
        return size.measured_rates(
            [8, 16, 32],
            F32_OFF,
            fake_build(clock, costs, built),
            100,
            cache=cache,
            key_of=lambda u: f"shape {u}",
            max_seconds=60,
            clock=clock,
        )

    built = []
    first = rates(built)
    assert first.how == "measured" and first.rates == pytest.approx({8: 10000.0, 32: 2500.0})
    assert "out of memory" in first.skipped[16] and built == ["8 units", "16 units", "32 units"]
    # Keyed per size under the precision's own name: what `auto` precision caches too.
    assert cache.get("shape 8")["rates"] == {F32_OFF.name: pytest.approx(10000.0)}
    built = []
    second = rates(built)
    assert (second.how, second.seconds, built) == ("cached", 0.0, [])
    assert second.rates == first.rates and 16 in second.skipped


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"hidden_size": 0}, r"hidden_size must be positive, got 0\."),
        ({"size_candidates": "256,x"}, "size_candidates must be comma-separated positive numbers"),
        ({"size_candidates": "256,0"}, "size_candidates must be comma-separated positive numbers"),
        ({"optimize_for": "speed"}, "optimize_for must be one of bits, transfer; got 'speed'"),
    ],
)
def test_bad_auto_size_settings_are_one_line_naming_the_setting(overrides, message):
    with pytest.raises(errors.InvalidValueError, match="^" + message):
        _auto_config(**overrides)
    with errors.naming_flags(), pytest.raises(errors.InvalidValueError, match="^--" + message):
        _auto_config(**overrides)


def test_the_hidden_size_flag_takes_a_number_or_auto():
    from tf_mlstm.cli import _flags  # pylint: disable=g-import-not-at-top

    parser = _flags._IntOrAutoParser()  # pylint: disable=protected-access
    assert (parser.parse("auto"), parser.parse(" 512"), parser.parse(64)) == ("auto", 512, 64)
    # absl reports it as one line: "flag --hidden_size=big: must be an integer or auto, ...".
    with pytest.raises(ValueError, match="^must be an integer or auto, got 'big'$"):
        parser.parse("big")
    with pytest.raises(errors.InvalidValueError, match=r"hidden_size must be an int or 'auto'"):
        _auto_config(hidden_size="big")


def test_a_resume_with_auto_passes_the_preflight_and_another_size_does_not(tmp_path):
    from tf_mlstm import preflight  # pylint: disable=g-import-not-at-top

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint").write_text("")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 512}))
    preflight.check_resume(str(tmp_path), {"hidden_size": "auto"})
    preflight.check_resume(str(tmp_path), {"hidden_size": 512})
    with pytest.raises(preflight.RunDirError, match=r"hidden_size=256 \(saved 512\)"):
        preflight.check_resume(str(tmp_path), {"hidden_size": 256})


@pytest.mark.slow
def test_an_auto_sized_run_measures_logs_one_line_records_it_and_a_resume_keeps_it(
    tmp_path, demo_tfrecords, caplog, monkeypatch
):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    files = tfrecord.split_files(demo_tfrecords, "train")
    # A 10-minute budget (a 30 s cap to measure in) the 3 steps never reach.
    auto = dict(hidden_size="auto", size_candidates="8,16", max_minutes=10.0, max_steps=3)
    config = tiny_train_config(tmp_path / "run", demo_tfrecords, **auto)
    with caplog.at_level(logging.INFO):
        trainer, results = _train(config, files)
    assert "Autosize: timing 8 units, 16 units at float32/xla_off" in caplog.text
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Model size")]
    assert len(lines) == 1, lines
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    record = saved["autosize"]
    units = saved["hidden_size"]
    assert units in (8, 16) and trainer.config.hidden_size == units and results["step"] == 3
    assert record["how"] == "measured" and record["hidden_size"] == units
    assert [c["units"] for c in record["candidates"]] == [8, 16]
    assert all(c["replica_chars_per_s"] > 0 for c in record["candidates"])
    assert lines[0].startswith("Model size (auto, measured in ")
    assert re.search(
        rf"hidden_size={units} for (9\.\d|10) minutes or 192 chars: {units} units", lines[0]
    )
    assert record["line"] in lines[0] and "alternatives" in lines[0]
    assert trainer.auto.seconds == pytest.approx(record["seconds"], abs=0.06)
    # The same command with more steps resumes at the recorded size and measures nothing.
    caplog.clear()
    more = tiny_train_config(tmp_path / "run", demo_tfrecords, **{**auto, "max_steps": 5})
    with caplog.at_level(logging.INFO):
        resumed, results = _train(more, files)
    assert "Autosize: timing" not in caplog.text and results["step"] == 5
    assert f"Model size: hidden_size={units} (auto: recorded in " in caplog.text
    assert resumed.config.hidden_size == units and resumed.auto.seconds == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["autosize"] == record


def test_settings_only_auto_reads_are_named_when_the_size_is_given():
    from tf_mlstm.auto import size  # pylint: disable=g-import-not-at-top
    from tf_mlstm.config import TrainConfig  # pylint: disable=g-import-not-at-top

    both = TrainConfig(hidden_size=512, optimize_for="transfer", scaling_law="fit.json")
    assert size.unused_settings(both) == (
        "--optimize_for=transfer and --scaling_law=fit.json do nothing: they choose the size "
        "of --hidden_size=auto, and this run has --hidden_size=512"
    )
    # The defaults, a recipe's candidate list, or an auto size: nothing to say.
    assert size.unused_settings(TrainConfig(hidden_size=512, size_candidates="8,16")) is None
    assert size.unused_settings(TrainConfig(hidden_size="auto", scaling_law="f")) is None


@pytest.mark.slow
def test_a_run_of_a_given_size_warns_that_optimize_for_does_nothing(
    tmp_path, demo_tfrecords, caplog
):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top

    files = tfrecord.split_files(demo_tfrecords, "train")
    config = tiny_train_config(
        tmp_path / "run", demo_tfrecords, optimize_for="transfer", max_steps=1
    )
    with caplog.at_level(logging.INFO):
        _, results = _train(config, files)
    warned = [r for r in caplog.records if "--optimize_for=transfer does nothing" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    assert f"this run has --hidden_size={config.hidden_size}." in warned[0].getMessage()
    assert results["step"] == 1 and "autosize" not in json.loads(
        (tmp_path / "run" / "config.json").read_text()
    )


@pytest.mark.slow
def test_the_time_spent_measuring_comes_off_the_budget(tmp_path, demo_tfrecords):
    from tf_mlstm.data import tfrecord  # pylint: disable=g-import-not-at-top
    from tf_mlstm.tasks.language_model import LanguageModelTask  # pylint: disable=g-import-not-at-top
    from tf_mlstm.train.runner import Runner  # pylint: disable=g-import-not-at-top

    files = tfrecord.split_files(demo_tfrecords, "train")
    config = tiny_train_config(tmp_path / "run", demo_tfrecords, max_minutes=10.0, max_steps=40)
    trainer = Runner(LanguageModelTask(config, files, []), config)
    # As if measuring the `auto` settings had spent all but 10 ms of the 10 minutes.
    trainer.auto.seconds = 600 - 0.01
    results = trainer.train()
    assert results["stopped_by"] == "time" and results["step"] < 40, results


# === Featurization and classification ===


@pytest.mark.slow
def test_featurization_measures_its_precision_and_classify_auto_uses_it(tmp_path, monkeypatch):
    from test_classify import _fitted  # pylint: disable=g-import-not-at-top

    from tf_mlstm.auto import hardware  # pylint: disable=g-import-not-at-top
    from tf_mlstm.cli import classify as classify_cli  # pylint: disable=g-import-not-at-top
    from tf_mlstm.transfer import features  # pylint: disable=g-import-not-at-top

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model_dir, _, _ = _fitted(tmp_path)
    # A CPU with the bfloat16 dot product: both policies are timed (for real, tiny).
    bf16_cpu = _machine(AVX512_BF16_EPYC)
    precision, choice = features.measured_precision(str(model_dir), 4, 32, machine=bf16_cpu)
    assert choice.how == "measured"
    assert set(choice.rates) == {"float32/xla_off", "mixed_bfloat16/xla_off"}
    assert precision == max(choice.rates, key=choice.rates.get).split("/")[0]
    again, cached = features.measured_precision(str(model_dir), 4, 32, machine=bf16_cpu)
    assert (again, cached.how) == (precision, "cached")
    # Where AVX2 alone emulates bfloat16, float32 is the only candidate: nothing is timed.
    assert features.measured_precision(str(model_dir), 4, 32, _machine(AVX2_EPYC))[0] == "float32"

    # tf-mlstm-classify --precision=auto where bfloat16 measured faster computes in it,
    # and its probabilities stay within the features' documented bfloat16 tolerance.
    path = tmp_path / "cache" / "tf_mlstm" / "autotune.json"
    entries = json.loads(path.read_text())
    for entry in entries.values():
        entry["rates"] = {"float32/xla_off": 1000.0, "mixed_bfloat16/xla_off": 2000.0}
    path.write_text(json.dumps(entries))
    monkeypatch.setattr(hardware, "detect", lambda *args, **kwargs: bf16_cpu)
    jsonl = tmp_path / "in.txt"
    jsonl.write_text("A wonderful, moving film.\nBoring and far too long.\nGreat.\nDull, dull.\n")
    common = dict(
        model_dir=str(model_dir),
        classifier=str(tmp_path / "classifier.json"),
        input=str(jsonl),
        output="-",
        batch_size=4,
        window=32,
    )
    loaded = []
    from tf_mlstm.models import language_model  # pylint: disable=g-import-not-at-top

    load = language_model.MLSTMLanguageModel.from_run
    monkeypatch.setattr(
        language_model.MLSTMLanguageModel,
        "from_run",
        lambda model_dir, precision=None: (
            loaded.append(precision) or load(model_dir, precision=precision)
        ),
    )
    auto = classify_cli.classify(classify_cli.ClassifyConfig(**common, precision="auto"))
    exact = classify_cli.classify(classify_cli.ClassifyConfig(**common, precision="float32"))
    assert loaded == ["mixed_bfloat16", "float32"]
    np.testing.assert_allclose(auto[1], exact[1], atol=0.05)
    assert not np.array_equal(auto[1], exact[1])  # really computed in bfloat16


@pytest.mark.slow
def test_two_workers_use_the_choice_the_chief_measured(tmp_path, demo_tfrecords):
    from test_multi_worker import _run_launcher  # pylint: disable=g-import-not-at-top
    from test_multi_worker import _train_args  # pylint: disable=g-import-not-at-top
    from test_multi_worker import _worker_text  # pylint: disable=g-import-not-at-top

    model_dir = tmp_path / "run"
    # A budget the 2 steps never reach (measuring allowed); the later flag wins over TINY's.
    # The size is auto too: the chief times both sizes at the table's precision and XLA,
    # then the other settings at the size it chose (the first is cached by then).
    auto = [
        "--hidden_size=auto",
        "--size_candidates=8,16",
        "--precision=auto",
        "--jit_compile=auto",
    ]
    args = _train_args(model_dir, demo_tfrecords, "--max_steps=2", "--max_minutes=300")
    code, log = _run_launcher(2, tmp_path / "log.txt", [*args, *auto], 400)
    assert code == 0, log[-4000:]
    chief, other = _worker_text(log, 0), _worker_text(log, 1)
    assert "Autosize: timing 8 units, 16 units at " in chief
    assert "Autotune: timing" in chief
    assert "Autotune: timing" not in other and "Autosize: timing" not in other  # the chief only
    saved = json.loads((model_dir / "config.json").read_text())
    units = saved["hidden_size"]
    assert saved["autosize"]["how"] == "measured" and saved["autosize"]["hidden_size"] == units
    assert f"Model size: hidden_size={units} (auto: from the chief)" in other
    record = saved["autotune"]
    assert record["how"] == "measured and cached" and "float32/xla_on" in record["rates"]
    # The precision is auto too: on a CPU with bfloat16 instructions bfloat16 is a
    # candidate, and the fastest measured wins, whichever it is.
    precision, xla = record["precision"], "on" if record["jit_compile"] else "off"
    assert max(record["rates"], key=record["rates"].get) == f"{precision}/xla_{xla}", record
    said = [line for line in other.splitlines() if "Precision " in line]
    expected = f"Precision {precision} (auto: from the chief); XLA {xla}"
    assert any(expected in line for line in said), (record, said)
    for text in (chief, other):
        assert re.search(rf"Training: 2 worker\(s\).*{precision}, XLA {xla}, from step 0", text)


@pytest.mark.parametrize(
    "refusal",
    [
        # What TensorFlow's filesystem raises for EROFS/EACCES, and for ENOSPC.
        tf.errors.PermissionDeniedError(None, None, "Read-only file system"),
        tf.errors.ResourceExhaustedError(None, None, "No space left on device"),
        PermissionError(13, "Permission denied"),
    ],
)
def test_a_cache_folder_that_refuses_writes_is_a_warning_and_the_choice_stands(
    tmp_path, monkeypatch, caplog, refusal
):
    def refuse(path, value):
        raise refusal

    monkeypatch.setattr(measure.fileio, "write_json_atomic", refuse)
    cache = measure.Cache(str(tmp_path / "cache" / "autotune.json"))
    clock = FakeClock()
    costs = {F32_ON.name: 0.5, F32_OFF.name: 0.4}
    choice = choose_faked([F32_ON, F32_OFF], costs, clock, [], cache=cache, key="k")
    assert choice.candidate == F32_OFF
    assert f"Autotune cache {cache.path} not written" in caplog.text
