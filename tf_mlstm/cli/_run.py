"""What `tf-mlstm-train` does once its flags are a config: train, then export.

Training and export are two packages that never import each other, so the
binary is where they meet. Separate from the flag definitions so TensorFlow
is imported only after the flags parsed (a usage error answers at once).
"""

from tf_mlstm import rundir
from tf_mlstm.export import saved_model
from tf_mlstm.train import data_files
from tf_mlstm.train import loop
from tf_mlstm.train import strategy as strategy_lib


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
    export_base = rundir.export_dir(config.model_dir)
    saved_model.check_export_base(export_base)
    train_files, validation_files = data_files.resolve_data(config)
    config = data_files.steps_for_epochs(config, train_files)
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
