"""Turns parsed absl flags into one frozen, validated config dataclass."""

import dataclasses

from absl import app
from absl import flags


def config_from_flags(config_class, flag_values=flags.FLAGS):
    """Builds `config_class` from the flags named like its fields, then validates it.

    Args:
      config_class: a dataclass whose fields all have flags of the same name.
      flag_values: the parsed flags.

    Returns:
      The validated config.

    Raises:
      app.UsageError: a flag value or combination is invalid (`validate`'s message).
    """
    values = {f.name: flag_values[f.name].value for f in dataclasses.fields(config_class)}
    try:
        return config_class(**values).validate()
    except ValueError as e:
        raise app.UsageError(str(e)) from None
