"""The embedded demo corpus: a few hundred short reviews, so `tf-mlstm-train` runs with no flags."""

import os

DEMO_CORPUS = os.path.join(os.path.dirname(__file__), "demo_corpus.txt")
# Proportions that leave the small corpus a validation and a test split.
DEMO_SPLIT = (16, 1, 1)
DEMO_SHARDS = 4
