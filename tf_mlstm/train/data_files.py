"""Which shards a training run reads, checked before it starts, and its epochs in steps."""

import dataclasses
import math
import os

import tensorflow as tf
from absl import logging

from tf_mlstm import errors
from tf_mlstm import rundir
from tf_mlstm.config import ConvertConfig
from tf_mlstm.config import TrainConfig
from tf_mlstm.data import convert
from tf_mlstm.data import demo
from tf_mlstm.data import fields
from tf_mlstm.data import readers
from tf_mlstm.data import tfrecord
from tf_mlstm.errors import setting_name as _name


def build_demo_tfrecords(output_dir) -> str:
    """Converts the embedded demo corpus (`data.demo`) into `output_dir` unless already there.

    Args:
      output_dir: destination folder for the shards and stats.json.

    Returns:
      output_dir.
    """
    if tf.io.gfile.exists(os.path.join(output_dir, fields.STATS_FILE)):
        return output_dir
    # Converted into a private folder, then renamed: workers of a local
    # multi-worker run all convert at once, and the first rename wins.
    private = f"{output_dir}.tmp-{os.getpid()}"
    convert.convert(
        ConvertConfig(
            input=demo.DEMO_CORPUS,
            output_dir=private,
            num_shards=demo.DEMO_SHARDS,
            split=demo.DEMO_SPLIT,
        )
    )
    try:
        os.rename(private, output_dir)
    except OSError:
        tf.io.gfile.rmtree(private)  # Another worker's copy is already there.
    return output_dir


def resolve_data(config) -> tuple[list[str], list[str]]:
    """The training and validation shard lists for `config`, checked before training.

    An empty `train_data` is the demo corpus; shards without records are left out. Without
    `validation_data`, the validation shards of `train_data`'s folders are used.

    Returns:
      (train_files, validation_files); validation_files may be empty.

    Raises:
      FileNotFoundError: no shards where `train_data` or an explicit `validation_data` points.
      ValueError: the training shards hold no records, a `train_data` glob takes in held-out
        shards, or a folder is incomplete (`tfrecord.IncompleteDataError`).
    """
    train_data = config.train_data
    check_converted("train_data", train_data)
    check_converted("validation_data", config.validation_data)
    if not train_data:
        train_data = build_demo_tfrecords(rundir.demo_data_dir(config.model_dir))
    train_files = tfrecord.split_files(train_data, "train")
    held_out = [
        path
        for path in train_files
        if os.path.basename(path).startswith(tuple(f"{s}-" for s in tfrecord.SPLITS[1:]))
    ]
    if held_out:
        raise errors.InvalidValueError(
            f"{_name('train_data')}={train_data} takes in {len(held_out)} held-out shards such as "
            f"{held_out[0]}: give the data folder, or a glob of its train-* shards"
        )
    train_files = _with_records(train_files, train_data, "train")
    if not train_files:
        raise errors.InvalidValueError(
            f"no training records: every train shard of {train_data} is empty; convert a corpus "
            "with documents into it (see its stats.json)"
        )
    if config.validation_data:
        validation_files = tfrecord.split_files(config.validation_data, "validation")
        source = config.validation_data
    else:
        folders = [train_data] if tf.io.gfile.isdir(train_data) else _folders(train_files)
        validation_files = []
        for folder in folders:
            try:
                validation_files += tfrecord.split_files(folder, "validation")
            except FileNotFoundError:
                pass
        source = ", ".join(folders)
        if not validation_files:
            logging.warning(
                "No validation shards beside %s (in %s): training without validation.",
                train_data,
                source,
            )
            return train_files, []
    validation_files = _with_records(validation_files, source, "validation")
    if not validation_files:
        logging.warning(
            "The validation shards of %s hold no records: training without validation.", source
        )
    return train_files, validation_files


def check_converted(flag, spec) -> None:
    """Raises, with the conversion command, when `--flag=spec` names raw corpus files.

    Args:
      flag, spec: the flag's name, and its value (empty: nothing to check).

    Raises:
      ValueError: `spec` names raw files; the message is the command to run.
    """
    if not spec or tfrecord.is_tfrecord_data(spec):
        return
    files = readers.expand_inputs(spec)
    first = files[0]
    stem = os.path.basename(first).split(".")[0] or "corpus"
    output = os.path.join(
        os.path.dirname(first), f"{stem}_tfrecords" if len(files) == 1 else "tfrecords"
    )
    keys = readers.record_fields(first)
    key_flag = ""
    if keys is not None and not set(keys) & set(fields.TEXT_KEYS):
        key_flag = f" --text_key=<the text field, one of: {', '.join(keys)}>"
    raise errors.InvalidValueError(
        f"{_name(flag)}={spec} names raw corpus files ({first}), and training reads TFRecord "
        "shards: "
        f"convert them once with `tf-mlstm-make-tfrecords --input={spec}{key_flag} "
        f"--output_dir={output}`, then pass {_name(flag)}={output}"
    )


def _folders(files):
    return list(dict.fromkeys(os.path.dirname(path) or "." for path in files))


def _with_records(files, source, split):
    kept = tfrecord.nonempty_files(files)
    if kept and len(kept) < len(files):
        empty = sorted(set(files) - set(kept))
        logging.warning(
            "%d of the %d %s shards of %s hold no records (such as %s): reading the other %d.",
            len(empty),
            len(files),
            split,
            source,
            empty[0],
            len(kept),
        )
    return kept


def steps_for_epochs(config, train_files) -> TrainConfig:
    """`config` with `max_steps` for its `--epochs` (unchanged when epochs is 0).

    One epoch is the training shards' characters (stats.json) over the characters of a step.

    Args:
      config, train_files: the run's `TrainConfig`, and its training shards.

    Returns:
      The config, validated.

    Raises:
      ValueError: a folder of the shards has no stats.json to count from.
    """
    if not config.epochs:
        return config
    chars = tfrecord.split_bytes(train_files, "train")
    per_step = config.batch_size * config.seq_length
    steps = max(1, math.ceil(config.epochs * chars / per_step))
    logging.info(
        "%s=%g: %d training characters / %d a step -> %s=%d.",
        _name("epochs"),
        config.epochs,
        chars,
        per_step,
        _name("max_steps"),
        steps,
    )
    return dataclasses.replace(config, max_steps=steps).validate()
