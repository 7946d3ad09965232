r"""Runs a training command as N multi-worker processes on loopback.

Usage:

  python tools/launch_local_workers.py --num_workers=2 --cpus_per_worker=1 -- \
      tf-mlstm-train --distribution_strategy=multi_worker --model_dir=/tmp/run

Each worker gets its own `TF_CONFIG` (a loopback cluster on free ports), its
output lines prefixed with `[worker i] `, and with `--cpus_per_worker=K` its
own K cores and K-thread TensorFlow pools. When a worker fails the others
are stopped and the launcher exits with the failed worker's status. SIGINT
and SIGTERM are passed on to the workers, and the launcher exits with the
status they end with (75 for a training run that checkpointed on SIGTERM,
130 on Ctrl-C; rerun to resume). A command that is not found is one error line and status 1.
"""

import local_cluster
from absl import app
from absl import flags
from absl import logging

from tf_mlstm.cli import _main


def define_flags():
    """Defines this tool's flags."""
    flags.DEFINE_integer("num_workers", 2, "How many worker processes.", lower_bound=1)
    flags.DEFINE_integer(
        "cpus_per_worker",
        None,
        "Pin worker i to cores [i*K, (i+1)*K) and give TensorFlow K threads; unset: no pinning.",
        lower_bound=1,
    )
    flags.DEFINE_integer(
        "base_port", 0, "First port of the cluster; 0 picks free ports.", lower_bound=0
    )
    flags.DEFINE_float(
        "grace_s",
        30.0,
        "Seconds a worker asked to stop gets (to checkpoint, for training) before SIGKILL.",
        lower_bound=0,
    )


def main(argv):
    command = argv[1:]
    if not command:
        raise app.UsageError("give the training command after --, e.g. -- python train.py")
    flag_values = flags.FLAGS
    status = _main.run_body(
        lambda _: local_cluster.run_local_workers(
            command,
            num_workers=flag_values.num_workers,
            cpus_per_worker=flag_values.cpus_per_worker,
            base_port=flag_values.base_port,
            grace_s=flag_values.grace_s,
        ),
        None,
    )
    logging.info("workers finished with status %d", status)
    return status


def run():
    """Entry point: defines the flags and runs `main`."""
    define_flags()
    app.run(main)


if __name__ == "__main__":
    run()
