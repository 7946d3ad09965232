"""Named moments a fault-injection run (`tools/chaos.py`) can stop a process at.

`reach(name)` does nothing unless `TF_MLSTM_FAILPOINT` names that moment, as
`name:hit:action[:worker]` (comma-separated): on the `hit`-th time this process reaches it
(on worker `worker` only, when given) it sends itself, or with `-launcher` its parent, the
signal of `action`: kill, term or int.
"""

import collections
import json
import os
import signal
import time

ENV = "TF_MLSTM_FAILPOINT"
MOMENTS = ("resume", "checkpoint-state", "checkpoint-commit", "checkpoint-saved", "export")
"""Every moment the code names, in the order a run reaches them."""
ACTIONS = {"kill": signal.SIGKILL, "term": signal.SIGTERM, "int": signal.SIGINT}
_LAUNCHER = "-launcher"
_hits = collections.Counter()


def parse(spec: str) -> list[tuple[str, int, str, int | None]]:
    """`TF_MLSTM_FAILPOINT`'s value as (moment, hit, action, worker or None) tuples.

    Raises:
      ValueError: a part that names no moment or action, or a hit below 1.
    """
    points = []
    for part in filter(None, spec.split(",")):
        fields = part.split(":")
        if len(fields) not in (3, 4):
            raise ValueError(f"{ENV}: {part!r} is not moment:hit:action[:worker]")
        moment, hit, action, worker = (*fields, None)[:4]
        if moment not in MOMENTS or action.removesuffix(_LAUNCHER) not in ACTIONS:
            raise ValueError(
                f"{ENV}: {part!r}: the moments are {', '.join(MOMENTS)}; the actions "
                f"{', '.join(ACTIONS)}, each also with {_LAUNCHER}"
            )
        if not hit.isdigit() or int(hit) < 1:
            raise ValueError(f"{ENV}: {part!r}: the hit must be a whole number from 1")
        points.append((moment, int(hit), action, None if worker is None else int(worker)))
    return points


def reach(moment: str) -> None:
    """This process is at `moment`: acts when `TF_MLSTM_FAILPOINT` names it (module doc)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    _hits[moment] += 1
    for name, hit, action, worker in parse(spec):
        if name != moment or hit != _hits[moment]:
            continue
        if worker is not None and worker != _task_index():
            continue
        target = os.getppid() if action.endswith(_LAUNCHER) else os.getpid()
        # Said first, so whoever set the failpoint knows its moment came.
        os.write(2, f"failpoint {moment} #{hit}: {action}\n".encode())
        os.kill(target, ACTIONS[action.removesuffix(_LAUNCHER)])
        if action == "kill":
            time.sleep(60)  # SIGKILL ends this process before the next line runs.


def _task_index():
    try:
        return int(json.loads(os.environ.get("TF_CONFIG") or "{}")["task"]["index"])
    except (KeyError, TypeError, ValueError):
        return 0
