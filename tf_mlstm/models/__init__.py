"""The byte-level mLSTM models, imported lazily (PEP 562) so `kinds` loads without TensorFlow."""

import importlib

_LAZY = {
    "BytePreprocessor": ("tf_mlstm.models.preprocessor", "BytePreprocessor"),
    "MLSTMBackbone": ("tf_mlstm.models.backbone", "MLSTMBackbone"),
    "MLSTMLanguageModel": ("tf_mlstm.models.language_model", "MLSTMLanguageModel"),
    "MLSTMClassifier": ("tf_mlstm.models.classifier", "MLSTMClassifier"),
}

__all__ = list(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'tf_mlstm.models' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
