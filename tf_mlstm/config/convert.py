"""What one conversion does (`tf-mlstm-make-tfrecords`), as a TensorFlow-free dataclass.

Apart from `tf_mlstm.data.convert` (which imports TensorFlow) so that the
binary checks its flags, and a notebook builds a config, without starting
TensorFlow.
"""

import dataclasses
import os

from tf_mlstm import errors
from tf_mlstm.data.fields import DEFAULT_MAX_DOCUMENT_BYTES
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import TEXT_MODES
from tf_mlstm.progress import DEFAULT_LOG_INTERVAL_S


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    """Everything one conversion needs.

    Attributes:
        inputs: Comma-separated input paths and globs (see
            `readers.expand_inputs`).
        output_dir: Directory for the shards and, by default, the stats file.
        text_keys: JSON keys / CSV columns of the text, first present wins.
        label_key: Key of an integer label; None for no labels.
        rating_key: Key of a rating; None reads "overall" or "rating" if present.
        text_mode: Plain-text files: "line" (a document per line) or "file".
        num_shards: Number of train shards.
        split_weights: Positive weights (train, validation, test).
        gzip: Write GZIP-compressed shards.
        max_documents: Stop after this many documents; 0 for all.
        interleave: Spread every input file over the whole output (see
            `readers.read_documents`) rather than one file after another.
        stats_file: Where to write the JSON stats; None for
            `<output_dir>/stats.json`.
        overwrite: Replace the shards and stats of a non-empty output folder
            (other files there are left alone); otherwise such a folder is
            refused.
        max_document_bytes: Longest input record, in bytes (see
            `readers.read_documents`); longer ones are skipped and counted.
        progress_interval_s: Seconds between progress log lines when stderr
            is not a terminal (on one, a bar is redrawn in place).

    Raises:
        ValueError: If a field is out of range.

    Example:

    >>> from tf_mlstm.config import ConvertConfig
    >>> config = ConvertConfig(inputs="reviews/*.json.gz", output_dir="shards", num_shards=4)
    >>> config.split_weights, config.text_keys
    ((1000, 1, 1), ('reviewText', 'text', 'sentence'))
    """

    inputs: str
    output_dir: str
    text_keys: tuple[str, ...] = TEXT_KEYS
    label_key: str | None = None
    rating_key: str | None = None
    text_mode: str = "line"
    num_shards: int = 100
    split_weights: tuple[int, int, int] = (1000, 1, 1)
    gzip: bool = False
    max_documents: int = 0
    interleave: bool = True
    stats_file: str | None = None
    overwrite: bool = False
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
    progress_interval_s: float = DEFAULT_LOG_INTERVAL_S

    def __post_init__(self):
        if not self.inputs.strip(" ,"):
            raise errors.InvalidValueError("inputs must name at least one file or glob")
        if not self.output_dir:
            raise errors.InvalidValueError("output_dir must not be empty")
        if not self.text_keys or not all(self.text_keys):
            raise errors.InvalidValueError(
                f"text_keys must be non-empty names, got {self.text_keys}"
            )
        if self.text_mode not in TEXT_MODES:
            raise errors.InvalidValueError(
                f"text_mode must be one of {TEXT_MODES}, got {self.text_mode!r}"
            )
        if self.num_shards < 1:
            raise errors.InvalidValueError(f"num_shards must be >= 1, got {self.num_shards}")
        if len(self.split_weights) != 3 or not all(w > 0 for w in self.split_weights):
            raise errors.InvalidValueError(
                f"split_weights must be three positive integers (train, validation, test), "
                f"got {self.split_weights}"
            )
        if self.max_documents < 0:
            raise errors.InvalidValueError(f"max_documents must be >= 0, got {self.max_documents}")
        if self.max_document_bytes < 1:
            raise errors.InvalidValueError(
                f"max_document_bytes must be >= 1, got {self.max_document_bytes}"
            )
        if self.progress_interval_s <= 0:
            raise errors.InvalidValueError(
                f"progress_interval_s must be > 0, got {self.progress_interval_s}"
            )

    @property
    def stats_path(self) -> str:
        """The stats file to write."""
        return self.stats_file or os.path.join(self.output_dir, "stats.json")
