"""What `tf-mlstm-train` does once its flags are a config.

Separate from the flag definitions so TensorFlow is imported only after the
flags parsed (a usage error answers at once).
"""

import os

from absl import logging

from tf_mlstm import rundir
from tf_mlstm.data import demo
from tf_mlstm.data import tfrecord
from tf_mlstm.export import saved_model
from tf_mlstm.train import loop
from tf_mlstm.train import strategy as strategy_lib


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
    """Trains, then (on the chief) exports the SavedModel.

    Returns:
      The results dict, with `export_dir` added on the chief.
    """
    train_files, validation_files = resolve_data(config)
    trainer = loop.Trainer(config, train_files, validation_files)
    results = trainer.train(finalize=False)
    if strategy_lib.is_chief(trainer.strategy):
        model, _ = rundir.load_trained_model(config.model_dir)
        export_dir = rundir.export_dir(config.model_dir)
        saved_model.export_saved_model(
            saved_model.ServingModule(model),
            export_dir,
            metadata={"config": config.to_json(), "results": results},
        )
        results["export_dir"] = export_dir
    strategy_lib.finalize(trainer.strategy)
    if "validation_bits_per_char" in results:
        print(f"validation bits/char: {results['validation_bits_per_char']:.4f}")
    return results
