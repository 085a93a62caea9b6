"""Fault drill for a Slurm that answers badly, on the local Slurm: one run, one trainer, whatever it says.

    .venv/bin/python -m bench.slurm_answer_drill [--timeout 420]

(on a shared machine: `flock /tmp/slurm-tests.lock .venv/bin/python -m bench.slurm_answer_drill`)

The sibling of bench/fault_drill.py (which kills jobs and nodes) for the moments a real cluster's Slurm
answers badly: ``squeue`` printing nothing or "Socket timed out", ``sacct`` failing or lagging,
``sbatch`` and ``scontrol requeue`` refusing. Each fault is injected as such a moment comes, by
wrappers first on PATH in front of the real commands (tests/doubles/slurm_wrappers.py): the launch's
environment carries them into the jobs and every job their hooks submit, and status.sh, sampled every
5 s while the fault lasts, meets them too. The workload is the step double (tests.doubles.step_trainer)
in 1-minute jobs (--signal_grace 20), all drills at once:

- ``two jobs at once``: every query (squeue, sacct, scontrol show) answers empty from the start and the
  run's script is submitted a second time at once; a relaunch is tried while it trains with squeue failing;
- ``squeue empty at the end``: squeue answers empty (exit 0) from before the first job's end hook until
  20 s after it;
- ``squeue, sacct fail``: both exit 1 from before the first job's end hook until it has left the queue;
- ``sbatch, requeue fail``: requeue mode, sbatch failing twice and scontrol requeue always;
- ``scancel, sacct fails``: a user's scancel while sacct fails;
- ``sacct lags``: the first job hidden from sacct for 60 s after its end (accounting's view).

Per drill it prints the steps trained twice, jobs of the run that overlapped (two trainers at once, from
steps.log), whether the run was stranded (neither finished nor cancelled as asked, no job left to carry
it), what the relaunch did, and what status.sh showed while the fault lasted (each kind of RESULT seen,
once). Exit 0 when no step was trained twice, no jobs overlapped, no run was stranded and status.sh never
said PARKED of a run that was going on.
"""

from __future__ import annotations

import argparse
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

from hpc.run import ledger
from hpc.run.ledger import Cancelled, JobEnd, JobStart, LeaseHeld, SlurmUnknown, Successor
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.states import QUEUED
from tests.doubles import slurm_wrappers
from tests.doubles.slurm_wrappers import FAULT_DIR
from tests.doubles.step_trainer import read_steps

REPO = Path(__file__).resolve().parent.parent

STATUS = REPO / "scripts" / "status.sh"
QUERIES = ("squeue", "sacct", "scontrol")


@dataclass
class Drill:
    """One fault done to one run."""

    name: str
    args: tuple[str, ...]
    fault: Callable[[Drill], None]
    cancelled: bool = False  # the user stops the run: it must stop
    run: RunDir | None = None
    faults: slurm_wrappers.Faults | None = None
    notes: dict[str, str] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)  # status.sh's RESULT while the fault lasted
    faulty: threading.Event = field(default_factory=threading.Event)
    error: str | None = None

    def launch(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "hpc.launch", "--job_name", self.run.name, "--runs_dir",
                               str(self.run.path.parent), "--env", f"ART_PATH={self.run.path / 'art'}", "--cluster",
                               "local", "--time_limit", "1", "--signal_grace", "20", "--gpus_per_node", "0",
                               "--cpus_per_task", "1", "--entrypoint", "tests.doubles.step_trainer", *self.args],
                              cwd=REPO, capture_output=True, text=True, timeout=180, env=self.faults.env())

    def set(self, modes: dict[str, str]) -> None:
        for command, mode in modes.items():
            self.faults.set(command, mode)
        self.faulty.set()

    def clear(self) -> None:
        self.faulty.clear()
        for command in slurm_wrappers.COMMANDS:
            self.faults.clear(command)


# -- reading a run ---------------------------------------------------------------------------------------


def records(d: Drill) -> list[ledger.Record]:
    return ledger.read(d.run)


def job_ids(run: RunDir) -> list[str]:
    return ledger.job_ids(ledger.read(run))


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def queued(run: RunDir) -> set[str]:
    return {str(s) for s in calls.queue_states(job_ids(run), timeout=30).values()} & QUEUED


def first_job(d: Drill) -> str:
    wait_until(lambda: ledger.of_kind(records(d), JobStart), 150, "the first job to start")
    return ledger.of_kind(records(d), JobStart)[0].job_id


def ended(d: Drill) -> bool:
    return bool(ledger.of_kind(records(d), JobEnd))


# -- the faults ------------------------------------------------------------------------------------------


def two_jobs_at_once(d: Drill) -> None:
    d.set({q: "empty" for q in QUERIES})
    script = next(d.run.scripts_dir.glob("*.sbatch"))
    env = d.faults.env()  # the second job meets the faults too
    calls.submit(script, options=(f"--export=ALL,PATH={env['PATH']},{FAULT_DIR}={env[FAULT_DIR]}",))
    wait_until(lambda: read_steps(d.run), 150, "a job to train")
    d.set({"squeue": "fail"})
    again = d.launch()
    d.notes["relaunch"] = "refused" if again.returncode != 0 and not re.search(r"submitted", again.stdout) else \
        "SUBMITTED"
    d.set({"squeue": "empty"})
    wait_until(lambda: d.run.done_file.exists(), 240, "the run to finish")


def squeue_empty_at_the_end(d: Drill) -> None:
    wait_until(lambda: ledger.of_kind(records(d), Successor), 120, "the successor to be queued")
    d.set({"squeue": "empty"})
    wait_until(lambda: ended(d), 150, "the first job's end hook")
    time.sleep(20)


def queries_fail_at_the_end(d: Drill) -> None:
    wait_until(lambda: ledger.of_kind(records(d), Successor) and len(read_steps(d.run)) >= 3, 120, "three steps")
    d.set({"squeue": "fail", "sacct": "fail"})
    job = first_job(d)
    wait_until(lambda: ended(d), 150, "the first job's end hook")
    wait_until(lambda: not calls.queue_states([job], timeout=30), 120, "the first job to leave the queue")


def sbatch_and_requeue_fail(d: Drill) -> None:
    d.set({"sbatch": "fail:2", "scontrol": "fail-requeue"})
    wait_until(lambda: ended(d), 180, "the first job's end hook")


def scancel_while_sacct_fails(d: Drill) -> None:
    wait_until(lambda: len(read_steps(d.run)) >= 3 and ledger.of_kind(records(d), Successor), 150, "three steps")
    d.set({"sacct": "fail"})
    calls.cancel([first_job(d)])
    wait_until(lambda: ended(d), 90, "the cancelled job's end hook")
    wait_until(lambda: not queued(d.run), 120, "the run's jobs to leave the queue")


def sacct_lags(d: Drill) -> None:
    job = first_job(d)
    wait_until(lambda: ended(d), 150, "the first job's end hook")
    d.set({"sacct": f"hide:{job}"})
    wait_until(lambda: len(ledger.of_kind(records(d), JobStart)) >= 2, 120, "the next job to start")
    said = subprocess.run([sys.executable, "-m", "hpc.accounting", str(d.run.path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=d.faults.env()).stdout
    d.notes["hpc.accounting"] = f"names job {job}" if f"not yet recorded job(s) {job}" in said else "SILENT"
    time.sleep(30)


DRILLS = [
    Drill("two_jobs_at_once", ("--continuation", "afterany", "--time_limit", "2", "--train_arg", "steps=10",
                               "--train_arg", "step_seconds=3"), two_jobs_at_once),
    Drill("squeue_empty_at_end", ("--continuation", "afterany", "--train_arg", "steps=25"), squeue_empty_at_the_end),
    Drill("squeue_sacct_fail", ("--continuation", "afterany", "--train_arg", "steps=25"), queries_fail_at_the_end),
    Drill("sbatch_requeue_fail", ("--continuation", "requeue", "--train_arg", "steps=25"), sbatch_and_requeue_fail),
    Drill("scancel_sacct_fails", ("--continuation", "afterany", "--time_limit", "3", "--train_arg", "steps=60"),
          scancel_while_sacct_fails, cancelled=True),
    Drill("sacct_lags", ("--continuation", "afterany", "--train_arg", "steps=25"), sacct_lags),
]


# -- following a drill -------------------------------------------------------------------------------------


def status_result(d: Drill) -> str:
    out = subprocess.run(["bash", str(STATUS), "--runs_dir", str(d.run.path.parent), "--run", d.run.name],
                         capture_output=True, text=True, timeout=60, env=d.faults.env())
    if out.returncode != 0:
        return f"error: {out.stderr.strip()[:80]}"
    row = next((line for line in out.stdout.splitlines() if line.startswith(d.run.name + " ")), "")
    return re.split(r"\s{2,}", row.strip())[-1] if row else "(no row)"


def sample(d: Drill, stop: threading.Event) -> None:
    while not stop.wait(5):
        if d.faulty.is_set():
            said = shortened(status_result(d))
            if said not in d.seen:
                d.seen.append(said)


def shortened(said: str) -> str:
    """status.sh's RESULT without its times and job ids, cut short: one entry per kind of answer."""
    said = re.sub(r"\(lease renewed at [^)]*\)", "", re.sub(r"\b\d{3,}\b", "N", said))
    return said if len(said) <= 70 else said[:67] + "..."


def follow(d: Drill, timeout: float) -> None:
    stop = threading.Event()
    threading.Thread(target=sample, args=(d, stop), daemon=True).start()
    try:
        launched = d.launch()
        if launched.returncode != 0:
            raise RuntimeError(f"launch failed: {launched.stderr.strip()}")
        d.fault(d)
        d.clear()
        wait_until(lambda: (d.run.done_file.exists() or d.cancelled) and not queued(d.run), timeout,
                   "the run to settle")
    except Exception as err:  # noqa: BLE001 - any failure of a drill case is reported in its table row
        d.error = f"{type(err).__name__}: {err}"
    finally:
        d.clear()
        stop.set()


# -- figures -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    drill: str
    twice: list[int]
    overlapping: list[tuple[str, str]]
    stranded: str
    ledger: str
    status: str

    @property
    def lied(self) -> bool:
        """status.sh said PARKED while the run was going on (a resume command would add a second job)."""
        return "PARKED" in self.status

    @property
    def ok(self) -> bool:
        return not self.twice and not self.overlapping and self.stranded == "no" and not self.lied


def overlapping(run: RunDir) -> list[tuple[str, str]]:
    spans: dict[str, list[float]] = {}
    for s in read_steps(run):
        span = spans.setdefault(s.job, [s.start, s.end])
        span[0], span[1] = min(span[0], s.start), max(span[1], s.end)
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    return [(a, b) for (a, sa), (b, sb) in zip(ordered, ordered[1:]) if sb[0] < sa[1]]


def stranded(d: Drill) -> str:
    if d.error:
        return f"NO RESULT ({d.error})"
    if d.cancelled:
        return "no" if ledger.of_kind(records(d), Cancelled) and not d.run.done_file.exists() else "went on: WRONG"
    return "no" if d.run.done_file.exists() else "STRANDED"


def ledger_said(d: Drill) -> str:
    recs = records(d)
    said = [f"{len(ledger.of_kind(recs, LeaseHeld))} lease_held", f"{len(ledger.of_kind(recs, SlurmUnknown))} "
            "slurm_unknown", *(f"{k}: {v}" for k, v in d.notes.items())]
    return ", ".join(said)


def row_of(d: Drill) -> Row:
    counts = Counter(s.step for s in read_steps(d.run))
    return Row(d.name, sorted(k for k, n in counts.items() if n > 1), overlapping(d.run), stranded(d),
               ledger_said(d), " | ".join(d.seen) or "-")


def report(rows: list[Row]) -> bool:
    head = ["fault", "trained twice", "overlapping jobs", "stranded", "ledger and views", "status.sh during the fault"]
    cells = [[r.drill, ",".join(map(str, r.twice)) or "none", ",".join(f"{a}+{b}" for a, b in r.overlapping) or
              "none", r.stranded, r.ledger, r.status] for r in rows]
    widths = [max(len(c[k]) for c in [head, *cells]) for k in range(len(head))]
    for line in [head, *cells]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    ok = all(r.ok for r in rows)
    print(f"targets (no step trained twice, no overlapping jobs, no run stranded, no PARKED while the run went on): {'met' if ok else 'NOT met'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=420, help="seconds each run may take after its fault")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slurm_answer_drill_") as tmp:
        threads = []
        for d in DRILLS:
            d.run = RunDir(Path(tmp) / "runs" / f"drill_{d.name}")
            d.faults = slurm_wrappers.install(Path(tmp) / "wrappers" / d.name)
            threads.append(threading.Thread(target=follow, args=(d, args.timeout), daemon=True))
        for thread in threads:
            thread.start()
            time.sleep(3 if thread is threads[0] else 0)  # the two-jobs drill's jobs first, before the CPUs fill
        for thread in threads:
            thread.join(args.timeout + 900)
        rows = [row_of(d) for d in DRILLS]
        leftover = [j for d in DRILLS if d.run.path.exists() for j in job_ids(d.run)]
        if leftover:
            try:
                calls.cancel(leftover)
            except calls.SlurmError:
                pass
    print()
    return 0 if report(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
