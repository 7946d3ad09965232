"""The byte-level mLSTM language model, featurization and sampling."""

from tf_mlstm.models.language_model import MLSTMLanguageModel

__all__ = ["MLSTMLanguageModel"]
