"""What Slurm's commands print, read into typed records: pure functions over text.

Job names may hold spaces, quotes, ``|``, even newlines and terminal escapes (Slurm accepts
all of them), and so may paths. So squeue is asked for records with ``\\x1f`` between fields
and ``\\x1e`` after the last one (``QUEUE_FORMAT``); sacct's fields are split on ``\\x1f`` with
any field that may hold a newline last; ``scontrol show job`` is read in its multi-line form,
where the fields that may hold spaces (the paths) have lines of their own and an unindented
line continues the value before it, and the last occurrence of a field wins, so a job name
cannot fake one. Each ``parse_*`` function reads what one command of ``hpc/slurm/calls.py``
prints; unusable rows are skipped, never an error. Times are read in the zone Slurm was asked
in (``calls.py`` asks in UTC).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo

from hpc.slurm.states import JobState, parse_state
from hpc.slurm.times import parse_duration, parse_time

FS, RS = "\x1f", "\x1e"  # ASCII unit and record separators: no job name or path holds them

# squeue -o: id, state, reason, elapsed, limit, nodes, node list, name (last: it may hold anything)
QUEUE_FORMAT = FS.join(["%i", "%T", "%r", "%M", "%l", "%D", "%N", "%j"]) + RS
# sacct -X -D: every run of a job (a requeued job has one row per run)
RUN_FIELDS = ("JobID", "State", "Submit", "Eligible", "Start", "End", "ElapsedRaw", "NNodes", "AllocTRES")
# sacct -X over a time window: ended jobs with what finds their logs; JobName last
ENDED_FIELDS = ("JobID", "JobIDRaw", "State", "ExitCode", "Elapsed", "End", "User", "WorkDir", "SubmitLine",
                "JobName")
# scontrol show job: fields printed on a line of their own, whose values may hold spaces
OWN_LINE_FIELDS = ("Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Power", "Comment", "AdminComment")


# -- squeue --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueuedJob:
    """One job in the queue (``squeue -o QUEUE_FORMAT``)."""

    job_id: str
    state: JobState
    reason: str
    elapsed: str  # as squeue prints it (``1:02:03``); seconds: elapsed_seconds
    limit: str  # ``UNLIMITED``, ``2:00:00``...
    nodes: str
    nodelist: str
    name: str

    @property
    def elapsed_seconds(self) -> int | None:
        return parse_duration(self.elapsed)

    @property
    def limit_seconds(self) -> int | None:
        return parse_duration(self.limit)


def squeue_records(text: str, fields: int) -> list[list[str]]:
    """Records of ``squeue -o 'a\\x1fb...\\x1fname\\x1e'`` (one ``\\n`` after each ``\\x1e``)."""
    records = []
    for chunk in text.split(RS):
        chunk = chunk[1:] if chunk.startswith("\n") else chunk
        parts = chunk.split(FS, fields - 1)
        if len(parts) == fields:
            records.append(parts)
    return records


def parse_queue(text: str) -> list[QueuedJob]:
    """The jobs of ``squeue -h -o QUEUE_FORMAT``."""
    return [QueuedJob(job_id, parse_state(state), reason, elapsed, limit, nodes, nodelist, name)
            for job_id, state, reason, elapsed, limit, nodes, nodelist, name in squeue_records(text, 8)]


# -- sacct ----------------------------------------------------------------------------------------


def sacct_records(text: str, fields: int) -> list[list[str]]:
    """Records of ``sacct -P --delimiter=$'\\x1f'`` whose last field (a name) may hold newlines:
    the token between a record's last separator and the next record's first is
    "<name>\\n<next JobID>", and a JobID never holds ``\\n``."""
    if not text.strip():
        return []
    tokens = (text if text.endswith("\n") else text + "\n").split(FS)
    records, current = [], [tokens[0]]
    for token in tokens[1:]:
        if len(current) < fields - 1:
            current.append(token)
            continue
        name, newline, next_id = token.rpartition("\n")
        if newline:
            records.append([*current, name])
        current = [next_id]  # without a newline the row was malformed: resynchronise
    return records


@dataclass(frozen=True)
class SacctRow:
    """One row of ``sacct -X -D``: one run of a job (a requeued job has one per run)."""

    job_id: str
    state: JobState
    submit: datetime | None
    eligible: datetime | None
    start: datetime | None
    end: datetime | None  # None while it runs (or waits)
    elapsed: int  # seconds, sacct's ElapsedRaw (up to now while it runs)
    nodes: int
    gpus: int  # gres/gpu of AllocTRES: the whole allocation's GPUs


def parse_runs(text: str, tz: tzinfo = timezone.utc) -> list[SacctRow]:
    """Rows of ``sacct -X -D -n -P --delimiter=\\x1f -o RUN_FIELDS``, in the order sacct printed them
    (not grouped by job: ``run_order`` sorts runs); no field holds a newline, so a line that is no
    row is skipped alone."""
    records = (line.split(FS) for line in text.split("\n"))
    return [run_row(dict(zip(RUN_FIELDS, parts)), tz) for parts in records if len(parts) == len(RUN_FIELDS)]


def run_row(f: dict[str, str], tz: tzinfo = timezone.utc) -> SacctRow:
    return SacctRow(job_id=f["JobID"], state=parse_state(f["State"]), submit=parse_time(f["Submit"], tz),
                    eligible=parse_time(f["Eligible"], tz), start=parse_time(f["Start"], tz),
                    end=parse_time(f["End"], tz), elapsed=to_int(f["ElapsedRaw"]), nodes=to_int(f["NNodes"]),
                    gpus=tres_gpus(f["AllocTRES"]))


def run_order(row: SacctRow) -> tuple[datetime, datetime]:
    """Runs in the order they happened: by start, then submission (not started yet: last)."""
    far = datetime.max.replace(tzinfo=timezone.utc)
    return row.start or far, row.submit or far


def latest_states(rows: Iterable[SacctRow]) -> dict[str, JobState]:
    """Each job's state in its latest run (a requeued job's earlier runs say REQUEUED)."""
    return {row.job_id: row.state for row in sorted(rows, key=run_order)}


def to_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        return 0


def tres_gpus(tres: str) -> int:
    """GPUs in a TRES string (``billing=2,cpu=2,gres/gpu=4,mem=2G,node=2``: 4; none: 0); a typed
    count beside it (``gres/gpu:h100=4``, Slurm 23.02 and later) is the same GPUs again."""
    for item in tres.split(","):
        name, _, count = item.partition("=")
        if name == "gres/gpu":
            return to_int(count)
    return 0


@dataclass(frozen=True)
class EndedJob:
    """One job of ``sacct -X -o ENDED_FIELDS`` (sfail.sh, scompleted.sh, scancelled.sh)."""

    job_id: str  # ``123``, ``123_4`` (an array's task), ``123+0`` (a heterogeneous job's part)
    job_id_raw: str
    state: JobState
    exit_code: str  # ``1:0``: the exit code and the signal
    elapsed: str
    end: datetime | None  # None: still ending (Unknown)
    user: str
    workdir: str
    submit_line: str  # sbatch's arguments joined by spaces
    name: str

    @property
    def elapsed_seconds(self) -> int | None:
        return parse_duration(self.elapsed)


def parse_ended(text: str, tz: tzinfo = timezone.utc) -> list[EndedJob]:
    """The jobs of ``sacct -X -n -P --delimiter=\\x1f -o ENDED_FIELDS``."""
    jobs = []
    for record in sacct_records(text, len(ENDED_FIELDS)):
        f = dict(zip(ENDED_FIELDS, record))
        jobs.append(EndedJob(f["JobID"], f["JobIDRaw"], parse_state(f["State"]), f["ExitCode"], f["Elapsed"],
                             parse_time(f["End"], tz), f["User"], f["WorkDir"], f["SubmitLine"], f["JobName"]))
    return jobs


# -- scontrol show job --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShownJob:
    """What ``scontrol show job ID`` says of a job slurmctld still knows."""

    fields: dict[str, str]
    tz: tzinfo = timezone.utc

    @property
    def job_id(self) -> str:
        return self.fields.get("JobId", "")

    @property
    def state(self) -> JobState:
        return parse_state(self.fields.get("JobState", ""))

    @property
    def restarts(self) -> int | None:
        """How often Slurm has requeued the job (``Restarts``), None if not printed."""
        text = self.fields.get("Restarts", "")
        return int(text) if text.isdigit() else None

    @property
    def end_time(self) -> datetime | None:
        """When the job ends (its start plus its limit while it runs); None when not known."""
        return parse_time(self.fields.get("EndTime", ""), self.tz)

    @property
    def std_out(self) -> str:
        return self.fields.get("StdOut", "")

    @property
    def std_err(self) -> str:
        return self.fields.get("StdErr", "")


def parse_show_job(text: str, tz: tzinfo = timezone.utc) -> ShownJob | None:
    """The first job of ``scontrol show job ID`` (multi-line, or one line with ``-o``); None if none."""
    fields = show_job_fields(text)
    return ShownJob(fields, tz) if "JobId" in fields else None


def show_job_fields(text: str) -> dict[str, str]:
    """Every ``Key=value`` of the first record; the last occurrence of a key wins (a job name is
    printed first, so it cannot fake a field printed after it)."""
    fields: dict[str, str] = {}
    key: str | None = None
    for number, line in enumerate(text.split("\n")):
        stripped = line.strip(" ")
        if number and not line.startswith(" "):
            if not stripped and fields:
                break  # a blank line ends the record (an array prints one per task)
            if key is not None:
                fields[key] += "\n" + line  # a newline in the value before
            continue
        key = read_fields(stripped, fields) or key
    return fields


def read_fields(line: str, fields: dict[str, str]) -> str | None:
    """One line's fields into ``fields``; the key whose value the line ends with."""
    name, sep, value = line.partition("=")
    if sep and name in OWN_LINE_FIELDS:
        fields[name] = value
        return name
    key = None
    for word in line.split(" "):
        name, sep, value = word.partition("=")
        if sep and name and " " not in name:
            key = name
            fields[key] = value
        elif key is not None and word:
            fields[key] += " " + word  # a value with a space (a job name)
    return key


# -- sbatch ------------------------------------------------------------------------------------------------


def parse_submitted(text: str) -> str:
    """The job id ``sbatch --parsable`` printed (``id`` or ``id;cluster``); ValueError if none."""
    job_id = text.strip().split(";")[0]
    if not job_id.isdigit():
        raise ValueError(f"sbatch printed no job id: {text.strip()!r}")
    return job_id
