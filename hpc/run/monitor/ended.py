"""The sacct views of ended jobs (sfail.sh, scompleted.sh, scancelled.sh): each job with its state,
exit code, elapsed time and end, its log paths, and the last lines of its error log."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from hpc.run.monitor.display import Failure, printable, table
from hpc.run.monitor.logs import LogFinder
from hpc.run.safe_io import read_tail
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError, SlurmFailed
from hpc.slurm.output import EndedJob
from hpc.slurm.states import JobState


def ended_jobs(states: str, start: str, user: str) -> list[EndedJob]:
    try:
        return calls.ended_jobs(user, states, start, timeout=120)
    except SlurmFailed as err:
        if "time" in err.stderr.lower() and "invalid" in err.stderr.lower():
            raise Failure(f"bad -S '{start}' (accepted: a time sacct accepts, e.g. now-3days, 2026-11-01, "
                          "2026-11-01T08:00)", 2) from None
        raise Failure(str(err)) from None
    except SlurmError as err:
        raise Failure(str(err)) from None


def end_text(job: EndedJob) -> str:
    """When the job ended, in this machine's local time as sacct prints it; Unknown while it ends."""
    return "Unknown" if job.end is None else job.end.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def tail(path: str, lines: int) -> Optional[list[str]]:
    """The last lines of a log, reading only its end (logs grow large)."""
    try:  # a regular file only, never a link's target: a FIFO or a device would hang the view
        text = read_tail(Path(path), 400 * lines + 4096).decode(errors="replace")
    except OSError:
        return None
    return text.splitlines()[-lines:]


def shown(path: str) -> str:
    return printable(path) + ("" if os.path.exists(path) else " (missing)")


def ended_view(label: str, states: str, start: str, user: str, runs_dir: Path, prefix: str,
               tail_lines: int) -> None:
    finder = LogFinder(runs_dir)
    named = [j for j in ended_jobs(states, start, user) if j.name.startswith(prefix)]
    jobs = [j for j in named if not (j.state == JobState.CANCELLED and j.job_id in finder.withdrawn)]
    which = f" named {prefix}*" if prefix else ""
    print(f"{label.capitalize()} jobs of {user}{which} since {start} (runs dir: {runs_dir}): {len(jobs)}")
    if len(named) > len(jobs):
        print(f"  (not listed: {len(named) - len(jobs)} successor job(s) that their runs withdrew, unstarted, "
              "when the runs stopped)")
    if not jobs:
        return
    header, *rows = table(["JOBID", "STATE", "EXIT", "ELAPSED", "END", "NAME"],
                          [[j.job_id, j.state, j.exit_code, j.elapsed, end_text(j), j.name] for j in jobs])
    print(header)
    for index, (row, job) in enumerate(zip(rows, jobs)):
        out, err = finder.find(job)
        if tail_lines and index:
            print()  # a blank line between jobs whose log tails are shown
        print(row)
        print(f"  out: {shown(out)}")
        if err != out:
            print(f"  err: {shown(err)}")
        if tail_lines:
            print_tail(err, tail_lines)


def print_tail(path: str, lines: int) -> None:
    last = tail(path, lines)
    if last is None:
        print("  (no error log to show)")
    elif not last:
        print("  (the error log is empty)")
    else:
        print(f"  last {len(last)} line(s) of the error log:")
        for text in last:
            print(f"    | {printable(text)}")
