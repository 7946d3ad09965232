"""The reviewed flagfiles in flags/ parse with the real flags and validate."""

import json
import math
import pathlib
import sys

import _forkserver
import pytest

from tf_mlstm.config import TrainConfig
from tf_mlstm.train import schedules

REPO = pathlib.Path(__file__).resolve().parent.parent
RECIPES = ("paper_4096_32k", "dgx1_4096")
# Paper-scale facts the recipes are built on.
CORPUS_BYTES = 40e9
PAPER_BASE_LR, PAPER_BASE_BATCH = 5e-4, 128

# Parses each flagfile exactly as `tf-mlstm-train --flagfile=...` does, in a
# fresh process (the flags are defined on absl's global FLAGS), and prints the
# validated configs as one JSON object.
_PARSE = """
import json, sys
from absl import flags
from tf_mlstm.cli import _config, train
from tf_mlstm.config import TrainConfig
train.define_train_flags()
out = {}
for path in sys.argv[1:]:
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["tf-mlstm-train", "--flagfile=" + path])
    out[path] = _config.config_from_flags(TrainConfig).to_json()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def configs():
    names = RECIPES + ("cpu_reviews",)
    paths = [str(REPO / "flags" / f"{name}.flags") for name in names]
    proc = _forkserver.run(
        [sys.executable, "-c", _PARSE, *paths],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        name: TrainConfig.from_json(parsed[path]).validate() for name, path in zip(names, paths)
    }


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_has_a_comment_header_and_only_flag_lines(name):
    lines = (REPO / "flags" / f"{name}.flags").read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    assert len(header) >= 10 and lines[0].startswith("#")
    assert all(line.startswith(("#", "--")) for line in lines if line.strip())


def test_paper_recipe_is_128_gpus_of_256_rows_at_32k(configs):
    config = configs["paper_4096_32k"]
    assert config.batch_size == 128 * 1 * 256 == 32768
    assert (config.hidden_size, config.embedding_size, config.seq_length) == (4096, 64, 256)
    assert config.distribution_strategy == "multi_worker" and config.num_gpus == 1
    assert config.all_reduce == "nccl" and config.jit_compile == "true"
    assert config.precision == "mixed_float16" and config.allreduce_dtype == "float16"
    # Decay to zero over 3 epochs of 40 GB.
    epoch_steps = CORPUS_BYTES / (config.batch_size * config.seq_length)
    assert config.schedule_steps == config.max_steps == round(3 * epoch_steps)
    assert config.lr_decay == "linear" and 0 < config.warmup_steps < epoch_steps / 10
    assert config.checkpoint_every_steps <= 250  # at most ~12 minutes of 128 GPUs lost


def test_dgx1_recipe_is_8_gpus_of_256_rows(configs):
    config = configs["dgx1_4096"]
    assert config.batch_size == 8 * 256
    assert config.distribution_strategy == "mirrored" and config.num_gpus == 8
    assert config.precision == "mixed_float16" and config.jit_compile == "true"
    paper = configs["paper_4096_32k"]
    for field in (
        "hidden_size",
        "embedding_size",
        "seq_length",
        "lr",
        "lr_base_batch",
        "lr_scaling",
        "max_lr",
        "clip_norm",
    ):
        assert getattr(config, field) == getattr(paper, field), field


def test_large_batch_rule_is_capped_sqrt_not_linear(configs):
    for config in (configs[name] for name in RECIPES):
        assert (config.lr, config.lr_base_batch) == (PAPER_BASE_LR, PAPER_BASE_BATCH)
        assert config.lr_scaling == "sqrt" and config.max_lr > 0
    paper = configs["paper_4096_32k"]
    peak = schedules.peak_learning_rate(
        paper.lr, paper.batch_size, paper.lr_base_batch, paper.lr_scaling, paper.max_lr
    )
    linear = schedules.peak_learning_rate(paper.lr, paper.batch_size, paper.lr_base_batch, "linear")
    assert peak == paper.max_lr < math.sqrt(256) * PAPER_BASE_LR < linear
    dgx = configs["dgx1_4096"]
    assert schedules.peak_learning_rate(
        dgx.lr, dgx.batch_size, dgx.lr_base_batch, dgx.lr_scaling, dgx.max_lr
    ) == pytest.approx(4 * PAPER_BASE_LR)


def test_cpu_recipe_oversamples_the_amazon_files_of_its_conversion_command(configs):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tf_mlstm.data import pipeline  # pylint: disable=g-import-not-at-top

    config = configs["cpu_reviews"]
    header = (REPO / "flags" / "cpu_reviews.flags").read_text()
    inputs = header.split("--input=")[1].split("--text_key")[0]
    sources = [p.strip(" #\\\n") for p in inputs.split(",")]
    assert [s.rsplit("/", 1)[-1] for s in sources] == ["books.jsonl", "dvd.jsonl", "unsup.jsonl"]
    rules = pipeline.parse_source_repeats(config.source_repeats)
    copies = pipeline.source_copies(tf.constant(sources), rules).numpy().tolist()
    assert copies == [4, 4, 1]
    assert config.shuffle_buffer >= 8 * 1024
