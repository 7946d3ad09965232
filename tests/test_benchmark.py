"""tools/benchmark.py and benchmark_transfer_fit.py: smoke runs with tiny sizes print valid JSON
lines (no timing checks)."""

import json
import math
import pathlib
import sys

import _forkserver
import pytest

from tf_mlstm.auto import hardware

REPO = pathlib.Path(__file__).resolve().parent.parent
BENCHMARK = REPO / "tools" / "benchmark.py"
TRAIN_KEYS = {
    "impl",
    "mode",
    "jit_compile",
    "hidden",
    "batch",
    "seq",
    "precision",
    "chars_per_s",
    "step_ms",
    "flops_per_char",
    "gflops",
    "peak_fraction",
    "matmul_gflops",
    "skinny_gflops",
    "skinny_fm_gflops",
    "peak_rss_mb",
}

# A model and a step small enough for a smoke run.
TINY = ("--hidden=8", "--batch=2", "--seq=8", "--steps=1", "--warmup=1")


def _run(tmp_path, *flags):
    command = [sys.executable, str(BENCHMARK), f"--corpus={tmp_path / 'no_corpus'}", *flags]
    done = _forkserver.run(command, capture_output=True, text=True, timeout=500, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_the_products_of_the_step_add_up_to_its_flops():
    sys.path.insert(0, str(BENCHMARK.parent))
    try:
        import benchmark  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(str(BENCHMARK.parent))
    for mode in ("train", "featurize"):
        products = benchmark.mlstm_products(mode, 64, 8, 16)
        assert sum(f for _, f in products) == benchmark.flops_per_char("mlstm", mode, 64, 32)
    # Half the time the products alone take: a fraction of 0.5.
    products = [((8, 8, 8), 100.0)]
    assert benchmark.matrix_fraction(products, lambda shape: 1.0, 5e6) == pytest.approx(0.5)


@pytest.mark.slow
def test_smoke_run_prints_a_json_line_per_configuration(tmp_path):
    # The mLSTM (the model this project trains) in every mode, XLA off and on; the Keras LSTM
    # baseline once more, in train and featurize, in mixed_bfloat16 (each line carries the
    # compute dtype's matrix rate then).
    records = _run(
        tmp_path,
        *TINY,
        "--modes=train,featurize,pipeline,convert",
        "--impls=mlstm",
        "--jit=false,true",
        "--precisions=float32",
        "--featurize_batch=2",
        "--featurize_batches=1",
        "--featurize_passes=1",
        "--featurize_max_chars=20",
        "--convert_max_documents=300",
        "--pipeline_batches=3",
    )
    baseline = _run(
        tmp_path,
        *TINY,
        "--modes=train,featurize",
        "--impls=keras_lstm",
        "--jit=false",
        "--precisions=mixed_bfloat16",
        "--featurize_batch=2",
        "--featurize_batches=1",
        "--featurize_passes=1",
        "--featurize_max_chars=20",
    )
    runs = [r for r in records if r["mode"] in ("train", "featurize")]
    assert len(runs) == 2 * 2 and len(baseline) == 2
    seen = {(r["impl"], r["mode"], r["jit_compile"]) for r in runs + baseline}
    assert len(seen) == 6
    for record in runs + baseline:
        assert TRAIN_KEYS <= set(record), TRAIN_KEYS - set(record)
        assert record["chars_per_s"] > 0 and record["step_ms"] > 0
        assert record["matmul_gflops"] > 0
        if record["mode"] == "train":  # one step of --batch=2 x --seq=8 characters
            assert record["step_ms"] == pytest.approx(1e3 * 2 * 8 / record["chars_per_s"])
            # The runner's own step, whose loss on random bytes starts near ln 256 nats.
            assert record["timed_step"] == "tf_mlstm.train.runner.Runner.train_step"
            assert abs(record["loss"] - math.log(256)) < 0.1
        assert record["gflops"] == pytest.approx(
            record["flops_per_char"] * record["chars_per_s"] / 1e9
        )
    for record in runs:
        assert record["precision"] == "float32"
        assert record["peak_fraction"] == pytest.approx(record["gflops"] / record["matmul_gflops"])
    for record in baseline:
        assert record["precision"] == "mixed_bfloat16"
        assert record["matmul_gflops_compute"] > 0
        assert record["peak_fraction_compute"] == pytest.approx(
            record["gflops"] / record["matmul_gflops_compute"]
        )
    # mLSTM training: 6 (H·H + H·4H) + 6·256·H.
    mlstm_train = [r for r in runs if r["impl"] == "mlstm" and r["mode"] == "train"][0]
    assert mlstm_train["flops_per_char"] == 6 * 5 * 8 * 8 + 6 * 256 * 8
    # The step over its own products' rate, each timed at its real shape.
    for record in runs:
        assert 0 < record["matrix_fraction"] < 1.5 and record["matrix_gflops"] > 0
        slots = record["chars_per_s"] / (1 - record.get("padding_fraction", 0.0))
        assert record["matrix_fraction"] == pytest.approx(
            record["flops_per_char"] * slots / 1e9 / record["matrix_gflops"]
        )
    # Featurization is compared with training of the same model.
    for group in (runs, baseline):
        for record in group:
            if record["mode"] == "featurize":
                train = [
                    r["chars_per_s"]
                    for r in group
                    if r["mode"] == "train" and r["impl"] == record["impl"]
                ]
                assert record["train_ratio"] == pytest.approx(record["chars_per_s"] / max(train))
    # Every line says what it ran on, as this machine's cpuinfo does.
    model, _ = hardware.read_cpuinfo()
    for record in records + baseline:
        assert record["cpu_model"] == model, record
        assert record["cpu_extensions"] == list(hardware.detect(gpus=()).cpu_extensions)
        assert isinstance(record["gpus"], list)
        for gpu in record["gpus"]:
            assert set(gpu) == {"name", "compute_capability"}
    (convert,) = [r for r in records if r["mode"] == "convert"]
    assert convert["records"] == 300 and convert["mb_per_s"] > 0
    (pipeline,) = [r for r in records if r["mode"] == "pipeline"]
    assert pipeline["chars_per_s"] > 0 and pipeline["train_ratio"] > 0


def test_bfloat16_units_are_read_from_the_cpu_flags(tmp_path):
    sys.path.insert(0, str(BENCHMARK.parent))
    try:
        import benchmark  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(str(BENCHMARK.parent))
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 avx512f amx_tile amx_bf16\n")
    assert benchmark.cpu_has_bfloat16_units(str(cpuinfo))
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_bf16\n")
    # Measured where auto does not choose it (AVX512-BF16 without AMX).
    assert benchmark.cpu_has_bfloat16_units(str(cpuinfo))
    cpuinfo.write_text("processor : 0\nflags : fpu avx2 avx512f avx512_vnni\n")
    assert not benchmark.cpu_has_bfloat16_units(str(cpuinfo))
    assert not benchmark.cpu_has_bfloat16_units(str(tmp_path / "missing"))


@pytest.mark.slow
def test_bad_flags_fail_with_a_clear_message(tmp_path):
    command = [sys.executable, str(BENCHMARK), "--modes=train,fly"]
    done = _forkserver.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode != 0
    assert "--modes: unknown ['fly']" in done.stderr


@pytest.mark.slow
def test_transfer_fit_benchmark_prints_a_line_per_sweep_and_a_summary_per_solver():
    command = [sys.executable, str(REPO / "tools" / "benchmark_transfer_fit.py")]
    command += ["--texts=150", "--classes=3", "--hidden=8", "--factors=4"]
    command += ["--solvers=batch,lbfgs", "--num_labeled=10,60"]
    done = _forkserver.run(command, capture_output=True, text=True, timeout=500, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    totals = [line for line in lines if line["what"] == "total"]
    assert [t["solver"] for t in totals] == ["batch", "lbfgs"]
    for total in totals:
        sweeps = [x for x in lines if x["solver"] == total["solver"] and x["what"] != "total"]
        # The selection's sweeps, the final one, then the curve's two sizes.
        assert total["sweeps"] == len(sweeps) >= 6 and total["penalty"] == "l2"
        assert [s["width"] for s in sweeps[:3]] == [16, 32, 24]  # the three groups of 8 units
        assert sweeps[0]["what"] == "feature group 1 of at most 6 (cell,hidden)"
        assert [s["what"] for s in sweeps[-3:]] == ["final", "10 labeled", "60 labeled"]
        for sweep in sweeps:
            assert len(sweep["iterations"]) == 9 and 0 <= sweep["val"] <= 1
            assert sweep["cpu_seconds"] >= 0 and isinstance(sweep["not_converged"], list)
        assert total["chosen"] in [s["kinds"] for s in sweeps]
        assert 0 <= total["test_accuracy"] <= 1
    # Both fit the same objective: the same choice and the same test accuracy.
    assert totals[0]["chosen"] == totals[1]["chosen"]
    assert abs(totals[0]["test_accuracy"] - totals[1]["test_accuracy"]) <= 0.01
    sweep = [sys.executable, str(REPO / "tools" / "benchmark_transfer_fit.py"), "--mode=sweep"]
    sweep += ["--shapes=semeval", "--texts=200", "--hidden=8", "--factors=4"]
    sweep += ["--solvers=batch,liblinear", "--penalties=l1"]
    done = _forkserver.run(sweep, capture_output=True, text=True, timeout=500, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(r["shape"], r["solver"], r["penalty"]) for r in rows] == [
        ("semeval", "batch", "l1"),
        ("semeval", "liblinear", "l1"),
    ]
    assert all(len(r["C"]) == 11 and "test_jaccard" in r for r in rows)
