r"""tf-mlstm-make-tfrecords: convert a review corpus into sharded train/validation/test TFRecords.

    tf-mlstm-make-tfrecords \
        --input='reviews/*.json.gz' --output_dir=data/amazon --num_shards=1000
    tf-mlstm-make-tfrecords --input='reviews/*.json.gz' --output_dir=data/amazon \
        --runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing

Reads JSON lines, CSV/TSV with a header or plain text (gzip or not),
normalizes the text and writes `{split}-NNNNN-of-NNNNN.tfrecord` shards and a
`stats.json` of records per split and skips by reason. A non-empty output
folder is refused unless `--overwrite`; the shards are moved in only once all
are written. With `--runner` the same conversion runs as an Apache Beam
pipeline (`pip install tf_mlstm[beam]`), and every flag this binary does not
define goes to Beam; both put each document in the same shard.
"""

import dataclasses

try:
    import resource
except ImportError:  # Not POSIX: no open-file limit to raise.
    resource = None

from absl import app
from absl import flags

from tf_mlstm import errors
from tf_mlstm import preflight
from tf_mlstm.cli import _beam
from tf_mlstm.cli import _flags
from tf_mlstm.config import ConvertConfig
from tf_mlstm.data import fields

# TensorFlow (through tf_mlstm.data.convert) is imported only once the flags
# and the config have passed their checks, so --help and usage errors answer
# at once, and TensorFlow starts quietly (`_main.quiet_tensorflow`).

_REQUIRED_FLAGS = ("input", "output_dir")


@dataclasses.dataclass(frozen=True)
class BeamConversion:
    """A conversion to run as a Beam pipeline (`--runner`).

    Attributes:
        config: The conversion.
        runner: The Beam runner's name.
        pipeline_args: The flags this binary does not define, for Beam.

    Example:

    >>> from tf_mlstm.cli.make_tfrecords import BeamConversion
    >>> from tf_mlstm.config import ConvertConfig
    >>> job = BeamConversion(
    ...     ConvertConfig(input="reviews.jsonl", output_dir="shards"),
    ...     runner="DirectRunner",
    ...     pipeline_args=("--direct_num_workers=2",),
    ... )
    >>> job.runner, job.config.num_shards
    ('DirectRunner', 100)
    """

    config: ConvertConfig
    runner: str
    pipeline_args: tuple[str, ...] = ()


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines this binary's flags from `ConvertConfig`; `run` marks the required ones.

    Args:
        flag_values: Where to define them (tests pass a fresh `FlagValues`).
    """
    fv = flag_values
    defaults = ConvertConfig(input="-", output_dir="-")
    _flags.define_fields(
        defaults, ("input", "output_dir"), no_default=_REQUIRED_FLAGS, flag_values=fv
    )
    _flags.define_text_key(_flags.field_help(ConvertConfig, "text_key"), flag_values=fv)
    _flags.define_fields(
        defaults,
        (
            "label_key",
            "rating_key",
            "text_mode",
            "num_shards",
            "split",
            "gzip",
            "interleave_inputs",
            "max_documents",
            "overwrite",
            "max_document_bytes",
            "stats_file",
        ),
        choices={"text_mode": fields.TEXT_MODES},
        lower_bounds={"num_shards": 1, "max_documents": 0, "max_document_bytes": 1},
        flag_values=fv,
    )
    flags.DEFINE_string(
        "runner",
        None,
        "Run the conversion as an Apache Beam pipeline on this runner (DirectRunner, "
        "DataflowRunner, FlinkRunner, SparkRunner, ...; needs pip install tf_mlstm[beam]); "
        "every flag this binary does not define is then passed to Beam as a pipeline option "
        "(--project, --temp_location, --flink_master, --direct_num_workers, ...). Unset: the "
        "single-process converter.",
        flag_values=fv,
    )


def parse_split(value: list[str] | list[int]) -> tuple[int, int, int]:
    """Parses `--split`.

    Args:
        value: The --split list, for example ["1000", "1", "1"] (its default: ints).

    Returns:
        The (train, validation, test) weights.

    Raises:
        app.UsageError: If `value` is not three positive integers.
    """
    pieces = [str(piece).strip() for piece in value]
    if len(pieces) != 3 or not all(piece.isdecimal() and int(piece) > 0 for piece in pieces):
        raise app.UsageError(
            f"--split must be three positive integers train,validation,test "
            f"(e.g. 1000,1,1), got {','.join(pieces)!r}"
        )
    return tuple(int(piece) for piece in pieces)


def config_from_flags(flag_values: flags.FlagValues) -> ConvertConfig:
    """Validates the parsed flags into the conversion config (each flag its field's).

    Args:
        flag_values: Parsed flags, as defined by `define_flags`.

    Returns:
        The frozen config.

    Raises:
        app.UsageError: If a flag value is invalid.
    """
    text_keys = _flags.text_keys(flag_values.text_key)
    if not text_keys:
        raise app.UsageError("--text_key must name at least one key")
    preflight.refuse_existing("--output_dir", flag_values.output_dir, flag_values.overwrite)
    values = {
        field.name: flag_values[field.name].value
        for field in dataclasses.fields(ConvertConfig)
        if field.name in flag_values
    }
    try:
        return ConvertConfig(
            **{
                **values,
                "text_key": text_keys,
                "split": parse_split(flag_values.split),
                "label_key": flag_values.label_key or None,
                "rating_key": flag_values.rating_key or None,
                "stats_file": flag_values.stats_file or None,
            }
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def check_before_work(flag_values: flags.FlagValues) -> None:
    """The inputs and the outputs, before TensorFlow starts (`preflight`)."""
    preflight.check_input_files("input", flag_values.input)
    preflight.check_output_dir("output_dir", flag_values.output_dir)
    preflight.check_output_file("stats_file", flag_values.stats_file)


def job_from_flags(
    flag_values: flags.FlagValues, pipeline_args: list[str] | tuple[str, ...] = ()
) -> ConvertConfig | BeamConversion:
    """The conversion of the parsed flags: single-process, or a Beam pipeline with `--runner`.

    Args:
        flag_values: Parsed flags, as defined by `define_flags`.
        pipeline_args: The flags the binary did not define, for Beam.

    Returns:
        A `ConvertConfig`, or with `--runner` a `BeamConversion`.

    Raises:
        app.UsageError: An invalid flag, `--runner` without Apache Beam, or a
            flag that is no Beam pipeline option either.
    """
    config = config_from_flags(flag_values)
    if not flag_values.runner:
        return config
    _beam.check_pipeline_args(flag_values.runner, pipeline_args)
    return BeamConversion(config, flag_values.runner, tuple(pipeline_args))


def split_pipeline_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """`_beam.split_pipeline_args` with this binary's flags."""
    return _beam.split_pipeline_args(argv, define_flags)


def main(config: ConvertConfig | BeamConversion) -> None:
    """Converts the corpus (on a Beam runner for a `BeamConversion`)."""
    _raise_open_file_limit()
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tf_mlstm.data import convert  # pylint: disable=g-import-not-at-top

    try:
        if isinstance(config, BeamConversion):
            from tf_mlstm.beam import convert as beam_convert  # pylint: disable=g-import-not-at-top

            beam_convert.convert_with_beam(config.config, config.runner, config.pipeline_args)
        else:
            convert.convert(config)
    except tf.errors.OpError as e:
        # TensorFlow is used here only for file I/O, so its errors are file
        # errors (permission denied, ...): the user's to fix.
        raise errors.UserError(errors.one_line(e)) from e


def _raise_open_file_limit() -> None:
    """Raises the soft open-file limit to the hard one.

    1000 open shards exceed the usual soft limit of 1024 files, and the writer's
    fallback (part files) costs a second pass over the output.
    """
    if resource is None:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # Some systems cap below the hard limit; the writer copes.


def run() -> None:
    """Entry point of `tf-mlstm-make-tfrecords`."""
    _beam.run_binary(__name__, define_flags, main, job_from_flags, required=_REQUIRED_FLAGS)


if __name__ == "__main__":
    run()
