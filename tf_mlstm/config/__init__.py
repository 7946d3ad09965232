"""Every config of tf_mlstm: small frozen dataclasses, built once, importable without TensorFlow.

Each field is the flag of the same name, its `Attributes:` entry the flag's `--help`.
"""

from tf_mlstm.config.base import CheckedFields
from tf_mlstm.config.base import JsonConfig
from tf_mlstm.config.binaries import ClassifyBeamConfig
from tf_mlstm.config.binaries import ClassifyConfig
from tf_mlstm.config.binaries import ExportConfig
from tf_mlstm.config.binaries import GenerateConfig
from tf_mlstm.config.binaries import ImportConfig
from tf_mlstm.config.binaries import PresetConfig
from tf_mlstm.config.binaries import VisualizeConfig
from tf_mlstm.config.choices import ALL_REDUCE
from tf_mlstm.config.choices import ALLREDUCE_DTYPES
from tf_mlstm.config.choices import AUTO
from tf_mlstm.config.choices import CLUSTER_RESOLVERS
from tf_mlstm.config.choices import DECAYS
from tf_mlstm.config.choices import HEAD_INITS
from tf_mlstm.config.choices import JIT_CHOICES
from tf_mlstm.config.choices import OPTIMIZE_FOR
from tf_mlstm.config.choices import PENALTIES
from tf_mlstm.config.choices import PRECISION_CHOICES
from tf_mlstm.config.choices import PRECISIONS
from tf_mlstm.config.choices import SCALINGS
from tf_mlstm.config.choices import SCHEDULE_LENGTHS
from tf_mlstm.config.choices import SOLVERS
from tf_mlstm.config.choices import STRATEGIES
from tf_mlstm.config.choices import THRESHOLD_METRICS
from tf_mlstm.config.convert import ConvertConfig
from tf_mlstm.config.runner import BudgetFields
from tf_mlstm.config.runner import OptimizationFields
from tf_mlstm.config.runner import RuntimeFields
from tf_mlstm.config.runner import profile_bounds
from tf_mlstm.config.runner import validate_runner_settings
from tf_mlstm.config.training import EvalConfig
from tf_mlstm.config.training import TrainConfig
from tf_mlstm.config.transfer import FinetuneConfig
from tf_mlstm.config.transfer import LabeledDataFields
from tf_mlstm.config.transfer import TransferConfig

__all__ = [
    "ALL_REDUCE",
    "ALLREDUCE_DTYPES",
    "AUTO",
    "BudgetFields",
    "CLUSTER_RESOLVERS",
    "CheckedFields",
    "ClassifyBeamConfig",
    "ClassifyConfig",
    "ExportConfig",
    "GenerateConfig",
    "ImportConfig",
    "PresetConfig",
    "VisualizeConfig",
    "ConvertConfig",
    "DECAYS",
    "EvalConfig",
    "FinetuneConfig",
    "HEAD_INITS",
    "JIT_CHOICES",
    "JsonConfig",
    "LabeledDataFields",
    "OPTIMIZE_FOR",
    "OptimizationFields",
    "PENALTIES",
    "PRECISIONS",
    "PRECISION_CHOICES",
    "RuntimeFields",
    "SCALINGS",
    "SCHEDULE_LENGTHS",
    "SOLVERS",
    "STRATEGIES",
    "THRESHOLD_METRICS",
    "TrainConfig",
    "TransferConfig",
    "profile_bounds",
    "validate_runner_settings",
]
