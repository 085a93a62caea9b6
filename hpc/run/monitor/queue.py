"""status.sh's first part: the user's queued and running jobs (a run's, or a sweep's runs')."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Optional

from hpc.run import ledger
from hpc.run.monitor.display import Failure, table
from hpc.run.monitor.rundirs import sweep_runs
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import QueuedJob
from hpc.slurm.states import JobState

SLURM_TIMEOUT = 30  # seconds status.sh waits for squeue, then for sacct, before it shows the runs without


def user_queue(user: str) -> list[QueuedJob]:
    """The user's queued and running jobs (the queue view cannot do without them)."""
    try:
        return calls.queue(user=user, timeout=SLURM_TIMEOUT)
    except SlurmError as err:
        raise Failure(str(err)) from None


def queue_view(user: str, runs_dir: Path, only: str) -> None:
    print_queue(user, runs_dir, only, user_queue(user))


def print_queue(user: str, runs_dir: Path, only: str, jobs: Optional[list[QueuedJob]], note: str = "") -> None:
    """The user's queued and running jobs (a run's, a sweep's); ``None``: squeue did not answer (``note``)."""
    if jobs is None:
        print(f"Queued and running jobs of {user}: UNKNOWN ({note})")
        return
    if only:  # the run's jobs (a sweep's: its runs'): named after it (the launcher's -J) or in its ledger
        names = set(sweep_runs(runs_dir, only) or [only])
        ids = {job for name in names for job in ledger.job_ids(ledger.readable(RunDir(runs_dir / name)))}
        jobs = [j for j in jobs if j.name in names or j.job_id in ids]
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    which = f" for run {only}" if only else ""
    print(f"Queued and running jobs of {user}{which} ({stamp}):")
    if not jobs:
        print("  none")
        return
    rows = []
    for j in jobs:
        waiting = j.state == JobState.PENDING
        rows.append([j.job_id, j.state, j.reason if waiting else "-", f"{j.elapsed}/{j.limit}", j.nodes,
                     "-" if waiting or not j.nodelist else j.nodelist, j.name])
    for line in table(["JOBID", "STATE", "REASON", "ELAPSED/LIMIT", "NODES", "NODELIST", "NAME"], rows):
        print(line)
