"""A flag's help text is its config field's documentation: one source, the class docstring."""

import dataclasses
import importlib
import re

import pytest
from absl import flags

from tf_mlstm import config
from tf_mlstm.cli import _flags
from tf_mlstm.config import base

# Binary module -> (its flag definitions, the config its flags build).
BINARIES = {
    "train": ("define_train_flags", config.TrainConfig),
    "finetune": ("define_finetune_flags", config.FinetuneConfig),
    "eval": ("define_eval_flags", config.EvalConfig),
    "transfer": ("define_transfer_flags", config.TransferConfig),
    "classify": ("define_classify_flags", config.ClassifyConfig),
    "classify_beam": ("define_flags", config.ClassifyBeamConfig),
    "export": ("define_export_flags", config.ExportConfig),
    "generate": ("define_generate_flags", config.GenerateConfig),
    "import_openai": ("define_import_flags", config.ImportConfig),
    "visualize": ("define_visualize_flags", config.VisualizeConfig),
    "make_tfrecords": ("define_flags", config.ConvertConfig),
    "preset": ("define_preset_flags", config.PresetConfig),
}
# Fields no flag sets (the binary fills them in).
NO_FLAG = {
    ("TransferConfig", "progress"),
    ("ClassifyBeamConfig", "pipeline_args"),
    ("ConvertConfig", "progress_interval_s"),
}
CONFIGS = sorted(
    (
        getattr(config, name)
        for name in config.__all__
        if dataclasses.is_dataclass(getattr(config, name))
    ),
    key=lambda c: c.__name__,
)


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_of_every_config_is_documented_in_its_docstring(config_class):
    docs = base.field_docs(config_class)
    missing = [f.name for f in dataclasses.fields(config_class) if not docs.get(f.name)]
    assert not missing, f"{config_class.__name__}: no Attributes entry for {missing}"
    assert not set(docs) - {f.name for f in dataclasses.fields(config_class)}, "a stale entry"


@pytest.mark.parametrize("module", sorted(BINARIES))
def test_a_flag_s_help_is_its_field_s_documentation(module):
    define, config_class = BINARIES[module]
    with _flags.one_commands_flags():
        getattr(importlib.import_module(f"tf_mlstm.cli.{module}"), define)()
        checked = 0
        for field in dataclasses.fields(config_class):
            if (config_class.__name__, field.name) in NO_FLAG:
                continue
            flag = flags.FLAGS[field.name]
            shown = re.sub(r"^<[^>]*>: ", "", flag.help)  # absl puts an enum's choices first
            assert shown == base.field_help(config_class, field.name), field.name
            checked += 1
    assert checked >= 2


# The binaries whose every flag is derived from its field (`_flags.define_fields`).
DERIVED = (
    "eval",
    "classify",
    "export",
    "generate",
    "visualize",
    "import_openai",
    "make_tfrecords",
    "preset",
)
# A field without a default whose flag has one: empty = the fine-tuned head of --model_dir.
FLAG_DEFAULTS = {("ClassifyConfig", "classifier"): ""}


@pytest.mark.parametrize("module", DERIVED)
def test_a_flag_s_default_is_its_field_s_and_its_binary_lists_it(module):
    define, config_class = BINARIES[module]
    name = f"tf_mlstm.cli.{module}"
    with _flags.one_commands_flags():
        getattr(importlib.import_module(name), define)()
        own = {flag.name for flag in flags.FLAGS.get_flags_for_module(name)}
        for field in dataclasses.fields(config_class):
            if (config_class.__name__, field.name) in NO_FLAG:
                continue
            flag = flags.FLAGS[field.name]
            if (config_class.__name__, field.name) in FLAG_DEFAULTS:
                assert flag.default == FLAG_DEFAULTS[config_class.__name__, field.name]
            elif field.default is dataclasses.MISSING:  # required, or resolved later
                assert flag.default is None, field.name
            else:
                wanted = list(field.default) if isinstance(field.default, tuple) else field.default
                assert flag.default == wanted, field.name
            # `--helpfull` lists it under the binary; a shared one (`--text_key`), under _flags.
            assert (field.name in own) == (field.name != "text_key"), field.name


def test_eval_s_sizes_keep_their_bounds():
    with _flags.one_commands_flags():
        importlib.import_module("tf_mlstm.cli.eval").define_eval_flags()
        for name, bound in (("batch_size", 1), ("seq_length", 1), ("max_batches", 0)):
            assert flags.FLAGS[name].parser.lower_bound == bound, name
        with pytest.raises(flags.IllegalFlagValueError, match="batch_size"):
            flags.FLAGS(["eval", "--model_dir=m", "--data=d", "--batch_size=0"])


def test_a_field_named_in_a_doc_reads_as_the_argument_to_python_and_the_flag_in_help():
    doc = base.field_doc(config.TrainConfig, "lr_scaling")
    assert doc == "Scale `lr` by global batch / `lr_base_batch`."
    assert base.field_help(config.TrainConfig, "lr_scaling") == (
        "Scale --lr by global batch / --lr_base_batch."
    )
    # A shared group's field keeps its group's documentation in every config.
    assert base.field_doc(config.FinetuneConfig, "lr") == base.field_doc(config.TrainConfig, "lr")
    with pytest.raises(KeyError, match="TrainConfig.nothing has no entry"):
        base.field_doc(config.TrainConfig, "nothing")
