"""Distribution strategies by name, and the multi-worker chores around them."""

import atexit
import contextlib
import hashlib
import itertools
import json
import os
import shutil
import socket
import tempfile
import threading
import time

import tensorflow as tf
from absl import logging

# The coordination service and the context flag below have no public API in
# TensorFlow 2.21; `MultiWorkerMirroredStrategy` itself uses the same calls.
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
from tensorflow.python.eager import context as tf_context

from tf_mlstm import errors
from tf_mlstm.config import ALL_REDUCE
from tf_mlstm.config import STRATEGIES
from tf_mlstm.errors import setting_name as _name

CLUSTER_RESOLVERS = ("tf_config", "slurm")

# Jobs that run the training loop and take part in collectives.
_TRAINING_JOBS = ("chief", "worker")

_COMMUNICATION = {
    "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
    "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
}

_TEMP_ROOT_PREFIX = "tf_mlstm_workertemp_"

# Collective keys (group and instance) each `MirroredStrategy` may use.
_COLLECTIVE_KEY_RANGE = 100_000

# How a collective or a barrier fails once the coordination service has
# noticed that a peer task is gone (heartbeat timeout) or has cancelled the
# pending ops.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
)

# The barrier after `finalize`'s all-reduce: every worker reaches it within
# moments of the others (the all-reduce already waited for the slowest), so
# its timeout only bounds a peer lost in between.
_FINAL_BARRIER_TIMEOUT_S = 300
_FINALIZE_CALLS = itertools.count()
_START_UP_CALLS = itertools.count()


# The coordination service key TensorFlow's preemption notifier sets on SIGTERM.
_PREEMPTION_NOTICE_KEY = "TF_DEFAULT_PREEMPTION_NOTICE_KEY"


class PeerWorkerError(errors.UserError, RuntimeError):
    """Another worker of the cluster stopped (crashed, killed, preempted) mid-run.

    Example:

    >>> from tf_mlstm import errors
    >>> from tf_mlstm.train.strategy import PeerWorkerError
    >>> errors.is_user_error(PeerWorkerError("worker 0 stops at step 6: a peer worker stopped"))
    True
    """


def get_distribution_strategy(
    strategy: str = "default",
    num_gpus: int | None = None,
    all_reduce: str = "auto",
    cluster_resolver: str = "tf_config",
    timeout_s: float = 300,
    heartbeat_timeout_s: float = 10,
    collective_timeout_s: float = 0,
) -> tf.distribute.Strategy:
    """Builds a distribution strategy by name; call it before any TensorFlow op runs.

    Args:
      strategy: "default", "one_device", "mirrored" (all local GPUs) or "multi_worker".
      num_gpus: GPUs to use per worker; None uses all visible ones.
      all_reduce: "auto", "ring" or "nccl" (needs GPUs): the collective implementation.
      cluster_resolver: "tf_config" (`TF_CONFIG`) or "slurm" (the Slurm job step).
      timeout_s: multi_worker: how long start-up waits for every worker to register.
      heartbeat_timeout_s: multi_worker: how long a silent worker is presumed alive.
      collective_timeout_s: multi_worker: how long a collective waits for its peers (0: forever).

    Returns:
      The strategy.

    Raises:
      ValueError: an unknown name, an impossible device request, or a bad cluster description.
      TimeoutError: multi_worker: not every worker registered within `timeout_s`.
      RuntimeError: multi_worker: the runtime was already initialized, or the server not started.
    """
    _check_choice("strategy", strategy, STRATEGIES)
    _check_choice("all_reduce", all_reduce, ALL_REDUCE)
    _check_choice("cluster_resolver", cluster_resolver, CLUSTER_RESOLVERS)
    if num_gpus is not None and num_gpus < 0:
        raise errors.InvalidValueError(
            f"num_gpus must be >= 0 or None (all visible), got {num_gpus}"
        )
    if timeout_s <= 0 or heartbeat_timeout_s <= 0:
        raise errors.InvalidValueError(
            f"timeout_s and heartbeat_timeout_s must be > 0, got {timeout_s} and "
            f"{heartbeat_timeout_s}"
        )
    if not collective_timeout_s >= 0:
        raise errors.InvalidValueError(
            f"collective_timeout_s must be >= 0, got {collective_timeout_s}"
        )

    if strategy != "multi_worker":
        check_no_unused_cluster(strategy, os.environ)
    if strategy == "default":
        return tf.distribute.get_strategy()
    if strategy == "multi_worker":
        return _multi_worker_strategy(
            num_gpus,
            all_reduce,
            cluster_resolver,
            timeout_s,
            heartbeat_timeout_s,
            collective_timeout_s,
        )

    gpus = _num_local_gpus(num_gpus)
    if all_reduce == "nccl" and not gpus:
        raise errors.InvalidValueError("all_reduce='nccl' needs GPUs, but this machine uses none")
    if strategy == "one_device":
        if gpus > 1:
            raise errors.InvalidValueError(
                f"strategy 'one_device' uses one device, got num_gpus={num_gpus}"
            )
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    devices = [f"/gpu:{i}" for i in range(gpus)] or ["/cpu:0"]
    return mirrored_strategy(devices, _mirrored_cross_device_ops(all_reduce, gpus))


def check_no_unused_cluster(strategy, environ) -> None:
    """Refuses a cluster that a one-machine `strategy` would ignore (each task training alone).

    Args:
      strategy: the `--distribution_strategy` (not "multi_worker").
      environ: the environment.

    Raises:
      ValueError: `TF_CONFIG` is invalid or names several tasks, or a Slurm step has several.
    """
    if environ.get("TF_CONFIG", "").strip():
        config = parse_tf_config(environ["TF_CONFIG"])
        tasks = sum(len(addresses) for addresses in config["cluster"].values())
        if tasks > 1:
            task = config["task"]
            raise errors.InvalidValueError(
                f"TF_CONFIG describes a cluster of {tasks} tasks (this is {task['type']} "
                f"{task['index']}), but {_name('distribution_strategy')}={strategy} trains on "
                "this machine alone, so every task would train a model of its own: pass "
                f"{_name('distribution_strategy')}=multi_worker, or unset TF_CONFIG"
            )
    slurm_tasks = environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS") or ""
    if environ.get("SLURM_PROCID") is not None and slurm_tasks.isdigit() and int(slurm_tasks) > 1:
        raise errors.InvalidValueError(
            f"this is task {environ['SLURM_PROCID']} of {slurm_tasks} of a Slurm job step, but "
            f"{_name('distribution_strategy')}={strategy} trains on this machine alone: pass "
            f"{_name('distribution_strategy')}=multi_worker {_name('cluster_resolver')}=slurm, "
            "or start one task"
        )


def mirrored_strategy(devices, cross_device_ops=None) -> tf.distribute.MirroredStrategy:
    """A `MirroredStrategy` over `devices` with collective keys no other strategy here uses.

    Args:
      devices: device names, e.g. ["/gpu:0", "/gpu:1"].
      cross_device_ops: a `tf.distribute.CrossDeviceOps`, or None for TensorFlow's default.

    Returns:
      The strategy.
    """
    # Private in TensorFlow 2.21; read by the constructor.
    tf.distribute.MirroredStrategy._collective_key_base += _COLLECTIVE_KEY_RANGE
    return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross_device_ops)


def parse_tf_config(env_value: str) -> dict:
    """Parses and checks a `TF_CONFIG` value.

    Args:
      env_value: the JSON text, e.g. `{"cluster": {"worker": ["h0:2222"]}, "task": {...}}`.

    Returns:
      The dict, with "cluster" (job -> ["host:port"]) and "task" ({"type": str, "index": int}).

    Raises:
      ValueError: one line naming what is malformed or missing.
    """
    try:
        config = json.loads(env_value)
    except json.JSONDecodeError as e:
        raise errors.InvalidValueError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise errors.InvalidValueError(
            f"TF_CONFIG must be a JSON object, got {type(config).__name__}"
        )
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise errors.InvalidValueError(
            'TF_CONFIG has no "cluster" object mapping job names to address lists'
        )
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise errors.InvalidValueError('TF_CONFIG has no "task" object with "type" and "index"')
    _check_cluster(cluster, task["type"], task["index"], source="TF_CONFIG")
    return config


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this worker keeps outputs: the "chief" task, else worker 0 (no cluster: True).

    Args:
      strategy: the run's strategy.

    Returns:
      True on the chief.
    """
    cluster, task_type, task_id = _cluster_view(strategy)
    if not cluster or task_type is None:
        return True
    if task_type == "chief":
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def worker_info(strategy: tf.distribute.Strategy) -> tuple[str | None, int, int]:
    """Describes this worker's place in the cluster.

    Args:
      strategy: the run's strategy.

    Returns:
      (task type or None, index among the training tasks with the chief first, number of them).
    """
    cluster, task_type, task_id = _cluster_view(strategy)
    if not cluster or task_type is None:
        return None, 0, 1
    num_workers = sum(len(cluster.get(job, ())) for job in _TRAINING_JOBS)
    worker_id = task_id
    if task_type == "worker" and "chief" in cluster:
        worker_id += len(cluster["chief"])
    return task_type, worker_id, num_workers


def write_dirpath(dirpath: str, strategy: tf.distribute.Strategy) -> str:
    """Where this worker writes what `dirpath` would receive (only the chief's files are kept).

    Args:
      dirpath: the folder the chief writes to (any `tf.io.gfile` path).
      strategy: the run's strategy.

    Returns:
      `dirpath` on the chief; elsewhere a local temporary folder, removed at exit at the latest.
    """
    if is_chief(strategy):
        return dirpath
    if not os.path.isdir(_temp_root()):
        atexit.register(shutil.rmtree, _temp_root(), True)
    path = _temp_dirpath(dirpath, strategy)
    os.makedirs(path, exist_ok=True)
    return path


def remove_temp_dirpath(dirpath: str, strategy: tf.distribute.Strategy) -> None:
    """Removes a non-chief worker's temporary folder; a no-op on the chief.

    Args:
      dirpath: the chief's folder as given to `write_dirpath`, or the folder it returned.
      strategy: the run's strategy.
    """
    if is_chief(strategy):
        return
    path = dirpath if _is_temp_dirpath(dirpath) else _temp_dirpath(dirpath, strategy)
    shutil.rmtree(path, ignore_errors=True)
    # Drop the per-task and per-process folders once the last one is gone.
    for parent in (os.path.dirname(path), os.path.dirname(os.path.dirname(path))):
        try:
            os.rmdir(parent)
        except OSError:
            break


def sum_over_replicas(strategy, value_of) -> tf.Tensor:
    """One all-reduce outside the step: a value summed over replicas (every worker calls it).

    Args:
      strategy: the run's strategy.
      value_of: `value_of(replica_context)` -> the replica's float32 tensor.

    Returns:
      The sum, as this worker's first replica holds it.
    """

    @tf.function(autograph=False)
    def _sum():
        def replica_fn():
            context = tf.distribute.get_replica_context()
            return context.all_reduce(tf.distribute.ReduceOp.SUM, value_of(context))

        return strategy.run(replica_fn)

    with collective_deadline():
        return strategy.experimental_local_results(_sum())[0]


class _CollectiveDeadline:
    """Aborts this process's collectives when one waits past `timeout_s`."""

    def __init__(self):
        self.timeout_s = 0.0  # set by the multi-worker strategy; 0: wait forever
        self._lock = threading.Condition()
        self._deadline = None
        self._watcher = None

    @contextlib.contextmanager
    def armed(self):
        if not self.timeout_s:
            yield
            return
        with self._lock:
            self._deadline = time.monotonic() + self.timeout_s
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch, name="collective-deadline", daemon=True
                )
                self._watcher.start()
            self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._deadline = None

    def _watch(self):
        with self._lock:
            while True:
                if self._deadline is None:
                    self._lock.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._lock.wait(left)
                    continue
                self._deadline = None
                # The waiting collective fails with DeadlineExceededError, as with a
                # timeout of TensorFlow's own; this process runs no collective after.
                tf_context.context().abort_collective_ops(
                    tf.errors.DEADLINE_EXCEEDED,
                    f"a collective waited longer than collective_timeout_s={self.timeout_s:g}",
                )


_DEADLINE = _CollectiveDeadline()


def collective_deadline() -> contextlib.AbstractContextManager:
    """While inside, a collective of this process fails after `collective_timeout_s` (0: never).

    Returns:
      A context manager.
    """
    return _DEADLINE.armed()


def finalize(strategy: tf.distribute.Strategy) -> None:
    """Synchronizes all workers at the end of a run (an all-reduce, then a barrier).

    Args:
      strategy: the run's strategy.

    Raises:
      PeerWorkerError: a peer stopped before reaching the end of the run.
      RuntimeError: the synchronization counted the wrong number of replicas.
    """
    _, worker, num_workers = worker_info(strategy)
    if num_workers <= 1:
        return

    try:
        total = sum_over_replicas(strategy, lambda context: tf.ones([]))
        # Every worker calls finalize as often as the others (the all-reduce
        # needs it too), so the count names the same barrier on each.
        barrier = f"tf_mlstm_finalize_{next(_FINALIZE_CALLS)}"
        context = tf_context.context()
        context.wait_at_barrier(barrier, _FINAL_BARRIER_TIMEOUT_S * 1000)
        leave_in_order(context, barrier, worker, num_workers)
    except PEER_ERRORS as e:
        first_line = (e.message or str(e)).strip().splitlines()[0]
        raise PeerWorkerError(
            f"final synchronization failed, a peer worker stopped early: {first_line}"
        ) from e
    if int(total.numpy()) != strategy.num_replicas_in_sync:
        raise RuntimeError(
            f"final synchronization counted {int(total.numpy())} replicas, expected "
            f"{strategy.num_replicas_in_sync}"
        )


def leave_in_order(context, barrier: str, worker: int, num_workers: int) -> None:
    """After `barrier`, worker 0 (the coordination service's host) waits for every peer to pass.

    A peer's word is its last call: worker 0 may leave as soon as it reads
    it, before the call's answer is back, so a peer takes a failure of that
    call as done (every worker has passed the final barrier by then).

    Args:
      context: TensorFlow's eager context.
      barrier: the barrier just passed.
      worker: this worker's index.
      num_workers: the workers in the cluster.
    """
    if worker:
        with contextlib.suppress(tf.errors.OpError):
            context.set_config_key_value(f"{barrier}_passed_{worker}", "1")
        return
    for peer in range(1, num_workers):
        context.get_config_key_value(f"{barrier}_passed_{peer}", _FINAL_BARRIER_TIMEOUT_S * 1000)


def stop_agreed_at_start_up(strategy: tf.distribute.Strategy, signalled: bool) -> bool:
    """Whether the run stops before training: any worker got SIGTERM during start-up.

    Args:
      strategy: the run's strategy.
      signalled: whether this worker holds a stop signal.

    Returns:
      True where any worker got the signal (every worker gets the same answer).
    """
    _, worker, num_workers = worker_info(strategy)
    if num_workers <= 1:
        return signalled
    context = tf_context.context()
    agreement = f"tf_mlstm_start_up_{next(_START_UP_CALLS)}"
    stop = signalled or _preemption_noticed(context)
    context.set_config_key_value(f"{agreement}_{worker}", "stop" if stop else "go")
    context.wait_at_barrier(agreement, _FINAL_BARRIER_TIMEOUT_S * 1000)
    return any(
        context.get_config_key_value(f"{agreement}_{peer}", _FINAL_BARRIER_TIMEOUT_S * 1000)
        == "stop"
        for peer in range(num_workers)
    )


def _preemption_noticed(context) -> bool:
    try:
        # The notifier posts the notice up to a second after the signal, and the reply
        # comes over RPC: a second's wait, once a run, tells "none" from "not yet".
        context.get_config_key_value(_PREEMPTION_NOTICE_KEY, timeout_in_ms=1000)
    except tf.errors.OpError:
        return False  # No notice within the time-out: no such signal came.
    return True


# === Multi-worker ===


def _multi_worker_strategy(
    num_gpus, all_reduce, cluster_resolver, timeout_s, heartbeat_timeout_s, collective_timeout_s
):
    resolver, cluster, task_type, task_id = _resolve_cluster(cluster_resolver, num_gpus)
    if cluster_resolver == "tf_config":
        gpus = _restrict_visible_gpus(num_gpus)
    else:
        # Slurm assigns GPUs to tasks itself through CUDA_VISIBLE_DEVICES.
        gpus = resolver.num_accelerators().get("GPU", 0)
    if all_reduce == "nccl" and not gpus:
        raise errors.InvalidValueError("all_reduce='nccl' needs GPUs, but this worker uses none")
    # No per-collective timeout of TensorFlow's: with one, each collective leaves a thread
    # waiting out the timeout, thousands a minute on fast steps, until the process cannot
    # start another ("Resource temporarily unavailable"). `collective_deadline` keeps it.
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=_COMMUNICATION[all_reduce]
    )
    if not cluster:
        logging.info("multi_worker: no cluster configured, running as a single worker")
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
    _DEADLINE.timeout_s = float(collective_timeout_s)
    if task_type not in _TRAINING_JOBS:
        raise errors.InvalidValueError(
            f"multi_worker runs on 'chief' and 'worker' tasks, this task is '{task_type}'"
        )
    _check_port_free(
        cluster[task_type][task_id], f"{task_type} {task_id} at {cluster[task_type][task_id]}"
    )
    ctx = tf_context.context()
    if ctx._initialized:  # pylint: disable=protected-access
        raise RuntimeError(
            "multi_worker: the TensorFlow runtime is already initialized; create the "
            "strategy before running any TensorFlow op"
        )
    leader = "/job:chief/replica:0/task:0" if "chief" in cluster else "/job:worker/replica:0/task:0"
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader=leader,
        cluster_register_timeout_in_ms=int(timeout_s * 1000),
        heartbeat_timeout_in_ms=int(heartbeat_timeout_s * 1000),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(cluster[job]))
            for job in _TRAINING_JOBS
            if job in cluster
        ],
    )
    # Without the barrier only the non-leaders wait for the leader; the
    # leader starts alone and hangs in its first collective.
    ctx.coordination_service.cluster_register_with_barrier = True

    where = f"{task_type} {task_id} at {cluster[task_type][task_id]}"
    logging.info(
        "multi_worker: %s, waiting up to %gs for %d workers to register",
        where,
        timeout_s,
        sum(len(cluster.get(job, ())) for job in _TRAINING_JOBS),
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as e:
        peers = ", ".join(
            f"{job} {i} at {address}"
            for job in _TRAINING_JOBS
            for i, address in enumerate(cluster.get(job, ()))
        )
        raise TimeoutError(
            f"multi_worker: not every worker registered within {timeout_s:g}s "
            f"(this is {where}; cluster: {peers}); check that all workers were started "
            f"with the same cluster and can reach each other"
        ) from e
    except tf.errors.UnknownError as e:
        if "gRPC server" not in str(e):
            raise
        raise errors.UserError(
            f"multi_worker: {where} could not start its server; is the port in use?"
        ) from e


def _check_port_free(address, where):
    """Refuses a task whose own port is taken, before TensorFlow fails on it."""
    port = int(address.rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("", port))
        except OSError as e:
            raise errors.UserError(
                f"multi_worker: port {port} of {where} is in use ({e.strerror}); stop the "
                "process holding it or give this task another port in the cluster"
            ) from None


def _resolve_cluster(name, num_gpus):
    """Returns (resolver, cluster dict, task type, task id), checked."""
    if name == "slurm":
        kwargs = {}
        if num_gpus is not None:
            kwargs = {"gpus_per_task": num_gpus}
            if num_gpus == 0:
                # Otherwise the resolver asks nvidia-smi, absent on CPU nodes.
                kwargs["gpus_per_node"] = 0
        try:
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(**kwargs)
            cluster = resolver.cluster_spec().as_dict()
        except (RuntimeError, ValueError, KeyError) as e:
            raise errors.InvalidValueError(f"slurm cluster resolver: {e}") from None
        _check_cluster(cluster, resolver.task_type, resolver.task_id, source="Slurm")
        return resolver, cluster, resolver.task_type, resolver.task_id

    env_value = os.environ.get("TF_CONFIG", "")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if not env_value.strip():
        return resolver, {}, None, None
    config = parse_tf_config(env_value)
    return resolver, config["cluster"], config["task"]["type"], config["task"]["index"]


def _check_cluster(cluster, task_type, task_index, source):
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise errors.InvalidValueError(
                f"{source} cluster job '{job}' must be a non-empty list of host:port, "
                f"got {addresses!r}"
            )
        for i, address in enumerate(addresses):
            if not _is_host_port(address):
                raise errors.InvalidValueError(
                    f"{source} address {address!r} of {job} {i} is not host:port"
                )
    if not isinstance(task_type, str) or task_type not in cluster:
        raise errors.InvalidValueError(
            f"{source} task type {task_type!r} is not a job of the cluster "
            f"(jobs: {', '.join(sorted(cluster))})"
        )
    if isinstance(task_index, bool) or not isinstance(task_index, int):
        raise errors.InvalidValueError(
            f"{source} task index must be an integer, got {task_index!r}"
        )
    if not 0 <= task_index < len(cluster[task_type]):
        raise errors.InvalidValueError(
            f"{source} task index {task_index} is out of range for job '{task_type}' "
            f"with {len(cluster[task_type])} tasks"
        )


def _is_host_port(address):
    if not isinstance(address, str) or ":" not in address:
        return False
    host, port = address.rsplit(":", 1)
    if host.startswith("["):  # IPv6 literal, "[::1]:2222"
        host = host[1:-1] if host.endswith("]") else ""
    if not host or any(c.isspace() for c in address):
        return False
    return port.isdigit() and 0 < int(port) < 65536


def _cluster_view(strategy):
    """(cluster dict, task type, task id) of a strategy; ({}, None, None) if local."""
    resolver = strategy.cluster_resolver
    if resolver is None:
        return {}, None, None
    cluster = resolver.cluster_spec().as_dict()
    return cluster, resolver.task_type, resolver.task_id


# === Devices ===


def _check_choice(name, value, choices):
    if value not in choices:
        raise errors.InvalidValueError(
            f"unknown {name} {value!r}; choose one of {', '.join(choices)}"
        )


def _num_local_gpus(num_gpus):
    available = len(tf.config.list_physical_devices("GPU"))
    if num_gpus is None:
        return available
    if num_gpus > available:
        raise errors.InvalidValueError(f"num_gpus={num_gpus} but only {available} GPUs are visible")
    return num_gpus


def _restrict_visible_gpus(num_gpus):
    # MultiWorkerMirroredStrategy with TF_CONFIG takes every visible GPU;
    # hiding the rest is the only way to use fewer.
    gpus = tf.config.list_physical_devices("GPU")
    count = _num_local_gpus(num_gpus)
    if count < len(gpus):
        tf.config.set_visible_devices(gpus[:count], "GPU")
    return count


def _mirrored_cross_device_ops(all_reduce, gpus):
    if all_reduce == "nccl":
        return tf.distribute.NcclAllReduce()
    if not gpus:
        return tf.distribute.ReductionToOneDevice()
    if all_reduce == "ring":
        return tf.distribute.HierarchicalCopyAllReduce()
    return None  # TensorFlow's choice for the GPUs it sees.


# === Temporary folders ===


def _temp_root():
    return os.path.join(tempfile.gettempdir(), f"{_TEMP_ROOT_PREFIX}{os.getpid()}")


def _is_temp_dirpath(path):
    return os.path.abspath(path).startswith(_temp_root() + os.sep)


def _temp_dirpath(dirpath, strategy):
    task_type, worker_id, _ = worker_info(strategy)
    # The digest keeps two dirpaths with one basename apart.
    digest = hashlib.sha1(dirpath.encode("utf-8")).hexdigest()[:10]
    name = f"{os.path.basename(dirpath.rstrip('/')) or 'root'}_{digest}"
    return os.path.join(_temp_root(), f"{task_type}_{worker_id}", name)
