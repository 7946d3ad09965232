"""Flag groups that several binaries share, defined once.

One definition means one name, one help text and one default everywhere: a
record reads the same in every binary.
"""

from absl import flags

# The text fields tried in order, the first present one wins: Amazon reviews
# (`reviewText`), IMDB and most JSON/CSV sets (`text`), SST (`sentence`).
TEXT_KEYS = ("reviewText", "text", "sentence")


def define_text_key(help_text="Keys/columns holding the text, tried in order."):
    """`--text_key`: a comma-separated list, `TEXT_KEYS` by default."""
    flags.DEFINE_list("text_key", list(TEXT_KEYS), help_text)


def text_keys(values):
    """The keys of a `--text_key` list value, blanks left out, as a tuple."""
    return tuple(key.strip() for key in values if key.strip())
