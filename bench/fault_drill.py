"""Fault drill on the local Slurm: what each fault does to a run, and whether it goes on alone.

    .venv/bin/python -m bench.fault_drill [--timeout 600]

(on a shared machine: `flock /tmp/slurm-dev.lock .venv/bin/python -m bench.fault_drill`; it kills
a node's slurmd and brings it back with `scripts/local_slurm.sh up --nodes 2`)

Each fault is done, with tests/doubles/slurm_faults.py, to a run of the training-step double
(tests.doubles.step_trainer: a checkpoint per step, every step logged) launched by the real
launcher and job template, as bench/resubmit_goodput.py launches its runs:

- kill -9 mid-save: the trainer killed while it writes a checkpoint;
- node lost mid-job: the node's slurmd and the job's processes killed; Slurm declares the
  node down (SlurmdTimeout, 60 s here), the job NODE_FAIL, and requeues it;
- node lost at the time limit: the same late in a 1-minute job whose 40 s step is in flight:
  the limit comes first, the job ends TIMEOUT and is not requeued (its successor continues the run);
- the batch script killed (kill -9 of the job's shell alone, an administrator's kill);
- OOM kill of the job: every process under the job's slurmstepd killed (a cgroup OOM kill);
- scancel: the user stops the run (it must stop; a launch resumes it, which the drill does);
- a requeue: an administrator's `scontrol requeue` of the running job.

The two node faults run first, together on one node (the other held by a filler job until both
started; one kill serves both), then the other five at once. Per fault it prints: steps lost
(never trained), steps repeated (trained more than once; the step in flight at the fault may be),
the time from the fault until the run trains again (its next step starts), whether the run went
on without a human, and whether ``scripts/status.sh`` told the truth meanwhile (sampled every
5 s from the fault until the run trained again: no PARKED, failed or finished while it was
continuing; ``cancelled`` after the scancel). Exit 0 when the targets hold: no step lost, none
repeated but the one in flight, every run but the cancelled one continued without a human.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench import resubmit_goodput as rg
from hpc.run import ledger
from hpc.run.ledger import By, Cancelled, JobEnd, JobStart, Requeue
from hpc.run.rundir import RunDir
from hpc.slurm import calls  # the one place that runs Slurm's commands
from tests.doubles import slurm_faults
from tests.doubles.step_trainer import read_steps

SAMPLE_EVERY = 5.0
STATUS = rg.REPO / "scripts" / "status.sh"


@dataclass
class Drill:
    """One fault done to one run."""

    name: str
    steps: int
    minutes: int
    train_args: list[str]
    fault: Callable[[Drill], None]
    grace: int = 30
    env: list[str] = field(default_factory=list)
    continues: bool = True  # the run goes on without a human (all but scancel)
    run: RunDir | None = None
    fault_at: float | None = None  # time.time() of the fault
    in_flight: int | None = None  # the step being trained when the fault came
    resumed_at: float | None = None  # a human's launch (scancel only)
    samples: list[tuple[float, str]] = field(default_factory=list)  # (time, status.sh RESULT)
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def command(self, runs_dir: Path) -> list[str]:
        return rg.launch_command(f"drill_{self.name}", runs_dir, self.minutes, self.grace,
                                 [f"steps={self.steps}", *self.train_args],
                                 ["--continuation", "afterany", *[a for e in self.env for a in ("--env", e)]])


# -- reading a run -----------------------------------------------------------------------------------------


def current_job(run: RunDir) -> str:
    starts = [r.job_id for r in ledger.of_kind(ledger.read(run), JobStart)]
    return starts[-1] if starts else ""


def all_job_ids(run: RunDir) -> list[str]:
    return ledger.job_ids(ledger.read(run))


def saved(run: RunDir) -> int:
    return (run.read_progress() or {}).get("step", 0)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def mark_fault(d: Drill) -> None:
    d.fault_at = time.time()
    d.in_flight = max((s.step for s in read_steps(d.run)), default=0) + 1


# -- the faults ------------------------------------------------------------------------------------------------


def kill_mid_save(d: Drill) -> None:
    wait_until((d.run.path / "saving").exists, 180, "the trainer to start saving")
    pid = int((d.run.path / "trainer.pid").read_text())
    mark_fault(d)
    d.in_flight = int((d.run.path / "saving").read_text())  # trained and logged, its checkpoint half-written
    os.kill(pid, 9)


def after_steps(action: Callable[[str], object]) -> Callable[[Drill], None]:
    """A fault done to the run's current job once three steps are saved."""
    def fault(d: Drill) -> None:
        wait_until(lambda: saved(d.run) >= 3, 180, "three saved steps")
        job = current_job(d.run)
        mark_fault(d)
        action(job)
    return fault


def scancel_then_relaunch(d: Drill) -> None:
    after_steps(lambda job: calls.cancel([job]))(d)
    wait_until(lambda: bool(ledger.of_kind(ledger.read(d.run), Cancelled))
               and not rg.ACTIVE & rg.queue_states(all_job_ids(d.run)), 120, "the cancel to settle")
    sample_status(d)  # what status.sh says of the stopped run
    d.resumed_at = time.time()  # a human launches it again
    result = subprocess.run(d.command(d.run.path.parent), cwd=rg.REPO, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"relaunch failed: {result.stderr.strip()}")


NODE_LOST = threading.Event()
LOST_NODE: list[str] = []


def lose_node_late(d: Drill) -> None:
    """Late in the 1-minute job, its 40 s step in flight: the time limit beats the node check."""
    wait_until(lambda: (d.run.path / "trainer.pid").exists(), 120, "the step to be in flight")
    time.sleep(33)
    mark_fault(d)
    LOST_NODE.append(slurm_faults.lose_node(current_job(d.run)))
    NODE_LOST.set()


def node_lost_with_the_other(d: Drill) -> None:
    """The same node, the same kill, mid-job for this run (its limit is minutes away)."""
    wait_until(lambda: saved(d.run) >= 1, 120, "a saved step")
    node = slurm_faults.node_of(current_job(d.run))
    if not NODE_LOST.wait(180):
        raise TimeoutError("the node was not lost")
    mark_fault(d)
    if node != LOST_NODE[0]:
        raise RuntimeError(f"this run's job ran on {node}, not on the lost node {LOST_NODE[0]}")


# -- following a run -------------------------------------------------------------------------------------------


def status_result(run: RunDir) -> str:
    out = subprocess.run(["bash", str(STATUS), "--runs_dir", str(run.path.parent), "--run", run.name],
                         capture_output=True, text=True, timeout=60).stdout
    row = next((line for line in out.splitlines() if line.startswith(run.name + " ")), "")
    return re.split(r"\s{2,}", row.strip())[-1] if row else "(no row)"


def sample_status(d: Drill) -> None:
    d.samples.append((time.time(), status_result(d.run)))


def trains_again(d: Drill) -> float | None:
    """When the first step after the fault (or after the relaunch) began."""
    since = d.resumed_at or d.fault_at
    starts = [s.start for s in read_steps(d.run) if since is not None and s.start >= since]
    return min(starts) if starts else None


def follow(d: Drill, runs_dir: Path, timeout: float) -> None:
    try:
        result = subprocess.run(d.command(runs_dir), cwd=rg.REPO, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"launch failed: {result.stderr.strip()}")
        d.fault(d)
        deadline = time.monotonic() + timeout
        while not (d.run.done_file.exists() or d.run.failed_file.exists()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the run did not finish within {timeout:.0f}s")
            if trains_again(d) is None:
                sample_status(d)
            time.sleep(SAMPLE_EVERY)
        wait_until(lambda: not rg.ACTIVE & rg.queue_states(all_job_ids(d.run)), 120, "the queue to empty")
    except Exception as err:  # noqa: BLE001 - reported in the table
        d.error = f"{type(err).__name__}: {err}"
    finally:
        d.done.set()


# -- figures ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    fault: str
    lost: list[int]
    repeated: list[int]
    in_flight: int | None
    gap: float | None
    alone: str
    truthful: str
    how: str  # what the ledger says of the job the fault ended

    @property
    def ok(self) -> bool:
        return not self.lost and set(self.repeated) <= {self.in_flight} and self.alone.startswith(("yes", "stopped"))


def row_of(d: Drill) -> Row:
    trained = Counter(s.step for s in read_steps(d.run))
    lost = [k for k in range(1, d.steps + 1) if k not in trained]
    repeated = sorted(k for k, n in trained.items() if n > 1)
    again = trains_again(d)
    gap = None if again is None or d.fault_at is None else again - (d.resumed_at or d.fault_at)
    if d.error:
        alone = f"NO ({d.error})"
    elif d.continues:
        alone = "yes" if d.run.done_file.exists() and d.resumed_at is None else "NO"
    else:
        alone = "stopped, as asked; relaunched" if d.run.done_file.exists() else "NO"
    return Row(d.name, lost, repeated, d.in_flight, gap, alone, truthful(d), lost_job_record(d))


def truthful(d: Drill) -> str:
    if not d.samples:
        return "- (no sample)"
    if not d.continues:
        said = d.samples[0][1]  # taken once the cancel had settled, before the relaunch
        return "yes" if said.startswith("cancelled") else f"NO: {said}"
    wrong = [said for _, said in d.samples if said.startswith(("PARKED", "failed", "finished"))]
    return f"yes ({len(d.samples)} samples)" if not wrong else f"NO: {wrong[0]}"


def lost_job_record(d: Drill) -> str:
    """How the ledger recorded the end of the job the fault hit."""
    records = ledger.read(d.run)
    ends = ledger.of_kind(records, JobEnd)
    requeues = ledger.of_kind(records, Requeue)
    lost = next((r for r in ends if r.slurm_state or r.exit_code is None), None)
    if lost is not None:
        return f"job_end {lost.slurm_state or 'no end hook'}" + (", requeue" if requeues else "")
    first = ends[0] if ends else None
    extra = ", requeue by slurm" if any(r.by == By.SLURM for r in requeues) else ""
    return f"end hook: exit {first.exit_code if first else None}, {first.outcome if first else None}{extra}"


def fmt(steps: list[int]) -> str:
    return ",".join(map(str, steps)) if steps else "none"


def report(rows: list[Row]) -> bool:
    head = ["fault", "lost", "repeated", "in flight", "trains again", "went on alone", "status.sh true", "ledger"]
    cells = [[r.fault, fmt(r.lost), fmt(r.repeated), str(r.in_flight or "-"),
              "-" if r.gap is None else f"{r.gap:.0f} s", r.alone, r.truthful, r.how] for r in rows]
    widths = [max(len(c[k]) for c in [head, *cells]) for k in range(len(head))]
    for line in [head, *cells]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    ok = all(r.ok for r in rows)
    print(f"targets (no step lost, none repeated but the one in flight, every run continued without a human): "
          f"{'met' if ok else 'NOT met'}")
    return ok


# -- running it ---------------------------------------------------------------------------------------------------


NODE_DRILLS = [
    Drill("node_mid_job", 40, 4, [], node_lost_with_the_other),
    Drill("node_at_limit", 2, 1, ["step_seconds=40"], lose_node_late, grace=10, env=["HPC_STOP_TIMEOUT=none"]),
]
OTHER_DRILLS = [
    Drill("kill9_mid_save", 8, 3, ["save_sleep=30", "save_sleep_at=3"], kill_mid_save),
    Drill("batch_script_killed", 12, 3, [], after_steps(slurm_faults.kill_batch_script)),
    Drill("oom_kill_of_job", 12, 3, [], after_steps(slurm_faults.kill_job_processes)),
    Drill("scancel", 12, 3, [], scancel_then_relaunch, continues=False),
    Drill("requeue", 12, 3, [], after_steps(lambda job: calls.requeue(job, in_job=False))),
]


def run_phase(drills: list[Drill], runs_dir: Path, timeout: float, before: Callable[[], None] = lambda: None) -> None:
    threads = []
    for d in drills:
        d.run = RunDir(runs_dir / f"drill_{d.name}")
        threads.append(threading.Thread(target=follow, args=(d, runs_dir, timeout), daemon=True))
    before()
    for thread in threads:
        thread.start()
    for d in drills:
        d.done.wait(timeout + 600)
        print(f"{d.name}: {'error: ' + d.error if d.error else 'settled'}", flush=True)


def hold_the_other_node(drills: list[Drill]) -> Callable[[], None]:
    """Fill n2 until both node drills' jobs run, so they share n1 and one kill serves both."""
    def before() -> None:
        script = drills[0].run.path.parent / "drill_fill.sh"  # run_phase named the runs before this
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text("#!/bin/sh\nsleep 300\n")
        filler = calls.submit(script, options=("--nodelist=n2", "--cpus-per-task=2", "--job-name=drill_fill",
                                               "--output=/dev/null"))
        wait_until(lambda: rg.queue_states([filler]) == {"RUNNING"}, 60, "the filler job to hold n2")

        def release() -> None:
            try:
                wait_until(lambda: all(d.run.path.exists() and current_job(d.run) for d in drills), 180,
                           "both node drills to start")
            except TimeoutError:
                pass
            rg.cancel_quietly([filler])

        threading.Thread(target=release, daemon=True).start()
    return before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=600, help="seconds each run may take after launch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fault_drill_") as tmp:
        runs_dir = Path(tmp) / "runs"
        try:
            run_phase(NODE_DRILLS, runs_dir, args.timeout, hold_the_other_node(NODE_DRILLS))
        finally:
            slurm_faults.restore_nodes(2)
        run_phase(OTHER_DRILLS, runs_dir, args.timeout)
        rows = [row_of(d) for d in NODE_DRILLS + OTHER_DRILLS]
        leftover = [j for d in NODE_DRILLS + OTHER_DRILLS for j in all_job_ids(d.run)] if runs_dir.exists() else []
        if leftover:
            rg.cancel_quietly(leftover)
    print()
    return 0 if report(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
