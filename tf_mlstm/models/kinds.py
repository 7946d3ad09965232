"""The feature kinds of a text, defined in `tf_mlstm.config.choices` (TensorFlow-free)."""

from tf_mlstm.config.choices import CELL_KINDS  # noqa: F401
from tf_mlstm.config.choices import FEATURE_KINDS  # noqa: F401
from tf_mlstm.config.choices import HIDDEN_KINDS  # noqa: F401
from tf_mlstm.config.choices import SEQUENCE_KINDS  # noqa: F401
