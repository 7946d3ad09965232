"""What one conversion does (`tf-mlstm-make-tfrecords`), as a TensorFlow-free dataclass."""

import dataclasses
import os

from tf_mlstm import errors
from tf_mlstm.config.bounds import check_config_sizes
from tf_mlstm.data.fields import DEFAULT_MAX_DOCUMENT_BYTES
from tf_mlstm.data.fields import STATS_FILE
from tf_mlstm.data.fields import TEXT_KEYS
from tf_mlstm.data.fields import TEXT_MODES
from tf_mlstm.data.fields import split_keys
from tf_mlstm.errors import setting_name as _name
from tf_mlstm.progress import DEFAULT_LOG_INTERVAL_S


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    """Everything one conversion needs. Field names match the flags.

    Attributes:
        input: Comma-separated files and globs: .jsonl/.json, .csv, .tsv, else plain text; .gz too.
        output_dir: Directory for the TFRecord shards and, by default, the stats file.
        text_key: JSON keys / CSV columns of the text, tried in order: the first present wins.
        label_key: Key/column of an integer label (0/1, pos/neg); records without one are skipped.
        rating_key: Key/column of a numeric rating. Unset: 'overall' or 'rating' if present.
        text_mode: Plain-text inputs: one document per line, or per file.
        num_shards: Number of train shards.
        split: Relative sizes of the train, validation and test splits: three positive integers.
        gzip: Write GZIP-compressed shards (*.tfrecord.gz).
        max_documents: Stop after this many documents; 0 converts all.
        interleave_inputs: Spread every input file over the whole output; false: one after another.
        stats_file: JSON stats file. Unset: <output_dir>/stats.json.
        overwrite: Replace the shards and stats of a non-empty `output_dir`; else it is refused.
        max_document_bytes: Longest input record in bytes; longer ones are skipped and counted.
        progress_interval_s: Seconds between progress lines when stderr is not a terminal.

    Raises:
        ValueError: If a field is out of range.

    Example:

    >>> from tf_mlstm.config import ConvertConfig
    >>> config = ConvertConfig(input="reviews/*.json.gz", output_dir="shards", num_shards=4)
    >>> config.split, config.text_keys
    ((1000, 1, 1), ('reviewText', 'text', 'sentence'))
    """

    input: str
    output_dir: str
    text_key: tuple = TEXT_KEYS  # or one comma-separated string
    label_key: str | None = None
    rating_key: str | None = None
    text_mode: str = "line"
    num_shards: int = 100
    split: tuple[int, int, int] = (1000, 1, 1)
    gzip: bool = False
    max_documents: int = 0
    interleave_inputs: bool = True
    stats_file: str | None = None
    overwrite: bool = False
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
    progress_interval_s: float = DEFAULT_LOG_INTERVAL_S

    def __post_init__(self):
        check_config_sizes(self)
        if not self.input.strip(" ,"):
            raise errors.InvalidValueError(f"{_name('input')} must name at least one file or glob")
        if not self.output_dir:
            raise errors.InvalidValueError(f"{_name('output_dir')} must not be empty")
        if not self.text_keys:
            raise errors.InvalidValueError(f"{_name('text_key')} must name at least one key")
        if self.text_mode not in TEXT_MODES:
            raise errors.InvalidValueError(
                f"{_name('text_mode')} must be one of {TEXT_MODES}, got {self.text_mode!r}"
            )
        if self.num_shards < 1:
            raise errors.InvalidValueError(
                f"{_name('num_shards')} must be >= 1, got {self.num_shards}"
            )
        if len(self.split) != 3 or not all(
            isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in self.split
        ):
            raise errors.InvalidValueError(
                f"{_name('split')} must be three positive integers (train, validation, test), "
                f"got {self.split}"
            )
        if self.max_documents < 0:
            raise errors.InvalidValueError(
                f"{_name('max_documents')} must be >= 0, got {self.max_documents}"
            )
        if self.max_document_bytes < 1:
            raise errors.InvalidValueError(
                f"{_name('max_document_bytes')} must be >= 1, got {self.max_document_bytes}"
            )
        if self.progress_interval_s <= 0:
            raise errors.InvalidValueError(
                f"{_name('progress_interval_s')} must be > 0, got {self.progress_interval_s}"
            )

    @property
    def text_keys(self) -> tuple[str, ...]:
        """The `text_key` list as a tuple, blanks left out."""
        return split_keys(self.text_key)

    @property
    def stats_path(self) -> str:
        """The stats file to write."""
        return self.stats_file or os.path.join(self.output_dir, STATS_FILE)
