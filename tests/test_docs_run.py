"""Every command README.md and docs/ show, run at tiny sizes, in the docs' order.

The docs are a walk-through: the README converts reviews and trains
`runs/r1`, transfer.md fits classifiers on it, serving.md exports them,
performance.md and distributed.md time and scale the same commands. Here
each command runs as the docs write it, in a sandbox laid out like a user's
folder beside a `shared/data` of tiny corpora in the shared corpora's
layout (generated, so this needs no download), with two changes only:

- sizes: a few flags appended per binary (`SIZES`, e.g. an 8-unit model,
  3 training steps, 2 shards), and precision and XLA pinned where the
  command leaves them to the flagfile or to `auto` (`PINS`);
- the paths a doc takes as the user's own (`reviews/*.json.gz`, `m`,
  `DIR`, `/shared/amazon`, ...), made in the sandbox or mapped to what an
  earlier command made (`_PLACEHOLDERS`).

Every command must end with status 0 and make what it claims: each
output its flags name (`--model_dir` of a training run, `--output_dir`,
`--output`, `--export_dir`) holds a non-empty file, and a command naming
none prints its answer on stdout. A command that cannot run on one
machine (a cluster's runner, Slurm, a 128-worker TF_CONFIG, a GPU) is
named in `_why_not_run` with its reason, and is still parsed by
test_docs_commands.py. So a renamed flag, a changed default, a flag a
flagfile sets that the binary no longer takes, or a walk-through step that
needs an output no earlier step makes fails here.

All commands run in one process (`_commands.run_in_one_process`), each
through its binary's own entry point, with the flags defined afresh for
each: a process per command would cost TensorFlow's start-up (about 7 s)
sixty times.
"""

import csv
import gzip
import json
import sys

import pytest

import _docs
from _commands import run_in_one_process
from _models import write_openai_release

REPO = _docs.REPO
# The walk-through's order: the README's model first, the docs that use it after.
_ORDER = [
    "README.md",
    "transfer.md",
    "serving.md",
    "performance.md",
    "scaling.md",
    "distributed.md",
    "reliability.md",
]
_EMOTIONS = (
    "anger,anticipation,disgust,fear,joy,love,optimism,pessimism,sadness,surprise,trust"
).split(",")

SIZES = {
    "tf_mlstm.cli.train": [
        "--hidden_size=8",
        "--embedding_size=4",
        "--batch_size=4",
        "--seq_length=16",
        "--max_steps=3",
        "--warmup_steps=1",
        "--eval_every_steps=0",
        "--sample_every_steps=0",
        "--eval_batches=1",
        "--shuffle_buffer=64",
    ],
    "tf_mlstm.cli.make_tfrecords": ["--num_shards=2"],
    "tf_mlstm.cli.eval": ["--max_batches=2", "--batch_size=4", "--seq_length=32"],
    "tf_mlstm.cli.transfer": [
        "--batch_size=32",
        "--window=64",
        "--c_grid=0.1,1",
        "--num_labeled=20",
    ],
    "tf_mlstm.cli.finetune": ["--max_steps=2", "--batch_size=4", "--max_length=32"],
    "tf_mlstm.cli.classify": ["--batch_size=16"],
    "tf_mlstm.cli.classify_beam": ["--batch_size=16"],
    "tf_mlstm.cli.generate": ["--length=16"],
    "benchmark": [
        "--hidden=8",
        "--batch=2",
        "--seq=8",
        "--embedding=4",
        "--steps=1",
        "--warmup=1",
        "--featurize_batches=1",
        "--featurize_passes=1",
        "--featurize_max_chars=32",
        "--convert_max_documents=20",
        "--pipeline_batches=2",
        # One cell of the matrix (test_benchmark.py runs each XLA setting and implementation).
        "--impls=mlstm",
        "--jit=false",
    ],
    # One grid point of 16 steps; the recipe's batch and sequence made tiny.
    "scaling_law": [
        "--sizes=8",
        "--budgets=1024",
        "--train_flags=--precision=float32,--jit_compile=false,--embedding_size=4,"
        "--batch_size=4,--seq_length=16,--shuffle_buffer=64,--eval_batches=1",
    ],
}
# A local Beam pipeline runs in this process: its worker processes (about 5 s
# each to start) are tested in test_beam_convert.py and test_beam_inference.py.
_ONE_BEAM_WORKER = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
# Appended only where the command itself does not set them: a flagfile's or
# auto's choice would make the run depend on the machine (or need a GPU).
PINS = {
    "tf_mlstm.cli.train": [
        "--precision=float32",
        "--jit_compile=false",
        "--num_gpus=0",
        "--all_reduce=auto",
        "--allreduce_dtype=float32",
    ],
    "tf_mlstm.cli.finetune": ["--precision=float32", "--jit_compile=false"],
    "tf_mlstm.cli.transfer": ["--precision=float32"],
    "tf_mlstm.cli.classify": ["--precision=float32"],
    "benchmark": ["--precisions=float32"],
}


# A doc's stand-ins for the user's own paths, and what they are here.
_PLACEHOLDERS = {
    "--train_data=data/amazon": "--train_data=data/reviews",  # before distributed.md converts it
    "--train_data=/shared/amazon": "--train_data=data/reviews",
    "--model_dir=/shared/runs/paper": "--model_dir=runs/paper",
    "--train_data=DIR": "--train_data=data/reviews",
    "--model_dir=/tmp/mw": "--model_dir=runs/mw",
    "--model_dir=m": "--model_dir=runs/r1",
    "--classifier=classifier.json": "--classifier=runs/r1/sst/classifier.json",
    # The newest version an earlier command exported there, found when the command runs.
    "--saved_model=export/1": "--saved_model=@newest:serving/mlstm_sst",
    "--saved_model=exports/r1/20": "--saved_model=@newest:serving/mlstm_sst",
}


def _why_not_run(command):
    """Why a doc command cannot run on one machine, or None when it runs here."""
    if command.via_launcher:
        return "run by the launcher on its line"
    if "srun" in command.prefix:
        return "one task of a Slurm job (srun)"
    if "TF_CONFIG" in command.exported:
        return "one worker of the cluster its block's TF_CONFIG describes"
    runner = next((a.split("=", 1)[1] for a in command.args if a.startswith("--runner=")), None)
    if runner not in (None, "DirectRunner"):
        return f"needs a {runner} cluster"
    if command.module == "gpu_check":
        return "needs a GPU (tests/test_gpu_check.py runs it on CPU devices)"
    if command.module == "mutants":
        return "runs the suite's own tests per planted fault (tests/test_mutants.py runs it)"
    if command.module == "chaos":
        return "relaunches a training run after each of many faults (tests/test_chaos.py runs it)"
    return None


def _flag_name(arg):
    return arg.split("=", 1)[0].lstrip("-")


def _args(module, args, launched=None):
    """The command's arguments at tiny sizes (see the module doc)."""
    if launched is not None:  # the launcher: its own flags, then its command's, sized
        return [*args, "--", _program(launched.module), *_args(launched.module, launched.args)]
    given = {_flag_name(arg) for arg in args}
    pins = [pin for pin in PINS.get(module, []) if _flag_name(pin) not in given]
    beam = _ONE_BEAM_WORKER if "--runner=DirectRunner" in args else []
    return [*args, *pins, *SIZES.get(module, []), *beam]


def _program(module):
    if module.startswith("tf_mlstm.cli."):
        return "tf-mlstm-" + module.rsplit(".", 1)[1].replace("_", "-")
    return f"tools/{module}.py"


def _sentences(label_of):
    """The demo corpus's reviews, each with label_of(text)."""
    from tf_mlstm.data import demo

    with open(demo.DEMO_CORPUS, encoding="utf-8") as f:
        texts = [line.strip() for line in f if line.strip()]
    return [(text, label_of(i, text)) for i, text in enumerate(texts)]


def _positive(_, text):
    words = ("great", "love", "perfect", "excellent", "wonderful", "best", "five stars")
    return int(any(word in text.lower() for word in words))


def _write_csv(path, header, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _write_jsonl(path, records, opener=open):
    path.parent.mkdir(parents=True, exist_ok=True)
    with opener(path, "wt", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def _sandbox(root):
    """A user's folder (`root/work`) beside `root/shared/data`; returns the folder."""
    data, work = root / "shared" / "data", root / "work"
    reviews = _sentences(_positive)
    splits = {"train": reviews[:150], "val": reviews[150:200], "test": reviews[200:]}
    for name, rows in splits.items():
        _write_csv(data / "sst" / f"{name}.csv", ["label", "sentence"], [(y, t) for t, y in rows])
        five = [(i % 5, t) for i, (t, _) in enumerate(rows)]
        _write_csv(data / "sst5" / f"{name}.csv", ["label", "sentence"], five)
    for name, rows in (("train", reviews[:200]), ("test", reviews[200:])):
        tweets = [
            [f"2018-En-{i}", text, *((i + k) % 3 == 0 for k in range(len(_EMOTIONS)))]
            for i, (text, _) in enumerate(rows)
        ]
        tweets = [[*row[:2], *(int(v) for v in row[2:])] for row in tweets]
        _write_csv(data / "semeval" / f"{name}.csv", ["ID", "Tweet", *_EMOTIONS], tweets)
        _write_jsonl(data / "imdb" / f"{name}.jsonl", [{"text": t, "label": y} for t, y in rows])
    _write_jsonl(data / "imdb" / "unsup.jsonl", [{"text": t} for t, _ in reviews])
    for name, rows in (("books", reviews[:120]), ("dvd", reviews[120:200])):
        stars = [
            {"reviewText": t, "overall": 5.0 if y else 1.0 + i % 2} for i, (t, y) in enumerate(rows)
        ]
        _write_jsonl(data / "amazon" / f"{name}.jsonl", stars)
    electronics = [{"reviewText": t, "overall": 4.0 if y else 2.0} for t, y in reviews[200:]]
    _write_jsonl(data / "amazon" / "electronics.jsonl", electronics)

    # What the docs take to be the user's own files.
    texts = [text for text, _ in reviews]
    for i in range(2):
        records = [{"reviewText": t} for t in texts[i::2]]
        _write_jsonl(work / "reviews" / f"part{i}.json.gz", records, opener=gzip.open)
    _write_jsonl(work / "reviews" / "more.jsonl", [{"text": t} for t in texts[:40]])
    _write_jsonl(work / "more" / "imdb.jsonl", [{"text": t} for t in texts[100:]])
    _write_jsonl(work / "electronics.jsonl", electronics)
    _write_jsonl(work / "new.jsonl", [{"text": t} for t in texts[:12]])
    _write_jsonl(work / "new_reviews.jsonl", [{"reviewText": t} for t in texts[12:24]])
    for i in range(2):
        part = texts[24 + 10 * i : 34 + 10 * i]
        _write_jsonl(work / f"part-{i}.jsonl", [{"text": t} for t in part])
    write_openai_release(work / "generating-reviews-discovering-sentiment" / "model", seed=0)
    for linked in ("flags", "tools"):
        (work / linked).symlink_to(REPO / linked)
    return work


# What each binary claims to make, by the flag that names it; a command
# without one of these (tf-mlstm-eval, -generate, a benchmark, classify to
# `-`) claims its answer on stdout.
_OUTPUT_FLAGS = {
    "tf_mlstm.cli.train": ("model_dir",),
    "tf_mlstm.cli.finetune": ("model_dir",),
    "tf_mlstm.cli.import_openai": ("model_dir",),
    "tf_mlstm.cli.make_tfrecords": ("output_dir",),
    "tf_mlstm.cli.transfer": ("output_dir",),
    "tf_mlstm.cli.visualize": ("output_dir",),
    "tf_mlstm.cli.export": ("export_dir",),
    "tf_mlstm.cli.classify": ("output",),
    "tf_mlstm.cli.classify_beam": ("output",),
}


def _unmade_outputs(item, result, work):
    """What a command that ended with status 0 claims to have made and did not.

    Each output its flags name must exist and hold a non-empty file (a
    Beam output is a prefix of its shards); a command with no such flag
    must print something.
    """
    names = _OUTPUT_FLAGS.get(item["module"], ())
    outputs = [
        arg.split("=", 1)[1]
        for arg in item["argv"][1:]
        if arg.startswith("--") and _flag_name(arg) in names and arg.split("=", 1)[1] != "-"
    ]
    if not outputs:
        return [] if result.stdout else ["printed nothing and names no output"]
    missing = []
    for output in outputs:
        path = work / output
        paths = sorted(path.parent.glob(path.name + "*")) if "beam" in item["module"] else [path]
        files = [p for p in paths if p.is_file()]
        files += [f for p in paths if p.is_dir() for f in p.rglob("*") if f.is_file()]
        if not any(f.stat().st_size for f in files):
            missing.append(f"{output}: not made, or holds no non-empty file")
    return missing


def _items(commands):
    """The runnable commands: where each is, its module, argv and stdin, and its command line."""
    items = []
    for command in commands:
        args = [
            _PLACEHOLDERS.get(a, a) for a in _args(command.module, command.args, command.launched)
        ]
        program = _program(command.module)
        items.append(
            {
                "where": f"{command.doc}: {command.line}",
                "module": command.module,
                "argv": [program, *args],
                "stdin": command.stdin,
                "command": [
                    sys.executable,
                    *(["-m", command.module] if command.module.startswith("tf_mlstm.") else []),
                    *([program] if program.startswith("tools/") else []),
                    *args,
                ],
            }
        )
    return items


def _walk_through():
    """[(DocCommand, why it is not run or None)] in the walk-through's order."""
    commands = sorted(_docs.doc_commands(), key=lambda c: _ORDER.index(c.doc))
    walk, seen = [], {}
    for command in commands:
        why = _why_not_run(command)
        key = (command.module, command.args, command.stdin)
        if why is None and key in seen:
            why = f"the same command as in {seen[key]}, run there"
        seen.setdefault(key, command.doc)
        walk.append((command, why))
    return walk


# The walk-through in two halves, each in a sandbox of its own, so that neither nears
# the per-test time-out on a slow machine shared with the rest of the suite: the
# README's model and what transfer.md and serving.md make of it; then the later docs,
# after the first half's commands that make what they read.
_HALVES = {"first": _ORDER[:3], "later": _ORDER[3:]}
# Flags whose value a command reads as a path (its other flags' values are not paths).
_READ_FLAGS = ("train_data", "model_dir", "init_model_dir", "classifier", "saved_model", "input")
_READ_FLAGS += ("add_runs",)


def _made(item):
    """The paths `item` makes: the values of its output flags (`_OUTPUT_FLAGS`)."""
    names = _OUTPUT_FLAGS.get(item["module"], ())
    return [a.split("=", 1)[1] for a in item["argv"][1:] if _flag_name(a) in names and "=" in a]


def _read(item):
    """The paths `item` reads (each of a list's; an `@newest:` folder as the folder)."""
    values = [a.split("=", 1)[1] for a in item["argv"][1:] if _flag_name(a) in _READ_FLAGS]
    return [p.replace("@newest:", "") for v in values if "=" not in v for p in v.split(",")]


def _with_what_they_read(earlier, later):
    """`later`, after the `earlier` items that make what it reads (and what those read)."""
    needed, wanted = set(), [path for item in later for path in _read(item)]
    while wanted:
        path = wanted.pop()
        for i, item in enumerate(earlier):
            made = _made(item)
            if i not in needed and any(path == m or path.startswith(m + "/") for m in made):
                needed.add(i)
                wanted += [p for p in _read(item) if p not in made]
    return [item for i, item in enumerate(earlier) if i in needed] + later


@pytest.mark.slow
@pytest.mark.parametrize("half", list(_HALVES))
def test_every_command_in_the_docs_runs_at_tiny_sizes(tmp_path, half):
    work = _sandbox(tmp_path)
    walk = _walk_through()
    assert {command.doc for command, _ in walk} == set(_ORDER)
    runnable = [command for command, why in walk if why is None]
    items = _items([c for c in runnable if c.doc in _HALVES[half]])
    if half == "later":
        items = _with_what_they_read(
            _items([c for c in runnable if c.doc in _HALVES["first"]]), items
        )
    results = run_in_one_process(
        [item["command"] for item in items],
        tmp_path / "commands",
        # Under the 600 s per-test limit, with room for a slow machine loaded with other runs.
        timeout=530,
        stdin=[item["stdin"] for item in items],
        cwd=work,
    )
    said = [f"{result.stdout[-1500:]}{result.stderr[-2500:]}" for result in results]
    failed = [
        f"{item['where']}\n  -> status {result.returncode}:\n{output}"
        for item, result, output in zip(items, results, said)
        if result.returncode != 0
    ]
    # Status 0 is not enough: a command that did nothing would pass.
    failed += [
        f"{item['where']}\n  -> status 0, but {'; '.join(unmade)}:\n{output}"
        for item, result, output in zip(items, results, said)
        if result.returncode == 0 and (unmade := _unmade_outputs(item, result, work))
    ]
    assert not failed, "\n\n".join(failed[:4])
    for item, result in zip(items, results):
        print(f"{result.seconds:6.1f} s  {item['where'][:110]}")


def test_only_commands_that_need_a_cluster_a_gpu_or_a_launcher_are_left_out():
    """A new local command in the docs runs above; only these kinds are ever left to parsing."""
    allowed = ("run by the launcher", "one task of a Slurm", "one worker of the cluster")
    allowed += ("needs a GPU", "the same command as in", "runs the suite's own tests")
    allowed += ("relaunches a training run after each of many faults",)
    left_out = [(command, why) for command, why in _walk_through() if why is not None]
    for command, why in left_out:
        assert why.startswith(allowed) or why.endswith("Runner cluster"), (command.line, why)
    assert sum(why is None for _, why in _walk_through()) >= 50
