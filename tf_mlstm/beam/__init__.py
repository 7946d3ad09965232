"""Apache Beam pipelines: the corpus converter and batch classification on any Beam runner.

Installed with the `beam` extra; only the binaries import it, with `--runner`. Beam's
import-time notices are silenced here, so a binary's user error stays its only line.
"""

import logging as _logging

_root = _logging.getLogger()
_level = _root.level
_root.setLevel(_logging.ERROR)
try:
    import apache_beam  # noqa: F401  # pylint: disable=unused-import
finally:
    _root.setLevel(_level)
