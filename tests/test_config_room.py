"""The config room (`tf_mlstm.config`): every config there, none importing TensorFlow.

Its errors name a setting as the reader wrote it: the Python argument to a
Python caller, the flag to a binary's user.
"""

import ast
import contextlib
import dataclasses
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import tf_mlstm
from tf_mlstm import config
from tf_mlstm import errors
from tf_mlstm.config import bounds

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "tf_mlstm"
ROOM = PACKAGE / "config"


def _python(code):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


def _config_classes(path):
    """(class name, line) of the dataclasses named like a config (…Config, …Fields) in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
        if decorated and node.name.endswith(("Config", "Fields")):
            found.append((node.name, node.lineno))
    return found


# === One room ===


def test_every_config_dataclass_of_the_library_lives_in_the_config_room():
    outside = [
        f"{path.relative_to(REPO)}:{line} {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if ROOM not in path.parents
        for name, line in _config_classes(path)
    ]
    assert not outside, "configs outside tf_mlstm/config/: " + ", ".join(outside)


def test_every_config_module_and_name_imports_without_tensorflow():
    modules = sorted(f"tf_mlstm.config.{p.stem}" for p in ROOM.glob("*.py") if p.stem != "__init__")
    assert "tf_mlstm.config.transfer" in modules and len(modules) >= 6
    names = [name for name in tf_mlstm.__all__ if name.endswith("Config")]
    assert {
        "TrainConfig",
        "EvalConfig",
        "FinetuneConfig",
        "TransferConfig",
        "ConvertConfig",
    } <= set(names)
    done = _python(
        f"""
        import importlib, sys
        import tf_mlstm
        for module in {modules!r}:
            importlib.import_module(module)
        import tf_mlstm.config
        for name in tf_mlstm.config.__all__:
            getattr(tf_mlstm.config, name)
        for name in {names!r}:
            getattr(tf_mlstm, name)
        loaded = sorted(m for m in ("tensorflow", "keras") if m in sys.modules)
        print("loaded:", loaded)
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("loaded: []"), done.stdout


# === Errors name the setting as the reader wrote it ===


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: config.TrainConfig(hidden_size=0), "hidden_size must be positive, got 0"),
        (lambda: config.TrainConfig(warmup_steps=10, max_steps=5), r"warmup_steps must be in"),
        (
            lambda: config.FinetuneConfig(train_data="t", model_dir="o"),
            "init_model_dir is required",
        ),
        (
            lambda: config.TransferConfig(
                model_dir="m", output_dir="o", train_data="t", solver="lbfgs", penalty="l1"
            ),
            "solver=lbfgs fits only penalty=l2, not l1",
        ),
        (lambda: config.EvalConfig(model_dir="m", data="d", text_key=()), "text_key must name"),
        # The conversion checks when constructed (`validate` is never reached).
        (
            lambda: config.ConvertConfig(input="a.jsonl", output_dir="o", split=(8, 0, 1)),
            r"split must be three positive integers",
        ),
    ],
)
def test_a_config_error_names_the_argument_to_python_and_the_flag_to_a_binary(build, message):
    with pytest.raises(errors.InvalidValueError, match="^" + message):
        build().validate()
    flag_message = message.replace("penalty=", "--penalty=")
    with errors.naming_flags(), pytest.raises(errors.InvalidValueError, match="^--" + flag_message):
        build().validate()
    # Outside the binary's context again: the argument.
    with pytest.raises(errors.InvalidValueError, match="^" + message):
        build().validate()


def test_a_wrong_type_names_the_argument():
    with pytest.raises(errors.InvalidValueError, match=r"embedding_size must be an int, got '64'"):
        config.TrainConfig(embedding_size="64")
    # hidden_size takes a number or the word auto (`--hidden_size=auto`).
    for wrong in (64.0, "64", "big", True):
        with pytest.raises(errors.InvalidValueError, match=r"hidden_size must be an int or 'auto'"):
            config.TrainConfig(hidden_size=wrong)


# === Sizes, lengths and counts: one table of bounds (config/bounds.py) ===

# The fewest arguments each config with a bounded field validates with.
_REQUIRED = {
    config.TrainConfig: {},
    config.EvalConfig: {"model_dir": "m", "data": "d"},
    config.FinetuneConfig: {"init_model_dir": "i", "model_dir": "o", "train_data": "t"},
    config.TransferConfig: {"model_dir": "m", "output_dir": "o", "train_data": "t"},
    config.GenerateConfig: {"model_dir": "m"},
    config.ExportConfig: {"model_dir": "m", "export_dir": "e"},
    config.ClassifyConfig: {"model_dir": "m", "classifier": "", "input": "i", "output": "o"},
    config.VisualizeConfig: {"model_dir": "m", "neuron": 0, "input": "Fine.", "output_dir": "v"},
    config.ClassifyBeamConfig: {"saved_model": "s", "input": "i", "output": "o", "runner": "r"},
    config.ConvertConfig: {"input": "a.jsonl", "output_dir": "o"},
}


def _validated(config_class, **values):
    built = config_class(**_REQUIRED[config_class], **values)  # ConvertConfig checks here
    return built.validate() if hasattr(built, "validate") else built


def _bounded_fields():
    return [
        pytest.param(config_class, field.name, id=f"{config_class.__name__}.{field.name}")
        for config_class in _REQUIRED
        for field in dataclasses.fields(config_class)
        if field.name in bounds.LARGEST
    ]


def test_every_bound_is_a_field_of_a_config():
    fields = {field.name for klass in _REQUIRED for field in dataclasses.fields(klass)}
    assert set(bounds.LARGEST) <= fields, set(bounds.LARGEST) - fields


@pytest.mark.parametrize(("config_class", "name"), _bounded_fields())
def test_a_size_past_its_bound_is_one_line_naming_it_and_the_bound_is_accepted(config_class, name):
    largest = bounds.LARGEST[name]
    _validated(config_class, **{name: largest})
    for past in (largest + 1, 3_000_000_000):  # past int32 too: the bound, not an overflow
        message = rf"{name} must be at most {largest}, got {past}\.$"
        with pytest.raises(errors.InvalidValueError, match="^" + message):
            _validated(config_class, **{name: past})
        with errors.naming_flags(), pytest.raises(errors.InvalidValueError, match="^--" + message):
            _validated(config_class, **{name: past})


_ROWS_BY_BYTES = ((32767, 65536), (100000, 100000))  # at int32 elements, past it


@pytest.mark.parametrize(
    ("config_class", "names", "accepted", "refused"),
    [
        # Each value within its bound, their tensor at int32 (accepted) and past it.
        (config.TrainConfig, ("batch_size", "seq_length"), *_ROWS_BY_BYTES),
        (config.EvalConfig, ("batch_size", "seq_length"), *_ROWS_BY_BYTES),
        (config.FinetuneConfig, ("batch_size", "max_length"), *_ROWS_BY_BYTES),
        (config.TransferConfig, ("batch_size", "window"), *_ROWS_BY_BYTES),
        (config.ClassifyConfig, ("batch_size", "window"), *_ROWS_BY_BYTES),
        (config.GenerateConfig, ("num_samples", "length"), (2047, 2**20), (2048, 2**20)),
        (config.TrainConfig, ("seq_length", "hidden_size"), (2**17, 4095), (2**17, 4096)),
    ],
)
def test_a_product_past_int32_is_one_line_naming_each_setting(
    config_class, names, accepted, refused
):
    (product,) = [p for p in bounds.PRODUCTS if p.names == names]
    _validated(config_class, **dict(zip(names, accepted)))
    factor = "" if product.factor == 1 else f"{product.factor} x "
    got = " x ".join(str(value) for value in refused)
    for prefix, context in (("", contextlib.nullcontext), ("--", errors.naming_flags)):
        named = " x ".join(prefix + name for name in names)
        message = rf"^{factor}{named} must be at most 2147483647 \(.*\), got {factor}{got} = "
        with context(), pytest.raises(errors.InvalidValueError, match=message):
            _validated(config_class, **dict(zip(names, refused)))


def test_the_python_entry_point_names_the_argument(tmp_path):
    bad = config.TrainConfig(model_dir=str(tmp_path / "run"), hidden_size=0)
    with pytest.raises(tf_mlstm.InvalidValueError, match=r"^TrainConfig: hidden_size must be pos"):
        tf_mlstm.pretrain(bad)


def test_the_binary_names_the_flag():
    done = subprocess.run(
        [sys.executable, "-m", "tf_mlstm.cli.train", "--hidden_size=0", "--max_steps=1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "--hidden_size must be positive, got 0" in done.stderr
    assert "Traceback" not in done.stderr
