"""Linear probing: a logistic regression on a language model's features.

The room of the probe, one job to a module, each layer importing only those
below it (pyproject.toml's contracts check it):

- `selection`: which feature kinds, and which C, by validation or
  cross-validation;
- `fit`: the C sweep (`solver`, the project's own full-batch solver, or
  scikit-learn's), the standardizers, the multi-label thresholds: a
  `logistic.LogisticClassifier` and the sweep that chose it;
- `neuron`: the sentiment neuron, found among the model's units when a
  classifier is fitted and read back from classifier.json by
  `tf-mlstm-generate` and `tf-mlstm-visualize`;
- `logistic`: the fitted classifier, its predictions and metrics;
- `file_format`: classifier.json, every version ever written;
- `threshold`: one feature's cut, the classifier a neuron is.

Nothing is imported here, so that a binary reading `neuron.SENTIMENTS` while
defining its flags loads neither TensorFlow nor scikit-learn.
"""
