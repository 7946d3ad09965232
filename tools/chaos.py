r"""Runs a training command under a seeded random schedule of faults, and checks the end.

The command (`tf-mlstm-train` or `tf-mlstm-finetune` with its flags, run as
one process or as `--num_workers` workers through the local launcher) is
first run once without faults: the reference. Then the same command runs
in another folder under faults, relaunched after each exit, until it
finishes. Each launch meets one fault of the seeded schedule:

- a signal (SIGKILL, SIGTERM, SIGINT) to the process, a worker or the
  launcher, at a random moment of the launch;
- the same signals at a named moment (`tf_mlstm.failpoints`): the
  workers' agreement on the checkpoint to resume from, a worker's own state
  written but its checkpoint not yet committed, the chief's save, the
  export;
- a disk that fills while the run writes (the run folder on a tmpfs of
  `--disk_mb`; root only), emptied again before the relaunch;
- the newest checkpoint damaged (cut short) before the relaunch.

The checker, once the run finished: its final weights equal the
reference's bit for bit (`weights_sha256`, what every run reports); every
step's loss, from the launch whose work was kept, equals the reference's
(each step trained on the same records, so every record was read as often
as in the run never stopped); no leftover (a staging file or folder, a
lock, TensorFlow's `_temp` checkpoint folder) is in the run folder; the
export has the reference's versions; and every launch ended with the
status documented for its fault (docs/reliability.md), without a traceback.

  python tools/chaos.py --output_dir=/tmp/chaos --faults=20 --seed=1 \
      --num_workers=2 -- tf-mlstm-train --max_steps=200 --checkpoint_every_steps=10

It prints one line per fault (what, where, the exit status, the seconds
it cost, the steps redone) and a summary, writes `chaos.json` under
`--output_dir`, and exits 1 when a check fails.
"""

import contextlib
import dataclasses
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from absl import app
from absl import flags

from tf_mlstm import errors
from tf_mlstm import failpoints
from tf_mlstm.cli import _main

LAUNCHER = pathlib.Path(__file__).resolve().parent / "launch_local_workers.py"
# A progress line: "step 12/40  loss 5.4851 ...", prefixed by "[worker 0] " through the launcher.
_STEP_LINE = re.compile(r"^(?:\[worker 0\] )?[IWEF]\d{4} .*\] step (\d+)/\d+\s+loss (\S+)")
# What `tf_mlstm.failpoints` prints as it acts.
_FAILPOINT_LINE = "failpoint "
# Training is over in a launch that logged its last step or found the run finished.
_FINAL = re.compile(r"\] step (\d+)/\1 |already finished at step")
_RESUMED = re.compile(r"Resumed from \S*ckpt-(\d+)|already finished at step (\d+)")
# What a fault may leave in a run folder while it runs, and nothing may leave once it finished.
_LEFTOVER = re.compile(r"^(\.tmp-|\.old-|\.lock-)|_temp$|^run\.lock$|\.tmp$")
KINDS = ("signal", "failpoint", "damage", "disk")
# The exit statuses docs/reliability.md gives each signal: after SIGKILL the signal's own;
# after SIGTERM 75 (a checkpoint, or nothing to save yet), or death by it once training
# ended; after Ctrl-C 130; a full disk 1. The launcher returns its first failed worker's.
_STATUSES = {
    "kill": {-signal.SIGKILL, 128 + signal.SIGKILL},
    "term": {75, -signal.SIGTERM, 128 + signal.SIGTERM},
    "int": {130, -signal.SIGINT},
    "disk": {1},
}


@dataclasses.dataclass
class Fault:
    """One fault of the schedule and what became of it."""

    kind: str  # "signal", "failpoint", "damage", "disk"
    action: str = ""  # "kill", "term", "int"
    target: str = "process"  # "process", "launcher", "worker N"
    moment: str = ""  # a failpoint's moment, or "at S s" for a timed one
    delay_s: float = 0.0
    hit: int = 1
    status: int | None = None
    seconds: float = 0.0
    last_step: int = 0
    resumed_from: int | None = None
    reached: bool = True
    backstop: bool = False  # a failpoint's signal sent at delay_s: its moment never came
    verdict: str = ""

    def describe(self) -> str:
        """One line: what, where, when."""
        if self.kind == "damage":
            return "the newest checkpoint cut short before the launch"
        if self.kind == "disk":
            return f"disk full at {self.delay_s:.1f} s"
        when = f"{self.moment} #{self.hit}" if self.kind == "failpoint" else f"{self.delay_s:.1f} s"
        if self.backstop:
            when += f" (not reached in {self.delay_s:.1f} s: sent then)"
        return f"SIG{self.action.upper()} to the {self.target} at {when}"


def schedule(rng, count, num_workers, kinds, window_s):
    """The seeded list of `count` faults.

    Args:
      rng: a `random.Random`.
      count: how many faults.
      num_workers: 1 (one process) or more (the launcher's workers).
      kinds: the fault kinds allowed (`KINDS`).
      window_s: timed faults land between a tenth of it and all of it after a launch
        starts.

    Returns:
      A list of `Fault`.
    """
    faults = []
    targets = (
        ["process"]
        if num_workers == 1
        else ["launcher"] + [f"worker {i}" for i in range(num_workers)]
    )
    for _ in range(count):
        kind = rng.choice(kinds)
        fault = Fault(kind=kind)
        if kind in ("signal", "failpoint"):
            fault.action = rng.choice(sorted(failpoints.ACTIONS))
            fault.target = rng.choice(targets)
        if kind == "signal" or kind == "disk":
            fault.delay_s = round(rng.uniform(0.1, 1.0) * window_s, 2)
        if kind == "failpoint":
            fault.delay_s = window_s
            # Export happens once, at the end; the others at each checkpoint.
            fault.moment = rng.choice(failpoints.MOMENTS)
            fault.hit = 1 if fault.moment in ("export", "resume") else rng.randint(1, 3)
        faults.append(fault)
    return faults


def _with_model_dir(command, model_dir):
    if any(arg.startswith(("--model_dir=", "--model_dir")) for arg in command[1:]):
        raise errors.InvalidValueError(
            "the command names --model_dir: leave it out, chaos gives the reference run and the "
            "faulted run folders of their own under --output_dir"
        )
    return [*command, f"--model_dir={model_dir}", "--log_every_steps=1"]


def _launch_command(command, num_workers, grace_s):
    if num_workers == 1:
        return list(command)
    return [
        sys.executable,
        str(LAUNCHER),
        f"--num_workers={num_workers}",
        f"--grace_s={grace_s}",
        "--",
        *command,
    ]


def _children(pid):
    """The pids of `pid`'s child processes (Linux's /proc), in start order."""
    kids = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            kids += [int(k) for k in (task / "children").read_text().split()]
    return sorted(kids)


def _worker_pid(launcher_pid, index):
    """Worker `index`'s pid: the launcher's children, started in worker order."""
    kids = _children(launcher_pid)
    return kids[index] if index < len(kids) else None


class _Disk:
    """The run folder on a tmpfs of `size_mb`, which a ballast file can fill."""

    def __init__(self, path, size_mb):
        self.path = path
        self.ballast = path / ".chaos-ballast"
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
            check=True,
            capture_output=True,
        )

    def fill(self):
        """Takes every free byte, so the run's next write fails."""
        with contextlib.suppress(OSError), open(self.ballast, "ab") as f:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()

    def empty(self):
        with contextlib.suppress(FileNotFoundError):
            self.ballast.unlink()

    def unmount(self):
        """Unmounts the tmpfs, keeping the run folder's files in its place on the real disk."""
        self.empty()
        kept = self.path.with_name(self.path.name + ".kept")
        shutil.copytree(self.path, kept, symlinks=True)
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)
        shutil.rmtree(self.path)
        kept.rename(self.path)


def _damage_newest_checkpoint(model_dir):
    """Cuts the newest checkpoint's data file to half; returns its step or None."""
    data = sorted(
        (model_dir / "checkpoints").glob("ckpt-*.data-*"),
        key=lambda p: int(re.search(r"ckpt-(\d+)", p.name).group(1)),
    )
    if not data:
        return None
    newest = data[-1]
    size = newest.stat().st_size
    with open(newest, "r+b") as f:
        f.truncate(size // 2)
    return int(re.search(r"ckpt-(\d+)", newest.name).group(1))


def _run_launch(argv, log_path, timeout_s, fault=None, num_workers=1, disk=None):
    """One launch of `argv`, with `fault` injected; returns (status, seconds, output)."""
    env = dict(os.environ)
    env.pop(failpoints.ENV, None)
    if fault is not None and fault.kind == "failpoint":
        action = fault.action + ("-launcher" if fault.target == "launcher" else "")
        worker = fault.target.split()[-1] if fault.target.startswith("worker") else ""
        env[failpoints.ENV] = ":".join(filter(None, [fault.moment, str(fault.hit), action, worker]))
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        timer = None
        if fault is not None and fault.kind != "damage":
            timer = threading.Timer(
                fault.delay_s, _inject, args=(proc, fault, num_workers, disk, log_path)
            )
            timer.start()
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise errors.UserError(
                f"a launch ran past --launch_timeout_s={timeout_s}: {log_path}"
            ) from None
        finally:
            if timer is not None:
                timer.cancel()
    return status, time.monotonic() - start, log_path.read_text(errors="replace")


def _inject(proc, fault, num_workers, disk, log_path):
    if proc.poll() is not None:
        fault.reached = fault.kind == "failpoint"  # A failpoint ended the launch before.
        return
    if fault.kind == "failpoint" and _FAILPOINT_LINE in log_path.read_text(errors="replace"):
        return  # Its moment came; the run is still on its way out.
    if fault.kind == "failpoint":
        # Its moment did not come within the window (an export before the run's end):
        # the signal goes now, so every launch meets its fault.
        fault.backstop = True
    if fault.kind == "disk":
        disk.fill()
        return
    pid = proc.pid
    if fault.target.startswith("worker"):
        pid = _worker_pid(proc.pid, int(fault.target.split()[-1]))
    if pid is None:
        fault.reached = False
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, failpoints.ACTIONS[fault.action])


def _losses(text):
    """{step: loss as printed} of a launch's progress lines (the chief's)."""
    return {int(m.group(1)): m.group(2) for m in map(_STEP_LINE.match, text.splitlines()) if m}


def _leftovers(model_dir):
    return sorted(
        str(p.relative_to(model_dir))
        for p in model_dir.rglob("*")
        if _LEFTOVER.search(p.name) and p.name != ".chaos-ballast"
    )


def _exports(model_dir):
    export = model_dir / "export"
    return sorted(p.name for p in export.iterdir()) if export.is_dir() else []


def _results(model_dir):
    path = model_dir / "results.json"
    return json.loads(path.read_text()) if path.exists() else None


def run_chaos(
    command,
    output_dir,
    faults=10,
    seed=0,
    num_workers=1,
    kinds=("signal", "failpoint", "damage"),
    disk_mb=0,
    grace_s=30.0,
    fault_window_s=0.0,
    launch_timeout_s=600.0,
    max_launches=None,
    out=sys.stdout,
):
    """Runs `command` once as the reference, then under `faults` faults (module doc).

    Args:
      command: the training command and its flags, without `--model_dir`.
      output_dir: where the reference run, the faulted run, the launch logs and
        `chaos.json` go.
      faults: how many faults the schedule holds.
      seed: the schedule's seed: the same seed, the same schedule.
      num_workers: 1 runs the command as one process; more, through the local launcher.
      kinds: the kinds of fault drawn from (`KINDS`); "disk" needs `disk_mb`.
      disk_mb: the tmpfs size of the faulted run folder (root only); 0: no disk faults.
      grace_s: the launcher's `--grace_s`.
      fault_window_s: timed faults land within this many seconds of a launch's start
        (0: the reference launch's duration).
      launch_timeout_s: a launch that runs longer fails the chaos run.
      max_launches: at most this many launches (default: faults + 5).
      out: where the per-fault lines and the summary go.

    Returns:
      The report: `ok`, `checks` (name -> passed), `faults` (one dict each), `injected`,
      `survived`, `launches`, `reference_s`, `chaos_s`.

    Raises:
      errors.InvalidValueError: a bad argument.
    """
    kinds = tuple(kinds)
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        raise errors.InvalidValueError(f"kinds must be among {', '.join(KINDS)}, got {kinds}")
    if "disk" in kinds and not disk_mb:
        raise errors.InvalidValueError("kinds has disk: give disk_mb, the run folder's tmpfs size")
    if not command:
        raise errors.InvalidValueError("no command to run (give it after --)")
    _with_model_dir(command, "")  # A command that names --model_dir is refused here.
    output = pathlib.Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    reference_dir, run_dir = output / "reference", output / "run"
    for folder in (reference_dir, run_dir):
        if folder.exists() and any(folder.iterdir()):
            raise errors.InvalidValueError(f"{folder} is not empty: give a new --output_dir")

    def launch(model_dir, log_name, fault=None, disk=None):
        argv = _launch_command(_with_model_dir(command, model_dir), num_workers, grace_s)
        return _run_launch(argv, output / log_name, launch_timeout_s, fault, num_workers, disk)

    status, reference_s, text = launch(reference_dir, "reference.log")
    reference = _results(reference_dir)
    if status != 0 or reference is None:
        raise errors.UserError(
            f"the reference run failed (status {status}); its log: {output / 'reference.log'}"
        )
    reference_losses = _losses(text)
    rng = random.Random(seed)
    plan = schedule(rng, faults, num_workers, kinds, fault_window_s or reference_s)
    disk = _Disk(run_dir, disk_mb) if disk_mb else None
    kept_losses, launches, done, chaos_start = {}, [], [], time.monotonic()
    limit = max_launches or faults + 5
    try:
        while len(launches) < limit:
            fault = plan[len(done)] if len(done) < len(plan) else None
            if fault is not None and fault.kind == "damage":
                # Before a launch, and the launch meets the schedule's next fault too.
                damaged = _damage_newest_checkpoint(run_dir)
                fault.reached, fault.hit = damaged is not None, damaged or 0
                fault.verdict = "ok" if damaged is None else ""
                done.append(fault)
                continue
            status, seconds, text = launch(run_dir, f"launch-{len(launches):03d}.log", fault, disk)
            launches.append({"status": status, "seconds": round(seconds, 2), "log": text})
            if disk is not None:
                disk.empty()
            losses = _losses(text)
            resumed = _RESUMED.search(text)
            resumed = (
                int(next(filter(None, resumed.groups()))) if resumed else (0 if losses else None)
            )
            for number, earlier in enumerate(done, 1):
                if earlier.resumed_from is None and resumed is not None:
                    earlier.resumed_from = resumed
                    if earlier.kind == "damage" and not earlier.verdict:
                        # The cut checkpoint is never restored: an intact older one is.
                        ok = resumed < earlier.hit and "Traceback" not in text
                        earlier.verdict = "ok" if ok else f"resumed from step {resumed}"
                    print(_fault_line(number, earlier), file=out, flush=True)
            kept_losses.update(losses)
            if fault is not None:
                fault.status, fault.seconds = status, round(seconds, 2)
                fault.last_step = max(losses, default=0)
                fault.verdict = _verdict(fault, status, text)
                done.append(fault)
            if status == 0 and _results(run_dir) is not None:
                break  # Finished: faults left in the schedule are not injected.
    finally:
        if disk is not None:
            disk.empty()
    for number, fault in enumerate(done, 1):
        if fault.resumed_from is None:
            print(_fault_line(number, fault), file=out, flush=True)
    chaos_s = time.monotonic() - chaos_start
    final = _results(run_dir)
    checks = {
        "finished": bool(launches) and launches[-1]["status"] == 0 and final is not None,
        "weights equal the reference's": bool(final)
        and final.get("weights_sha256") == reference["weights_sha256"]
        and final.get("step") == reference["step"],
        # Vacuous unless the reference logged a loss for every step.
        "every step's loss equals the reference's": kept_losses == reference_losses
        and sorted(reference_losses) == list(range(1, reference["step"] + 1)),
        "no leftovers": not (leftovers := _leftovers(run_dir)),
        "the reference's exports": _exports(run_dir) == _exports(reference_dir),
        "every exit documented, no traceback": all(f.verdict == "ok" for f in done),
    }
    if disk is not None:
        disk.unmount()
    injected = [f for f in done if f.reached]
    report = {
        "ok": all(checks.values()),
        "checks": checks,
        "faults": [dataclasses.asdict(f) for f in done],
        "injected": len(injected),
        "survived": sum(f.verdict == "ok" for f in injected) if checks["finished"] else 0,
        "launches": len(launches),
        "reference_s": round(reference_s, 1),
        "chaos_s": round(chaos_s, 1),
        "leftovers": leftovers,
        "seed": seed,
    }
    (output / "chaos.json").write_text(json.dumps(report, indent=1) + "\n")
    print(_summary(report, checks), file=out, flush=True)
    return report


def _verdict(fault, status, text):
    """ "ok", or what was wrong with the launch's end."""
    if "Traceback (most recent call last)" in text:
        return "a traceback"
    expected = set(_STATUSES[fault.action or fault.kind])
    if fault.action == "term" and not _FINAL.search(text):
        # Death by SIGTERM is documented only once training ended (the results, the export).
        expected = {75}
    if fault.action == "int" and fault.target.startswith("worker"):
        # Every worker stops at the agreed step; one that got no signal itself exits 75,
        # and the launcher says the status of the first worker to end.
        expected.add(75)
    if not fault.reached or status == 0:
        # The fault came after the run finished (or its moment never came): a whole launch.
        fault.reached = fault.reached and status != 0
        expected.add(0)
    return "ok" if status in expected else f"status {status}, documented {sorted(expected)}"


def _fault_line(number, fault):
    redone = ""
    if fault.resumed_from is not None:
        redone = f", the relaunch resumed from step {fault.resumed_from}"
    if fault.kind == "damage":
        what = f"ckpt-{fault.hit}" if fault.reached else "not reached: no checkpoint yet"
        return f"fault {number}: {fault.describe()} ({what}){redone}: {fault.verdict}"
    return (
        f"fault {number}: {fault.describe()}: status {fault.status} after {fault.seconds:.1f} s, "
        f"last step {fault.last_step}{redone}: {fault.verdict}"
        + ("" if fault.reached else " (not reached: the launch ended first)")
    )


def _summary(report, checks):
    lines = [
        f"faults injected {report['injected']}, survived {report['survived']}; "
        f"{report['launches']} launches in {report['chaos_s']:.0f} s "
        f"(the run without faults: {report['reference_s']:.0f} s)"
    ]
    lines += [f"  {'ok  ' if passed else 'FAIL'} {name}" for name, passed in checks.items()]
    if report["leftovers"]:
        lines.append(f"  left in the run folder: {', '.join(report['leftovers'])}")
    return "\n".join(lines)


FLAGS = flags.FLAGS


def define_flags():
    flags.DEFINE_string("output_dir", None, "Where the runs, the launch logs and chaos.json go.")
    flags.DEFINE_integer("faults", 10, "How many faults the schedule holds.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "The schedule's seed.")
    flags.DEFINE_integer(
        "num_workers", 1, "Workers (more than 1: the local launcher).", lower_bound=1
    )
    flags.DEFINE_list(
        "kinds", ["signal", "failpoint", "damage"], f"Fault kinds: {', '.join(KINDS)}."
    )
    flags.DEFINE_integer(
        "disk_mb", 0, "tmpfs size of the faulted run folder, for disk faults (root)."
    )
    flags.DEFINE_float("grace_s", 30.0, "The launcher's --grace_s.")
    flags.DEFINE_float(
        "fault_window_s",
        0.0,
        "Timed faults land within this many seconds of a launch's start "
        "(0: the reference launch's duration).",
    )
    flags.DEFINE_float("launch_timeout_s", 600.0, "A launch running longer fails the chaos run.")


def main(argv):
    command = argv[1:]
    if command and command[0] == "--":
        command = command[1:]
    report = _main.run_body(
        lambda _: run_chaos(
            command,
            FLAGS.output_dir,
            faults=FLAGS.faults,
            seed=FLAGS.seed,
            num_workers=FLAGS.num_workers,
            kinds=FLAGS.kinds,
            disk_mb=FLAGS.disk_mb,
            grace_s=FLAGS.grace_s,
            fault_window_s=FLAGS.fault_window_s,
            launch_timeout_s=FLAGS.launch_timeout_s,
        ),
        None,
    )
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("output_dir")
    app.run(main)
