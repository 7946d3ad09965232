"""Every command the README and docs/ show, parsed by the binary it names.

The shell blocks of README.md and docs/*.md are read for `tf-mlstm-*` (and
`tf-mlstm <binary>`) commands and `python tools/*.py` ones; each is parsed
with that binary's own flag definitions in a fresh process (flagfiles
included, from the repository root), its required flags checked, and its
config built and validated where the binary's config is a dataclass. So a
renamed or removed flag, a value of the wrong type, an enum value that is
no longer a choice, or a setting the config refuses fails here, not in a
user's terminal. (What each command then does at full size is measured in
the docs; the quick start runs end to end in `test_train.py`.)
"""

import json
import os
import pathlib
import re
import shlex
import sys
import textwrap

import pytest

from _models import run

REPO = pathlib.Path(__file__).resolve().parent.parent
_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_SHELL_LANGUAGES = ("", "sh", "bash", "shell", "console")
_BINARY = re.compile(r"^tf-mlstm(?:-([a-z-]+))?$")
_OURS = re.compile(r"(^|\s)(tf-mlstm\b|python3? tools/)")


def _pieces(line):
    """The simple commands of one shell line (split at `|`, `&&`, `;`), as token lists."""
    tokens = shlex.split(line, comments=True)
    command = []
    for token in tokens:
        if token in ("|", "&&", ";", "||"):
            yield command
            command = []
        else:
            command.append(token)
    yield command


def _module_and_args(tokens):
    """(module, args) of a command, or None when it runs none of ours."""
    while tokens and (re.fullmatch(r"[A-Z_]+=.*", tokens[0]) or tokens[0] == "srun"):
        tokens = tokens[1:]  # an environment assignment, a launcher of the whole line
    if not tokens:
        return None
    match = _BINARY.match(tokens[0])
    if match:
        name, args = match.group(1), tokens[1:]
        if name is None:  # the umbrella: tf-mlstm <binary> ...
            if not args or args[0].startswith("-"):
                return None
            name, args = args[0], args[1:]
        return f"tf_mlstm.cli.{name.replace('-', '_')}", args
    if tokens[0] in ("python", "python3") and len(tokens) > 1:
        tool = re.fullmatch(r"tools/(\w+)\.py", tokens[1])
        if tool:
            return tool.group(1), tokens[2:]
    return None


def _shell_blocks(text):
    """The bodies of the fenced blocks tagged sh/bash/shell/console or untagged."""
    blocks, body, language = [], None, None
    for line in text.splitlines():
        fence = re.match(r"^\s*```(\w*)\s*$", line)
        if fence and body is None:
            body, language = [], fence.group(1)
        elif fence:
            if language in _SHELL_LANGUAGES:
                blocks.append("\n".join(body))
            body = None
        elif body is not None:
            body.append(line)
    return blocks


def doc_commands():
    """[(doc name, line, module, args)] of every command of ours in the docs' shell blocks."""
    found = []
    for doc in _DOCS:
        for block in _shell_blocks(doc.read_text(encoding="utf-8")):
            for line in block.replace("\\\n", " ").splitlines():
                if not _OURS.search(line) or line.lstrip().startswith("#"):
                    continue
                for tokens in _pieces(line):
                    command = _module_and_args(tokens)
                    if command is None:
                        continue
                    module, args = command
                    if "--" in args:  # the launcher: its flags, then the command it runs
                        cut = args.index("--")
                        inner = _module_and_args(args[cut + 1 :])
                        if inner:
                            found.append((doc.name, line.strip(), *inner))
                        args = args[:cut]
                    found.append((doc.name, line.strip(), module, args))
    return found


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
        before, aliases = set(FLAGS), dict(_flags.DEPRECATED_ALIASES)
        seen["define"]()
        error = None
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
        FLAGS.unparse_flags()
        for name in set(FLAGS) - before:
            delattr(FLAGS, name)
        _flags.DEPRECATED_ALIASES.clear()
        _flags.DEPRECATED_ALIASES.update(aliases)
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


def test_the_docs_show_commands_of_every_kind():
    commands = doc_commands()
    modules = {module for _, _, module, _ in commands}
    assert len(commands) >= 40, commands
    for expected in ("tf_mlstm.cli.train", "tf_mlstm.cli.transfer", "benchmark"):
        assert expected in modules, sorted(modules)


@pytest.mark.slow
def test_every_command_in_the_docs_parses_with_its_binarys_flags():
    commands = doc_commands()
    errors = _parse([[module, args] for _, _, module, args in commands])
    failed = [
        f"{doc}: {line}\n    -> {error}"
        for (doc, line, _, _), error in zip(commands, errors, strict=True)
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
