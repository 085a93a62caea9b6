"""status.sh's runs view on the terminal: the user's queue, then the runs' table (grouped by sweep),
their goodput lines, the parked runs and how to resume them, what was unreadable, and where a
running serve job listens (the rows: hpc/run/monitor/runs.py)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Optional

from hpc.run.monitor import status_cache
from hpc.run.monitor.display import Failure, printable, table
from hpc.run.monitor.queue import SLURM_TIMEOUT, print_queue, user_queue
from hpc.run.monitor.rundirs import run_dirs
from hpc.run.monitor.runs import HEADERS, RunView, SlurmAnswers, run_views
from hpc.run.rundir import RunDir
from hpc.run.serving import address_of, ssh_line
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import QueuedJob
from hpc.slurm.states import JobState


def status_view(user: str, runs_dir: Path, only: str) -> int:
    """status.sh: the user's queue, then the runs, from one squeue and (at most) one sacct call. A
    Slurm that does not answer costs what it would have said (marked), never the table: 1 then."""
    try:
        jobs: Optional[list[QueuedJob]] = calls.queue(user=user, timeout=SLURM_TIMEOUT)
        note = ""
    except SlurmError as err:
        jobs, note = None, str(err)
    print_queue(user, runs_dir, only, jobs, note)
    print()
    answers = SlurmAnswers(None if jobs is None else {job.job_id: job.state for job in jobs}, note)
    runs_view(user, runs_dir, only, answers)
    for failed in filter(None, (answers.queue_note, answers.sacct_note)):
        raise Failure(failed)
    return 0


def runs_view(user: str, runs_dir: Path, only: str, answers: Optional[SlurmAnswers] = None) -> None:
    runs = run_dirs(runs_dir, only)
    if not runs:
        missing = "" if runs_dir.is_dir() else " (the directory does not exist)"
        print(f"No runs under {runs_dir}{missing}" + (f" named {only}" if only else ""))
        return
    if answers is None:
        answers = SlurmAnswers({job.job_id: job.state for job in user_queue(user)})
    cache = status_cache.load(runs_dir)
    views = run_views(runs, answers, cache)
    if not only:  # a run no longer there is forgotten
        cache.forget_all_but({view.run_dir.name for view in views})
    status_cache.save(cache, runs_dir)
    print(f"Runs under {runs_dir}:" + unknown_note(answers))
    header, *rows = table(HEADERS, [view.row() for view in views])
    row_of = {id(view): row for view, row in zip(views, rows)}
    print(header)
    for sweep, group in by_sweep(views):
        if sweep:
            print(f"sweep {printable(sweep)}: {sweep_summary(group)}")
        for view in group:
            print(("  " if sweep else "") + row_of[id(view)])
    print_goodput(views)
    print_parked(views)
    print_unreadable(views)
    for view in views:
        if view.state == JobState.RUNNING:
            print_service(view.run_dir)
    if cache.note:
        print(f"\n({printable(cache.note)}; every run was read)")


def unknown_note(answers: SlurmAnswers) -> str:
    """What the table cannot say, when Slurm did not answer (the error line follows on stderr)."""
    notes = []
    if answers.active is None:
        notes.append("SLURM QUEUE UNKNOWN (squeue did not answer): states are accounting's; a run read now is not "
                     "called PARKED")
    if answers.sacct_note:
        notes.append("ACCOUNTING UNKNOWN (sacct did not answer): STATE and GPU-H of runs read now are '-'")
    return "".join(f"\n  {note}" for note in notes)


def by_sweep(views: list[RunView]) -> list[tuple[str, list[RunView]]]:
    """Runs on their own first, then each sweep's runs together (sweep_member.json, hpc/launcher/sweeps.py)."""
    groups: dict[str, list[RunView]] = {}
    for view in views:
        groups.setdefault(view.sweep, []).append(view)
    alone = groups.pop("", [])
    return ([("", alone)] if alone else []) + sorted(groups.items())


def sweep_summary(group: list[RunView]) -> str:
    """``6 runs: 2 finished, 3 RUNNING, 1 failed``: where the sweep stands."""
    counts: dict[str, int] = {}
    for view in group:
        counts[view.word] = counts.get(view.word, 0) + 1
    return f"{len(group)} runs: " + ", ".join(f"{n} {word}" for word, n in counts.items())


def print_goodput(views: list[RunView]) -> None:
    """Under the table, one line per run that has had a job: goodput, GPU-hours, to finish."""
    lines = [v.goodput for v in views if v.goodput is not None]
    if lines:
        print("\nGPU-hours (python -m hpc.accounting RUN for the breakdown):")
    for line in lines:
        print(f"  {printable(line)}")


def print_parked(views: list[RunView]) -> None:
    """Under the table, how to resume each parked run."""
    parked_views = [v for v in views if v.parked is not None and not v.parked.unknown]
    if parked_views:
        print("\nParked runs (no job queued, not finished, failed or cancelled): launch again to resume")
    for view in parked_views:
        resume = view.parked.resume if view.parked is not None else ""
        print(f"  {printable(view.run_dir.name)}: {printable(resume)}")


def print_unreadable(views: list[RunView]) -> None:
    """Under the table, what each run's readers skipped: the rest of the run is shown above."""
    unreadable = [v.run_dir for v in views if v.run_dir.unreadable]
    if unreadable:
        print("\nUnreadable records, skipped (the rest of each run is shown above):")
    for run_dir in unreadable:
        print(f"  {printable(run_dir.name)}: {printable(run_dir.unreadable_line())}")


def print_service(run_dir: RunDir) -> None:
    """A running serve job's address, and the ssh line that reaches it from a laptop."""
    address = address_of(run_dir)
    if address is None:
        return
    print(f"\n{printable(run_dir.name)} serves {printable(address.get('model'))} on "
          f"{printable(address.get('node'))}:{address.get('port')}; from a laptop:")
    print(f"  {printable(ssh_line(address, login_host()))}")


def login_host() -> str:
    """The cluster's login host (hpc/launcher/clusters.yaml), else this machine's name."""
    try:
        from hpc.launcher.clusters import load_registry

        return load_registry().detect().cluster.login_host or socket.getfqdn()
    except Exception:  # noqa: BLE001 - a hint line must never break the status view
        return socket.getfqdn()
