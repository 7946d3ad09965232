"""One name per idea: every binary's flags, walked, and the shared config groups.

The binaries' flags are collected in a fresh process (each binary's own flag
definitions, as `run_binary` receives them); the checks then fail on two
spellings of one idea across binaries (`--val` beside `--validation_data`,
`--feature` beside `--features`), on a config field whose flag has another
name, and on a deprecated spelling that is still a flag of its own.
"""

import dataclasses
import json
import os
import pathlib
import sys
import textwrap

import _forkserver
import pytest
from absl import flags

from tf_mlstm import config as settings
from tf_mlstm import config as train_config
from tf_mlstm import errors
from tf_mlstm.cli import _flags

REPO = pathlib.Path(__file__).resolve().parent.parent

# Prints {binary: {"flags": [...], "aliases": {old: new}, "config": [fields] or None}}
# for every binary of the `tf-mlstm` command (and the tools named on the command line).
_WALK = textwrap.dedent(
    """
    import dataclasses, importlib, json, sys
    from absl import flags
    from tf_mlstm.cli import _flags, _main
    from tf_mlstm.cli import main as umbrella

    # The binaries as the `tf-mlstm` command lists them (it has no flags of its own).
    names = list(umbrella.binaries().values()) + sys.argv[1:]
    out = {}
    for name in names:
        module = importlib.import_module(name)
        seen = {}
        _main.run_binary = lambda _n, define, _b, config, required=(): seen.update(
            define=define, config=config)
        module.run()
        before, aliases = set(flags.FLAGS), dict(_flags.DEPRECATED_ALIASES)
        seen["define"]()
        defined = sorted(set(flags.FLAGS) - before)
        new_aliases = {k: v for k, v in _flags.DEPRECATED_ALIASES.items() if k not in aliases}
        config = seen["config"]
        fields = ([f.name for f in dataclasses.fields(config)]
                  if dataclasses.is_dataclass(config) else None)
        out[name.rsplit(".", 1)[-1]] = {
            "flags": [f for f in defined if f not in new_aliases],
            "aliases": new_aliases,
            "config": fields,
        }
        for flag in defined:
            delattr(flags.FLAGS, flag)
        _flags.DEPRECATED_ALIASES.clear()
    print(json.dumps(out))
    """
)


def _walk(*extra_modules):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tools")]))
    done = _forkserver.run(
        [sys.executable, "-c", _WALK, *extra_modules],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def binaries():
    return _walk()


# === What "one idea" means ===

# Tokens that say where a thing is, not what: `--train` and `--train_data`
# name one idea.
_PLACE_WORDS = {"data", "dir", "file", "files", "path", "paths"}

# Distinct ideas whose names the rules below would merge, each with why.
_DISTINCT = {
    # the run folder written vs the one fine-tuning starts from
    frozenset({"model_dir", "init_model_dir"}),
    # tf-mlstm-classify writes one CSV (or stdout); the others fill a folder
    frozenset({"output", "output_dir"}),
    # whether tf-mlstm-train ends with an export (into its run folder) vs the folder
    # tf-mlstm-export writes
    frozenset({"export", "export_dir"}),
}


def _token(token, vocabulary):
    if token.endswith("s") and not token.endswith("ss") and len(token) > 3:
        token = token[:-1]  # plural and singular: features, feature
    # An abbreviation of a word another flag spells out: val, validation.
    longer = sorted(w for w in vocabulary if len(token) >= 3 and w.startswith(token) and w != token)
    return longer[0] if longer else token


def idea(name, vocabulary):
    """The idea a flag name stands for, as a tuple of normalized words.

    Args:
      name: a flag name.
      vocabulary: every word of every flag name (for abbreviations).
    """
    words = [_token(t, vocabulary) for t in name.split("_")]
    return tuple(w for w in words if w not in _PLACE_WORDS) or tuple(words)


def spellings(names):
    """Groups of two or more flag names that spell one idea.

    Returns:
      A sorted list of sorted name lists.
    """
    vocabulary = {t for name in names for t in name.split("_")}
    groups = {}
    for name in names:
        groups.setdefault(idea(name, vocabulary), set()).add(name)
    clashes = [sorted(g) for g in groups.values() if len(g) > 1]
    return sorted(c for c in clashes if frozenset(c) not in _DISTINCT)


def test_the_rule_catches_the_spellings_the_binaries_used_to_disagree_on():
    assert spellings({"train", "train_data"}) == [["train", "train_data"]]
    assert spellings({"val", "validation_data"}) == [["val", "validation_data"]]
    assert spellings({"val_fraction", "validation_fraction"}) == [
        ["val_fraction", "validation_fraction"]
    ]
    assert spellings({"feature", "features"}) == [["feature", "features"]]
    assert spellings({"text_key", "text_keys"}) == [["text_key", "text_keys"]]
    assert spellings({"model_dir", "init_model_dir", "seed", "max_steps"}) == []


# === The binaries ===


def test_no_idea_has_two_flag_names_across_the_binaries(binaries):
    names = {flag for binary in binaries.values() for flag in binary["flags"]}
    assert {"train_data", "validation_data", "test_data", "features"} <= names
    assert spellings(names) == []


def test_every_config_field_is_set_by_the_flag_of_its_name(binaries):
    for name, binary in binaries.items():
        if binary["config"] is not None:
            missing = sorted(set(binary["config"]) - set(binary["flags"]))
            assert not missing, f"tf-mlstm-{name}: config fields without a flag of their name"
    # tf-mlstm-transfer builds its config in a function; its fields are flag names too.
    from tf_mlstm.transfer import experiment  # pylint: disable=g-import-not-at-top

    fields = {f.name for f in dataclasses.fields(experiment.TransferConfig)}
    assert fields - {"progress"} <= set(binaries["transfer"]["flags"])
    # So does tf-mlstm-make-tfrecords (it wraps its config for `--runner`).
    fields = {f.name for f in dataclasses.fields(settings.ConvertConfig)}
    assert fields - {"progress_interval_s"} <= set(binaries["make_tfrecords"]["flags"])


def test_old_spellings_are_only_deprecated_aliases_of_the_new(binaries):
    assert binaries["transfer"]["aliases"] == {
        "train": "train_data",
        "val": "validation_data",
        "test": "test_data",
        "val_fraction": "validation_fraction",
    }
    assert binaries["finetune"]["aliases"] == {"feature": "features"}
    every_flag = {flag for binary in binaries.values() for flag in binary["flags"]}
    for name, binary in binaries.items():
        for old, new in binary["aliases"].items():
            assert new in binary["flags"], f"tf-mlstm-{name}: --{old} stands for no flag"
            assert old not in every_flag, f"--{old} is deprecated but still a flag somewhere"


@pytest.mark.slow
def test_the_tools_use_the_binaries_names():
    walked = _walk("tfidf_baseline")
    names = {flag for binary in walked.values() for flag in binary["flags"]}
    assert spellings(names) == []
    assert walked["tfidf_baseline"]["aliases"]["val"] == "validation_data"


# === The deprecated spellings ===


def test_a_deprecated_spelling_sets_the_flag_and_warns_once(caplog):
    values = flags.FlagValues()
    flags.DEFINE_string("validation_data", "", "Validation files.", flag_values=values)
    flags.DEFINE_list("features", ["cell"], "Feature kinds.", flag_values=values)
    flags.DEFINE_string("train_data", None, "Training files.", flag_values=values)
    flags.mark_flag_as_required("train_data", flag_values=values)
    for old, new in (("val", "validation_data"), ("feature", "features"), ("train", "train_data")):
        _flags.define_deprecated_alias(old, new, flag_values=values)
    with caplog.at_level("WARNING"):
        values(["prog", "--val=v.csv", "--feature=mean,max", "--train=t.csv"])
    assert (values.validation_data, values.features, values.train_data) == (
        "v.csv",
        ["mean", "max"],
        "t.csv",
    )
    warnings = sorted(r.getMessage() for r in caplog.records if "deprecated" in r.getMessage())
    assert warnings == [
        "--feature is deprecated; use --features (same value).",
        "--train is deprecated; use --train_data (same value).",
        "--val is deprecated; use --validation_data (same value).",
    ]
    assert "Deprecated: use --validation_data." in values["val"].help


def test_the_new_spelling_alone_warns_nothing(caplog):
    values = flags.FlagValues()
    flags.DEFINE_string("validation_data", "", "Validation files.", flag_values=values)
    _flags.define_deprecated_alias("val", "validation_data", flag_values=values)
    with caplog.at_level("WARNING"):
        values(["prog", "--validation_data=v.csv"])
    assert values.validation_data == "v.csv"
    assert not [r for r in caplog.records if "deprecated" in r.getMessage()]


# === One validation per shared field ===


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(precision="float16"), "precision must be one of"),
        (dict(allreduce_dtype="float16", precision="float32"), "allreduce_dtype=float16 needs"),
        (dict(collective_timeout_s=-1.0), "collective_timeout_s must be"),
        (dict(cluster_resolver="k8s"), "cluster_resolver must be one of"),
        (dict(batch_size=0), "batch_size must be positive"),
        (dict(lr=0.0), "lr must be positive"),
        (dict(lr_decay="step"), "lr_decay must be one of"),
        (dict(clip_norm=-1.0), "clip_norm must be >= 0"),
        (dict(warmup_steps=5000), r"warmup_steps must be in \[0, "),
        (dict(max_minutes=-1.0), "max_minutes must be >= 0"),
        (dict(max_nonfinite_steps=0), "max_nonfinite_steps must be positive"),
        (dict(profile_steps="5"), "profile_steps must be START,END"),
        (dict(schedule_length="epochs"), "schedule_length must be one of"),
    ],
)
def test_a_shared_field_is_checked_alike_in_training_and_fine_tuning(change, message):
    finetune = dict(init_model_dir="m", train_data="t", model_dir="o")
    for config in (
        train_config.TrainConfig(**change),
        settings.FinetuneConfig(**finetune, **change),
    ):
        # A Python caller reads the argument's name; a binary's user, the flag's.
        with pytest.raises(ValueError, match="^" + message):
            config.validate()
        with errors.naming_flags(), pytest.raises(ValueError, match="^--" + message):
            config.validate()


def test_float16_all_reduce_under_auto_precision_waits_for_the_resolved_policy():
    # Both accept it until `hardware.resolve_run_config` makes the precision concrete.
    train_config.TrainConfig(allreduce_dtype="float16").validate()
    settings.FinetuneConfig(
        init_model_dir="m", train_data="t", model_dir="o", allreduce_dtype="float16"
    ).validate()


def test_the_configs_are_composed_of_the_shared_groups():
    groups = (
        train_config.RuntimeFields,
        train_config.OptimizationFields,
        train_config.BudgetFields,
    )
    tune = settings.FinetuneConfig(init_model_dir="m", train_data="t", model_dir="o", seed=3)
    for config in (train_config.TrainConfig(seed=3), tune):
        for group in groups:
            assert isinstance(config, group)
        assert config.runtime == train_config.RuntimeFields(seed=3)
    assert tune.labeled_data == settings.LabeledDataFields(train_data="t")
    # Each binary keeps its own defaults for the shared fields.
    assert (train_config.TrainConfig().lr, tune.lr) == (5e-3, 1e-4)
    assert tune.budget.keep_checkpoints == 2
