"""tf_mlstm: byte-level multiplicative LSTM language models on review text."""
