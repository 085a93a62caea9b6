"""The run's ledger (``ledger.jsonl``): its vocabulary, written and read here and nowhere else.

Each kind of event is one frozen dataclass with its fields (docs/design.md, "Ledger records"):
``Submit``, ``Chain``, ``JobStart``, ``JobEnd``, ``Requeue``, ``Successor``, ``Resubmit``,
``Cancelled``, ``Done``, ``Failed``, ``Moved``, ``MovedIn``, ``Reclaimed``, ``Decline``, ``LeaseHeld``,
``SlurmUnknown``. ``append`` writes one as the JSON line runs on clusters already have (``event`` and
``time`` first; a field listed in a kind's ``OMITTED`` only when set); ``read`` gives them back
typed, oldest first. Lines are read as every record of a run directory is (hpc/run/records.py,
hpc/run/fields.py), with the fields of their event's class (hpc/run/ledger_fields.py): a line that
is not an object, has a field of the wrong kind, or is a job record without its job id is skipped
and named in ``RunDir.unreadable``; a torn last line (a crash mid-write) is dropped, and a line of an
event this code does not know (a newer release's) is left out quietly. So the ledger survives
requeues, lost nodes and older and newer versions of this code, and a corrupt line costs that line
only. What the records say together (the jobs a run has had, its continuations, its newest launch)
is here too, once. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any, ClassVar, TypeVar

from hpc.job.workload_env import REPO_DIR
from hpc.run.fields import Fields, parse_time, problem
from hpc.run.ledger_fields import EVENT, enum_fields, fields_of
from hpc.run.records import parse_lines
from hpc.run.rundir import RunDir, utc_now
from hpc.run.safe_io import append_jsonl, read_bytes


class Outcome(StrEnum):
    """How a job's workload ended (``JobEnd.outcome``)."""

    STOPPED = "stopped_for_time"
    FINISHED = "finished"
    FAILED = "failed"


class By(StrEnum):
    """Who continued a run: ``Requeue.by`` (its end hook, or Slurm itself), ``Resubmit.by`` (the successor)."""

    JOB = "job"
    SLURM = "slurm"
    SUCCESSOR = "successor"


class DeclineAction(StrEnum):
    """What the trainer did about a declining run (``Decline.action``, hpc/run/decline.py's rule)."""

    CONTINUE = "continue"
    STOP = "stop"
    ROLLBACK = "rollback"


@dataclass(frozen=True, kw_only=True)
class Record:
    """What every record has: its kind (``event``) and when it was written (ISO-8601 UTC)."""

    EVENT: ClassVar[str] = ""
    OMITTED: ClassVar[frozenset[str]] = frozenset()  # fields written only when not None
    time: str = field(default_factory=utc_now)

    def __post_init__(self) -> None:
        """A field typed by an enum holds the enum's member, whatever it was given (a ledger line's text,
        a caller's word): a value the enum lacks is a ValueError here, not a state no reader decides on."""
        for name, enum in enum_fields(type(self)).items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, enum):
                object.__setattr__(self, name, enum(value))

    @property
    def moment(self) -> datetime | None:
        return parse_time(self.time)


@dataclass(frozen=True, kw_only=True)
class JobRecord(Record):
    """A record about one Slurm job."""

    job_id: str


@dataclass(frozen=True, kw_only=True)
class Launched(JobRecord):
    """What the launcher records of a job it submitted (a pack job's: ``pack``, ``pack_script``, ``pack_runs``)."""

    OMITTED = frozenset({"pack", "pack_script", "pack_runs"})
    cluster: str | None = None
    script: str | None = None
    git_commit: str | None = None
    argv: list[str] = field(default_factory=list)  # secret values as ***
    log_out: str | None = None
    log_err: str | None = None
    pack: str | None = None
    pack_script: str | None = None
    pack_runs: int | None = None


@dataclass(frozen=True, kw_only=True)
class Submit(Launched):
    """The launcher submitted a job: a launch (a run's newest launch starts a fresh failure count)."""

    EVENT = "submit"


@dataclass(frozen=True, kw_only=True)
class Chain(Launched):
    """The launcher pre-submitted a job to follow ``after`` (``--chain N``)."""

    EVENT = "chain"
    after: str | None = None


@dataclass(frozen=True, kw_only=True)
class JobStart(JobRecord):
    """A job's begin hook: the step it starts from, its restarts, where its part of the .err log begins."""

    EVENT = "job_start"
    OMITTED = frozenset({"pack_runs"})
    step: int | None = None
    restart_count: int = 0
    err_offset: int = 0
    pack_runs: int | None = None  # runs sharing the job (a pack job): accounting charges each its part


@dataclass(frozen=True, kw_only=True)
class JobEnd(JobRecord):
    """How a job's workload ended; a job lost without its end hook is closed by the next begin
    (``exit_code`` None, a ``note`` and the ``slurm_state`` accounting gives it)."""

    EVENT = "job_end"
    OMITTED = frozenset({"error", "note", "slurm_state", "signal"})
    exit_code: int | None = None
    step: int | None = None
    outcome: Outcome = Outcome.FAILED
    error: str | None = None  # a failed job's error line
    note: str | None = None
    slurm_state: str | None = None
    signal: str | None = None  # the first stop signal the job's shell got: USR1 (time) or TERM (scancel, preemption)


@dataclass(frozen=True, kw_only=True)
class Requeue(JobRecord):
    """The job was requeued, ``by`` its end hook (``job``) or by Slurm itself (``slurm``)."""

    EVENT = "requeue"
    by: By = By.JOB


@dataclass(frozen=True, kw_only=True)
class Successor(JobRecord):
    """A starting job (``after``) queued ``job_id`` to follow it, whatever ends it."""

    EVENT = "successor"
    after: str = ""
    script: str | None = None


@dataclass(frozen=True, kw_only=True)
class Resubmit(JobRecord):
    """The run continues in ``job_id`` after ``after``: a follow-up submitted at the end (``script``),
    or the successor queued at the start (``by``: ``successor``)."""

    EVENT = "resubmit"
    OMITTED = frozenset({"script", "by"})
    after: str = ""
    script: str | None = None
    by: By | None = None


@dataclass(frozen=True, kw_only=True)
class Cancelled(JobRecord):
    """A user cancelled the job: the run is not continued (a launch resumes it)."""

    EVENT = "cancelled"


@dataclass(frozen=True, kw_only=True)
class Done(Record):
    """Training finished."""

    EVENT = "done"
    step: int | None = None


@dataclass(frozen=True, kw_only=True)
class Failed(Record):
    """The run was given up; ``error`` quotes the failed job's error line."""

    EVENT = "failed"
    OMITTED = frozenset({"error"})
    reason: str = ""
    log_tail: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Moved(Record):
    """The run was bundled to continue elsewhere (hpc/run/bundle.py): ``to`` (where), at ``step``
    (its latest complete checkpoint), as ``bundle`` (the bundle's id). It trains there, not here."""

    EVENT = "moved"
    to: str = ""
    step: int | None = None
    bundle: str = ""


@dataclass(frozen=True, kw_only=True)
class MovedIn(Record):
    """The run arrived from a bundle (hpc/run/unbundle.py): from ``source`` (host:run folder) at
    ``step``. The records before it are of the clusters it came from: their job ids are not ours."""

    EVENT = "moved_in"
    source: str = ""
    step: int | None = None
    bundle: str = ""


@dataclass(frozen=True, kw_only=True)
class Reclaimed(Record):
    """The user took a moved run back here (``python -m hpc.run reclaim``): it trains here again,
    and ``bundle``'s copy must not."""

    EVENT = "reclaimed"
    bundle: str = ""


@dataclass(frozen=True, kw_only=True)
class Decline(Record):
    """The trainer found the run declining at the validation of ``step`` (hpc/run/decline.py) and
    chose ``action`` (``continue`` | ``stop`` | ``rollback``). A rollback continues from ``to_step``,
    a copy of ``best_step``'s checkpoint, with every later step's learning rate x ``lr_scale``; it is
    the run's ``rollback``-th. A stop leaves ``steps_left`` untrained. The next job reads these back."""

    EVENT = "decline"
    OMITTED = frozenset({"rollback", "to_step", "lr_scale", "steps_left"})
    action: DeclineAction
    step: int = 0
    accuracy: float = 0.0
    best_step: int = 0
    best_accuracy: float = 0.0
    reason: str = ""
    rollback: int | None = None
    to_step: int | None = None
    lr_scale: float | None = None
    steps_left: int | None = None


@dataclass(frozen=True, kw_only=True)
class LeaseHeld(JobRecord):
    """``job_id`` started, found the run held by ``holder`` (its lease renewed: hpc/run/lease.py) and
    ended at once, touching nothing: Slurm had started two jobs of one run."""

    EVENT = "lease_held"
    holder: str = ""
    holder_host: str | None = None


@dataclass(frozen=True, kw_only=True)
class SlurmUnknown(JobRecord):
    """A hook of ``job_id`` could not learn what it needed from Slurm (an error, a timeout, an answer
    that contradicts this ledger) after asking for ``waited`` seconds, and so did not do ``held_back``."""

    EVENT = "slurm_unknown"
    asked: str = ""
    why: str = ""
    waited: int = 0
    held_back: str = ""



KINDS: dict[str, type[Record]] = {kind.EVENT: kind for kind in (
    Submit, Chain, JobStart, JobEnd, Requeue, Successor, Resubmit, Cancelled, Done, Failed, Moved, MovedIn,
    Reclaimed, Decline, LeaseHeld, SlurmUnknown)}
R = TypeVar("R", bound=Record)


# -- the file ---------------------------------------------------------------------------------------------


def to_json(record: Record) -> dict[str, Any]:
    """The record as its line in ledger.jsonl (a record read from a line without a time, without one)."""
    fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name != "time"}
    kept = {name: value for name, value in fields.items() if value is not None or name not in record.OMITTED}
    return {"event": record.EVENT, **({"time": record.time} if record.time else {}), **kept}


@cache
def event_fields() -> dict[str, Fields]:
    """Each event's fields, worked out from the record classes' type hints on first use: a launch that
    reads no ledger (a dry run) does not pay for them."""
    return {event: fields_of(kind) for event, kind in KINDS.items()}


def problem_of(data: dict[str, Any]) -> str | None:
    """Why a ledger line is no record of its event (one line, fields.py's rule), or None; a line of an
    event this code does not know passes here and ``from_json`` leaves it out."""
    fields = event_fields()
    return problem(data, EVENT) or (problem(data, fields[data["event"]]) if data["event"] in fields else None)


def from_json(data: Any) -> Record | None:
    """The typed record of one line; None for a line that is no record this code knows. A job id
    written as a number is its text."""
    if not isinstance(data, dict) or problem_of(data) is not None or data["event"] not in KINDS:
        return None
    values = {"time": "", **{name: data[name] for name in event_fields()[data["event"]] if name in data}}
    if "job_id" in values:
        values["job_id"] = str(values["job_id"])
    return KINDS[data["event"]](**values)


def append(run: RunDir, record: Record) -> Record:
    """Append one record: a single write() of one line, under the run's lock, never through a link."""
    with run.locked():
        append_jsonl(run.ledger, to_json(record), run.path)
    return record


def read(run: RunDir) -> list[Record]:
    """Every record, oldest first; a line that is none is skipped (see the module's docstring). A
    ledger that cannot be read at all (a folder or a link where the file should be) raises OSError:
    the job's hooks decide nothing on a ledger they could not read."""
    try:
        data = read_bytes(run.ledger, run.path)
    except FileNotFoundError:
        return []
    return parse(parse_lines(data, problem_of, run.teller(run.ledger)))


def readable(run: RunDir) -> list[Record]:
    """``read``, with a ledger that cannot be read at all as none, named in ``run.unreadable``: the
    views over many runs show the others."""
    try:
        return read(run)
    except OSError as error:
        run.skip_file(run.ledger, error)
        return []


def parse(lines: Iterable[Any]) -> list[Record]:
    return [record for record in map(from_json, lines) if record is not None]


# -- what the records say together --------------------------------------------------------------------------


def of_kind(records: Iterable[Record], kind: type[R]) -> list[R]:
    """The records of one kind."""
    return [r for r in records if isinstance(r, kind)]


def job_ids(records: Iterable[Record]) -> list[str]:
    """Every job the ledger names since the run last arrived here (``moved_in``: older job ids are
    another cluster's), in the order it last names them: the job that did something last comes
    last (a chain's pre-submitted jobs before the one that started after them)."""
    ids: dict[str, None] = {}
    for record in since_arrival(list(records)):
        if isinstance(record, JobRecord):
            ids.pop(record.job_id, None)
            ids[record.job_id] = None
    return list(ids)


def open_jobs(records: Iterable[Record]) -> list[str]:
    """The jobs whose last ``job_start`` has no ``job_end`` after it: running, as far as the ledger knows
    (or lost without their end hook, which only Slurm can tell)."""
    opened: dict[str, None] = {}
    for record in records:
        if isinstance(record, JobStart):
            opened[record.job_id] = None
        elif isinstance(record, JobEnd):
            opened.pop(record.job_id, None)
    return list(opened)


def continuations(records: Iterable[Record]) -> int:
    """Continuations so far = requeue + resubmit records (docs/design.md)."""
    return sum(1 for r in records if isinstance(r, (Requeue, Resubmit)))


def since_launch(records: list[Record]) -> list[Record]:
    """The records from the newest launch (``submit``) on: what this launch's jobs did."""
    launches = [k for k, record in enumerate(records) if isinstance(record, Submit)]
    return records[launches[-1]:] if launches else records


def cancelled_since_launch(records: Iterable[Record]) -> bool:
    """The newest of the launch (``submit``) and ``cancelled`` records is a ``cancelled``."""
    marks = [r for r in records if isinstance(r, (Submit, Cancelled))]
    return bool(marks) and isinstance(marks[-1], Cancelled)


def latest_launch(records: Iterable[Record]) -> Submit | None:
    return next((r for r in reversed(list(records)) if isinstance(r, Submit)), None)


def cluster_of(records: Iterable[Record]) -> str | None:
    """The cluster of the run's latest launch (submit and chain records name it)."""
    return next((r.cluster for r in reversed(list(records)) if isinstance(r, Launched) and r.cluster), None)


def since_arrival(records: list[Record]) -> list[Record]:
    """The records since the run last arrived from a bundle (``moved_in``), else all of them."""
    arrivals = [k for k, record in enumerate(records) if isinstance(record, MovedIn)]
    return records[arrivals[-1]:] if arrivals else records


def moved_away(records: Iterable[Record]) -> Moved | None:
    """The move that took the run elsewhere, unless it was reclaimed or arrived back since."""
    last = next((r for r in reversed(list(records)) if isinstance(r, (Moved, MovedIn, Reclaimed))), None)
    return last if isinstance(last, Moved) else None


def resume_command(launch: Submit | None) -> str:
    """The newest launch's command (its secrets already redacted in the ledger), run again."""
    argv = launch.argv if launch is not None else []
    words = " ".join(shlex.quote(word) for word in argv) if argv else "<the same arguments>"
    secret = " (give the secret --env values shown as *** again)" if "***" in words else ""
    return f"cd {shlex.quote(str(REPO_DIR))} && .venv/bin/python -m hpc.launch {words}{secret}"
