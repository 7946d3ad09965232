"""The record fields every binary looks in for text, in one order.

Apart from the readers (which import TensorFlow for its filesystems) so that
flag definitions can name the default without loading TensorFlow.
"""

# Tried in order, the first present one wins: Amazon reviews (`reviewText`),
# IMDB and most JSON/CSV sets (`text`), SST (`sentence`). One order for every
# binary, so one record reads the same everywhere.
TEXT_KEYS = ("reviewText", "text", "sentence")
