"""Every config of tf_mlstm: small frozen dataclasses, built once, importable without TensorFlow.

A binary turns its flags into one of these (`tf_mlstm.cli`), a Python caller
builds it by hand (`tf_mlstm.TrainConfig(hidden_size=64)`), and everything
below receives it; nothing reads absl FLAGS. A config's field is the flag of
the same name, documented once, in the class docstring's `Attributes:` (the
flag's `--help` is that text); `validate()` turns a bad value or combination
into one line that names the setting as its reader wrote it: the Python
argument (`hidden_size`) to a Python caller, the flag (`--hidden_size`) to a
binary's user (`tf_mlstm.errors.setting_name`).

One module per concern:

- `choices`: the values a setting may take (precisions, strategies, decays,
  feature kinds, penalties, solvers, ...), each list defined once;
- `base`: what every config shares: type checks on construction, range and
  choice checks, the JSON round trip of the run folder's config files;
- `bounds`: the largest value of each size, length and count, by setting
  name, alone and in the tensors several of them shape (every config's
  `validate`, every binary's flags and the Python API check against it);
- `runner`: the groups of settings every run on the distributed runner
  shares (runtime, optimization, budget);
- `training`: the language model's `TrainConfig` and `EvalConfig`;
- `transfer`: labeled data, `FinetuneConfig`, `TransferConfig`;
- `convert`: `ConvertConfig`, one conversion to TFRecords;
- `binaries`: the configs of the binaries that apply a trained model or
  bring one in (classify, classify-beam, export, generate, visualize,
  import-openai).

Layering: this room imports only `errors`, `progress` and `data`'s field
names (no TensorFlow; tests/test_config_room.py proves it for every module
here), so that the run folder (`rundir`), which reads and writes config.json,
sits below training without importing it.
"""

from tf_mlstm.config.base import CheckedFields
from tf_mlstm.config.base import JsonConfig
from tf_mlstm.config.binaries import ClassifyBeamConfig
from tf_mlstm.config.binaries import ClassifyConfig
from tf_mlstm.config.binaries import ExportConfig
from tf_mlstm.config.binaries import GenerateConfig
from tf_mlstm.config.binaries import ImportConfig
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
