"""The config room (`tf_mlstm.config`): every config there, none importing TensorFlow.

Its errors name a setting as the reader wrote it: the Python argument to a
Python caller, the flag to a binary's user.
"""

import ast
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import tf_mlstm
from tf_mlstm import config
from tf_mlstm import errors

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
