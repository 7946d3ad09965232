"""The embedded demo corpus: a few hundred short reviews, so `tf-mlstm-train` runs with no flags."""

import os

import tensorflow as tf

from tf_mlstm.data import convert

DEMO_CORPUS = os.path.join(os.path.dirname(__file__), "demo_corpus.txt")
# Proportions that leave the small corpus a validation and a test split.
DEMO_SPLIT = (16, 1, 1)
DEMO_SHARDS = 4


def build_demo_tfrecords(output_dir) -> str:
    """Converts the demo corpus into `output_dir` unless already there.

    Args:
        output_dir: destination folder for the shards and stats.json.

    Returns:
        output_dir.
    """
    if tf.io.gfile.exists(os.path.join(output_dir, "stats.json")):
        return output_dir
    # Converted into a private folder, then renamed: workers of a local
    # multi-worker run all convert at once, and the first rename wins.
    private = f"{output_dir}.tmp-{os.getpid()}"
    convert.convert(
        convert.ConvertConfig(
            input=DEMO_CORPUS,
            output_dir=private,
            num_shards=DEMO_SHARDS,
            split=DEMO_SPLIT,
        )
    )
    try:
        os.rename(private, output_dir)
    except OSError:
        tf.io.gfile.rmtree(private)  # Another worker's copy is already there.
    return output_dir
