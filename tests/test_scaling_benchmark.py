"""tools/scaling_benchmark.py: the convergence runs it plans (the runs themselves are real
training, measured by the tool, not by tests)."""

import importlib.util
import pathlib

import pytest
from absl import flags

REPO = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(name="tool")
def fixture_tool():
    spec = importlib.util.spec_from_file_location(
        "scaling_benchmark", REPO / "tools" / "scaling_benchmark.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.FLAGS = flags.FlagValues()  # The tool's functions read its module-level FLAGS.
    module.define_flags(module.FLAGS)
    module.FLAGS(["scaling_benchmark"])
    return module


def test_parse_schedule(tool):
    assert tool.parse_schedule("linear:0.1") == ("linear", 0.1, 0.0)
    assert tool.parse_schedule("sqrt:0:6e-3") == ("sqrt", 0.0, 6e-3)
    with pytest.raises(ValueError, match="is not SCALING:WARMUP_FRACTION"):
        tool.parse_schedule("sqrt")
    with pytest.raises(ValueError, match="is not SCALING:WARMUP_FRACTION"):
        tool.parse_schedule("sqrt:ten")
    with pytest.raises(ValueError, match="scaling must be none, linear or sqrt"):
        tool.parse_schedule("cubic:0.1")
    with pytest.raises(ValueError, match="warm-up share in"):
        tool.parse_schedule("linear:1.5")


def test_convergence_runs_see_the_same_characters(tool):
    tool.FLAGS.schedules = ["linear:0.1", "sqrt:0.25:6e-3"]
    specs = tool.convergence_specs()
    names = [name for name, _, _ in specs]
    assert names == ["small_base", "large_linear", "large_schedule_0", "large_schedule_1"]
    chars = {name: s["batch_size"] * s["seq_length"] * s["max_steps"] for name, _, s in specs}
    assert len(set(chars.values())) == 1
    by_name = {name: s for name, _, s in specs}
    ratio = tool.FLAGS.large_batch / tool.FLAGS.small_batch
    assert tool._peak(by_name["small_base"]) == tool.FLAGS.base_lr
    assert tool._peak(by_name["large_linear"]) == pytest.approx(tool.FLAGS.base_lr * ratio)
    assert tool._peak(by_name["large_schedule_0"]) == pytest.approx(tool.FLAGS.base_lr * ratio)
    assert tool._peak(by_name["large_schedule_1"]) == 6e-3
    steps = by_name["large_schedule_1"]["max_steps"]
    assert by_name["large_schedule_1"]["warmup_steps"] == round(0.25 * steps)
    assert "warmup_steps" not in by_name["large_linear"]
    # One progress line per equal number of characters in every run.
    small, large = by_name["small_base"], by_name["large_linear"]
    assert small["log_every_steps"] == large["log_every_steps"] * ratio
