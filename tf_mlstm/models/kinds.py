"""The feature kinds of a text: what featurization computes and a head reads.

Defined with the other choice lists in `tf_mlstm.config.choices` (no
TensorFlow there, so that the binaries check `--features` at once); named
here too for the model code that computes and reads them.
"""

from tf_mlstm.config.choices import CELL_KINDS  # noqa: F401
from tf_mlstm.config.choices import FEATURE_KINDS  # noqa: F401
from tf_mlstm.config.choices import HIDDEN_KINDS  # noqa: F401
from tf_mlstm.config.choices import SEQUENCE_KINDS  # noqa: F401
