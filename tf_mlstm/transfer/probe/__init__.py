"""Linear probing: a logistic regression on a language model's features.

One job to a module: `selection` (feature kinds and C), `fit` (the C sweep), `neuron` (the
sentiment neuron), `logistic` (the fitted classifier), `file_format` (classifier.json),
`threshold` (one feature's cut). Nothing is imported here, so a binary reading
`neuron.SENTIMENTS` for its flags loads neither TensorFlow nor scikit-learn.
"""
