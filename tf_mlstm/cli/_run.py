"""What `tf-mlstm-train` does once its flags are a config.

Separate from the flag definitions so TensorFlow is imported only after the
flags parsed (a usage error answers at once).
"""

import os

from absl import logging

from tf_mlstm.data import demo
from tf_mlstm.data import tfrecord
from tf_mlstm.export import saved_model
from tf_mlstm.train import loop
from tf_mlstm.train import strategy as strategy_lib
from tf_mlstm.train.config import EXPORT_SUBDIR


def resolve_data(config):
    """The training and validation shard lists for `config`.

    An empty `train_data` means the embedded demo corpus, converted once into
    `model_dir/demo_data`.

    Returns:
      (train_files, validation_files).

    Raises:
      FileNotFoundError: no training shards where `train_data` points.
    """
    train_data = config.train_data
    if not train_data:
        train_data = demo.build_demo_tfrecords(os.path.join(config.model_dir, "demo_data"))
    train_files = tfrecord.split_files(train_data, "train")
    if config.validation_data:
        validation_files = tfrecord.split_files(config.validation_data, "validation")
    else:
        try:
            validation_files = tfrecord.split_files(train_data, "validation")
        except FileNotFoundError:
            logging.warning(
                "No validation shards beside %s: training without " "validation.", train_data
            )
            validation_files = []
    return train_files, validation_files


def train_and_export(config):
    """Trains, then (on the chief) exports the SavedModel as `model_dir/export/<step>`.

    The export folder is checked before training starts, so a folder that
    holds something the exporter did not write stops the run at once rather
    than after the training.

    Returns:
      The results dict, with `export_dir` (the version folder) added on the chief.

    Raises:
      ValueError: `model_dir/export` holds something not written by an export.
    """
    export_base = os.path.join(config.model_dir, EXPORT_SUBDIR)
    saved_model.check_export_base(export_base)
    train_files, validation_files = resolve_data(config)
    trainer = loop.Trainer(config, train_files, validation_files)
    results = trainer.train(finalize=False)
    if strategy_lib.is_chief(trainer.strategy):
        exported = saved_model.export_trained_model(
            config.model_dir, export_base, metadata={"results": results}
        )
        results["export_dir"] = exported["export_dir"]
    strategy_lib.finalize(trainer.strategy)
    if "validation_bits_per_char" in results:
        print(f"validation bits/char: {results['validation_bits_per_char']:.4f}")
    return results
