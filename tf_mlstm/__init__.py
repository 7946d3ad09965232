"""tf_mlstm: byte-level multiplicative LSTM language models on review text.

The Python API (docs/python.md); each name is imported on first use (PEP 562):

    import tf_mlstm

    tf_mlstm.pretrain(tf_mlstm.TrainConfig(model_dir="runs/demo"))
    model = tf_mlstm.load("runs/demo")
    model.score(["A fine film."])              # bits/char per text
    model.generate("This movie", length=100, seed=7)
"""

import importlib

from tf_mlstm import _quiet
from tf_mlstm._version import __version__

# TensorFlow's start-up lines (no CUDA driver, a failed GPU probe) are no news
# to a user of this package; a TF_CPP_MIN_LOG_LEVEL the user set shows them.
if not _quiet.user_chose_tensorflow_log_level():
    _quiet.quiet_start()

# Public name -> (module, attribute). The entry points are verbs that no
# subpackage shadows (importing `tf_mlstm.train` sets this module's `train`
# to the package): `pretrain` trains the language model, `probe` fits the
# linear probe of `tf-mlstm-transfer`, `export` writes the SavedModel (whose
# package is `tf_mlstm.serving`).
_LAZY = {
    "load": ("tf_mlstm.api", "load"),
    "TrainedModel": ("tf_mlstm.api", "TrainedModel"),
    "convert": ("tf_mlstm.api", "convert"),
    "pretrain": ("tf_mlstm.api", "pretrain"),
    "evaluate": ("tf_mlstm.api", "evaluate"),
    "finetune": ("tf_mlstm.api", "finetune"),
    "probe": ("tf_mlstm.api", "probe"),
    "export": ("tf_mlstm.api", "export"),
    "import_openai_weights": ("tf_mlstm.api", "import_openai_weights"),
    "ConvertConfig": ("tf_mlstm.config", "ConvertConfig"),
    "TrainConfig": ("tf_mlstm.config", "TrainConfig"),
    "EvalConfig": ("tf_mlstm.config", "EvalConfig"),
    "FinetuneConfig": ("tf_mlstm.config", "FinetuneConfig"),
    "TransferConfig": ("tf_mlstm.config", "TransferConfig"),
    "ExportConfig": ("tf_mlstm.config", "ExportConfig"),
    "MLSTMBackbone": ("tf_mlstm.models.backbone", "MLSTMBackbone"),
    "MLSTMLanguageModel": ("tf_mlstm.models.language_model", "MLSTMLanguageModel"),
    "MLSTMClassifier": ("tf_mlstm.models.classifier", "MLSTMClassifier"),
    "BytePreprocessor": ("tf_mlstm.models.preprocessor", "BytePreprocessor"),
    "UserError": ("tf_mlstm.errors", "UserError"),
    "InvalidValueError": ("tf_mlstm.errors", "InvalidValueError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'tf_mlstm' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
