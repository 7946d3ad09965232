"""Apache Beam pipelines: the corpus converter and batch classification on any Beam runner.

Installed with the `beam` extra (`pip install tf_mlstm[beam]`). Only the
binaries import this package, and only with `--runner` (`tf-mlstm-make-tfrecords
--runner=...`, `tf-mlstm-classify-beam`), so `import tf_mlstm` and the
single-process binaries never load Beam.

Importing it imports Apache Beam with its import-time notices silenced (the
Google Cloud client libraries it finds missing, which only Dataflow needs
and which Dataflow reports itself), so a binary's user error stays its only
line.
"""

import logging as _logging

_root = _logging.getLogger()
_level = _root.level
_root.setLevel(_logging.ERROR)
try:
    import apache_beam  # noqa: F401  # pylint: disable=unused-import
finally:
    _root.setLevel(_level)
