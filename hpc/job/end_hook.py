"""The end hook of a job (``python -m hpc.job.continuation end``): record how the workload ended,
decide (hpc/job/end_decision.py) and carry the decision out.

The run continues by ``scontrol requeue`` (same job id, where the cluster allows it), the successor
queued at the start, else a follow-up job with ``--dependency=afterany`` (where jobs may submit
jobs), or nothing (``--chain``: the launcher pre-submitted the followers); a run that stops here has
its successor cancelled. On an unknown answer of Slurm nothing is submitted, cancelled, given up or
marked: the hook records ``slurm_unknown``. ``sbatch`` and ``scontrol requeue`` are retried within
the time the job has left.

A failed job's ``job_end`` quotes its error line (hpc/job/error_line.py), and so do ``failed.json``
and the ledger's ``failed`` record.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc.job import end_slurm, notify, successor
from hpc.job.end_decision import CONTINUES, ENDS, Action, Decision, SlurmView, decide, last_end, outcome_of
from hpc.job.error_line import error_line, start_offset
from hpc.job.run_marks import current_step, give_up
from hpc.job.successor import resubmit
from hpc.run import lease, ledger
from hpc.run.ledger import By, Cancelled, Done, JobEnd, Outcome, Record, Requeue, Resubmit
from hpc.run.rundir import RunDir
from hpc.slurm import answer as answers
from hpc.slurm import calls


@dataclass(frozen=True)
class EndArgs:
    run: RunDir
    model_dir: Path
    job_id: str
    exit_code: int
    mode: str
    script: Path
    max_resubmits: int
    max_failures: int
    log_err: str | None
    restart_count: int = 0
    packed: bool = False  # one run of a pack job: hpc.job.pack continues the job, once, for all its runs
    stop_signal: str | None = None  # the first stop signal the job's shell got (USR1, TERM), if any


def end(a: EndArgs) -> Decision:
    """Record the job's end, decide, and carry the decision out."""
    run = a.run
    with run.locked():
        other = lease.held_by_other(run, a.job_id, a.restart_count)
        if other is not None:
            return held_end(a, other)
        done = run.read_done()
        step = current_step(a.model_dir)
        outcome = outcome_of(a.exit_code, done is not None)
        if outcome is Outcome.FINISHED and done is None:  # a workload that is not the trainer finished
            run.mark_done(step)
            done = run.read_done()
        error = failed_job_error(a, ledger.read(run)) if outcome is Outcome.FAILED else None
        ledger.append(run, JobEnd(job_id=a.job_id, exit_code=a.exit_code, step=step, outcome=outcome, error=error,
                                  signal=a.stop_signal))
        records = ledger.read(run)
        slurm = SlurmView() if done else end_slurm.slurm_view(a.job_id, a.restart_count, a.stop_signal)
        decision = decide(records, done=done is not None, mode=a.mode, max_resubmits=a.max_resubmits,
                          max_failures=a.max_failures, slurm=slurm)
        print(f"[continuation] job {a.job_id} ended: exit {a.exit_code}, {outcome} at step {step}; "
              f"{decision.action}: {decision.reason}")
        lease.release(run, a.job_id, a.restart_count)  # this job trains no more: the next may take the run
        carry_out(a, decision, records, done)
    return decision


def held_end(a: EndArgs, other: lease.Lease) -> Decision:
    """The end of a job that lost the run's lease while its workload ran (its keeper killed the
    workload: another job took the run): recorded, and nothing continued or cancelled."""
    ledger.append(a.run, JobEnd(job_id=a.job_id, exit_code=a.exit_code, step=current_step(a.model_dir),
                                outcome=Outcome.FAILED, signal=a.stop_signal,
                                note=f"lost the run's lease to {other.holder()}: nothing continued"))
    decision = Decision(Action.NONE, f"the run is held by {other.holder()}, which carries it")
    print(f"[continuation] job {a.job_id} ended; {decision.reason}", file=sys.stderr)
    return decision


def carry_out(a: EndArgs, decision: Decision, records: list[Record], done: dict[str, Any] | None) -> None:
    run = a.run
    if a.packed and decision.action in CONTINUES:
        print(f"[continuation] run {run.name} is in a pack job: the pack continues it (hpc.job.pack end)")
        return
    if decision.action in ENDS and not a.packed:
        successor.cancel(run, a.job_id)
    if decision.action is Action.FINISH:
        if not ledger.of_kind(records, Done):
            ledger.append(run, Done(step=(done or {}).get("final_step")))
            notify.tell(run, "done")  # the webhook, if any (hpc/job/notify.py)
    elif decision.action is Action.GIVE_UP:
        last = last_end(records)
        give_up(run, decision.reason, a.log_err, last.error if last else None)
    elif decision.action is Action.STOP:
        ledger.append(run, Cancelled(job_id=a.job_id))
    elif decision.action is Action.REQUEUED:
        ledger.append(run, Requeue(job_id=a.job_id, by=By.SLURM))
    elif decision.action in CONTINUES:
        continue_run(a, decision.action, records)


def continue_run(a: EndArgs, action: Action, records: list[Record]) -> None:
    """Requeue where the mode says so (the job keeps its id, so its successor keeps waiting
    on it); else, or where Slurm refuses the requeue, through the successor that already
    waits (one continuation, never two), else by a new follow-up job."""
    if action is Action.REQUEUE and end_slurm.requeued(a.job_id, end_slurm.seconds_left(a.job_id)):
        ledger.append(a.run, Requeue(job_id=a.job_id, by=By.JOB))
        print(f"[continuation] requeued job {a.job_id}")
        return
    asking = end_slurm.seconds_left(a.job_id)
    waiting = successor.pending_of(records, a.job_id, asking)
    if waiting.unknown:
        successor.record_unknown([a.run], a.job_id, "does this job's successor still wait", waiting.why, asking,
                                 "submit a follow-up job (a second job would train beside the successor; "
                                 "status.sh says whether the run goes on, and how to resume it if not)")
        return
    if waiting.value:
        ledger.append(a.run, Resubmit(job_id=waiting.value, after=a.job_id, by=By.SUCCESSOR))
        print(f"[continuation] job {waiting.value}, queued when this job started, continues the run")
        return
    submit_follower(a, records)


def submit_follower(a: EndArgs, records: list[Record]) -> None:
    """A follow-up job with afterany on this one, sbatch tried again while Slurm refuses and time is
    left; the run is marked failed only when Slurm kept refusing, with its error and the resume command."""
    seconds = end_slurm.seconds_left(a.job_id)
    tried = answers.retry(lambda: resubmit(a.script, a.job_id), seconds, say=successor._say)
    if tried.value is None:
        give_up(a.run, slurm_refusal(tried, seconds, records), a.log_err)
        return
    ledger.append(a.run, Resubmit(job_id=tried.value, after=a.job_id, script=str(a.script)))
    print(f"[continuation] submitted job {tried.value} to continue after job {a.job_id}")


def slurm_refusal(tried: answers.Tried[str], seconds: float, records: list[Record]) -> str:
    """Why the run stops when Slurm kept refusing to continue it, and what resumes it."""
    if isinstance(tried.error, calls.SlurmMissing):  # no sbatch in jobs: a cluster where jobs may not submit jobs
        return f"could not continue the run: {tried.error} (where jobs may not submit jobs, launch with --chain N)"
    return (f"Slurm refused to continue the run ({tried.tries} tries over {seconds:.0f} s): {tried.error}; "
            f"resume with: {ledger.resume_command(ledger.latest_launch(records))}")


def failed_job_error(a: EndArgs, records: list[Record]) -> str | None:
    """The error line of this job's part of its .err log (the log Slurm writes, else the run's)."""
    log = Path(a.log_err) if a.log_err else a.run.log_paths(a.job_id)[1]
    return error_line(log, start_offset(records, a.job_id))
