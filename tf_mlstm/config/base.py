"""What every config dataclass shares: field docs, type checks, range checks, JSON.

A field's entry in its class's `Attributes:` is its flag's `--help` (`field_help`).
"""

import dataclasses
import inspect
import json
import math
import numbers
import re
from typing import Self
from typing import TypeVar

from tf_mlstm import errors
from tf_mlstm.config import bounds
from tf_mlstm.errors import setting_name as _name

_SETTING = re.compile(r"`(\w+)`")

T = TypeVar("T")


def field_docs(config_class: type) -> dict[str, str]:
    """{field: its documentation on one line} from the `Attributes:` of `config_class` and bases."""
    docs = {}
    for klass in reversed(config_class.__mro__):
        docs.update(_attributes(klass.__dict__.get("__doc__") or ""))
    return docs


def _attributes(doc):
    lines = inspect.cleandoc(doc).split("\n")
    if "Attributes:" not in (line.strip() for line in lines):
        return {}
    start = [line.strip() for line in lines].index("Attributes:") + 1
    entries, name, indent = {}, None, None
    for line in lines[start:]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:
            break  # the next section
        if depth == indent:
            name, _, text = line.strip().partition(":")
            entries[name] = text.strip()
        else:
            entries[name] += " " + line.strip()
    return entries


def field_doc(config_class: type, name: str) -> str:
    """The documentation of `config_class`'s field `name`, on one line.

    Raises:
      KeyError: the field is not documented.
    """
    docs = field_docs(config_class)
    if name not in docs:
        raise KeyError(f"{config_class.__name__}.{name} has no entry in its Attributes")
    return docs[name]


def field_help(config_class: type, name: str) -> str:
    """The `--help` text of `--name`: the field's documentation, `field` written as --field."""
    fields = {field.name for field in dataclasses.fields(config_class)}
    return _SETTING.sub(
        lambda m: f"--{m.group(1)}" if m.group(1) in fields else m.group(0),
        field_doc(config_class, name),
    )


# The scalar field types a config checks when it is constructed, and their names.
_SCALAR_TYPES = {bool: "True or False", int: "an int", float: "a number", str: "a str"}


def _accepts(expected, value):
    if expected is bool:
        return isinstance(value, bool)
    # NumPy's scalars count (a size computed from an array is a numpy.int64).
    if expected is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if expected is float:  # an int is a number too
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if expected is str:
        return isinstance(value, str)
    return None


class CheckedFields:
    """Checks the scalar fields' types when a config dataclass is constructed.

    Example:

    >>> from tf_mlstm.config import TrainConfig
    >>> TrainConfig(embedding_size="64")
    Traceback (most recent call last):
    ...
    tf_mlstm.errors.InvalidValueError: TrainConfig: embedding_size must be an int, got '64'.
    """

    def __post_init__(self):
        for field in dataclasses.fields(self):
            expected = field.type
            options = getattr(expected, "__args__", None)
            if type(expected).__name__ == "UnionType" and options:
                choices = [t for t in options if t is not type(None)]
                value = getattr(self, field.name)
                if value is None or len(choices) != 1:
                    continue
                expected = choices[0]
            value = getattr(self, field.name)
            if _accepts(expected, value) is False:
                raise errors.InvalidValueError(
                    f"{type(self).__name__}: {field.name} must be {_SCALAR_TYPES[expected]}, "
                    f"got {value!r}."
                )


class JsonConfig(CheckedFields):
    """JSON round trip for frozen config dataclasses.

    Example:

    >>> from tf_mlstm.config import TrainConfig
    >>> config = TrainConfig(hidden_size=64)
    >>> TrainConfig.from_json(config.to_json()) == config
    True
    """

    def to_json(self) -> str:
        """The config as sorted, indented JSON."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    # Integer fields that may be negative, with their smallest value
    # (num_gpus: -1 = all visible). Every other integer field is a count, a
    # size, a step or a seed: >= 0.
    NEGATIVE_INTS = {"num_gpus": -1}

    def check_numbers(self) -> None:
        """Raises ValueError naming the first number field not finite or below its lowest."""
        bounds.check_config_sizes(self)
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise errors.InvalidValueError(
                    f"{_name(field.name)} must be a finite number, got {value}."
                )
            if isinstance(value, int) and not isinstance(value, bool):
                lowest = self.NEGATIVE_INTS.get(field.name, 0)
                if value < lowest:
                    raise errors.InvalidValueError(
                        f"{_name(field.name)} must be >= {lowest}, got {value}."
                    )

    def check_positive(self, names) -> None:
        """Raises ValueError naming the first of the fields `names` that is not > 0."""
        for name in names:
            if not getattr(self, name) > 0:
                raise errors.InvalidValueError(
                    f"{_name(name)} must be positive, got {getattr(self, name)}."
                )

    def check_choices(self, choices) -> None:
        """Raises ValueError naming the first field whose value is not among its choices.

        Args:
          choices: field name -> the values it may take.
        """
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise errors.InvalidValueError(
                    f"{_name(name)} must be one of {', '.join(allowed)}; "
                    f"got {getattr(self, name)!r}."
                )

    # Field names a config file written before a rename holds: old -> new.
    RENAMED_FIELDS = {}

    @classmethod
    def upgrade_saved(cls, values: dict) -> dict:
        """A saved config's dict with the names `RENAMED_FIELDS` replaced (new ones win)."""
        upgraded = {cls.RENAMED_FIELDS.get(k, k): v for k, v in values.items()}
        upgraded.update({k: v for k, v in values.items() if k not in cls.RENAMED_FIELDS})
        return upgraded

    @classmethod
    def from_json(cls, text: str) -> Self:
        """Builds a config from `to_json` output, ignoring unknown keys."""
        values = cls.upgrade_saved(json.loads(text))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def group_of(config, group: type[T]) -> T:
    """The fields of `group` (a fields dataclass) taken from `config`, as a `group`."""
    return group(**{f.name: getattr(config, f.name) for f in dataclasses.fields(group)})
