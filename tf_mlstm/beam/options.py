"""Beam pipeline options from the flags a binary did not define; an unknown flag is refused."""

import logging
from collections.abc import Sequence

from apache_beam.options import pipeline_options as beam_options

from tf_mlstm import errors


def pipeline_options(runner: str, args: Sequence[str]) -> beam_options.PipelineOptions:
    """The pipeline options of `--runner=runner` and the passed-through `args`.

    Args:
        runner: A Beam runner's name ("DirectRunner", "DataflowRunner", ...).
        args: The command-line flags the binary did not define.

    Returns:
        The `PipelineOptions`.

    Raises:
        ValueError: An argument that is no Beam pipeline option (named).
    """
    args = [f"--runner={runner}", *args]
    # What PipelineOptions.get_all_options parses with, minus its habit of
    # discarding what it does not know with a warning.
    parser = beam_options._BeamArgumentParser(allow_abbrev=False)
    for cls in beam_options.PipelineOptions.__subclasses__():
        cls._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(args)
    flags = [arg for arg in unknown if arg.startswith("-")]
    if flags:
        raise errors.InvalidValueError(
            f"unknown flag {flags[0].split('=')[0]}: neither a flag of this binary nor a Beam "
            "pipeline option"
        )
    # Beam's INFO lines (each local worker's start, bundles, shutdown) would
    # bury the binary's own log; set the "apache_beam" logger's level to see them.
    beam_logger = logging.getLogger("apache_beam")
    if beam_logger.level == logging.NOTSET:
        beam_logger.setLevel(logging.WARNING)
    return beam_options.PipelineOptions(args)
