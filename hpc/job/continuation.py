"""In-job hooks that carry a run across wall-time-limited jobs.

The job script (sbatch/_job_control.sh.j2) calls

    python -m hpc.job.continuation begin --run_dir D --model_dir M
    python -m hpc.job.continuation end   --run_dir D --model_dir M --exit_code RC --mode requeue|afterany|chain \
                                     --script S --max_resubmits N --max_failures N [--log_err PATH]

``begin`` first takes the run's lease (hpc/run/lease.py: exit 12, touching nothing, when another
job holds it, whatever Slurm says of that job), then says whether there is anything to do (exit 10 when the run is done,
given up or cancelled by its user, or another job carries it: a chained job or
a successor then ends at once), checks that the model folder is this run's own
(exit 3 and the run marked failed when another run owns it: hpc/run/ownership.py),
records a job that ended without its end hook (with the state accounting gives
it), moves half-written checkpoints aside, records the step the job starts from
and, with ``--successor SCRIPT``, queues the job's successor (hpc/job/successor.py:
the run then goes on whatever ends this job). ``end`` records how the
workload ended and continues the run: ``scontrol requeue`` (same job id, where
the cluster allows it), the successor queued at the start, else a follow-up job
with ``--dependency=afterany`` (where jobs may submit jobs), or nothing
(``--chain``: the launcher pre-submitted the followers); a run that stops here
has its successor cancelled. The decision is the pure function ``decide`` over the ledger and
what Slurm says about the job, so every counter (continuations, failures
without progress) is derived from the one record that survives requeues and
node losses; there is no other state.

A failed job's ``job_end`` quotes its error line (the last meaningful line of
its part of the .err log), and so do ``failed.json`` and the ledger's
``failed`` record. Exit 78 (``EXIT_CONFIG_ERROR``: the trainer's preflight or
setup found a configuration error) or 2 (bad input) gives the run up at once; other failures
are retried until ``--max_failures`` of them in a row made no progress,
counted from the newest launch.

Slurm's answers are known, known empty or unknown (hpc/slurm/answer.py): on an unknown one
nothing is submitted, cancelled, given up or marked; the hook asks again within the time its job
has left and records ``slurm_unknown``. ``sbatch`` and ``scontrol requeue`` are retried within
the same time. The job's shell passes the first stop signal it got (``--signal``): a TERM with no
USR1 before it is a cancel, never a stop for time, when accounting cannot say.

Slurm is asked two things at the end, because a TERM alone does not say why
it came: whether it has already requeued the job itself (preemption, an
admin's ``scontrol requeue``: continuing it again would start a second job on
the same run), and whether a user cancelled it (``scancel``: the user wants
the run stopped, and a requeue would undo that).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc.job import deadline, notify, successor
from hpc.job.continuation_modes import MODE_CHOICES, ContinuationMode
from hpc.job.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_CONFIG_ERROR,
    EXIT_NOT_OURS,
    EXIT_NOTHING_TO_DO,
    EXIT_RUN_HELD,
    EXIT_STOPPED_FOR_TIME,
)
from hpc.job.successor import resubmit
from hpc.job.workload_env import HPC_PACK_RUNS
from hpc.run import lease, ledger, ownership
from hpc.run.checkpoints import latest_complete, quarantine_incomplete
from hpc.run.ledger import (
    By,
    Cancelled,
    Chain,
    Done,
    Failed,
    JobEnd,
    JobStart,
    LeaseHeld,
    Outcome,
    Record,
    Requeue,
    Resubmit,
)
from hpc.run.rundir import RunDir
from hpc.slurm import answer as answers
from hpc.slurm import calls
from hpc.slurm.answer import Knowledge
from hpc.slurm.calls import SlurmError, requeue
from hpc.slurm.states import JobState

log = logging.getLogger("hpc.job.continuation")

# A workload that exits 78 (the trainer's preflight or setup: a configuration error) or 2 (bad
# input: the evaluation's and the service's bad model or data, a usage error) cannot outgrow it.
PERMANENT_EXIT_CODES = (EXIT_CONFIG_ERROR, EXIT_BAD_INPUT)
END_RESERVE = 15.0  # seconds an end hook keeps before its job's end when it retries Slurm
UNKNOWN_END_SECONDS = 30.0  # how long an end hook retries when Slurm does not say when its job ends
CANCEL_ASK_SECONDS = 10.0  # after a TERM, Slurm kills the job KillWait (30 s by default) later
# A failed job's error line: the last line of its .err log that reads like an error, else its
# last line; read from where the job began (a requeued job appends to the same log).
ERROR_WORDS = re.compile(r"error|exception|traceback|fail|fatal|killed|cancelled|denied|refused|timed out", re.I)
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ERROR_TAIL_BYTES = 65536
ERROR_LINE_CHARS = 1000  # a preflight line with its fix fits; a runaway line does not

FINISHED, STOPPED, FAILED = Outcome.FINISHED, Outcome.STOPPED, Outcome.FAILED

# Decision actions.
FINISH = "finish"      # training is done: record it, continue nothing
GIVE_UP = "give_up"    # mark the run failed, continue nothing
STOP = "stop"          # a user cancelled the job: continue nothing, mark nothing (a launch resumes)
REQUEUE = "requeue"    # scontrol requeue this job
RESUBMIT = "resubmit"  # sbatch the same script with afterany on this job
REQUEUED = "requeued"  # Slurm has already requeued this job: record it, submit nothing
NONE = "none"          # chain mode: the pre-submitted job continues


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str


@dataclass(frozen=True)
class SlurmView:
    """What Slurm says about the job while its end hook runs."""

    requeued: bool = False   # Slurm requeued it already (its restart count went up)
    cancelled: bool = False  # accounting says CANCELLED: a user's scancel
    signal: str | None = None  # the first stop signal the job's shell got (USR1: time; TERM: scancel, preemption)
    cancel_unknown: str = ""  # why accounting could not say whether it was cancelled (empty: it could)

    @property
    def terminated(self) -> bool:
        """Ended by a TERM that no time-limit USR1 came before, and accounting cannot say why: a user's
        scancel as far as anyone knows (a stop for time has USR1 first, or no signal at all)."""
        return self.signal == "TERM" and bool(self.cancel_unknown) and not self.requeued


# -- pure logic -------------------------------------------------------------------------


def outcome_of(exit_code: int, done: bool) -> Outcome:
    """How a workload ended. Exit 0 means it finished (docs/design.md): the
    trainer writes the done marker itself, and for any other entrypoint (an
    evaluation, a smoke workload) ``end`` writes it, so a finished workload is
    never started again."""
    if exit_code == 0 or (done and exit_code == EXIT_STOPPED_FOR_TIME):
        return FINISHED
    if exit_code == EXIT_STOPPED_FOR_TIME:
        return STOPPED
    return FAILED


JobRun = tuple[JobStart | None, JobEnd | None]


def job_runs(records: list[Record]) -> list[JobRun]:
    """Each job_start paired with the job_end that closes it (None if none yet).

    A requeued job keeps its id, so a job_end closes the most recent open
    job_start of the same id; a job_end with no start pairs with None (its
    start step is unknown, so it cannot show progress)."""
    runs: list[JobRun] = []
    for record in records:
        if isinstance(record, JobStart):
            runs.append((record, None))
        elif isinstance(record, JobEnd):
            _close(runs, record)
    return runs


def _close(runs: list[JobRun], end: JobEnd) -> None:
    for k in range(len(runs) - 1, -1, -1):
        start, closed = runs[k]
        if start is not None and closed is None and start.job_id == end.job_id:
            runs[k] = (start, end)
            return
    runs.append((None, end))


def failures_without_progress(records: list[Record]) -> int:
    """Consecutive failed jobs of the newest launch, newest first, whose step did not advance.

    Any job that stopped for time, finished, or failed after advancing the step
    breaks the streak: a run that still learns is worth continuing. A new launch
    starts a fresh count: the user changed something and deserves --max_failures
    attempts, not what the previous launch left."""
    streak = 0
    for start, end in reversed(job_runs(ledger.since_launch(records))):
        if end is None:
            continue
        if end.outcome != FAILED or _advanced(start, end):
            break
        streak += 1
    return streak


def _advanced(start: JobStart | None, end: JobEnd) -> bool:
    return start is not None and start.step is not None and end.step is not None and end.step > start.step


def last_end(records: list[Record]) -> JobEnd | None:
    return next((r for r in reversed(records) if isinstance(r, JobEnd)), None)


def decide(records: list[Record], *, done: bool, mode: str, max_resubmits: int,
           max_failures: int, slurm: SlurmView = SlurmView()) -> Decision:
    """What to do after a job, given the ledger *including* this job's job_end."""
    if done:
        return Decision(FINISH, "training finished")
    if slurm.cancelled:
        return Decision(STOP, "the job was cancelled (scancel): the run is not continued; launch again to resume")
    if slurm.terminated:
        return Decision(STOP, "the job got SIGTERM with no time-limit SIGUSR1 before it (a scancel, an administrator "
                              f"or a preemption) and accounting did not say which ({slurm.cancel_unknown}): "
                              "the run is not continued; launch again to resume")
    last = last_end(records)
    failed = last is not None and last.outcome == FAILED
    if failed and last is not None and last.exit_code in PERMANENT_EXIT_CODES:
        return Decision(GIVE_UP, f"configuration error (exit {last.exit_code}), not retried: "
                                 f"{last.error or 'see the log'}")
    if failed and last is not None:
        streak = failures_without_progress(records)
        if streak >= max_failures:
            return Decision(GIVE_UP, f"{streak} failed job(s) in a row without progress "
                                     f"(--max_failures {max_failures}); last {failure_text(last)}")
    if slurm.requeued:
        return Decision(REQUEUED, "Slurm has requeued this job itself (preemption or an admin): "
                                  "it continues the run, nothing else is submitted")
    if mode == ContinuationMode.CHAIN:
        return chain_decision(records, last)
    used = ledger.continuations(records)
    if used >= max_resubmits:
        return Decision(GIVE_UP, f"reached --max_resubmits {max_resubmits} continuations without finishing")
    why = "stopped for time" if last is not None and last.outcome == STOPPED else "failed but made progress"
    action = REQUEUE if mode == ContinuationMode.REQUEUE else RESUBMIT
    return Decision(action, f"{why}; continuation {used + 1} of at most {max_resubmits}")


def chain_decision(records: list[Record], last: JobEnd | None) -> Decision:
    """Chain mode: the pre-submitted job that waits for this one continues the run, if any."""
    follower = chain_follower(records, last.job_id) if last is not None else None
    if follower is None:
        return Decision(NONE, "chain mode, and this was the last pre-submitted job: launch again to continue the run")
    return Decision(NONE, f"chain mode: the pre-submitted job {follower} continues the run")


def failure_text(end: JobEnd) -> str:
    """A failed job in a few words: its exit code and, when it wrote one, its error line."""
    text = f"exit code {end.exit_code}"
    return f"{text}: {end.error}" if end.error else text


def error_line(log: Path, offset: int = 0) -> str | None:
    """The last meaningful line a job wrote to its .err log from ``offset`` (where it began):
    the last that reads like an error (a traceback's exception, the trainer's one-line
    errors, Slurm's CANCELLED line), else the last one; printable, one line. None if none."""
    try:
        with open(log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(offset if offset <= size else 0, size - ERROR_TAIL_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line for line in map(clean_line, text.splitlines()) if line and not line.startswith("[continuation]")]
    if not lines:
        return None
    return next((line for line in reversed(lines) if ERROR_WORDS.search(line)), lines[-1])


def clean_line(line: str) -> str:
    """Without terminal escapes and control characters, at most ERROR_LINE_CHARS long."""
    line = "".join(ch if ch.isprintable() else " " for ch in ANSI_ESCAPE.sub("", line)).strip()
    return line if len(line) <= ERROR_LINE_CHARS else line[: ERROR_LINE_CHARS - 3] + "..."


def log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def start_offset(records: list[Record], job_id: str) -> int:
    """Where this job's part of its .err log begins (its job_start's ``err_offset``)."""
    start = next((r for r in reversed(records) if isinstance(r, JobStart) and r.job_id == job_id), None)
    return start.err_offset if start is not None else 0


def chain_follower(records: list[Record], job_id: str) -> str | None:
    """The pre-submitted job that waits for ``job_id`` (``chain`` records), if any."""
    return next((r.job_id for r in records if isinstance(r, Chain) and r.after == job_id), None)


def unclosed_start(records: list[Record]) -> JobStart | None:
    """The last job_start without a job_end: a job lost before its end hook ran
    (node failure, SIGKILL, requeue by Slurm itself)."""
    runs = job_runs(records)
    if runs and runs[-1][1] is None:
        return runs[-1][0]
    return None


# -- what Slurm says (hpc/slurm asks it) ------------------------------------------------------


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


# -- hooks --------------------------------------------------------------------------


def current_step(model_dir: Path) -> int:
    latest = latest_complete(model_dir)
    return latest.step if latest else 0


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
    if close_lost_job(run, lost, step, job_id) == STOP:
        return False
    decision = decide(ledger.read(run), done=False, mode=ContinuationMode.AFTERANY, max_resubmits=limits.max_resubmits + 1,
                      max_failures=limits.max_failures)
    if decision.action == GIVE_UP:
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


def close_lost_job(run: RunDir, lost: JobStart, step: int, job_id: str) -> str:
    """Record the end of a job that never ran its end hook (node failure, kill -9 or OOM kill
    of the job, time limit overrun) with the state accounting gives it, as a failure, so the
    crash guard sees it; return the action. If it is this very job, Slurm requeued it (a lost
    node, with --requeue): that continuation goes in the ledger too. If this job is the lost
    one's successor, it continues the run (a ``resubmit`` record), unless the lost job was
    cancelled by its user: then the run stops (STOP)."""
    lost_id = lost.job_id
    asked = answers.ask_until(lambda: successor.ended_state(lost_id, requeued=lost_id == job_id),
                              CANCEL_ASK_SECONDS, say=successor._say)
    state = asked.value if asked.knowledge == Knowledge.KNOWN else None
    ledger.append(run, JobEnd(job_id=lost_id, exit_code=None, step=step, outcome=FAILED, slurm_state=state,
                              note="ended without its end hook (node failure, kill, or time limit overrun)"))
    print(f"[continuation] job {lost_id} ended without its end hook ({state or 'state unknown'}); "
          f"recorded as failed at step {step}")
    if lost_id == job_id:
        ledger.append(run, Requeue(job_id=job_id, by=By.SLURM))
        return REQUEUED
    if state == JobState.CANCELLED:
        ledger.append(run, Cancelled(job_id=lost_id))
        print(f"[continuation] job {lost_id} was cancelled by its user: the run is not continued")
        return STOP
    if successor.predecessor(ledger.read(run), job_id) == lost_id:
        ledger.append(run, Resubmit(job_id=job_id, after=lost_id, by=By.SUCCESSOR))
    return RESUBMIT


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
        if outcome == FINISHED and done is None:  # a workload that is not the trainer finished
            run.mark_done(step)
            done = run.read_done()
        error = failed_job_error(a, ledger.read(run)) if outcome == FAILED else None
        ledger.append(run, JobEnd(job_id=a.job_id, exit_code=a.exit_code, step=step, outcome=outcome, error=error,
                                  signal=a.stop_signal))
        records = ledger.read(run)
        slurm = SlurmView() if done else slurm_view(a.job_id, a.restart_count, a.stop_signal)
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
                                outcome=FAILED, signal=a.stop_signal,
                                note=f"lost the run's lease to {other.holder()}: nothing continued"))
    decision = Decision(NONE, f"the run is held by {other.holder()}, which carries it")
    print(f"[continuation] job {a.job_id} ended; {decision.reason}", file=sys.stderr)
    return decision


def carry_out(a: EndArgs, decision: Decision, records: list[Record], done: dict[str, Any] | None) -> None:
    run = a.run
    if a.packed and decision.action in (REQUEUE, RESUBMIT):
        print(f"[continuation] run {run.name} is in a pack job: the pack continues it (hpc.job.pack end)")
        return
    if decision.action in (FINISH, GIVE_UP, STOP) and not a.packed:
        successor.cancel(run, a.job_id)
    if decision.action == FINISH:
        if not ledger.of_kind(records, Done):
            ledger.append(run, Done(step=(done or {}).get("final_step")))
            notify.tell(run, "done")  # the webhook, if any (hpc/job/notify.py)
    elif decision.action == GIVE_UP:
        last = last_end(records)
        give_up(run, decision.reason, a.log_err, last.error if last else None)
    elif decision.action == STOP:
        ledger.append(run, Cancelled(job_id=a.job_id))
    elif decision.action == REQUEUED:
        ledger.append(run, Requeue(job_id=a.job_id, by=By.SLURM))
    elif decision.action in (REQUEUE, RESUBMIT):
        continue_run(a, decision.action, records)


def continue_run(a: EndArgs, action: str, records: list[Record]) -> None:
    """Requeue where the mode says so (the job keeps its id, so its successor keeps waiting
    on it); else, or where Slurm refuses the requeue, through the successor that already
    waits (one continuation, never two), else by a new follow-up job."""
    if action == REQUEUE and requeued(a.job_id, seconds_left(a.job_id)):
        ledger.append(a.run, Requeue(job_id=a.job_id, by=By.JOB))
        print(f"[continuation] requeued job {a.job_id}")
        return
    asking = seconds_left(a.job_id)
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
    seconds = seconds_left(a.job_id)
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


def give_up(run: RunDir, reason: str, log_err: str | None, error: str | None = None) -> None:
    """Mark the run failed: failed.json and the ledger's ``failed`` quote the job's error line."""
    run.mark_failed(reason, log_tail=log_err, error=error)
    ledger.append(run, Failed(reason=reason, log_tail=log_err, error=error))
    print(f"[continuation] run {run.name} marked failed: {reason}; log: {log_err or '-'}", file=sys.stderr)
    notify.tell(run, "failed", error or reason)  # the webhook, if any (hpc/job/notify.py)


# -- command line ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpc.job.continuation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("begin", "end"):
        s = sub.add_parser(name)
        s.add_argument("--run_dir", type=Path, required=True)
        s.add_argument("--model_dir", type=Path, required=True)
        s.add_argument("--job_id", default=os.environ.get("SLURM_JOB_ID", "local"))
    b = sub.choices["begin"]
    b.add_argument("--successor", type=Path, default=None, metavar="SCRIPT",
                   help="queue SCRIPT to follow this job (afterany), whatever ends it")
    b.add_argument("--max_resubmits", type=int, default=Limits.max_resubmits)
    b.add_argument("--max_failures", type=int, default=Limits.max_failures)
    e = sub.choices["end"]
    e.add_argument("--exit_code", type=int, required=True)
    e.add_argument("--mode", choices=MODE_CHOICES, required=True)
    e.add_argument("--script", type=Path, required=True)
    e.add_argument("--max_resubmits", type=int, required=True)
    e.add_argument("--max_failures", type=int, required=True)
    e.add_argument("--log_err", default=None)
    e.add_argument("--packed", action="store_true", help="a run of a pack job: record and decide, continue nothing")
    e.add_argument("--signal", default="", help="the first stop signal the job's shell got (USR1, TERM), if any")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[continuation] %(message)s", stream=sys.stderr)
    run = RunDir(args.run_dir)
    if args.command == "begin":
        return begin(run, args.model_dir, args.job_id, int(os.environ.get("SLURM_RESTART_COUNT") or 0),
                     args.successor, Limits(args.max_resubmits, args.max_failures))
    end(EndArgs(run, args.model_dir, args.job_id, args.exit_code, args.mode, args.script,
                args.max_resubmits, args.max_failures, args.log_err,
                int(os.environ.get("SLURM_RESTART_COUNT") or 0), args.packed, args.signal or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
