"""A run's next job, queued while its current one runs: the run never depends on its job script.

Whatever ends a job without its end hook (a lost node, the time limit beating
Slurm's node check, a cgroup OOM kill of the whole job, an administrator's
kill of the batch script), the run must go on. So each job, once its begin hook
has recorded its start, submits its *successor*: the same job script with
``--dependency=afterany:<this job>`` (``successor`` in the ledger). Slurm starts
it once this job has ended, however it ended, and its begin hook decides as an
end hook would (hpc/job/begin_hook.py): a predecessor that ended without its end
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
from hpc.run.ledger import Record, SlurmUnknown, Successor
from hpc.run.rundir import RunDir
from hpc.slurm import answer as answers
from hpc.slurm import calls
from hpc.slurm.answer import Answer, Knowledge, known, unknown
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import run_order
from hpc.slurm.states import QUEUED, JobState

QUERY_TIMEOUT = 20  # seconds: a job near its limit asks briefly, and takes no answer as "not known"
ASK_SECONDS = 20.0  # how long a begin hook asks again, and retries a submission, while Slurm does not answer (its workload waits)


def of(records: list[Record], job_id: str) -> str | None:
    """The newest successor submitted for ``job_id``, if any."""
    found = [r.job_id for r in ledger.of_kind(records, Successor) if r.after == job_id]
    return found[-1] if found else None


def predecessor(records: list[Record], job_id: str) -> str | None:
    """The job that ``job_id`` was submitted to follow, when it is a successor."""
    found = [r.after for r in ledger.of_kind(records, Successor) if r.job_id == job_id]
    return found[-1] if found else None


def queue_state(job_id: str) -> Answer[JobState]:
    """The job's state in the queue: known, known empty (it has left the queue; no Slurm job id is
    never queued), or unknown (squeue failed or did not answer)."""
    if not job_id.isdigit():
        return known(JobState.UNKNOWN, True)
    answer = answers.queue_states([job_id], QUERY_TIMEOUT, in_job=True)
    if answer.unknown or answer.value is None:
        return unknown(answer.why)
    state = answer.value.get(job_id)
    return known(state, False) if state is not None else known(JobState.UNKNOWN, True)


def expected_state(job_id: str) -> Answer[JobState]:
    """The state of a job the ledger says is in the queue (a successor not yet started, this very
    job): squeue's, else accounting's. squeue omitting it, or failing, is no proof it left: then
    sacct decides, and when sacct cannot either the answer is unknown (never "gone")."""
    asked = queue_state(job_id)
    if asked.knowledge == Knowledge.KNOWN or not job_id.isdigit():
        return asked
    ended = ended_state(job_id)
    if ended.knowledge == Knowledge.KNOWN:
        return ended
    said = asked.why or f"squeue omits job {job_id}, which this run's ledger shows in the queue"
    return unknown(f"{said}; sacct: {ended.why or 'has not yet recorded the job'}")


def still_queued(job_id: str) -> bool:
    """Known to be in the queue (an unknown answer is not; the run's lease keeps one job at a time)."""
    asked = queue_state(job_id)
    return asked.knowledge == Knowledge.KNOWN and asked.value in QUEUED


def pending_of(records: list[Record], job_id: str, seconds: float = 0.0) -> Answer[str]:
    """This job's successor, known still waiting (known, its id), known gone or none (known empty),
    or unknown, asked again for at most ``seconds`` while Slurm does not answer."""
    succ = of(records, job_id)
    if succ is None:
        return known("", True)
    state = answers.ask_until(lambda: expected_state(succ), seconds, say=_say)
    if state.unknown:
        return unknown(state.why)
    return known(succ, False) if state.value in QUEUED else known("", True)


def ended_state(job_id: str, requeued: bool = False) -> Answer[JobState]:
    """How accounting says a job's latest run ended (TIMEOUT, FAILED, NODE_FAIL, CANCELLED...): known;
    known empty when sacct has not yet recorded it; unknown when sacct fails. ``requeued``: the job
    runs again under its id, so its previous run's (``sacct -D``)."""
    if not job_id.isdigit():
        return unknown(f"job {job_id} is no Slurm job")
    answer = answers.job_runs([job_id], QUERY_TIMEOUT, in_job=True)
    if answer.unknown or answer.value is None:
        return unknown(answer.why)
    states = [row.state for row in sorted(answer.value, key=run_order) if row.job_id == job_id]
    if requeued:
        states = states[:-1]
    return known(states[-1], False) if states else known(JobState.UNKNOWN, True)


def _say(line: str) -> None:
    print(f"[continuation] {line}", file=sys.stderr)


def resubmit(script: Path, after: str, options: tuple[str, ...] = ()) -> str:
    """Submit ``script`` again to start once job ``after`` has ended; return the new id
    (``options`` override the script's #SBATCH lines: a smaller pack job asks for fewer GPUs)."""
    return calls.submit(script, f"afterany:{after}", options, in_job=True)


def ensure(runs: Sequence[RunDir], job_id: str, script: Path, options: tuple[str, ...] = (),
           seconds: float | None = None) -> str | None:
    """Queue this job's successor unless one already waits (a requeued job keeps its own);
    record it in every run's ledger. None (said on stderr) where Slurm refuses the submission
    after retries for ``seconds`` (ASK_SECONDS), where this is no job Slurm runs (sbatch would take a dependency
    on an unknown job id), or where Slurm's answers stay unknown (a ``slurm_unknown`` record: a
    second successor is never queued on a guess; the end hook continues the run)."""
    seconds = ASK_SECONDS if seconds is None else seconds
    mine = answers.ask_until(lambda: expected_state(job_id), seconds, say=_say)
    if mine.unknown:
        record_unknown(runs, job_id, f"is job {job_id} running in Slurm", mine.why, seconds, "queue a successor")
        return None
    if mine.value != JobState.RUNNING:  # a job script run by hand or by a test: Slurm runs no such job
        print(f"[continuation] job {job_id} is not running in Slurm: no successor queued")
        return None
    waiting = pending_of(ledger.read(runs[0]), job_id, seconds)
    if waiting.unknown:
        record_unknown(runs, job_id, "does this job's successor still wait", waiting.why, seconds, "queue a successor")
        return None
    if waiting.value:
        print(f"[continuation] job {waiting.value} already waits to follow job {job_id}")
        return waiting.value
    tried = answers.retry(lambda: resubmit(script, job_id, options), seconds, say=_say)
    if tried.value is None:
        print(f"[continuation] could not queue a successor after {tried.tries} tries ({tried.error}); the end hook "
              "continues the run, and a job lost without it is not continued", file=sys.stderr)
        return None
    for run in runs:
        ledger.append(run, Successor(job_id=tried.value, after=job_id, script=str(script)))
    print(f"[continuation] queued job {tried.value} to follow job {job_id} (afterany), whatever ends this one")
    return tried.value


def record_unknown(runs: Sequence[RunDir], job_id: str, asked: str, why: str, waited: float, held_back: str) -> None:
    """Say in every run's ledger (and on stderr) what was not done because Slurm's answer stayed unknown."""
    for run in runs:
        ledger.append(run, SlurmUnknown(job_id=job_id, asked=asked, why=why, waited=round(waited),
                                        held_back=held_back))
    print(f"[continuation] Slurm's answer stayed unknown for {waited:.0f} s ({asked}? {why}): "
          f"did not {held_back}", file=sys.stderr)


def cancel(run: RunDir, job_id: str, seconds: float = 0.0) -> None:
    """Cancel this job's waiting successor: the run stops here (its begin hook would exit at once anyway)."""
    waiting = pending_of(ledger.read(run), job_id, seconds)
    if waiting.unknown:
        record_unknown([run], job_id, "does this job's successor still wait", waiting.why, seconds,
                       "cancel the successor (it exits at once if it starts)")
        return
    if not waiting.value:
        return
    try:
        calls.cancel([waiting.value], in_job=True)
    except SlurmError as err:
        print(f"[continuation] could not cancel job {waiting.value} ({err}); it will exit at once", file=sys.stderr)
        return
    print(f"[continuation] cancelled job {waiting.value}, queued to follow job {job_id}: the run stops here")
