"""Apache Beam pipelines: the corpus converter and batch classification on any Beam runner.

Installed with the `beam` extra. Only the binaries import it, and only with
`--runner`, so `import tf_mlstm` never loads Beam. Beam's import-time notices
(missing Google Cloud clients only Dataflow needs) are silenced here, so a
binary's user error stays its only line.
"""

import logging as _logging

_root = _logging.getLogger()
_level = _root.level
_root.setLevel(_logging.ERROR)
try:
    import apache_beam  # noqa: F401  # pylint: disable=unused-import
finally:
    _root.setLevel(_level)
