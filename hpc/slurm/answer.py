"""What Slurm answered, as one of three: known, known empty, or unknown.

Real clusters' Slurm answers badly for moments: ``squeue`` prints nothing or "Socket timed out"
while slurmctld is busy or failing over, ``sacct`` lags behind the queue, ``sbatch`` says
"Resource temporarily unavailable". An error or a timeout is *unknown*, never "no such job":
a hook that read "no answer" as "not queued" submitted a second job beside a waiting successor,
and the two trained one run into one checkpoint folder. So every answer the project acts on is
an ``Answer``: ``KNOWN`` (a value), ``EMPTY`` (Slurm answered, and the answer holds nothing) or
``UNKNOWN`` (an error, a timeout, or, judged by the caller, an answer that contradicts what the
run directory says: ``contradicted``). No caller submits, cancels, gives up or marks a run on
unknown; it asks again (``ask_until``) within the time it has left, and says so.

``retry`` is the same patience for commands that change something (sbatch, scontrol requeue):
a passing error is tried again with backoff while the time allows. Stdlib only; imports nothing
of the project.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import SacctRow
from hpc.slurm.states import JobState

T = TypeVar("T")
FIRST_WAIT = 2.0  # seconds before the first retry; doubled after each
LONGEST_WAIT = 30.0


class Unanswered(SlurmError):
    """Slurm's answer stayed unknown for as long as the caller could ask: nothing was done on it."""


class Knowledge(StrEnum):
    """How much an answer says."""

    KNOWN = "known"
    EMPTY = "known empty"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Answer(Generic[T]):
    """One answer of Slurm's: its knowledge, its value (None when unknown) and, unknown, why."""

    knowledge: Knowledge
    value: T | None = None
    why: str = ""

    @property
    def unknown(self) -> bool:
        return self.knowledge == Knowledge.UNKNOWN

    def contradicted(self, why: str) -> Answer[T]:
        """The same answer, judged unknown: it contradicts the run directory (``why``)."""
        return Answer(Knowledge.UNKNOWN, None, why)


def known(value: T, empty: bool) -> Answer[T]:
    return Answer(Knowledge.EMPTY if empty else Knowledge.KNOWN, value)


def unknown(why: str) -> Answer[T]:
    return Answer(Knowledge.UNKNOWN, None, why)


# -- the questions the project asks ---------------------------------------------------------------


def queue_states(job_ids: Iterable[str], timeout: float = 60, in_job: bool = False) -> Answer[dict[str, JobState]]:
    """The state of each of these jobs still in the queue; an error or a timeout is unknown."""
    try:
        states = calls.queue_states(job_ids, timeout, in_job)
    except SlurmError as error:
        return unknown(str(error))
    return known(states, not states)


def job_runs(job_ids: Iterable[str], timeout: float = 60, in_job: bool = False) -> Answer[list[SacctRow]]:
    """Every run of these jobs accounting has (``sacct -X -D``); an error or a timeout is unknown."""
    try:
        rows = calls.job_runs(job_ids, timeout, in_job)
    except SlurmError as error:
        return unknown(str(error))
    return known(rows, not rows)


# -- patience ------------------------------------------------------------------------------------------


def ask_until(question: Callable[[], Answer[T]], seconds: float, say: Callable[[str], None] = print,
              sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Answer[T]:
    """Ask until the answer is known (or known empty), for at most ``seconds``, waiting longer
    each time; the last answer (unknown when Slurm never answered) when the time is up."""
    deadline, wait = clock() + seconds, FIRST_WAIT
    answer = question()
    while answer.unknown and clock() + wait < deadline:
        say(f"Slurm's answer is unknown ({answer.why}); asking again in {wait:.0f} s")
        sleep(wait)
        answer, wait = question(), min(wait * 2, LONGEST_WAIT)
    return answer


@dataclass(frozen=True)
class Tried(Generic[T]):
    """A command tried until it worked or the time was up: its value, or its last error, and how often."""

    value: T | None
    error: SlurmError | OSError | None
    tries: int


def retry(command: Callable[[], T], seconds: float, say: Callable[[str], None] = print,
          sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Tried[T]:
    """``command`` tried again with backoff after each SlurmError or OSError while ``seconds`` allow
    another try; at least once."""
    deadline, wait, tries = clock() + seconds, FIRST_WAIT, 0
    while True:
        tries += 1
        try:
            return Tried(command(), None, tries)
        except (SlurmError, OSError) as error:
            if clock() + wait >= deadline:
                return Tried(None, error, tries)
            say(f"{error}; trying again in {wait:.0f} s (try {tries + 1})")
            sleep(wait)
            wait = min(wait * 2, LONGEST_WAIT)
