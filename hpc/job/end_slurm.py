"""What a job's hooks ask of Slurm (through hpc/slurm) at the job's end: whether Slurm requeued the job
or a user cancelled it, how long is left to ask, and the requeue itself.

Slurm's answers are known, known empty or unknown (hpc/slurm/answer.py): on an unknown one nothing
is submitted, cancelled, given up or marked; a hook asks again within the time its job has left.
A TERM alone does not say why it came: Slurm is asked whether it has already requeued the job
itself (preemption, an admin's ``scontrol requeue``: continuing it again would start a second job
on the same run), and whether a user cancelled it (``scancel``: the user wants the run stopped,
and a requeue would undo that).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from hpc.job import deadline, successor
from hpc.job.end_decision import SlurmView
from hpc.slurm import answer as answers
from hpc.slurm import calls
from hpc.slurm.answer import Knowledge
from hpc.slurm.calls import SlurmError, requeue
from hpc.slurm.states import JobState

END_RESERVE = 15.0  # seconds an end hook keeps before its job's end when it retries Slurm
UNKNOWN_END_SECONDS = 30.0  # how long an end hook retries when Slurm does not say when its job ends
CANCEL_ASK_SECONDS = 10.0  # after a TERM, Slurm kills the job KillWait (30 s by default) later


def slurm_view(job_id: str, restart_count: int, stop_signal: str | None = None) -> SlurmView:
    """Ask Slurm whether it requeued or a user cancelled this job.

    Both show as JobState=COMPLETING inside the job; a requeue also raises
    ``Restarts`` above the job's SLURM_RESTART_COUNT, and only accounting keeps
    the reason of the end (``CANCELLED by <uid>``, ``PREEMPTED``, ``TIMEOUT``).
    An error of scontrol answers "not requeued"; accounting's silence is kept
    (``cancel_unknown``): with the TERM the shell got first, it is taken for a
    cancel (``SlurmView.terminated``), never for a stop for time."""
    if not job_id.isdigit():  # not a Slurm job (a test, a run by hand)
        return SlurmView(signal=stop_signal)
    try:
        shown = calls.show_job(job_id, successor.QUERY_TIMEOUT, in_job=True)
    except SlurmError:
        shown = None
    restarts = shown.restarts if shown is not None else None
    seconds = CANCEL_ASK_SECONDS if stop_signal == "TERM" else 0.0
    ended = answers.ask_until(lambda: successor.ended_state(job_id), seconds, say=successor._say)
    why = "" if ended.knowledge == Knowledge.KNOWN else (ended.why or f"sacct has not yet recorded job {job_id}")
    return SlurmView(requeued=restarts is not None and restarts > restart_count,
                     cancelled=ended.knowledge == Knowledge.KNOWN and ended.value == JobState.CANCELLED,
                     signal=stop_signal, cancel_unknown=why)


def seconds_left(job_id: str) -> float:
    """How long an end hook may retry Slurm: until its job's end, less END_RESERVE (0 outside Slurm;
    UNKNOWN_END_SECONDS when Slurm does not say when the job ends)."""
    if not job_id.isdigit():
        return 0.0
    try:
        end = deadline.JobEnd({**os.environ, "SLURM_JOB_ID": job_id}).get()
    except deadline.EndTimeError:
        end = None
    if end is None:
        return UNKNOWN_END_SECONDS
    return max(0.0, end - time.time() - END_RESERVE)


def requeued(job_id: str, seconds: float = 0.0) -> bool:
    """``scontrol requeue`` this job, tried again with backoff for ``seconds`` while Slurm refuses;
    False (said on stderr) when it kept refusing, and the caller continues through the successor
    or a follower instead. scontrol requeue ends the job at once: Slurm sends TERM to every
    process of it (KILL after KillWait), so TERM is ignored from now on, for the moment it takes
    to record the requeue: the ledger holds only what happened."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    tried = answers.retry(lambda: requeue(job_id), seconds, say=successor._say)
    if tried.error is None:
        return True
    print(f"[continuation] {tried.error} ({tried.tries} tries); continuing through the successor or a follow-up "
          "job instead", file=sys.stderr)
    return False
