"""Hardware detection and the automatic precision / XLA choices, down to a real run's config."""

import json
import pathlib
import sys

import pytest

import _commands
from tf_mlstm import errors
from tf_mlstm.auto import hardware
from tf_mlstm.config import TrainConfig
from tf_mlstm.transfer.finetune import FinetuneConfig

REPO = pathlib.Path(__file__).resolve().parent.parent

# Two processor blocks each, trimmed from real machines' /proc/cpuinfo.
AMX_XEON = """\
processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512bw \
avx512vl avx_vnni avx512_bf16 avx512_vnni avx512_fp16 amx_bf16 amx_tile amx_int8

processor	: 1
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512bw \
avx512vl avx_vnni avx512_bf16 avx512_vnni avx512_fp16 amx_bf16 amx_tile amx_int8
"""
AVX2_EPYC = """\
processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7B12
flags		: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2 sha_ni

processor	: 1
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7B12
flags		: fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi2 sha_ni
"""
# Zen 4: AVX-512 with the bfloat16 dot product, no AMX.
AVX512_BF16_EPYC = """\
processor	: 0
model name	: AMD EPYC 9654 96-Core Processor
flags		: fpu sse4_2 avx fma avx2 avx512f avx512_bf16 avx512_vnni
"""
GRAVITON = """\
processor	: 0
BogoMIPS	: 2100.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp sve bf16 i8mm
CPU implementer	: 0x41
"""
H100 = hardware.GpuInfo("NVIDIA H100 80GB HBM3", (9, 0))
V100 = hardware.GpuInfo("Tesla V100-SXM2-16GB", (7, 0))
P100 = hardware.GpuInfo("Tesla P100-PCIE-16GB", (6, 0))


def _machine(cpuinfo, gpus=()):
    model, flags = hardware.parse_cpuinfo(cpuinfo)
    return hardware.Hardware(model, flags, tuple(gpus))


def _choices(machine, use_gpus=True):
    precision, _ = hardware.resolve_precision("auto", machine, use_gpus)
    jit, _ = hardware.resolve_jit("auto", precision, machine, use_gpus)
    return precision, jit


def test_cpuinfo_parsing_reads_the_model_and_extensions():
    machine = _machine(AMX_XEON)
    assert machine.cpu_model == "Intel(R) Xeon(R) Platinum 8480+"
    assert machine.cpu_extensions == (
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
    )
    arm = _machine(GRAVITON)
    assert arm.cpu_model == "unknown"
    assert arm.cpu_extensions == ("asimd", "asimdhp", "sve", "bf16", "i8mm")
    assert hardware.read_cpuinfo("/nonexistent/cpuinfo")[1] == frozenset()


def test_amx_xeon_trains_in_bfloat16_without_xla():
    assert _choices(_machine(AMX_XEON)) == ("mixed_bfloat16", False)


def test_avx2_epyc_trains_in_float32_with_xla():
    # bfloat16 is emulated there (5.7x slower); XLA measured 1.13-1.15x faster in float32.
    assert _choices(_machine(AVX2_EPYC)) == ("float32", True)


def test_avx512_bf16_without_amx_and_arm_bf16_stay_float32():
    assert _choices(_machine(AVX512_BF16_EPYC)) == ("float32", True)
    assert _choices(_machine(GRAVITON)) == ("float32", True)
    assert _choices(hardware.Hardware("unknown")) == ("float32", True)


def test_gpus_with_tensor_cores_train_in_float16_with_xla():
    assert _choices(_machine(AVX2_EPYC, [H100, H100])) == ("mixed_float16", True)
    assert _choices(_machine(AMX_XEON, [V100])) == ("mixed_float16", True)
    # One GPU without tensor cores decides for all replicas.
    assert _choices(_machine(AMX_XEON, [V100, P100])) == ("float32", True)
    assert _choices(_machine(AVX2_EPYC, [hardware.GpuInfo("gpu", None)])) == ("float32", True)
    # --num_gpus=0 computes on the CPU: the CPU rules apply.
    assert _choices(_machine(AMX_XEON, [H100]), use_gpus=False) == ("mixed_bfloat16", False)


def test_explicit_choices_are_kept_and_bad_ones_rejected():
    machine = _machine(AMX_XEON)
    assert hardware.resolve_precision("float32", machine) == ("float32", "set explicitly")
    assert hardware.resolve_jit("true", "mixed_bfloat16", machine) == (True, "set explicitly")
    # A Python caller reads the argument's name; a binary's user, the flag's.
    with pytest.raises(ValueError, match="^jit_compile must be one of auto, true, false"):
        hardware.resolve_jit("yes", "float32", machine)
    with errors.naming_flags(), pytest.raises(ValueError, match="^--jit_compile must be one of"):
        hardware.resolve_jit("yes", "float32", machine)
    with pytest.raises(ValueError, match="needs a resolved precision, got 'auto'"):
        hardware.resolve_jit("auto", "auto", machine)


def test_every_table_entry_states_its_reason():
    for (kind, precision), (on, reason) in hardware.JIT_TABLE.items():
        assert kind in ("cpu", "gpu") and precision in hardware.PRECISIONS
        assert isinstance(on, bool) and len(reason) > 20


def test_description_names_cpu_and_gpus():
    machine = _machine(AVX2_EPYC, [H100])
    assert machine.describe() == (
        "CPU AMD EPYC 7B12 (sse4_2 avx avx2 fma); 1 GPU(s): NVIDIA H100 80GB HBM3 "
        "(compute capability 9.0)"
    )
    assert machine.to_dict()["gpus"] == [
        {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
    ]


def test_this_machine_is_detected():
    machine = hardware.detect()
    assert machine.cpu_model and isinstance(machine.gpus, tuple)
    if pathlib.Path("/proc/cpuinfo").exists():
        assert machine.cpu_flags  # every Linux CPU reports some


def test_config_validation_accepts_auto():
    config = TrainConfig().validate()
    assert config.precision == "auto" and config.jit_compile == "auto"
    # float16 all-reduce may meet auto; the resolved config is checked again.
    TrainConfig(precision="auto", allreduce_dtype="float16").validate()
    with pytest.raises(ValueError, match="precision must be one of auto, float32"):
        TrainConfig(precision="bfloat16").validate()
    finetune = FinetuneConfig(init_model_dir="a", train_data="b", model_dir="c")
    assert finetune.precision == "auto"
    finetune.validate()


def test_run_config_resolves_auto_to_concrete_values(tmp_path):
    config = TrainConfig(model_dir=str(tmp_path))
    resolved = hardware.resolve_run_config(
        config, str(tmp_path / "config.json"), _machine(AMX_XEON)
    )
    assert (resolved.precision, resolved.jit_compile) == ("mixed_bfloat16", "false")
    resolved = hardware.resolve_run_config(config, str(tmp_path / "none"), _machine(AVX2_EPYC))
    assert (resolved.precision, resolved.jit_compile) == ("float32", "true")
    finetune = FinetuneConfig(init_model_dir="a", train_data="b", model_dir="c", num_gpus=0)
    resolved = hardware.resolve_run_config(finetune, "c/none", _machine(AMX_XEON, [H100]))
    assert (resolved.precision, resolved.jit_compile) == ("mixed_bfloat16", "false")


def test_an_existing_run_keeps_its_recorded_precision(tmp_path, caplog):
    recorded = tmp_path / "config.json"
    recorded.write_text(TrainConfig(precision="float32", jit_compile="true").to_json())
    config = TrainConfig(model_dir=str(tmp_path))
    resolved = hardware.resolve_run_config(config, str(recorded), _machine(AMX_XEON))
    # The run started in float32 on another machine: auto does not switch it to bfloat16,
    # while XLA is decided here for the kept precision (float32 on a CPU: on).
    assert (resolved.precision, resolved.jit_compile) == ("float32", "true")
    assert "the run in" in caplog.text and "auto would choose mixed_bfloat16" in caplog.text
    # An explicit precision is the user's decision, with a warning.
    explicit = TrainConfig(model_dir=str(tmp_path), precision="mixed_bfloat16")
    resolved = hardware.resolve_run_config(explicit, str(recorded), _machine(AMX_XEON))
    assert resolved.precision == "mixed_bfloat16"
    assert "changes the precision of the run" in caplog.text


def test_unreadable_recorded_config_and_impossible_combinations_are_one_line(tmp_path):
    broken = tmp_path / "config.json"
    broken.write_text('{"precision": ')
    with pytest.raises(ValueError, match=r"config.json: not valid JSON"):
        hardware.resolve_run_config(TrainConfig(), str(broken), _machine(AMX_XEON))
    config = TrainConfig(allreduce_dtype="float16")
    with pytest.raises(
        ValueError,
        match=r"allreduce_dtype=float16 needs precision=mixed_float16 .*"
        r"\(precision=auto chose mixed_bfloat16: CPU with bfloat16 matrix units",
    ):
        hardware.resolve_run_config(config, str(tmp_path / "none"), _machine(AMX_XEON))
    with errors.naming_flags(), pytest.raises(ValueError, match=r"\(--precision=auto chose "):
        hardware.resolve_run_config(config, str(tmp_path / "none"), _machine(AMX_XEON))


def _train_command(model_dir, *extra):
    return [
        sys.executable,
        "-m",
        "tf_mlstm.cli.train",
        f"--model_dir={model_dir}",
        "--hidden_size=16",
        "--embedding_size=8",
        "--seq_length=16",
        "--batch_size=4",
        "--eval_every_steps=0",
        "--sample_every_steps=0",
        "--log_every_steps=1",
        *extra,
    ]


def _table_choice_here():
    """The documented prior for a 2-step run on this machine, read from /proc/cpuinfo
    itself (not through the code under test): bfloat16 with AMX, else float32."""
    if hardware.detect().gpus:
        pytest.skip("the CPU table's choice is checked on machines without GPUs")
    flags = set()
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return "mixed_bfloat16" if "amx_bf16" in flags else "float32"


@pytest.mark.slow
def test_default_training_records_the_concrete_choice_and_a_resume_keeps_it(tmp_path):
    expected_precision = _table_choice_here()
    model_dir = tmp_path / "run"
    # A run started in another precision resumes in it under the default auto.
    other = "float32" if expected_precision != "float32" else "mixed_bfloat16"
    started = tmp_path / "started"
    # Three runs in one process: what is checked is each run's choice, not a process start.
    proc, _, resumed = _commands.run_in_one_process(
        [
            _train_command(model_dir, "--max_steps=2"),
            _train_command(started, "--max_steps=2", f"--precision={other}", "--noexport"),
            _train_command(started, "--max_steps=3", "--noexport"),
        ],
        tmp_path / "commands",
        timeout=400,
    )
    for done in (proc, _, resumed):
        assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads((model_dir / "config.json").read_text())
    assert config["precision"] == expected_precision
    assert config["jit_compile"] in ("true", "false")
    assert f"Precision {expected_precision} (auto:" in proc.stderr
    # The exported model's metadata carries the same concrete config.
    # (TensorFlow Serving layout: one numbered folder per exported step.)
    exported = json.loads((model_dir / "export" / "2" / "assets.extra" / "meta.json").read_text())
    assert exported["config"]["precision"] == expected_precision

    assert "Resumed from" in resumed.stderr
    assert json.loads((started / "config.json").read_text())["precision"] == other
    assert f"Precision {other}: the run in" in resumed.stderr
    assert json.loads((started / "config.json").read_text())["precision"] == other
    assert f"Precision {other}: the run in" in resumed.stderr
