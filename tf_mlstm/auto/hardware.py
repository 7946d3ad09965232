"""What this machine computes on, and the table of precision and XLA settings (the prior)."""

import dataclasses
import os
import platform
from typing import Any

from absl import logging

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.config import AUTO
from tf_mlstm.config import PRECISIONS

CPUINFO = "/proc/cpuinfo"

# CPU extensions worth reporting beside a benchmark number: the vector widths
# and the low-precision dot-product and matrix units oneDNN can use (x86), and
# their AArch64 counterparts. Listed in this order where present.
REPORTED_EXTENSIONS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx_vnni",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
)

# The CPU flags that make mixed_bfloat16 the table's choice (the prior; a
# training run measures, see `measure.py`).
#
# amx_bf16 (Intel AMX, Sapphire Rapids and later): oneDNN runs bfloat16
# products on the tile units; the training step measured 1.5-1.7x faster than
# float32 (docs/performance.md).
#
# avx512_bf16 alone (Cooper Lake Xeons, AMD Zen 4/5, Xeons whose AMX is
# not exposed) is left out of the prior: the three such CPUs measured
# (docs/performance.md) disagree. On two AMD EPYC mixed_bfloat16 was 1.40-1.42x
# as fast as float32; on an Intel Xeon without AMX 0.67x (each precision at its
# faster XLA setting, 768 units).
# The flag says the instructions exist, not that they are fast, and the
# downside of a wrong bfloat16 choice is large (emulated bfloat16 ran the
# CPU recipe 5.7x slower on an AVX2-only EPYC). Where it
# counts (training), auto measures bfloat16 on these CPUs instead of
# guessing (`measure.BFLOAT16_CPU_FLAGS`). The AArch64 `bf16` feature is
# left out of the prior for the same reason (unmeasured).
BFLOAT16_MATRIX_FLAGS = frozenset({"amx_bf16"})

# Tensor cores (float16 matrix units) arrived with compute capability 7.0
# (Volta); older GPUs run float16 products at best at twice the float32 rate
# and some far slower, so mixed_float16 is chosen only from 7.0 up.
TENSOR_CORE_CAPABILITY = (7, 0)

# --jit_compile=auto's prior: (device kind, precision) -> (XLA on?, why). Every CPU
# entry is a measurement of this project's training step with its hand-written
# sequence gradient (tools/benchmark.py, docs/performance.md). The GPU entries
# are the GPU recipes' choice and have not been measured side by side by this
# project yet (`tools/benchmark.py --jit=false,true` on a GPU does that).
_GPU_XLA = "on GPUs XLA fuses the per-step gate arithmetic into few kernels (recipe choice)"
JIT_TABLE = {
    ("cpu", "float32"): (
        True,
        "measured 1.13-1.15x faster than the graph step on an AVX2-only CPU (H = 512 and 768) "
        "and 7-16% faster on an AVX-512 CPU at H = 512; at H = 1024 within 5% either way",
    ),
    ("cpu", "mixed_bfloat16"): (
        False,
        "XLA's CPU backend does not hand bfloat16 products to oneDNN: 3.2k vs 19.2k chars/s "
        "without XLA at H = 512 on an AMX CPU, 5.1k vs 10.6k at H = 768 on an AVX512-BF16 one",
    ),
    ("cpu", "mixed_float16"): (
        False,
        "not measured; XLA's CPU backend keeps the products from oneDNN as with bfloat16, and "
        "float16 is slow on CPUs either way",
    ),
    ("gpu", "float32"): (True, _GPU_XLA),
    ("gpu", "mixed_float16"): (True, _GPU_XLA),
    ("gpu", "mixed_bfloat16"): (True, _GPU_XLA),
}


# === Detection ===


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One GPU as TensorFlow reports it: its name and (major, minor) compute capability or None.

    Example:
    >>> from tf_mlstm.auto.hardware import GpuInfo
    >>> gpu = GpuInfo("NVIDIA H100 80GB HBM3", (9, 0))
    >>> gpu.has_tensor_cores, gpu.to_dict()
    (True, {'name': 'NVIDIA H100 80GB HBM3', 'compute_capability': '9.0'})
    """

    name: str
    compute_capability: tuple | None = None

    @property
    def has_tensor_cores(self) -> bool:
        """Whether the GPU has float16 matrix units (compute capability >= 7.0)."""
        return (
            self.compute_capability is not None
            and tuple(self.compute_capability) >= TENSOR_CORE_CAPABILITY
        )

    def to_dict(self) -> dict:
        """JSON-ready fields: name and "major.minor" capability (or None)."""
        capability = self.compute_capability
        return {
            "name": self.name,
            "compute_capability": None if capability is None else "{}.{}".format(*capability),
        }


@dataclasses.dataclass(frozen=True)
class Hardware:
    """The CPU and GPUs a process computes on.

    Attributes:
      cpu_model: the CPU's model name ("unknown" where it is not reported).
      cpu_flags: every feature flag of the CPU (x86 `flags`, AArch64 `Features`).
      gpus: the GPUs TensorFlow sees, in device order.

    Example:
    >>> from tf_mlstm.auto.hardware import Hardware
    >>> machine = Hardware("Intel Xeon", frozenset({"avx2", "avx512_bf16", "amx_bf16"}))
    >>> machine.cpu_extensions, machine.bfloat16_matrix_units
    (('avx2', 'avx512_bf16', 'amx_bf16'), True)
    """

    cpu_model: str
    cpu_flags: frozenset = frozenset()
    gpus: tuple = ()

    @property
    def cpu_extensions(self) -> tuple[str, ...]:
        """The reported vector/matrix extensions this CPU has, in a fixed order."""
        return tuple(name for name in REPORTED_EXTENSIONS if name in self.cpu_flags)

    @property
    def bfloat16_matrix_units(self) -> bool:
        """Whether the CPU multiplies bfloat16 matrices fast enough to pick it (AMX)."""
        return bool(self.cpu_flags & BFLOAT16_MATRIX_FLAGS)

    def to_dict(self) -> dict:
        """JSON-ready summary: cpu_model, cpu_extensions, gpus."""
        return {
            "cpu_model": self.cpu_model,
            "cpu_extensions": list(self.cpu_extensions),
            "gpus": [gpu.to_dict() for gpu in self.gpus],
        }

    def describe(self) -> str:
        """One log line: the CPU, its extensions and the GPUs."""
        extensions = " ".join(self.cpu_extensions) or "none reported"
        text = f"CPU {self.cpu_model} ({extensions})"
        if self.gpus:
            gpus = ", ".join(
                f"{g.name} (compute capability {g.to_dict()['compute_capability'] or 'unknown'})"
                for g in self.gpus
            )
            return f"{text}; {len(self.gpus)} GPU(s): {gpus}"
        return f"{text}; no GPU"


def parse_cpuinfo(text) -> tuple[str, frozenset]:
    """The model name and feature flags of the first processor in a cpuinfo text.

    Args:
      text: the contents of /proc/cpuinfo (x86 or AArch64 layout).

    Returns:
      (model name or "unknown", frozenset of flags).
    """
    model, features = None, None
    for line in text.splitlines():
        if not line.strip():
            if model is not None and features is not None:
                break  # the first processor block is enough; all cores match
            continue
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and model is None:
            model = value.strip()
        elif key in ("flags", "features") and features is None:
            features = frozenset(value.split())
    return model or "unknown", features or frozenset()


def read_cpuinfo(path=CPUINFO) -> tuple[str, frozenset]:
    """`parse_cpuinfo` of `path`; a missing file (not Linux) gives no flags.

    Args:
      path: the cpuinfo file.

    Returns:
      (model name, frozenset of flags); without the file, `platform.processor()` and no flags.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return platform.processor() or "unknown", frozenset()


def list_gpus() -> tuple[GpuInfo, ...]:
    """The GPUs TensorFlow sees (physical devices, so before a strategy restricts them).

    Returns:
      A tuple of `GpuInfo`.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(device)
        except (ValueError, RuntimeError):  # no details for this device type
            details = {}
        capability = details.get("compute_capability")
        gpus.append(
            GpuInfo(
                name=details.get("device_name", device.name),
                compute_capability=tuple(capability) if capability else None,
            )
        )
    return tuple(gpus)


def detect(cpuinfo_path=CPUINFO, gpus=None) -> Hardware:
    """This machine's `Hardware`.

    Args:
      cpuinfo_path, gpus: where to read the CPU from, and the GPUs to assume (None: ask).

    Returns:
      A `Hardware`.
    """
    model, flags = read_cpuinfo(cpuinfo_path)
    return Hardware(model, flags, list_gpus() if gpus is None else tuple(gpus))


# === Resolution ===


def resolve_precision(choice, hardware, use_gpus=True) -> tuple[str, str]:
    """The precision policy `choice` ("auto" or a policy name) stands for on `hardware`.

    Args:
      choice, hardware: "auto" or a policy name, and a `Hardware`.
      use_gpus: whether the run places its work on the GPUs (False with --num_gpus=0).

    Returns:
      (precision, reason): the policy name and a phrase saying why.
    """
    if choice != AUTO:
        return choice, "set explicitly"
    if use_gpus and hardware.gpus:
        # Every replica must run the same policy; the slowest GPU decides.
        if all(gpu.has_tensor_cores for gpu in hardware.gpus):
            return "mixed_float16", "GPUs with tensor cores (compute capability >= 7.0)"
        return "float32", "a GPU without tensor cores (compute capability < 7.0 or unknown)"
    if hardware.bfloat16_matrix_units:
        units = ", ".join(sorted(hardware.cpu_flags & BFLOAT16_MATRIX_FLAGS))
        return "mixed_bfloat16", f"CPU with bfloat16 matrix units ({units})"
    return "float32", "CPU without bfloat16 matrix units (no amx_bf16)"


def resolve_jit(choice, precision, hardware, use_gpus=True) -> tuple[bool, str]:
    """Whether the per-replica step is XLA-compiled, from `JIT_TABLE` for `auto`.

    Args:
      choice: "auto", "true" or "false".
      precision: the resolved precision policy (not "auto").
      hardware, use_gpus: a `Hardware`, and whether the run places its work on the GPUs.

    Returns:
      (on, reason): a bool and a phrase saying why.

    Raises:
      ValueError: `choice` or `precision` is not one this module knows.
    """
    if choice in ("true", "false"):
        return choice == "true", "set explicitly"
    if choice != AUTO:
        raise errors.InvalidValueError(
            f"{errors.setting_name('jit_compile')} must be one of auto, true, false; "
            f"got {choice!r}."
        )
    if precision not in PRECISIONS:
        raise errors.InvalidValueError(
            f"resolve_jit needs a resolved precision, got {precision!r}."
        )
    kind = "gpu" if use_gpus and hardware.gpus else "cpu"
    return JIT_TABLE[(kind, precision)]


def resolve_run_config(config, recorded_config_path, hardware=None, decide=None) -> Any:
    """`config` with concrete `precision` and `jit_compile`, logged with the reasons.

    A run's recorded precision wins over `auto`; `auto` XLA is decided anew on every start.

    Args:
      config: a frozen dataclass with `precision`, `jit_compile` (and `num_gpus`).
      recorded_config_path: the run folder's config JSON, read if it exists.
      hardware: a `Hardware`; None detects this machine.
      decide: `decide(precision, jit_compile, hardware, use_gpus)` ->
        (precision, reason, jit bool, jit reason); None lets the table decide.

    Returns:
      The config with concrete values (re-validated when it has `validate`).

    Raises:
      ValueError: the recorded file is unreadable, or the resolved config is invalid.
    """
    if config.precision != AUTO and config.jit_compile != AUTO:
        return config
    hardware = hardware or detect()
    use_gpus = getattr(config, "num_gpus", -1) != 0
    logging.info("Hardware: %s.", hardware.describe())
    recorded = rundir.recorded_precision(*os.path.split(recorded_config_path))
    precision, reason = resolve_precision(config.precision, hardware, use_gpus)
    fixed = config.precision
    if recorded and recorded != precision:
        if config.precision == AUTO:
            logging.warning(
                "Precision %s: the run in %s was started in it (auto would choose %s here: %s).",
                recorded,
                os.path.dirname(recorded_config_path) or ".",
                precision,
                reason,
            )
            precision, reason = recorded, f"recorded in {recorded_config_path}"
        else:
            logging.warning(
                "%s=%s changes the precision of the run in %s, started in %s.",
                errors.setting_name("precision"),
                precision,
                os.path.dirname(recorded_config_path) or ".",
                recorded,
            )
    if recorded and config.precision == AUTO:
        fixed = recorded  # never re-measured into another precision mid-run
    decided = decide(fixed, config.jit_compile, hardware, use_gpus) if decide else None
    if decided is not None:
        precision, reason, jit, jit_reason = decided
    else:
        jit, jit_reason = resolve_jit(config.jit_compile, precision, hardware, use_gpus)
    logging.info(
        "Precision %s (%s: %s); XLA %s (%s: %s).",
        precision,
        config.precision,
        reason,
        "on" if jit else "off",
        config.jit_compile,
        jit_reason,
    )
    resolved = dataclasses.replace(
        config, precision=precision, jit_compile="true" if jit else "false"
    )
    if hasattr(resolved, "validate"):
        try:
            resolved.validate()
        except ValueError as e:
            if config.precision != AUTO:
                raise
            raise errors.InvalidValueError(
                f"{e} ({errors.setting_name('precision')}=auto chose {precision}: {reason})"
            ) from None
    return resolved
