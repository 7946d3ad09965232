"""The commands README.md and docs/*.md show, read from their shell blocks.

A command of ours is a `tf-mlstm-*` binary (or `tf-mlstm <binary>`) or a
`python tools/*.py` script. Each is found with the shell line it is on, the
environment variables its block exports, and the text piped into it by a
`printf`/`echo` before it on that line, so a test can parse it
(`test_docs_commands.py`) or run it (`test_docs_run.py`).
"""

import dataclasses
import pathlib
import re
import shlex

REPO = pathlib.Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_SHELL_LANGUAGES = ("", "sh", "bash", "shell", "console")
_BINARY = re.compile(r"^tf-mlstm(?:-([a-z-]+))?$")
_OURS = re.compile(r"(^|\s)(tf-mlstm\b|python3? tools/)")
_EXPORT = re.compile(r"^\s*export\s+([A-Z_][A-Z0-9_]*)=")
_SEPARATORS = ("|", "&&", ";", "||")


@dataclasses.dataclass(frozen=True)
class DocCommand:
    """One command of ours in a doc's shell block.

    Attributes:
      doc: the doc's file name ("README.md", "transfer.md").
      line: the shell line it is on (continuations joined).
      module: `tf_mlstm.cli.<binary>`, or the tool's module name ("benchmark").
      args: its arguments, as the shell would pass them (globs unexpanded).
      prefix: what runs it on that line before the command itself ("srun", "VAR=value").
      exported: the variables its block exports before it (TF_CONFIG, ...).
      stdin: the text a `printf`/`echo` pipes into it, or None.
      launched: a launcher's command (after `--`), as a DocCommand.
      via_launcher: this is the command a launcher on its line runs.
    """

    doc: str
    line: str
    module: str
    args: tuple
    prefix: tuple = ()
    exported: tuple = ()
    stdin: str | None = None
    launched: "DocCommand | None" = None
    via_launcher: bool = False


def _pieces(line):
    """The simple commands of one shell line, as (tokens, separator before it)."""
    tokens = shlex.split(line, comments=True)
    command, separator = [], None
    for token in tokens:
        if token in _SEPARATORS:
            yield command, separator
            command, separator = [], token
        else:
            command.append(token)
    yield command, separator


def _module_and_args(tokens):
    """(module, args, prefix) of a command, or None when it runs none of ours."""
    prefix = []
    while tokens and (re.fullmatch(r"[A-Z_]+=.*", tokens[0]) or tokens[0] == "srun"):
        prefix.append(tokens[0])  # an environment assignment, a launcher of the whole line
        tokens = tokens[1:]
    if not tokens:
        return None
    match = _BINARY.match(tokens[0])
    if match:
        name, args = match.group(1), tokens[1:]
        if name is None:  # the umbrella: tf-mlstm <binary> ...
            if not args or args[0].startswith("-"):
                return None
            name, args = args[0], args[1:]
        return f"tf_mlstm.cli.{name.replace('-', '_')}", args, prefix
    if tokens[0] in ("python", "python3") and len(tokens) > 1:
        tool = re.fullmatch(r"tools/(\w+)\.py", tokens[1])
        if tool:
            return tool.group(1), tokens[2:], prefix
    return None


def _piped_text(tokens):
    """What `printf FORMAT` or `echo TEXT` writes, or None for another command."""
    if len(tokens) >= 2 and tokens[0] == "printf":
        return tokens[1].encode("utf-8").decode("unicode_escape")
    if tokens and tokens[0] == "echo":
        return " ".join(tokens[1:]) + "\n"
    return None


def shell_blocks(text):
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


def _commands_of_line(doc, line, exported):
    found, previous = [], None
    for tokens, separator in _pieces(line):
        command = _module_and_args(tokens)
        stdin = _piped_text(previous) if separator == "|" and previous else None
        previous = tokens
        if command is None:
            continue
        module, args, prefix = command
        inner = None
        if "--" in args:  # the launcher: its flags, then the command it runs
            cut = args.index("--")
            inner, args = _module_and_args(args[cut + 1 :]), args[:cut]
        base = DocCommand(
            doc, line.strip(), module, tuple(args), tuple(prefix), tuple(exported), stdin
        )
        if inner:
            found.append(
                dataclasses.replace(base, module=inner[0], args=tuple(inner[1]), via_launcher=True)
            )
            base = dataclasses.replace(base, launched=found[-1])
        found.append(base)
    return found


def doc_commands(docs=DOCS):
    """[DocCommand] of every command of ours in the docs' shell blocks, in reading order.

    A launcher's line gives two: the command after `--` (`via_launcher`) and
    then the launcher (whose `launched` is that command).
    """
    found = []
    for doc in docs:
        for block in shell_blocks(doc.read_text(encoding="utf-8")):
            exported = []
            for line in block.replace("\\\n", " ").splitlines():
                export = _EXPORT.match(line)
                if export:
                    exported.append(export.group(1))
                if not _OURS.search(line) or line.lstrip().startswith("#"):
                    continue
                found.extend(_commands_of_line(doc.name, line, exported))
    return found
