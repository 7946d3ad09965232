"""The scaling law (`tf_mlstm.auto.law`), its fit (tools/law_fitting.py), the grid tool.

The fit and the planner are pure functions, checked against golden values:
coefficients recovered from points the law itself made, leave-one-out
against its definition, the planner's choice against the loss worked out by
hand. The tool's grid arithmetic is checked directly, and one real run of the
tool (a 16-unit model for two steps, then the same command again) shows that
a finished run is recorded and not run again, and that the same run added as a
finished run (`--add_runs`) scores the same.
"""

import doctest
import importlib.util
import json
import os
import pathlib
import shutil
import sys

import law_fitting
import numpy as np
import pytest

import _models
from tf_mlstm import errors
from tf_mlstm.auto import law as law_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
TOOL = REPO / "tools" / "scaling_law.py"
# A known law, in the range the CPU grid measures (bits/char).
GOLDEN = {"E": 1.3, "A": 0.25, "alpha": 0.6, "B": 0.9, "beta": 0.45}
SIZES = (64, 128, 256, 512, 1024)
CHARS = (0.25e6, 0.5e6, 1e6, 2e6, 4e6)


def _load_tool():
    spec = importlib.util.spec_from_file_location("scaling_law", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(name="tool")
def fixture_tool():
    return _load_tool()


def test_the_fitting_module_s_examples_run():
    # tools/ lies outside the package whose examples test_docstrings.py runs.
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    results = doctest.testmod(law_fitting, optionflags=flags)
    assert results.failed == 0 and results.attempted >= 10, results


def golden_points(sizes=SIZES, chars=CHARS, noise=0.0, seed=0):
    law = law_lib.ScalingLaw(**GOLDEN)
    n = np.array([law_lib.model_weights(u) for u in sizes for _ in chars], dtype=float)
    d = np.array([c for _ in sizes for c in chars])
    loss = law.predict(n, d) + noise * np.random.default_rng(seed).standard_normal(len(n))
    return n, d, loss


def test_model_weights_counts_the_real_model():
    from tf_mlstm.models import language_model  # pylint: disable=g-import-not-at-top

    for units, embedding, weight_norm in ((16, 8, True), (24, 64, False)):
        model = language_model.MLSTMLanguageModel(
            hidden_size=units, embedding_size=embedding, weight_norm=weight_norm
        )
        model(np.zeros((1, 3), "int32"))
        assert law_lib.model_weights(units, embedding, weight_norm=weight_norm) == (
            model.count_params()
        )


def test_fit_recovers_known_coefficients():
    law = law_fitting.fit_law(*golden_points())
    for name, value in GOLDEN.items():
        assert getattr(law, name) == pytest.approx(value, rel=1e-4), name
    assert law.rms < 1e-6
    assert law.weights_range == (law_lib.model_weights(64), law_lib.model_weights(1024))
    assert law.chars_range == (0.25e6, 4e6)


def test_the_coupled_form_is_recovered_and_differs_where_one_term_dominates():
    law = law_lib.ScalingLaw(**GOLDEN, form="coupled")
    n, d, _ = golden_points()
    fitted = law_fitting.fit_law(n, d, law.predict(n, d), form="coupled")
    for name, value in GOLDEN.items():
        assert getattr(fitted, name) == pytest.approx(value, rel=1e-4), name
    assert fitted.form == "coupled" and fitted.rms < 1e-6
    # Each term alone is the additive law's; together the larger one dominates.
    additive = law_lib.ScalingLaw(**GOLDEN)
    assert law.predict(1e12, 1e6) == pytest.approx(additive.predict(1e12, 1e6), abs=1e-4)
    size, data = GOLDEN["A"], GOLDEN["B"]  # both terms at one million weights and characters
    beta = GOLDEN["beta"]
    coupled = GOLDEN["E"] + (size ** (1 / beta) + data ** (1 / beta)) ** beta
    assert law.predict(1e6, 1e6) == pytest.approx(coupled)
    assert law.predict(1e6, 1e6) < additive.predict(1e6, 1e6)
    assert "[(0.250 / (N/1M)^0.600)^2.222 + (0.900 / (D/1M)^0.450)^2.222]^0.450" in law.formula()
    with pytest.raises(errors.InvalidValueError, match="form must be one of"):
        law_fitting.fit_law(n, d, law.predict(n, d), form="cubic")


def test_fit_with_noise_stays_near_the_truth():
    # 0.005 bits/char of noise (about run-to-run spread): the prediction at an unseen
    # point stays within a few hundredths.
    n, d, loss = golden_points(noise=0.005)
    law = law_fitting.fit_law(n, d, loss)
    far = (law_lib.model_weights(768), 8e6)
    assert law.predict(*far) == pytest.approx(law_lib.ScalingLaw(**GOLDEN).predict(*far), abs=0.03)
    assert 0.002 < law.rms < 0.008


def test_leave_one_out_is_each_run_predicted_by_a_fit_without_it():
    n, d, loss = golden_points(sizes=(128, 256, 512), chars=(0.25e6, 0.5e6, 1e6), noise=0.01)
    errors_out = law_fitting.leave_one_out(n, d, loss)
    assert errors_out.shape == (9,)
    for i in (0, 4, 8):
        keep = np.arange(9) != i
        law = law_fitting.fit_law(n[keep], d[keep], loss[keep])
        assert errors_out[i] == pytest.approx(law.predict(n[i], d[i]) - loss[i], abs=1e-9)
    # Not the in-sample residual: the left-out run pulls the full fit towards itself.
    residuals = law_fitting.fit_law(n, d, loss).predict(n, d) - loss
    assert np.sqrt(np.mean(errors_out**2)) > np.sqrt(np.mean(residuals**2))
    # Points the law made exactly: every left-out run is predicted exactly.
    exact = law_fitting.leave_one_out(*golden_points(sizes=(128, 256, 512), chars=CHARS[:3]))
    assert np.max(np.abs(exact)) < 1e-5


def test_fit_refuses_bad_input_in_one_line():
    n, d, loss = golden_points(sizes=(128,), chars=CHARS[:4])
    with pytest.raises(errors.InvalidValueError, match="4 runs cannot fit its 5 coefficients"):
        law_fitting.fit_law(n, d, loss)
    n, d, loss = golden_points(sizes=(128,), chars=CHARS)
    with pytest.raises(errors.InvalidValueError, match="give at least 6"):
        law_fitting.leave_one_out(n, d, loss)
    loss[2] = np.nan
    with pytest.raises(errors.InvalidValueError, match=r"run 2 has losses=nan"):
        law_fitting.fit_law(n, d, loss)
    with pytest.raises(errors.InvalidValueError, match=r"differ in length \(5, 4, 5\)"):
        law_fitting.fit_law(n, d[:4], loss)


def test_planner_picks_the_lowest_predicted_loss_for_the_budget():
    law = law_lib.ScalingLaw(**GOLDEN, weights_range=(1e5, 1e6), chars_range=(2.5e5, 4e6))
    rates = {128: 20000.0, 256: 11000.0, 512: 5000.0}
    plan = law_lib.plan_size(law, rates, seconds=120)
    by_hand = {
        units: GOLDEN["E"]
        + GOLDEN["A"] / (law_lib.model_weights(units) / 1e6) ** GOLDEN["alpha"]
        + GOLDEN["B"] / (rate * 120 / 1e6) ** GOLDEN["beta"]
        for units, rate in rates.items()
    }
    assert [c.predicted for c in plan.candidates] == pytest.approx(list(by_hand.values()))
    assert plan.best.units == min(by_hand, key=by_hand.get) == 256
    assert plan.best.chars == 11000 * 120
    assert plan.line.startswith(f"hidden_size=256 for 2 minutes: 256 units: {by_hand[256]:.3f}")
    assert "11,000 chars/s, 1.3M chars)" in plan.line
    assert f"alternatives 128 units: {by_hand[128]:.3f}" in plan.line
    assert "512 units" in plan.line
    # 512 units have 1.6M weights: beyond the weights the law was fitted on.
    assert plan.candidates[2].extrapolated and not plan.candidates[1].extrapolated
    # A longer budget buys the larger model.
    assert law_lib.plan_size(law, rates, seconds=36000).best.units == 512


def test_planning_for_transfer_takes_the_widest_size_within_the_margin_of_the_lowest():
    law = law_lib.ScalingLaw(**GOLDEN)
    rates = {128: 20000.0, 256: 11000.0, 512: 5000.0, 1024: 1200.0}
    bits = law_lib.plan_size(law, rates, seconds=120)
    transfer = law_lib.plan_size(law, rates, seconds=120, optimize_for="transfer")
    lowest = bits.best
    predicted = {c.units: c.predicted for c in bits.candidates}
    within = [u for u, p in predicted.items() if p <= lowest.predicted + law_lib.TRANSFER_MARGIN]
    # The golden law puts 512 units inside the margin and 1024 outside it, so the choice is
    # neither the lowest prediction nor the largest candidate.
    assert lowest.units == 256 and max(within) == 512 and 1024 not in within
    assert transfer.best.units == 512 and transfer.candidates == bits.candidates
    assert transfer.line.startswith(
        f"hidden_size=512 for 2 minutes, for transfer (the largest within "
        f"{law_lib.TRANSFER_MARGIN:g} bits/char of the lowest, 256 units): 512 units: "
    )
    assert f"alternatives 128 units: {predicted[128]:.3f}" in transfer.line
    # With one size inside the margin, transfer and bits agree.
    narrow = {128: 20000.0, 256: 11000.0, 1024: 1200.0}
    assert law_lib.plan_size(law, narrow, 120, optimize_for="transfer").best.units == 256
    with pytest.raises(errors.InvalidValueError, match="optimize_for must be bits or transfer"):
        law_lib.plan_size(law, rates, 120, optimize_for="speed")


def test_planner_and_rates_refuse_bad_input():
    law = law_lib.ScalingLaw(**GOLDEN)
    with pytest.raises(errors.InvalidValueError, match="no sizes with a measured rate"):
        law_lib.plan_size(law, {}, 60)
    with pytest.raises(errors.InvalidValueError, match="size 128 has rate -1.0"):
        law_lib.plan_size(law, {128: -1.0}, 60)
    with pytest.raises(errors.InvalidValueError, match="budget must be positive"):
        law_lib.plan_size(law, {128: 1.0}, 0)
    assert law_fitting.parse_rates("128=20000, 256=1.1e4") == {128: 20000.0, 256: 11000.0}
    with pytest.raises(errors.InvalidValueError, match="'256:11000' is not UNITS=CHARS_PER_S"):
        law_fitting.parse_rates("128=2,256:11000")


def test_the_planner_caps_characters_by_the_step_budget_and_plans_without_time():
    law = law_lib.ScalingLaw(**GOLDEN)
    rates = {128: 20000.0, 256: 11000.0}
    capped = law_lib.plan_size(law, rates, seconds=120, max_chars=1.5e6)
    assert [c.chars for c in capped.candidates] == [1.5e6, 1.32e6]
    assert capped.line.startswith("hidden_size=256 for 2 minutes or 1.5M chars: ")
    # No time budget: every size trains on the steps' characters, rates unknown.
    steps = law_lib.plan_size(law, dict.fromkeys(rates), float("inf"), max_chars=20480)
    assert steps.best.units == 256 and [c.chars for c in steps.candidates] == [20480] * 2
    assert "law favours the largest" in steps.line and "not measured, 20,480 chars" in steps.line
    with pytest.raises(errors.InvalidValueError, match="budget must be positive"):
        law_lib.plan_size(law, dict.fromkeys(rates), float("inf"))
    with pytest.raises(errors.InvalidValueError, match="size 128 has rate None"):
        law_lib.plan_size(law, {128: None}, 60)


def test_the_shipped_law_is_the_documented_fit_and_law_files_load(tmp_path):
    law = law_lib.REVIEWS_LAW
    assert law.formula() in (REPO / "docs" / "scaling.md").read_text(encoding="utf-8")
    assert law.weights_range == (174080.0, 3418880.0)
    assert law_lib.load_law("") is law
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"law": law_lib.ScalingLaw(**GOLDEN).to_json(), "runs": 13}))
    assert law_lib.load_law(str(fit)) == law_lib.ScalingLaw(**GOLDEN)
    plain = tmp_path / "law.json"
    plain.write_text(json.dumps(GOLDEN))
    assert law_lib.load_law(str(plain)).formula() == law_lib.ScalingLaw(**GOLDEN).formula()
    bad = tmp_path / "bad.json"
    for text, message in [
        ("{", "not valid JSON"),
        ("[1, 2]", "expected a JSON object with E, A, alpha, B, beta"),
        (json.dumps({**GOLDEN, "beta": "x"}), "beta must be a number"),
        (json.dumps({**GOLDEN, "A": -1}), "A must be >= 0"),
        (json.dumps({**GOLDEN, "chars_range": [5, 1]}), r"chars_range must be \[low, high\]"),
        (json.dumps({**GOLDEN, "form": "cubic"}), "form must be one of"),
    ]:
        bad.write_text(text)
        with pytest.raises(errors.InvalidValueError, match=f"^scaling_law={bad}: {message}"):
            law_lib.load_law(str(bad))
    with errors.naming_flags(), pytest.raises(errors.InvalidValueError, match="cannot read it"):
        law_lib.load_law(str(tmp_path / "missing.json"))


def test_a_grid_run_recorded_with_a_fixed_size_recipe_counts_for_the_auto_sized_one(tool, tmp_path):
    # The runs recorded before the recipe said --hidden_size=auto: each run's size is the
    # grid's, so the recipe's size lines are no setting; any other line still is.
    def settings(*recipe):
        return {"recipe": sorted(recipe), "train_flags": [], "heldout": "e.jsonl"}

    path = tmp_path / "results.jsonl"
    before = settings("--hidden_size=768", "--lr=0.006")
    path.write_text(
        json.dumps({"units": 8, "steps": 2, "heldout_bits_per_char": 3.1, "settings": before})
    )
    now = tool._without_size_lines(
        settings("--hidden_size=auto", "--size_candidates=8", "--lr=0.006")
    )
    assert now == settings("--lr=0.006")
    assert [r["units"] for r in tool.read_results(str(path), now)] == [8]
    with pytest.raises(errors.InvalidValueError, match="run u8_s2 was made with other settings"):
        tool.read_results(str(path), settings("--lr=0.003"))


def test_grid_runs_end_their_schedule_at_the_budget(tool):
    recipe = {"batch_size": "64", "seq_length": "64", "warmup_steps": "100"}
    points = tool.grid([512, 128], [250_000, 4_000_000], recipe, 0.05)
    # Cheapest first; steps cover the budget; the warm-up is a twentieth, capped at the recipe's.
    assert [(p["units"], p["steps"], p["warmup_steps"]) for p in points] == [
        (128, 62, 4),
        (512, 62, 4),
        (128, 977, 49),
        (512, 977, 49),
    ]
    assert points[0]["chars"] == 62 * 4096
    command = tool.train_command(
        points[0], "r", {"recipe_path": "f", "train_flags": ["--seed=1"], "train_data": "t"}
    )
    assert command[3:] == [
        "--flagfile=f",
        "--seed=1",
        "--train_data=t",
        "--model_dir=r",
        "--hidden_size=128",
        "--max_steps=62",
        "--warmup_steps=4",
        "--max_minutes=0",
        "--eval_every_steps=0",
        "--sample_every_steps=0",
        "--noexport",
    ]
    assert tool.parse_chars("0.25M") == 250_000 and tool.parse_chars("8k") == 8000
    with pytest.raises(errors.InvalidValueError, match=r"--budgets: '1X' is not a character"):
        tool.parse_chars("1X")


def _tool_command(output_dir, *flags):
    return [sys.executable, str(TOOL), f"--output_dir={output_dir}", *flags]


def test_tool_bad_input_is_one_line(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text('{"units": 16}\n')
    cases = [
        (["--fit_only", "--plan_rates=128:5"], "'128:5' is not UNITS=CHARS_PER_S"),
        (["--fit_only"], f"{results}:1: not a results line"),
        (["--fit_only", "--add_runs=r"], "--add_runs and --fit_only: give one"),
        (
            ["--fit_only", f"--output_dir={tmp_path / 'typo'}"],
            f"--fit_only: no results.jsonl in --output_dir={tmp_path / 'typo'} (run the grid",
        ),
        (["--train_data=" + str(tmp_path / "none")], "--train_data=" + str(tmp_path / "none")),
    ]
    for flags, message in cases:
        done = _models.run(_tool_command(tmp_path, *flags), timeout=60)
        assert done.returncode == 1, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "typo").exists()


def test_tool_fits_reports_and_plans_from_its_results(tmp_path):
    n, d, loss = golden_points(sizes=(128, 256, 512), chars=CHARS[:3])
    with open(tmp_path / "results.jsonl", "w", encoding="utf-8") as f:
        for units, weights, chars, bits in zip((128,) * 3 + (256,) * 3 + (512,) * 3, n, d, loss):
            record = {"units": units, "weights": int(weights), "chars": int(chars)}
            record.update(steps=int(chars) // 4096, heldout_bits_per_char=float(bits))
            f.write(json.dumps(record) + "\n")
    plot = tmp_path / "law.png"
    done = _models.run(
        _tool_command(
            tmp_path, "--fit_only", f"--plot={plot}", "--plan_rates=128=20000,256=11000,512=5000"
        ),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    final = json.loads(done.stdout.splitlines()[-1])
    assert final["runs"] == 9
    for name, value in GOLDEN.items():
        assert final["law"][name] == pytest.approx(value, rel=1e-3), name
    assert final["leave_one_out"]["max_abs"] < 1e-4
    # Both forms fitted; the additive one, which made the points, predicts left-out runs best.
    assert final["law"]["form"] == "additive"
    assert final["forms"]["coupled"]["leave_one_out"]["rms"] > 1e-3
    assert "used: additive (the lowest leave-one-out error)" in done.stdout
    plan = law_lib.plan_size(law_lib.ScalingLaw(**GOLDEN), {128: 2e4, 256: 1.1e4, 512: 5e3}, 1800)
    assert final["plan"]["hidden_size"] == plan.best.units
    assert "| 256 | 495,360 | 122 | 500,000 |" in done.stdout
    assert "loss = 1.300 + 0.250 / (N/1M)^0.600 + 0.900 / (D/1M)^0.450" in done.stdout
    assert plot.stat().st_size > 10_000
    assert json.loads((tmp_path / "fit.json").read_text())["law"]["alpha"] == pytest.approx(0.6)


@pytest.mark.slow
def test_tool_runs_a_real_grid_and_does_not_rerun_a_finished_run(tmp_path, demo_tfrecords):
    recipe = tmp_path / "tiny.flags"
    recipe.write_text(
        "\n".join(
            [
                *_models.PINNED_FLAGS,
                "--hidden_size=768",
                "--embedding_size=8",
                "--batch_size=4",
                "--seq_length=32",
                "--warmup_steps=100",
                "--log_every_steps=1",
                "--eval_batches=2",
                "--shuffle_buffer=64",
            ]
        )
    )
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("".join(f"line {i} of a held-out review.\n" for i in range(40)))
    flags = [
        f"--train_data={demo_tfrecords}",
        f"--flagfile_recipe={recipe}",
        f"--heldout={heldout}",
        "--heldout_every=2",
        "--sizes=16",
        "--budgets=128",
        # Given after the recipe, it wins in the steps the grid plans as in training.
        "--train_flags=--seq_length=16",
    ]
    output = tmp_path / "grid"
    done = _models.run(_tool_command(output, *flags), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(line) for line in (output / "results.jsonl").read_text().splitlines()]
    assert (record["units"], record["steps"], record["chars"], record["warmup_steps"]) == (
        16,
        2,
        128,
        1,
    )
    assert record["weights"] == law_lib.model_weights(16, 8)
    sampled = [f"line {i} of a held-out review." for i in range(0, 40, 2)]
    assert record["heldout_chars"] == sum(len(line) for line in sampled)
    assert 0 < record["heldout_bits_per_char"] < 9
    assert "--max_steps=2 --warmup_steps=1" in record["train_command"]
    assert json.loads(done.stdout.splitlines()[-1]) == {"runs": 1}
    checkpoints = output / "runs" / "u16_s2" / "checkpoints"
    before = sorted(os.listdir(checkpoints))
    again = _models.run(_tool_command(output, *flags), timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "skipping u16_s2: finished (results.jsonl)" in again.stderr
    assert len((output / "results.jsonl").read_text().splitlines()) == 1
    assert sorted(os.listdir(checkpoints)) == before
    # The same folder with another recipe is refused, not mixed into the fit.
    other = _models.run(_tool_command(output, *flags, "--warmup_fraction=0.5"), timeout=120)
    assert other.returncode == 1
    assert "run u16_s2 was made with other settings" in other.stderr

    # The finished run added to another folder (as a recipe's own runs are): scored on the
    # same sample, the same score; its size, steps and characters from its own files.
    run_dir = checkpoints.parent
    added = tmp_path / "added"
    adding = [f"--flagfile_recipe={recipe}", f"--heldout={heldout}", "--heldout_every=2"]
    adding += [f"--add_runs={run_dir}", "--train_flags=--seq_length=16"]
    done = _models.run(_tool_command(added, *adding), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = [json.loads(line) for line in (added / "results.jsonl").read_text().splitlines()]
    assert row["heldout_bits_per_char"] == record["heldout_bits_per_char"]
    assert (row["units"], row["steps"], row["chars"]) == (16, 2, 128)
    assert row["weights"] == record["weights"]
    assert row["added_from"] == str(run_dir) and sorted(os.listdir(checkpoints)) == before
    again = _models.run(_tool_command(added, *adding), timeout=120)
    assert f"skipping {run_dir}: added before" in again.stderr
    assert len((added / "results.jsonl").read_text().splitlines()) == 1
    # A run that did not end its schedule is not a short run; nor is one of another recipe.
    tool = _load_tool()
    message = f"--add_runs: {run_dir}: --seq_length=16, the recipe's is 32: its loss"
    with pytest.raises(errors.InvalidValueError, match=message):
        tool.added_run(str(run_dir), tool.read_recipe(str(recipe)))  # without --train_flags
    recipe_flags = {**tool.read_recipe(str(recipe)), "seq_length": "16"}
    assert tool.added_run(str(run_dir), recipe_flags)["chars"] == 128
    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut)
    ended = json.loads((cut / "results.json").read_text())
    (cut / "results.json").write_text(json.dumps({**ended, "final_learning_rate": 0.001}))
    with pytest.raises(errors.InvalidValueError, match=f"{cut}: its rate ended at 0.001, not 0"):
        tool.added_run(str(cut), recipe_flags)
    with pytest.raises(errors.InvalidValueError, match=r"--lr=.*, the recipe's is 0.5: its loss"):
        tool.added_run(str(run_dir), {**recipe_flags, "lr": "0.5"})
    (cut / "results.json").unlink()
    with pytest.raises(errors.InvalidValueError, match=f"{cut}: no results.json: the run has not"):
        tool.added_run(str(cut), recipe_flags)
    with pytest.raises(errors.MissingFileError, match="no config.json .not a tf-mlstm-train run"):
        tool.added_run(str(tmp_path), recipe_flags)


# === Planning a cluster run: the law counted in FLOPs ===


def test_flops_per_char_is_the_hand_count_of_the_cell_s_products():
    # The paper's model, H=4096, E=64, V=256, product by product (multiply-adds a character):
    x_wx = 64 * 4 * 4096  # 1,048,576: input -> the four gates
    x_wmx = 64 * 4096  # 262,144: input -> the multiplicative intermediate
    h_wmh = 4096 * 4096  # 16,777,216: state -> the multiplicative intermediate
    m_wh = 4096 * 4 * 4096  # 67,108,864: intermediate -> the four gates
    softmax = 4096 * 256  # 1,048,576
    multiply_adds = x_wx + x_wmx + h_wmh + m_wh + softmax
    assert multiply_adds == 86_245_376
    # 2 FLOPs a multiply-add forward, twice that backward (input and weight gradients).
    assert law_fitting.flops_per_char(4096) == 2 * multiply_adds + 4 * multiply_adds == 517_472_256
    # A tiny one: 8*64 + 8*16 + 16*16 + 16*64 + 16*256 = 6,016 multiply-adds.
    assert law_fitting.flops_per_char(16, embedding_size=8) == 6 * 6_016
    # 6 x the products' weights: 6 x the non-embedding weights less the biases and gains.
    for units, share in ((128, 0.9870), (768, 0.9968), (4096, 0.9993), (16384, 0.9998)):
        non_embedding = law_lib.model_weights(units) - 256 * 64
        ratio = law_fitting.flops_per_char(units) / (6 * non_embedding)
        assert ratio == pytest.approx(share, abs=1e-4), units
    with pytest.raises(errors.InvalidValueError, match="units, embedding size and vocabulary"):
        law_fitting.flops_per_char(0)


def test_flops_per_char_counts_every_product_of_the_real_model():
    from tf_mlstm.models import language_model  # pylint: disable=g-import-not-at-top

    model = language_model.MLSTMLanguageModel(hidden_size=16, embedding_size=8, weight_norm=False)
    model(np.zeros((1, 3), "int32"))
    # Every matrix a character is multiplied by: the 2-D weights but the embedding's table.
    products = [w for w in model.weights if len(w.shape) == 2 and "embedding" not in w.path]
    assert len(products) == 5, [w.path for w in model.weights]
    assert law_fitting.flops_per_char(16, embedding_size=8) == 6 * sum(
        int(np.prod(w.shape)) for w in products
    )


def _hand_loss(units, flops):
    """GOLDEN's loss for `units` trained on `flops`, every step written out."""
    h, e, v = units, 64, 256
    per_char = 6 * (e * 4 * h + e * h + h * h + h * 4 * h + h * v)
    n = law_lib.model_weights(units) / 1e6
    d = flops / per_char / 1e6
    return GOLDEN["E"] + GOLDEN["A"] / n ** GOLDEN["alpha"] + GOLDEN["B"] / d ** GOLDEN["beta"]


def test_compute_plan_chooses_the_brute_force_minimum():
    law = law_lib.ScalingLaw(**GOLDEN)
    units = range(32, 4097, 32)
    for flops_per_s, seconds in ((1e12, 3600), (1e13, 4 * 3600), (1e14, 3600)):
        plan = law_fitting.plan_compute(law, flops_per_s, seconds, units=units)
        by_hand = {u: _hand_loss(u, flops_per_s * seconds) for u in units}
        best = min(by_hand, key=by_hand.get)
        assert plan.best.units == best, (flops_per_s, seconds)
        assert 32 < best < 4096  # inside the grid: a real minimum, not an end
        assert plan.best.predicted == pytest.approx(by_hand[best])
        assert plan.best.chars == pytest.approx(
            flops_per_s * seconds / law_fitting.flops_per_char(best)
        )
        assert [c.units for c in plan.candidates] == list(units)
        assert plan.line.startswith(f"hidden_size={best} for {seconds / 3600:g} hours at ")
    # More compute buys a larger model; the default candidates are 128-16384.
    small = law_fitting.plan_compute(law, 1e12, 3600).best.units
    assert small < law_fitting.plan_compute(law, 1e15, 12 * 3600).best.units
    assert law_fitting.cluster_units()[0] == 128 and law_fitting.cluster_units()[-1] == 16384
    with pytest.raises(errors.InvalidValueError, match="FLOP rate must be positive, got 0"):
        law_fitting.plan_compute(law, 0, 3600)
    with pytest.raises(errors.InvalidValueError, match="size -4 is not a positive number"):
        law_fitting.plan_compute(law, 1e12, 3600, units=(128, -4))


def test_compute_plan_flags_and_measures_extrapolation():
    law = law_lib.ScalingLaw(**GOLDEN, weights_range=(1e5, 4e6), chars_range=(2.5e5, 8e6))
    plan = law_fitting.plan_compute(law, 1e13, 1, units=(128, 256, 1024))
    small, inside, large = plan.candidates
    # 128 units: 1e13 / 933,888 FLOPs a character = 10.7M characters, past the law's 8M.
    assert small.chars == pytest.approx(1e13 / 933_888) and small.extrapolated
    assert "extrapolated: 1.34x the law's characters" in law_fitting.describe_choice(law, small)
    # 256 units: 495,360 weights on 3.5M characters, inside both ranges.
    assert not inside.extrapolated
    assert "extrapolated" not in law_fitting.describe_choice(law, inside)
    # 1024 units: 5.86M weights, past the law's 4M; 286k characters, inside.
    assert large.extrapolated
    assert law_fitting.describe_choice(law, large).endswith("extrapolated: 1.47x the law's weights")
    tiny = law_fitting.plan_compute(law, 1e11, 1, units=(256,)).best
    assert "extrapolated: 1/7.13 of the law's smallest characters" in (
        law_fitting.describe_choice(law, tiny)
    )
    # The shipped law's ranges are the grid's: the paper's model is far outside both.
    shipped = law_lib.REVIEWS_LAW
    assert shipped.weights_range == (174_080, 3_418_880)
    assert shipped.chars_range == (503_808, 24_637_440)
    assert shipped.extrapolates(law_lib.model_weights(4096), 1.2e11)


def test_cluster_flops_and_its_errors():
    assert law_fitting.cluster_flops(128 * 125e12, 0.3, 4) == pytest.approx(6.912e19)
    with pytest.raises(errors.InvalidValueError, match=r"cluster: hours must be positive, got 0"):
        law_fitting.cluster_flops(1e15, 0.3, 0)
    with pytest.raises(errors.InvalidValueError, match=r"utilization must be in \(0, 1\]"):
        law_fitting.cluster_flops(1e15, 1.5, 1)
    with pytest.raises(errors.InvalidValueError, match="peak FLOP/s must be positive"):
        law_fitting.cluster_flops(-1, 0.3, 1)


def test_tool_cluster_flags_are_checked_in_one_line(tool):
    settings = tool.cluster_settings(128, 125, 0, 0.3, 4, [])
    assert settings["peak_flops_per_s"] == 128 * 125e12
    assert settings["units"] == law_fitting.cluster_units()
    assert tool.cluster_settings(0, 0, 0, 0.3, 0, []) is None  # no cluster: the grid
    assert tool.cluster_settings(0, 0, 1e15, 0.3, 1, ["512", "256"])["units"] == (256, 512)
    cases = [
        ((128, 125, 1e15, 0.3, 4, []), "--plan_gpus and --cluster_flops: give one"),
        ((128, 0, 0, 0.3, 4, []), "--plan_gpu_tflops must be positive"),
        ((-8, 125, 0, 0.3, 4, []), "--plan_gpus must be positive, got -8"),
        ((0, 0, -1.0, 0.3, 4, []), "--cluster_flops must be positive, got -1.0"),
        ((8, 125, 0, 0, 4, []), r"--plan_utilization must be in \(0, 1\]"),
        ((8, 125, 0, 0.3, 0, []), "--plan_hours must be positive, got 0"),
        ((0, 0, 0, 0.3, 4, []), "--plan_hours: give the cluster too"),
        ((8, 125, 0, 0.3, 4, ["1k"]), "--plan_units: '1k' is not a positive number"),
    ]
    for args, message in cases:
        with pytest.raises(errors.InvalidValueError, match=message):
            tool.cluster_settings(*args)


def test_tool_reads_the_law_from_fit_json_or_ships_one(tool, tmp_path):
    law, source = tool.read_law("", str(tmp_path))
    assert law == law_lib.REVIEWS_LAW and source.startswith("shipped")
    golden = law_lib.ScalingLaw(**GOLDEN, weights_range=(1e5, 4e6), chars_range=(2.5e5, 8e6))
    (tmp_path / "fit.json").write_text(json.dumps({"law": golden.to_json(), "runs": 9}))
    assert tool.read_law("", str(tmp_path)) == (golden, str(tmp_path / "fit.json"))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"law": {"E": 1.0}}))
    with pytest.raises(errors.InvalidValueError, match="other.json: A must be a number"):
        tool.read_law(str(other), str(tmp_path))
    other.write_text("[]")
    with pytest.raises(errors.InvalidValueError, match="other.json: not this tool's fit.json"):
        tool.read_law(str(other), str(tmp_path))
    with pytest.raises(errors.MissingFileError, match="none.json: no such file"):
        tool.read_law(str(tmp_path / "none.json"), str(tmp_path))


def test_tool_prints_the_plan_for_a_cluster(tmp_path):
    done = _models.run(
        _tool_command(
            tmp_path,
            "--plan_gpus=128",
            "--plan_gpu_tflops=125",
            "--plan_utilization=0.3",
            "--plan_hours=4",
            "--plan_units=1024,4096,16384",
        ),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    final = json.loads(lines[-1])
    expected = law_fitting.plan_compute(
        law_lib.REVIEWS_LAW, 128 * 125e12 * 0.3, 4 * 3600, (1024, 4096, 16384)
    )
    assert final["plan"]["hidden_size"] == expected.best.units
    assert final["plan"]["line"] == expected.line
    assert final["cluster"]["flops"] == pytest.approx(6.912e19)
    assert [c["units"] for c in final["candidates"]] == [1024, 4096, 16384]
    assert final["law_source"].startswith("shipped")
    candidates = [line for line in lines if " units: " in line and "MFLOPs/char" in line]
    assert len(candidates) == 3
    assert [line[0] for line in candidates].count("*") == 1
    assert f"* {expected.best.units} units:" in done.stdout
    assert "cluster: 128 GPUs x 125 TFLOP/s peak x 0.3 utilization" in done.stdout
    assert "4,800 TFLOP/s sustained, for 4 hours: 6.91e+19 FLOPs" in done.stdout
    assert f"chosen: {expected.line}" in done.stdout
    assert "x the law's characters" in done.stdout
    # Nothing was run or written: a plan is arithmetic.
    assert not os.listdir(tmp_path)
