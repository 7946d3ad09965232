"""Apache Beam pipelines: the corpus converter and batch classification on any Beam runner.

Installed with the `beam` extra (`pip install tf_mlstm[beam]`). Nothing
outside this package imports it, and it imports Apache Beam only in its
modules, so `import tf_mlstm` and the single-process binaries never load
Beam; `tf-mlstm-make-tfrecords --runner=...` and
`tf-mlstm-classify --runner=...` do.
"""
