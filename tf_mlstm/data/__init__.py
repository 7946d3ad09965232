"""Text normalization, corpus readers, TFRecord schema and tf.data input pipelines."""
