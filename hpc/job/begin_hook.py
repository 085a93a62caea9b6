"""The begin hook of a job (``python -m hpc.job.continuation begin``): may this job carry the run, and
if so where does it start.

It first takes the run's lease (hpc/run/lease.py: exit 12, touching nothing, when another job holds
it, whatever Slurm says of that job), then says whether there is anything to do (exit 10 when the
run is done, given up or cancelled by its user, or another job carries it: a chained job or a
successor then ends at once), checks that the model folder is this run's own (exit 3 and the run
marked failed when another run owns it: hpc/run/ownership.py), records a job that ended without
its end hook (with the state accounting gives it, deciding as its end hook would), moves
half-written checkpoints aside, records the step the job starts from and, with a successor
script, queues the job's successor (hpc/job/successor.py: the run then goes on whatever ends
this job).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from hpc.job import end_slurm, successor
from hpc.job.continuation_modes import ContinuationMode
from hpc.job.end_decision import Action, decide, unclosed_start
from hpc.job.error_line import log_size
from hpc.job.exit_codes import EXIT_NOT_OURS, EXIT_NOTHING_TO_DO, EXIT_RUN_HELD
from hpc.job.run_marks import current_step, give_up
from hpc.job.workload_env import HPC_PACK_RUNS
from hpc.run import lease, ledger, ownership
from hpc.run.checkpoints import quarantine_incomplete
from hpc.run.ledger import By, Cancelled, JobEnd, JobStart, LeaseHeld, Outcome, Requeue, Resubmit
from hpc.run.rundir import RunDir
from hpc.slurm import answer as answers
from hpc.slurm.answer import Knowledge
from hpc.slurm.states import JobState


@dataclass(frozen=True)
class Limits:
    """--max_resubmits and --max_failures, which a begin hook applies to a job lost without
    its end hook (a job OOM-killed over and over is a crash loop like any other)."""

    max_resubmits: int = 10**9
    max_failures: int = 10**9


def begin(run: RunDir, model_dir: Path, job_id: str, restart_count: int, script: Path | None = None,
          limits: Limits = Limits()) -> int:
    """Exit 10 if the run is done, failed or cancelled, or another job carries it; else record
    where this job starts and (``script`` given) queue its successor (hpc/job/successor.py)."""
    done, failed = run.read_done(), run.read_failed()
    if done:
        print(f"[continuation] run {run.name} finished at step {done.get('final_step')}: nothing to do")
        return EXIT_NOTHING_TO_DO
    if failed:
        print(f"[continuation] run {run.name} was marked failed ({failed.get('reason')}): nothing to do; "
              f"relaunch to try again")
        return EXIT_NOTHING_TO_DO
    if not take_run(run, job_id, restart_count):
        return EXIT_RUN_HELD
    with run.locked():
        code = start(run, model_dir, job_id, restart_count, limits)
    if code != 0:
        lease.release(run, job_id, restart_count)
    elif script is not None and job_id.isdigit():
        successor.ensure([run], job_id, script)
    return code


def take_run(run: RunDir, job_id: str, restart_count: int) -> bool:
    """Take the run's lease (hpc/run/lease.py) for this job, or record that another job holds it:
    then this job ends at once and touches nothing, whatever Slurm said of the other."""
    taken = lease.take(run, job_id, restart_count, os.getppid())
    if isinstance(taken, lease.Taken):
        return True
    holder = taken.lease
    ledger.append(run, LeaseHeld(job_id=job_id, holder=holder.job_id, holder_host=holder.host))
    print(f"[continuation] run {run.name} is held by {holder.holder()}, which renewed its lease at "
          f"{holder.renewed}: job {job_id} touches nothing and ends (exit {EXIT_RUN_HELD})", file=sys.stderr)
    return False


def start(run: RunDir, model_dir: Path, job_id: str, restart_count: int, limits: Limits) -> int:
    """Under the run's lock, holding its lease: whether this job carries the run; if so its start recorded."""
    why_not = nothing_to_do(run, job_id)
    if why_not:
        print(f"[continuation] {why_not}: nothing to do")
        return EXIT_NOTHING_TO_DO
    try:
        note = ownership.claim(run, model_dir).note
    except ownership.OwnershipError as error:
        give_up(run, str(error), None)
        return EXIT_NOT_OURS
    if note:
        print(f"[continuation] {note}")
    lost = unclosed_start(ledger.read(run))
    if lost is not None and not resume_after_lost_job(run, lost, current_step(model_dir), job_id, limits):
        return EXIT_NOTHING_TO_DO
    record_takeover(run, job_id)
    quarantine_incomplete(model_dir)
    step = current_step(model_dir)
    ledger.append(run, JobStart(job_id=job_id, step=step, restart_count=restart_count,
                                err_offset=log_size(run.log_paths(job_id)[1]), pack_runs=pack_share()))
    print(f"[continuation] job {job_id} starts from step {step} (restart {restart_count})")
    return 0


def resume_after_lost_job(run: RunDir, lost: JobStart, step: int, job_id: str, limits: Limits) -> bool:
    """Record the lost job and decide as its end hook would: False when the run stops here
    (its user cancelled the lost job; --max_failures lost or failed jobs in a row without
    progress; --max_resubmits used up)."""
    if close_lost_job(run, lost, step, job_id) is Action.STOP:
        return False
    decision = decide(ledger.read(run), done=False, mode=ContinuationMode.AFTERANY,
                      max_resubmits=limits.max_resubmits + 1,
                      max_failures=limits.max_failures)
    if decision.action is Action.GIVE_UP:
        give_up(run, decision.reason, None)
        return False
    return True


def record_takeover(run: RunDir, job_id: str) -> None:
    """A successor whose predecessor's end hook continued nothing (Slurm's answer stayed unknown: a
    ``slurm_unknown`` record) records that it continues the run, so the continuations are counted."""
    records = ledger.read(run)
    before = successor.predecessor(records, job_id)
    if before is None or before == job_id or any(isinstance(r, (Resubmit, Requeue)) and getattr(r, "after", r.job_id)
                                                 == before for r in records):
        return
    if any(isinstance(r, JobEnd) and r.job_id == before for r in records):
        ledger.append(run, Resubmit(job_id=job_id, after=before, by=By.SUCCESSOR))


def nothing_to_do(run: RunDir, job_id: str) -> str | None:
    """Why this job must not touch the run though it is neither done nor failed: it moved to
    another cluster (hpc/run/bundle.py), its user
    cancelled it (a ``cancelled`` record since the newest launch), this job is a successor
    whose predecessor Slurm requeued (back in the queue, it carries the run on), or another
    job of the run is running."""
    records = ledger.read(run)
    moved = ledger.moved_away(records)
    if moved is not None:
        return f"run {run.name} moved to {moved.to} at step {moved.step} and continues there"
    if ledger.cancelled_since_launch(records):
        return f"run {run.name} was cancelled by its user (launch again to resume)"
    before = successor.predecessor(records, job_id)
    if before is not None and before != job_id and successor.still_queued(before):
        return f"job {before}, which this job follows, is back in the queue (requeued by Slurm) and carries the run"
    running = unclosed_start(records)
    other = running.job_id if running else None
    if other not in (None, job_id) and successor.queue_state(other).value == JobState.RUNNING:
        return f"job {other} is running this run (one job at a time; e.g. a job requeued after its successor began)"
    return None


def pack_share() -> int | None:
    """In a pack job (hpc/job/pack.py): how many runs share it, so accounting charges each its part."""
    runs = os.environ.get(HPC_PACK_RUNS, "")
    return int(runs) if runs.isdigit() else None


def close_lost_job(run: RunDir, lost: JobStart, step: int, job_id: str) -> Action:
    """Record the end of a job that never ran its end hook (node failure, kill -9 or OOM kill
    of the job, time limit overrun) with the state accounting gives it, as a failure, so the
    crash guard sees it; return the action. If it is this very job, Slurm requeued it (a lost
    node, with --requeue): that continuation goes in the ledger too. If this job is the lost
    one's successor, it continues the run (a ``resubmit`` record), unless the lost job was
    cancelled by its user: then the run stops (``Action.STOP``)."""
    lost_id = lost.job_id
    asked = answers.ask_until(lambda: successor.ended_state(lost_id, requeued=lost_id == job_id),
                              end_slurm.CANCEL_ASK_SECONDS, say=successor._say)
    state = asked.value if asked.knowledge == Knowledge.KNOWN else None
    ledger.append(run, JobEnd(job_id=lost_id, exit_code=None, step=step, outcome=Outcome.FAILED, slurm_state=state,
                              note="ended without its end hook (node failure, kill, or time limit overrun)"))
    print(f"[continuation] job {lost_id} ended without its end hook ({state or 'state unknown'}); "
          f"recorded as failed at step {step}")
    if lost_id == job_id:
        ledger.append(run, Requeue(job_id=job_id, by=By.SLURM))
        return Action.REQUEUED
    if state == JobState.CANCELLED:
        ledger.append(run, Cancelled(job_id=lost_id))
        print(f"[continuation] job {lost_id} was cancelled by its user: the run is not continued")
        return Action.STOP
    if successor.predecessor(ledger.read(run), job_id) == lost_id:
        ledger.append(run, Resubmit(job_id=job_id, after=lost_id, by=By.SUCCESSOR))
    return Action.RESUBMIT
