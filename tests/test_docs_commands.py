"""Every command the README and docs/ show, parsed by the binary it names.

The shell blocks of README.md and docs/*.md are read for `tf-mlstm-*` (and
`tf-mlstm <binary>`) commands and `python tools/*.py` ones; each is parsed
with that binary's own flag definitions in a fresh process (flagfiles
included, from the repository root), its required flags checked, and its
config built and validated where the binary's config is a dataclass. So a
renamed or removed flag, a value of the wrong type, an enum value that is
no longer a choice, or a setting the config refuses fails here, not in a
user's terminal. Each command that can run on one machine also runs, at
tiny sizes and in the docs' order, in test_docs_run.py; the ones that need
a cluster or a GPU are checked here only.
"""

import json
import os
import sys
import textwrap

import pytest

import _docs
from _models import run

REPO = _docs.REPO
doc_commands = _docs.doc_commands


# Parses each [module, args] with that binary's flags; prints one error (or null) each.
_PARSE = textwrap.dedent(
    """
    import dataclasses, importlib, json, sys
    from absl import flags
    from tf_mlstm.cli import _flags, _main
    from tf_mlstm.cli._config import config_from_flags

    FLAGS = flags.FLAGS
    capture = _main.run_binary
    out = []
    for module_name, args in json.loads(sys.stdin.read()):
        module = importlib.import_module(module_name)
        seen = {"config": None, "required": ()}
        if module_name.startswith("tf_mlstm.cli."):
            _main.run_binary = lambda _n, define, _b, config, required=(): seen.update(
                define=define, config=config, required=tuple(required))
            module.run()
            _main.run_binary = capture
        else:
            seen["define"] = module.define_flags
        if hasattr(module, "split_pipeline_args"):  # --runner: Beam's flags go to Beam
            args = module.split_pipeline_args([module_name, *args])[0][1:]
        error = None
        with _flags.one_commands_flags():
            seen["define"]()
            try:
                FLAGS([module_name, *args])
                missing = [name for name in seen["required"] if FLAGS[name].value is None]
                if missing:
                    raise ValueError("missing required flags: " + ", ".join(missing))
                if dataclasses.is_dataclass(seen["config"]):
                    config_from_flags(seen["config"])
            except (Exception, SystemExit) as e:
                error = f"{type(e).__name__}: {e}"
        out.append(error)
    print(json.dumps(out))
    """
)


def _parse(commands, cwd=REPO):
    """`_PARSE` over [[module, args]]: the error of each, or None."""
    path = os.pathsep.join([str(REPO), str(REPO / "tools")])
    done = run(
        [sys.executable, "-c", _PARSE],
        timeout=120,
        env={"PYTHONPATH": path},
        input=json.dumps(commands),
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _as_received(command):
    """[module, args] as the binary gets them: tools/chaos.py gives its command a run folder."""
    args = list(command.args)
    if command.via_launcher and "tools/chaos.py" in command.line:
        sys.path.insert(0, str(REPO / "tools"))
        try:
            import chaos  # pylint: disable=import-outside-toplevel
        finally:
            sys.path.remove(str(REPO / "tools"))
        args = chaos._with_model_dir(["-", *args], "runs/chaos")[1:]  # pylint: disable=protected-access
    return [command.module, args]


def test_the_docs_show_commands_of_every_kind():
    commands = doc_commands()
    modules = {command.module for command in commands}
    assert len(commands) >= 40, commands
    for expected in ("tf_mlstm.cli.train", "tf_mlstm.cli.transfer", "benchmark"):
        assert expected in modules, sorted(modules)


@pytest.mark.slow
def test_every_command_in_the_docs_parses_with_its_binarys_flags():
    commands = doc_commands()
    errors = _parse([_as_received(command) for command in commands])
    failed = [
        f"{command.doc}: {command.line}\n    -> {error}"
        for command, error in zip(commands, errors, strict=True)
        if error
    ]
    assert not failed, "\n".join(failed)


def test_a_renamed_flag_in_a_doc_command_would_fail(tmp_path):
    """The parse above can fail: an unknown flag, a bad enum value, a missing required flag."""
    unknown, enum, missing, fine = _parse(
        [
            ["tf_mlstm.cli.eval", ["--model_dir=m", "--data=d", "--max_batch=3"]],
            ["tf_mlstm.cli.train", ["--precision=float16"]],
            ["tf_mlstm.cli.eval", ["--data=d"]],
            ["tf_mlstm.cli.eval", ["--model_dir=m", "--data=d"]],
        ],
        cwd=tmp_path,
    )
    assert "max_batch" in unknown
    assert "precision" in enum and "float16" in enum
    assert "missing required flags: model_dir" in missing
    assert fine is None
