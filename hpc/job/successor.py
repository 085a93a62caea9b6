"""A run's next job, queued while its current one runs: the run never depends on its job script.

Whatever ends a job without its end hook (a lost node, the time limit beating
Slurm's node check, a cgroup OOM kill of the whole job, an administrator's
kill of the batch script), the run must go on. So each job, once its begin hook
has recorded its start, submits its *successor*: the same job script with
``--dependency=afterany:<this job>`` (``successor`` in the ledger). Slurm starts
it once this job has ended, however it ended, and its begin hook decides as an
end hook would (hpc/job/continuation.py): a predecessor that ended without its end
hook is recorded with the state accounting gives it and the run resumes; a
run that is done, failed or cancelled by its user exits at once.

A normal end never makes two continuations: the end hook continues the run
through the pending successor (a ``resubmit`` record naming it) instead of a
requeue or a new submission, and cancels it when the run stops (finished,
given up, ``scancel``). A job Slurm requeues itself keeps its id, so the
successor keeps waiting on it; should Slurm start the successor anyway, its
begin hook finds the predecessor back in the queue and exits at once, and the
requeued job queues a new successor when it starts.

Where jobs may not submit jobs the submission fails: the job says so and the
end hook continues the run by requeue as before; ``--chain N`` pre-submits
such followers from the login node instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from hpc.run import ledger
from hpc.run.ledger import Record, Successor
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import run_order
from hpc.slurm.states import QUEUED, JobState

QUERY_TIMEOUT = 20  # seconds: a job near its limit asks briefly, and takes no answer as "not known"


def of(records: list[Record], job_id: str) -> str | None:
    """The newest successor submitted for ``job_id``, if any."""
    found = [r.job_id for r in ledger.of_kind(records, Successor) if r.after == job_id]
    return found[-1] if found else None


def predecessor(records: list[Record], job_id: str) -> str | None:
    """The job that ``job_id`` was submitted to follow, when it is a successor."""
    found = [r.after for r in ledger.of_kind(records, Successor) if r.job_id == job_id]
    return found[-1] if found else None


def queue_state(job_id: str) -> JobState | None:
    """The job's state in the queue, None once it has left it (or squeue fails)."""
    if not job_id.isdigit():
        return None
    try:
        return calls.queue_states([job_id], QUERY_TIMEOUT, in_job=True).get(job_id)
    except SlurmError:
        return None


def still_queued(job_id: str) -> bool:
    return queue_state(job_id) in QUEUED


def pending_of(records: list[Record], job_id: str) -> str | None:
    """This job's successor, if it is still waiting (not started, not cancelled)."""
    succ = of(records, job_id)
    return succ if succ is not None and queue_state(succ) == JobState.PENDING else None


def ended_state(job_id: str, requeued: bool = False) -> JobState | None:
    """How accounting says a job's latest run ended (TIMEOUT, FAILED, NODE_FAIL, CANCELLED...), None if
    unknown; ``requeued``: the job runs again under its id, so its previous run's (``sacct -D``)."""
    if not job_id.isdigit():
        return None
    try:
        runs = calls.job_runs([job_id], QUERY_TIMEOUT, in_job=True)
    except SlurmError:
        return None
    states = [row.state for row in sorted(runs, key=run_order) if row.job_id == job_id]
    if requeued:
        states = states[:-1]
    return states[-1] if states else None


def resubmit(script: Path, after: str, options: tuple[str, ...] = ()) -> str:
    """Submit ``script`` again to start once job ``after`` has ended; return the new id
    (``options`` override the script's #SBATCH lines: a smaller pack job asks for fewer GPUs)."""
    return calls.submit(script, f"afterany:{after}", options, in_job=True)


def ensure(runs: Sequence[RunDir], job_id: str, script: Path, options: tuple[str, ...] = ()) -> str | None:
    """Queue this job's successor unless one already waits (a requeued job keeps its own);
    record it in every run's ledger. None (said on stderr) where Slurm refuses the submission,
    or where this is no job Slurm runs (sbatch would take a dependency on an unknown job id)."""
    if queue_state(job_id) != JobState.RUNNING:  # a job script run by hand or by a test: Slurm runs no such job
        print(f"[continuation] job {job_id} is not running in Slurm: no successor queued")
        return None
    waiting = pending_of(ledger.read(runs[0]), job_id)
    if waiting is not None:
        print(f"[continuation] job {waiting} already waits to follow job {job_id}")
        return waiting
    try:
        new_id = resubmit(script, job_id, options)
    except (SlurmError, OSError) as err:
        print(f"[continuation] could not queue a successor ({err}); the end hook continues the run, "
              "and a job lost without it is not continued", file=sys.stderr)
        return None
    for run in runs:
        ledger.append(run, Successor(job_id=new_id, after=job_id, script=str(script)))
    print(f"[continuation] queued job {new_id} to follow job {job_id} (afterany), whatever ends this one")
    return new_id


def cancel(run: RunDir, job_id: str) -> None:
    """Cancel this job's waiting successor: the run stops here (its begin hook would exit at once anyway)."""
    waiting = pending_of(ledger.read(run), job_id)
    if waiting is None:
        return
    try:
        calls.cancel([waiting], in_job=True)
    except SlurmError as err:
        print(f"[continuation] could not cancel job {waiting} ({err}); it will exit at once", file=sys.stderr)
        return
    print(f"[continuation] cancelled job {waiting}, queued to follow job {job_id}: the run stops here")
