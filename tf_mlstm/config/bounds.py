"""The largest value each size, length and count a user gives may take: one table for all.

`LARGEST` bounds one value, `PRODUCTS` the tensors several settings shape together.

Example:

>>> from tf_mlstm.config import bounds
>>> bounds.check_sizes({"batch_size": 32, "seq_length": 1_000_000_000})
Traceback (most recent call last):
...
tf_mlstm.errors.InvalidValueError: seq_length must be at most 1048576, got 1000000000.
"""

import dataclasses
import numbers
from collections.abc import Mapping

from tf_mlstm import errors
from tf_mlstm.errors import setting_name as _name

# === One value ===

# Bytes of one window: a truncated-BPTT step of training (`seq_length`), one
# model call when scoring or featurizing (`window`), one fine-tuned text
# (`max_length`). The recurrence steps through a window byte by byte and
# training keeps every byte's gate activations (4 x hidden_size floats a row)
# for the backward pass: at a megabyte (a thousand reviews in one window) that
# is gigabytes a row already at 256 units; the rows and the width are bounded
# with it in `PRODUCTS`.
WINDOW_BYTES = 2**20

# Rows of one step or model call. Training's batch is global (split over the
# replicas): 32 times the paper's 32,768 rows (128 GPUs x 256 rows) leaves
# room for 4,096 GPUs; the rows x window tensor has its own bound below.
ROWS = 2**20

# The mLSTM's recurrent kernel is [hidden_size, 4 x hidden_size]: at 16,384
# units 2^30 elements (4 GiB in float32, three times that with Adam's
# moments), the widest power of two whose kernel TensorFlow and XLA still
# index in int32 (32,768 units would be 2^32). Four times the paper's 4,096
# units. The embedding (its kernel [embedding_size, 4 x hidden_size]) and a
# fine-tuned head's hidden layer ([features x hidden_size, head_hidden]) are
# widths of the same kind.
WIDTH = 2**14

# Bytes generated one at a time, a loop step each (a megabyte is a thousand
# reviews, minutes to hours of sampling), and characters drawn one heat-map
# cell each; the samples x length output has its own bound below.
GENERATED_BYTES = 2**20

# A whole text held in memory: one input record when converting, one string of
# a serving request. Either travels in one protobuf message (a tf.train.Example
# record, a request), which cannot exceed 2 GiB; 1 GiB leaves room for the
# rest of the message.
TEXT_BYTES = 2**30

# Shard files are named with five-digit numbers (train-00003-of-00100,
# <output>-00003-of-00100.jsonl), so that sorting the names sorts the shards
# and finds every output of a run.
SHARDS = 10**5 - 1

# Documents the training input holds at once to shuffle: at a review's few
# KiB, 16 million of them are tens of GiB of host memory.
SHUFFLE_DOCUMENTS = 2**24

# Batches of every periodic validation (each a step of work, at every
# `eval_every_steps`): a million is far more than the validation split of the
# paper's 40 GB corpus holds at any batch.
EVAL_BATCHES = 2**20

LARGEST = {
    "seq_length": WINDOW_BYTES,
    "window": WINDOW_BYTES,
    "max_length": WINDOW_BYTES,
    "batch_size": ROWS,
    "lr_base_batch": ROWS,
    "num_samples": ROWS,
    "chunk_texts": ROWS,  # texts read, classified and held with their scores at a time
    "hidden_size": WIDTH,
    "embedding_size": WIDTH,
    "head_hidden": WIDTH,
    "length": GENERATED_BYTES,
    "sample_length": GENERATED_BYTES,
    "max_generate_length": GENERATED_BYTES,
    "max_chars": GENERATED_BYTES,
    "max_document_bytes": TEXT_BYTES,
    "max_text_bytes": TEXT_BYTES,
    "num_shards": SHARDS,
    "num_output_shards": SHARDS,
    "shuffle_buffer": SHUFFLE_DOCUMENTS,
    "eval_batches": EVAL_BATCHES,
}
"""Setting name -> the largest value it may take, in every config, binary and function."""

# === Products: one tensor shaped by several settings ===


@dataclasses.dataclass(frozen=True)
class Product:
    """Settings whose product (times `factor`) sizes one tensor, bounded by int32.

    Attributes:
      names: the settings multiplied.
      factor: a constant factor of the tensor's size (4 gates).
      tensor: the tensor, for the message.

    Example:

    >>> from tf_mlstm.config import bounds
    >>> [(p.names, p.factor) for p in bounds.PRODUCTS if "hidden_size" in p.names]
    [(('seq_length', 'hidden_size'), 4)]
    """

    names: tuple[str, ...]
    factor: int
    tensor: str


PRODUCTS = (
    # A global batch (training's) bounds every replica's share of it.
    Product(("batch_size", "seq_length"), 1, "a step's bytes and targets"),
    Product(("batch_size", "window"), 1, "a model call's framed bytes"),
    Product(("batch_size", "max_length"), 1, "a fine-tuning step's bytes"),
    Product(("num_samples", "length"), 1, "the sampled bytes"),
    # The backward pass keeps each row's gate activations over its window: at
    # int32 elements they are 8 GiB of float32 a row (with the other saved
    # states more), so a replica, which has at least one row, holds a handful.
    Product(("seq_length", "hidden_size"), 4, "one row's gate activations"),
)
"""The products bounded by `errors.INT32_MAX`, checked where all their settings are given."""


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_at_most(name: str, value: int, largest: int) -> None:
    """Raises one line when `value` of the setting `name` is above `largest`.

    Raises:
      errors.InvalidValueError: "`name` must be at most `largest`, got `value`."
    """
    if value > largest:
        raise errors.InvalidValueError(f"{_name(name)} must be at most {largest}, got {value}.")


def check_sizes(values: Mapping[str, object]) -> None:
    """Refuses the first integer past its bound, then the first product past int32.

    Args:
      values: setting name -> value; non-integers and incomplete products are passed over.

    Raises:
      errors.InvalidValueError: one line naming the setting, the value and the bound.
    """
    ints = {name: value for name, value in values.items() if _is_int(value)}
    for name, value in ints.items():
        if name in LARGEST:
            check_at_most(name, value, LARGEST[name])
        errors.check_int32(_name(name), value)
    for product in PRODUCTS:
        if not all(name in ints and ints[name] > 0 for name in product.names):
            continue
        factors = [ints[name] for name in product.names]
        total = product.factor
        for factor in factors:
            total *= factor
        if total > errors.INT32_MAX:
            named = [_name(name) for name in product.names]
            given = [str(factor) for factor in factors]
            if product.factor != 1:
                named.insert(0, str(product.factor))
                given.insert(0, str(product.factor))
            raise errors.InvalidValueError(
                f"{' x '.join(named)} must be at most {errors.INT32_MAX} ({product.tensor}: "
                f"the elements of one tensor), got {' x '.join(given)} = {total}."
            )


def check_config_sizes(config) -> None:
    """`check_sizes` of a config dataclass's fields.

    Raises:
      errors.InvalidValueError: as `check_sizes`.
    """
    check_sizes({field.name: getattr(config, field.name) for field in dataclasses.fields(config)})
