"""`BytePreprocessor`: the one place text becomes the byte ids the mLSTM reads.

`frame` on Python lists and `call` on a `tf.string` batch agree exactly.
"""

from typing import Any
from typing import Self

import keras
import numpy as np

from tf_mlstm.data import framing
from tf_mlstm.data.text import DOC_START
from tf_mlstm.data.text import check_texts
from tf_mlstm.data.text import normalize_text
from tf_mlstm.data.text import normalize_text_tf


@keras.saving.register_keras_serializable(package="tf_mlstm")
class BytePreprocessor(keras.layers.Layer):
    """Texts -> a `framing.FramedIds` batch (ids, valid, lengths, truncated).

    Args:
      padding: "right" or "left": the side the padding goes on.
      max_length: framed bytes per row at most (None: no limit).
      pad_to_multiple: the row width is a multiple of this.
      pad_id: the byte value of the padding.
      normalize: normalize the texts first (False: they already are).
      **kwargs: base layer arguments (name, ...).

    Example:

    >>> import tensorflow as tf
    >>> from tf_mlstm.models.preprocessor import BytePreprocessor
    >>> preprocessor = BytePreprocessor.for_classifier(max_length=4)
    >>> preprocessor.frame(["hello"]).ids.tolist()  # DOC_START, then the first bytes
    [[10, 104, 101, 108]]
    >>> preprocessor(tf.constant(["hello"])).ids.numpy().tolist()
    [[10, 104, 101, 108]]
    """

    def __init__(
        self,
        padding="right",
        max_length=None,
        pad_to_multiple=1,
        pad_id=framing.PAD_ID,
        normalize=True,
        **kwargs,
    ):
        kwargs.setdefault("trainable", False)
        super().__init__(**kwargs)
        self.padding = padding
        self.max_length = None if max_length is None else int(max_length)
        self.pad_to_multiple = int(pad_to_multiple)
        self.pad_id = int(pad_id)
        self.normalize = bool(normalize)
        # The options are checked once, here, for both forms.
        framing.frame_ids([], padding, self.max_length, self.pad_to_multiple, self.pad_id)

    # === Constructors ===
    @classmethod
    def for_windows(cls, window, normalize=False, **kwargs) -> Self:
        """Rows for windowed featurization and scoring (right padding, whole windows)."""
        return cls("right", pad_to_multiple=window, normalize=normalize, **kwargs)

    @classmethod
    def for_classifier(cls, max_length, normalize=False, **kwargs) -> Self:
        """Rows for the classifier (left padding, cut to `max_length` bytes)."""
        return cls("left", max_length=max_length, normalize=normalize, **kwargs)

    @classmethod
    def for_prompts(cls, normalize=False, **kwargs) -> Self:
        """Rows of prompts to continue (left padding with `DOC_START`)."""
        return cls("left", pad_id=DOC_START, normalize=normalize, **kwargs)

    # === The two forms ===
    def frame(self, texts, dtype=np.int32) -> framing.FramedIds:
        """The NumPy form: a sequence of `str` -> `FramedIds` of arrays (ids of `dtype`)."""
        texts = check_texts(texts)
        if self.normalize:
            texts = [normalize_text(text) for text in texts]
        return framing.frame_ids(
            texts, self.padding, self.max_length, self.pad_to_multiple, self.pad_id, dtype
        )

    def call(self, texts) -> framing.FramedIds:
        """The graph form: [N] `tf.string` -> `FramedIds` of tensors (int32 ids)."""
        if self.normalize:
            texts = normalize_text_tf(texts)
        return framing.frame_ids_tf(
            texts, self.padding, self.max_length, self.pad_to_multiple, self.pad_id
        )

    def valid_mask(self, lengths, width) -> Any:
        """[N, width] float32 mask, 1 on the framed bytes of rows `lengths` long, in the graph."""
        return framing.valid_mask_tf(lengths, width, self.padding)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "padding": self.padding,
                "max_length": self.max_length,
                "pad_to_multiple": self.pad_to_multiple,
                "pad_id": self.pad_id,
                "normalize": self.normalize,
            }
        )
        return config
