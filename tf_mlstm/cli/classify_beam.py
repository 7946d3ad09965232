r"""tf-mlstm-classify-beam: apply an exported SavedModel to many files as an Apache Beam pipeline.

  tf-mlstm-classify-beam --saved_model=exports/r1/20 --input='reviews/*.jsonl.gz' \
      --text_key=reviewText --output=scores/part --runner=DirectRunner \
      --direct_num_workers=2 --direct_running_mode=multi_processing
  tf-mlstm-classify-beam --saved_model=exports/r1/20 --signature=featurize \
      --input='reviews/*.jsonl.gz' --output=gs://bucket/features/part \
      --runner=DataflowRunner --project=my-project --region=us-central1 \
      --temp_location=gs://bucket/tmp

Needs the `beam` extra (`pip install tf_mlstm[beam]`); every flag this binary
does not define goes to Beam as a pipeline option. RunInference applies the
`classify` (or `featurize`) signature of a `tf-mlstm-export` SavedModel to
every text of `--input` (CSV / JSON lines / text files) and writes JSON lines
`<output>-SSSSS-of-NNNNN.jsonl`, one row per text with `input` and `line` to
join it back, once the pipeline has succeeded. Details: docs/distributed.md.
"""

import functools
import os
import re

from absl import app
from absl import flags

from tf_mlstm import preflight
from tf_mlstm.cli import _beam
from tf_mlstm.cli import _flags
from tf_mlstm.config import choices
from tf_mlstm.config.binaries import ClassifyBeamConfig
from tf_mlstm.data import fields

_REQUIRED_FLAGS = ("saved_model", "input", "output", "runner")


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this binary's flags; all optional here, `run` marks the required ones."""
    fv = flag_values
    flags.DEFINE_string(
        "saved_model", None, _flags.field_help(ClassifyBeamConfig, "saved_model"), flag_values=fv
    )
    flags.DEFINE_string(
        "input", None, _flags.field_help(ClassifyBeamConfig, "input"), flag_values=fv
    )
    flags.DEFINE_string(
        "output", None, _flags.field_help(ClassifyBeamConfig, "output"), flag_values=fv
    )
    flags.DEFINE_string(
        "runner",
        None,
        _flags.field_help(ClassifyBeamConfig, "runner"),
        flag_values=fv,
    )
    flags.DEFINE_enum(
        "signature",
        "classify",
        list(choices.BATCH_SIGNATURES),
        _flags.field_help(ClassifyBeamConfig, "signature"),
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "batch_size",
        64,
        _flags.field_help(ClassifyBeamConfig, "batch_size"),
        lower_bound=1,
        flag_values=fv,
    )
    flags.DEFINE_list(
        "text_key",
        list(fields.TEXT_KEYS),
        _flags.field_help(ClassifyBeamConfig, "text_key"),
        flag_values=fv,
    )
    flags.DEFINE_integer(
        "num_output_shards",
        0,
        _flags.field_help(ClassifyBeamConfig, "num_output_shards"),
        lower_bound=0,
        flag_values=fv,
    )
    _flags.define_overwrite("--output's shards", fv)


def split_pipeline_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """`_beam.split_pipeline_args` with this binary's flags."""
    return _beam.split_pipeline_args(argv, define_flags)


def config_from_flags(
    flag_values: flags.FlagValues, pipeline_args: list[str] | tuple[str, ...] = ()
) -> ClassifyBeamConfig:
    """Validates the parsed flags (and Beam's) into the config.

    Raises:
        app.UsageError: No text key, Apache Beam not installed, or a flag
            that is no Beam pipeline option either.
    """
    text_keys = _flags.text_keys(flag_values.text_key)
    if not text_keys:
        raise app.UsageError("--text_key must name at least one key")
    _beam.check_pipeline_args(flag_values.runner, pipeline_args)
    _flags.refuse_output_over_input(
        "--output",
        functools.partial(_is_an_output, flag_values.output),
        "--input",
        flag_values.input,
    )
    # Shards of an earlier run (of another count) would stay among the new ones.
    folder = os.path.dirname(flag_values.output) or "."
    preflight.refuse_existing(
        "--output",
        folder,
        flag_values.overwrite,
        is_output=lambda name: _is_an_output(flag_values.output, os.path.join(folder, name)),
        given=flag_values.output,
    )
    return ClassifyBeamConfig(
        saved_model=flag_values.saved_model,
        input=flag_values.input,
        output=flag_values.output,
        runner=flag_values.runner,
        signature=flag_values.signature,
        text_key=tuple(text_keys),
        batch_size=flag_values.batch_size,
        num_output_shards=flag_values.num_output_shards,
        pipeline_args=tuple(pipeline_args),
    ).validate()


def check_before_work(flag_values: flags.FlagValues) -> None:
    """The SavedModel, the input and the output, before TensorFlow or Beam starts (`preflight`)."""
    preflight.check_saved_model("saved_model", flag_values.saved_model)
    preflight.check_input_files("input", flag_values.input)
    preflight.check_output_prefix("output", flag_values.output)


def _is_an_output(prefix: str, path: str) -> bool:
    """Whether `path` is one of the files `--output=prefix` writes (`<prefix>-S-of-N.jsonl`)."""
    folder, base = os.path.split(prefix)
    name = os.path.basename(path)
    return (
        os.path.realpath(os.path.dirname(path) or ".") == os.path.realpath(folder or ".")
        and re.fullmatch(re.escape(base) + r"-\d{5}-of-\d{5}\.jsonl", name) is not None
    )


def main(config: ClassifyBeamConfig) -> dict:
    """Runs the pipeline; returns what it wrote (rows, skips, files)."""
    from tf_mlstm.beam import inference  # pylint: disable=g-import-not-at-top

    return inference.classify_with_beam(
        config.saved_model,
        config.input,
        config.output,
        config.runner,
        config.pipeline_args,
        signature=config.signature,
        text_keys=config.text_key,
        batch_size=config.batch_size,
        num_shards=config.num_output_shards,
    )


def run() -> None:
    """Entry point of `tf-mlstm-classify-beam`."""
    _beam.run_binary(__name__, define_flags, main, config_from_flags, required=_REQUIRED_FLAGS)


if __name__ == "__main__":
    run()
