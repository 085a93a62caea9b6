"""What a run does after one of its jobs: the pure decision over the ledger and what Slurm says.

Every counter (continuations, failures without progress) is derived from the ledger, the one
record that survives requeues and node losses; there is no other state. ``decide`` is a pure
function of it, so the begin hook (a job lost without its end hook) and a pack job's end decide
as the end hook does.

Exit 78 (``EXIT_CONFIG_ERROR``: the trainer's preflight or setup found a configuration error) or 2
(bad input) gives the run up at once; other failures are retried until ``--max_failures`` of them
in a row made no progress, counted from the newest launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from hpc.job.continuation_modes import ContinuationMode
from hpc.job.exit_codes import EXIT_BAD_INPUT, EXIT_CONFIG_ERROR, EXIT_STOPPED_FOR_TIME
from hpc.run import ledger
from hpc.run.ledger import Chain, JobEnd, JobStart, Outcome, Record

# A workload that exits 78 (the trainer's preflight or setup: a configuration error) or 2 (bad
# input: the evaluation's and the service's bad model or data, a usage error) cannot outgrow it.
PERMANENT_EXIT_CODES = (EXIT_CONFIG_ERROR, EXIT_BAD_INPUT)


class Action(StrEnum):
    """What the end of a job does with the run (its value is the word the hook prints)."""

    FINISH = "finish"      # training is done: record it, continue nothing
    GIVE_UP = "give_up"    # mark the run failed, continue nothing
    STOP = "stop"          # a user cancelled the job: continue nothing, mark nothing (a launch resumes)
    REQUEUE = "requeue"    # scontrol requeue this job
    RESUBMIT = "resubmit"  # sbatch the same script with afterany on this job
    REQUEUED = "requeued"  # Slurm has already requeued this job: record it, submit nothing
    NONE = "none"          # chain mode, or another job holds the run: the job that waits continues


CONTINUES = frozenset({Action.REQUEUE, Action.RESUBMIT})  # the run goes on in a job this end makes
ENDS = frozenset({Action.FINISH, Action.GIVE_UP, Action.STOP})  # the run stops: its successor is cancelled


@dataclass(frozen=True)
class Decision:
    action: Action
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


def outcome_of(exit_code: int, done: bool) -> Outcome:
    """How a workload ended. Exit 0 means it finished (docs/design.md): the
    trainer writes the done marker itself, and for any other entrypoint (an
    evaluation, a smoke workload) ``end`` writes it, so a finished workload is
    never started again."""
    if exit_code == 0 or (done and exit_code == EXIT_STOPPED_FOR_TIME):
        return Outcome.FINISHED
    if exit_code == EXIT_STOPPED_FOR_TIME:
        return Outcome.STOPPED
    return Outcome.FAILED


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
        if end.outcome is not Outcome.FAILED or _advanced(start, end):
            break
        streak += 1
    return streak


def _advanced(start: JobStart | None, end: JobEnd) -> bool:
    return start is not None and start.step is not None and end.step is not None and end.step > start.step


def last_end(records: list[Record]) -> JobEnd | None:
    return next((r for r in reversed(records) if isinstance(r, JobEnd)), None)


def unclosed_start(records: list[Record]) -> JobStart | None:
    """The last job_start without a job_end: a job lost before its end hook ran
    (node failure, SIGKILL, requeue by Slurm itself)."""
    runs = job_runs(records)
    if runs and runs[-1][1] is None:
        return runs[-1][0]
    return None


def decide(records: list[Record], *, done: bool, mode: str, max_resubmits: int,
           max_failures: int, slurm: SlurmView = SlurmView()) -> Decision:
    """What to do after a job, given the ledger *including* this job's job_end."""
    if done:
        return Decision(Action.FINISH, "training finished")
    stopped = stop_decision(slurm)
    if stopped is not None:
        return stopped
    last = last_end(records)
    if last is not None and last.outcome is Outcome.FAILED:
        given_up = failure_decision(records, last, max_failures)
        if given_up is not None:
            return given_up
    if slurm.requeued:
        return Decision(Action.REQUEUED, "Slurm has requeued this job itself (preemption or an admin): "
                                         "it continues the run, nothing else is submitted")
    if mode == ContinuationMode.CHAIN:
        return chain_decision(records, last)
    return continuation_decision(records, last, mode, max_resubmits)


def stop_decision(slurm: SlurmView) -> Decision | None:
    """A user's cancel (or a TERM taken for one): the run is not continued."""
    if slurm.cancelled:
        return Decision(Action.STOP, "the job was cancelled (scancel): the run is not continued; launch again to resume")
    if slurm.terminated:
        return Decision(Action.STOP, "the job got SIGTERM with no time-limit SIGUSR1 before it (a scancel, an "
                                     f"administrator or a preemption) and accounting did not say which "
                                     f"({slurm.cancel_unknown}): the run is not continued; launch again to resume")
    return None


def failure_decision(records: list[Record], last: JobEnd, max_failures: int) -> Decision | None:
    """A failed job gives the run up when its error is permanent or the failures stopped making progress."""
    if last.exit_code in PERMANENT_EXIT_CODES:
        return Decision(Action.GIVE_UP, f"configuration error (exit {last.exit_code}), not retried: "
                                        f"{last.error or 'see the log'}")
    streak = failures_without_progress(records)
    if streak >= max_failures:
        return Decision(Action.GIVE_UP, f"{streak} failed job(s) in a row without progress "
                                        f"(--max_failures {max_failures}); last {failure_text(last)}")
    return None


def continuation_decision(records: list[Record], last: JobEnd | None, mode: str, max_resubmits: int) -> Decision:
    """Requeue or resubmit (the mode's way), while continuations are left."""
    used = ledger.continuations(records)
    if used >= max_resubmits:
        return Decision(Action.GIVE_UP, f"reached --max_resubmits {max_resubmits} continuations without finishing")
    why = "stopped for time" if last is not None and last.outcome is Outcome.STOPPED else "failed but made progress"
    action = Action.REQUEUE if mode == ContinuationMode.REQUEUE else Action.RESUBMIT
    return Decision(action, f"{why}; continuation {used + 1} of at most {max_resubmits}")


def chain_decision(records: list[Record], last: JobEnd | None) -> Decision:
    """Chain mode: the pre-submitted job that waits for this one continues the run, if any."""
    follower = chain_follower(records, last.job_id) if last is not None else None
    if follower is None:
        return Decision(Action.NONE, "chain mode, and this was the last pre-submitted job: launch again to "
                                     "continue the run")
    return Decision(Action.NONE, f"chain mode: the pre-submitted job {follower} continues the run")


def chain_follower(records: list[Record], job_id: str) -> str | None:
    """The pre-submitted job that waits for ``job_id`` (``chain`` records), if any."""
    return next((r.job_id for r in records if isinstance(r, Chain) and r.after == job_id), None)


def failure_text(end: JobEnd) -> str:
    """A failed job in a few words: its exit code and, when it wrote one, its error line."""
    text = f"exit code {end.exit_code}"
    return f"{text}: {end.error}" if end.error else text
