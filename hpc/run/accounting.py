"""Where a run's GPU-hours went, computed from Slurm's records and the run's (``python -m hpc.accounting RUN``).

Login side (status.sh's runs view, the run report, hpc/run/accounting_cli.py). Stdlib only
and one ``sacct`` call for any number of runs, because status.sh runs it every
few seconds on a login node. What it computes is hpc/run/accounting_records.py's records;
hpc/run/accounting_text.py writes them.

Sources, all read through hpc/run/rundir.py except Slurm's own record:

- ``sacct -X -D`` (``hpc.slurm.calls.job_runs``): every run of every job of the run (a
  requeued job keeps its id and has one row per run): submit, start, end,
  elapsed seconds, nodes, and the GPUs in ``AllocTRES``;
- the ledger: which jobs are the run's, the cluster they ran on (whose
  ``whole_nodes`` and ``gpus_per_node`` say how a job is charged), and how each
  job run ended (``job_end``'s outcome);
- ``steps.jsonl``: each trained step's seconds, end time and job;
- ``stops.jsonl``: why each job's workload stopped, and the rollout-seconds it
  threw away;
- ``progress.json`` / ``done.json``: steps done and the total.

Each job run's allocated time (start to end, or to now while it runs) is cut
into segments (``KINDS``): ``starting`` until its first step began (model load,
vLLM start), ``training`` during steps, ``between`` between steps (validation),
``lost`` from the last step to the stop when a step in flight was thrown away
(rollouts abandoned, a crash, a job that ended without its end hook),
``idle`` from there to the job's end (stopping, a step that would not fit),
and ``in_flight`` for the step a running job is on, or ``stalled`` instead once
the run is flagged STALLED (hpc/run/health.py: no step for 3x its usual step time):
a running job's time since its last step (or its start) is then lost. Before a job run starts it
is ``queued``: from its submission (a requeued run: from the requeue), or from
the end of the run's previous job run when it was submitted earlier (chain,
afterany), to its start.

Charged GPU-hours = elapsed x the job's GPUs: the GPUs Slurm allocated
(``gres/gpu`` of AllocTRES), or, where the cluster charges whole nodes, nodes x
the node's GPUs. A job run several runs share (a pack job, hpc/launcher/packing.py: each
member's ``begin`` hook records a ``job_start`` for it, with ``pack_runs``, how
many share it; without that field, the runs whose ledgers have a ``job_start`` in
it are counted) is charged to each of them in equal parts. Goodput = productive step GPU-hours / charged GPU-hours
(a step in flight counts in neither).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from hpc.run import health, ledger
from hpc.run.accounting_records import Charging, JobRun, RunAccounting, Segment, Stop
from hpc.run.ledger import Chain, JobEnd, JobStart, Outcome, Record, Resubmit, Submit, Successor
from hpc.run.rundir import RunDir
from hpc.run.steps import Step, parse_time, trained_steps, usual_step_seconds
from hpc.slurm import calls
from hpc.slurm.output import SacctRow, run_order
from hpc.slurm.states import JobState

# A successor (hpc/job/successor.py) is submitted when its predecessor starts, hours before the
# ``resubmit`` that names it: its ``successor`` record is its submission.
SUBMITTING = (Submit, Chain, Successor, Resubmit)
# A sacct row submitted this long before the ledger first names its job id is another job
# that had the id (a Slurm whose job ids started again), not the run's.
ID_REUSE_SLACK = timedelta(minutes=10)
MATCH_SLACK = timedelta(seconds=90)  # records written just after a job run's end still belong to it
EARLY = timedelta(seconds=2)  # sacct and the run's records round to whole seconds
ENDED_BADLY = (Outcome.FAILED,)  # job_end outcomes whose step in flight died with the job


def stops_of(run: RunDir) -> list[Stop]:
    """stops.jsonl as records, oldest first (the run's reader skipped and named any that is not one)."""
    return [Stop(str(record.get("job_id", "")), parse_time(record["time"]), str(record.get("reason", "")),  # type: ignore[arg-type]
                 float(record.get("lost_rollout_seconds") or 0.0)) for record in run.read_stops()]


def charging_of(cluster: str | None) -> Charging | None:
    """How ``cluster`` charges (hpc/launcher/clusters.yaml); None when it is not in the registry."""
    if cluster is None:
        return None
    from hpc.launcher.clusters import load_registry  # PyYAML: only when some job is to be charged

    found = load_registry().clusters.get(cluster)
    return None if found is None else Charging(cluster, found.whole_nodes, found.gpus_per_node)


class Owners:
    """Which job run a record of a job belongs to: the latest run of that job id started by
    the record's time (a requeued job's runs follow each other closely), if the record is
    not later than that run's end (give or take MATCH_SLACK; a running one runs until now)."""

    def __init__(self, rows: Iterable[SacctRow], now: datetime):
        self.now = now
        self.by_id: dict[str, list[SacctRow]] = {}
        for row in sorted((r for r in rows if r.start is not None), key=run_order):
            self.by_id.setdefault(row.job_id, []).append(row)

    def of(self, job_id: str, moment: datetime) -> SacctRow | None:
        started = [r for r in self.by_id.get(job_id, []) if r.start - EARLY <= moment]  # type: ignore[operator]
        if not started:
            return None
        row = started[-1]
        return row if moment <= (row.end or self.now) + MATCH_SLACK else None


def rows_of_run(records: list[Record], rows: Iterable[SacctRow], now: datetime) -> list[SacctRow]:
    """The sacct rows of the run's jobs. Job ids come again (a Slurm whose ids started
    over), so a row counts only when it fits the ledger: submitted after the ledger
    first submitted its id, or, for a job the ledger only saw start, holding that start."""
    first: dict[str, datetime] = {}
    for record in records:
        moment = record.moment
        if isinstance(record, SUBMITTING) and moment is not None:
            first.setdefault(record.job_id, moment)
    ids = set(ledger.job_ids(records))
    candidates = [r for r in rows if r.job_id in ids]
    owners = Owners(candidates, now)
    started = {id(owners.of(job, moment)) for job, moments in job_starts([records]).items() for moment in moments}

    def ours(row: SacctRow) -> bool:
        if row.job_id in first:
            return row.submit is None or row.submit >= first[row.job_id] - ID_REUSE_SLACK
        return id(row) in started

    return [row for row in candidates if ours(row) and not never_ran(row)]


def never_ran(row: SacctRow) -> bool:
    """Ended without starting: a successor (or chained job) cancelled while it waited costs nothing."""
    return row.start is None and row.end is not None


def job_starts(ledgers: Iterable[list[Record]]) -> dict[str, list[datetime]]:
    """When runs' ``begin`` hooks started each job, over several runs' ledgers: a job run
    with N starts was shared by N runs (a pack job)."""
    starts: dict[str, list[datetime]] = {}
    for records in ledgers:
        for record in ledger.of_kind(records, JobStart):
            if record.moment is not None:
                starts.setdefault(record.job_id, []).append(record.moment)
    return starts


def sharing(starts: dict[str, list[datetime]], owners: Owners, row: SacctRow) -> int:
    """How many runs' begin hooks started this job run (1 unless it is a pack job's)."""
    return max(1, sum(1 for moment in starts.get(row.job_id, []) if owners.of(row.job_id, moment) is row))


# -- one job run ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFacts:
    """What the run's files say about one job run."""

    steps: list[Step]
    stop: Stop | None
    ended_badly: bool  # its workload failed, or it ended without its end hook
    pack_runs: int | None = None  # its job_start's: runs sharing the job (a pack job, hpc/job/pack.py)
    stalled: bool = False  # it runs, and the run is flagged STALLED (hpc/run/health.py)


NO_FACTS = JobFacts([], None, False)  # a job run that has not started


def facts_by_row(owners: Owners, files: RunFiles) -> dict[int, JobFacts]:
    """The steps, stop and end hook of each job run (by ``id`` of its row): every record
    goes to the one job run that owns it."""
    steps: dict[int, list[Step]] = {}
    stops: dict[int, Stop] = {}
    hooks: dict[int, Hooks] = {}
    for step in files.steps:
        row = owners.of(step.job_id, step.end)
        if row is not None:
            steps.setdefault(id(row), []).append(step)
    for stop in files.stops:
        row = owners.of(stop.job_id, stop.time)
        if row is not None:
            stops[id(row)] = stop  # the last one
    for record in files.ledger:
        moment = record.moment
        row = owners.of(record.job_id, moment) if isinstance(record, (JobStart, JobEnd)) and moment else None
        if row is not None:
            hooks[id(row)] = hooks.get(id(row), Hooks()).with_record(record)
    return {key: job_facts(row, steps.get(key, []), stop=stops.get(key), hooks=hooks.get(key, Hooks()))
            for key, row in ((id(r), r) for rows in owners.by_id.values() for r in rows)}


@dataclass(frozen=True)
class Hooks:
    """A job run's begin and end hook records (the latest of each that it owns)."""

    job_start: JobStart | None = None
    job_end: JobEnd | None = None

    def with_record(self, record: Record) -> Hooks:
        if isinstance(record, JobStart):
            return replace(self, job_start=record)
        return replace(self, job_end=record) if isinstance(record, JobEnd) else self


def job_facts(row: SacctRow, steps: list[Step], stop: Stop | None, hooks: Hooks) -> JobFacts:
    """A job run whose begin hook ran but whose end hook did not died with its step in flight."""
    hookless = row.end is not None and hooks.job_start is not None and hooks.job_end is None
    pack_runs = hooks.job_start.pack_runs if hooks.job_start is not None else None
    ended_badly = hooks.job_end is not None and hooks.job_end.outcome in ENDED_BADLY
    return JobFacts(steps, stop, hookless or ended_badly, pack_runs if pack_runs is not None and pack_runs >= 1 else None)


def segments_of(row: SacctRow, ready: datetime | None, facts: JobFacts, now: datetime) -> list[Segment]:
    """The job run's time, queued to its end, cut into KINDS."""
    segments: list[Segment] = []
    if ready is not None and (row.start or now) > ready:
        segments.append(Segment("queued", ready, row.start or now))
    if row.start is None:
        return segments
    end = row.end or now
    cursor = row.start
    for step in facts.steps:
        begin = min(max(step.start, cursor), end)
        if begin > cursor:
            segments.append(Segment("starting" if cursor == row.start else "between", cursor, begin))
        finish = min(max(step.end, begin), end)
        segments.append(Segment("training", begin, finish))
        cursor = finish
    return segments + tail_segments(row, cursor, facts, now)


def tail_segments(row: SacctRow, cursor: datetime, facts: JobFacts, now: datetime) -> list[Segment]:
    """After the job run's last step (or its start, when it trained none)."""
    trained = bool(facts.steps)
    if row.end is None:
        kind = "stalled" if facts.stalled else "in_flight" if trained else "starting"
        return [Segment(kind, cursor, max(cursor, now))]
    end = max(cursor, row.end)
    stop_at = min(max(facts.stop.time, cursor), end) if facts.stop else None
    if not trained:
        return [Segment("starting", cursor, stop_at or end)] + ([Segment("idle", stop_at, end)] if stop_at else [])
    if facts.stop is not None and facts.stop.lost_rollout_seconds > 0:
        return [Segment("lost", cursor, stop_at), Segment("idle", stop_at, end)]  # type: ignore[arg-type]
    if facts.ended_badly:
        return [Segment("lost", cursor, end)]
    if stop_at is not None:
        return [Segment("between", cursor, stop_at), Segment("idle", stop_at, end)]
    return [Segment("idle", cursor, end)]


def job_run(row: SacctRow, attempt: int, ready: datetime | None, facts: JobFacts, gpus: int, share: int,
            now: datetime) -> JobRun:
    segments = tuple(s for s in segments_of(row, ready, facts, now) if s.seconds > 0)
    elapsed = float(row.elapsed) if row.start is not None else 0.0
    return JobRun(job_id=row.job_id, attempt=attempt, state=row.state, submit=row.submit, start=row.start,
                  end=row.end, elapsed=elapsed, nodes=row.nodes, gpus=gpus, share=share, segments=segments,
                  steps=len(facts.steps), productive=sum(s.seconds for s in segments if s.kind == "training"),
                  lost_rollout_seconds=facts.stop.lost_rollout_seconds if facts.stop else 0.0,
                  stop_reason=facts.stop.reason if facts.stop else None)


# -- one run ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFiles:
    """A run's records, read once (status.sh reads every run every few seconds)."""

    ledger: list[Record]
    steps: list[Step]
    stops: list[Stop]
    progress: dict[str, Any]
    done: dict[str, Any] | None
    validations: list[dict[str, Any]] = field(default_factory=list)  # the health check's (a stall allows for them)

    @classmethod
    def read(cls, run: RunDir, records: list[Record] | None = None) -> RunFiles:
        """Whatever is readable: the run's readers skip a bad record (and name it in ``run.unreadable``)."""
        return cls(ledger.readable(run) if records is None else records, trained_steps(run), stops_of(run),
                   run.read_progress() or {}, run.read_done(), run.read_validations())


def account(name: str, files: RunFiles, rows: Iterable[SacctRow], charging: Charging | None,
            starts: dict[str, list[datetime]] | None = None, now: datetime | None = None,
            health: Any = None) -> RunAccounting:
    """The run's accounting from its files and the sacct rows of its jobs (others are ignored).

    ``starts``: job_start times of every run that may share a job with this one (job_starts);
    default, this run's own (nothing shared). ``health``: the STALLED thresholds
    (hpc.run.health.HealthSettings; default, its defaults)."""
    now = now or datetime.now(timezone.utc)
    starts = job_starts([files.ledger]) if starts is None else starts
    ordered = sorted(rows_of_run(files.ledger, rows, now), key=run_order)
    owners = Owners(ordered, now)
    facts = facts_by_row(owners, files)
    jobs, previous_end, attempts = [], None, dict[str, int]()
    for row in ordered:
        attempt = attempts[row.job_id] = attempts.get(row.job_id, -1) + 1
        ready = max(filter(None, (row.submit, previous_end)), default=None)
        gpus = charging.gpus(row) if charging else row.gpus
        known = with_stall(facts.get(id(row), NO_FACTS), row, files, now, health)
        share = known.pack_runs or sharing(starts, owners, row)
        jobs.append(job_run(row, attempt, ready, known, gpus, share, now))
        previous_end = row.end or previous_end
    return RunAccounting(name, charging, tuple(jobs), *step_totals(files), restart_gaps(jobs),
                         usual_step_seconds(files.steps), now, (files.done or {}).get("steps_left"),
                         unrecorded_jobs(files.ledger, ordered))


def unrecorded_jobs(records: list[Record], rows: list[SacctRow]) -> tuple[str, ...]:
    """The run's jobs that started and that accounting has no record of yet (sacct lags behind):
    their time is missing from every figure until it has, which the views say."""
    recorded = {row.job_id for row in rows}
    started = dict.fromkeys(r.job_id for r in ledger.of_kind(records, JobStart))
    return tuple(job for job in started if job not in recorded)


def with_stall(known: JobFacts, row: SacctRow, files: RunFiles, now: datetime, settings: Any) -> JobFacts:
    """A running job's facts, marked stalled when hpc/run/health.py flags the run STALLED."""
    if row.end is not None or row.start is None or row.state != JobState.RUNNING:
        return known
    flag = health.stalled(files.steps, files.validations, row.job_id, row.start, now,
                          settings or health.HealthSettings())
    return replace(known, stalled=flag is not None)


def step_totals(files: RunFiles) -> tuple[int, int | None, bool]:
    """Steps done, total steps and whether training is finished."""
    done = files.done or {}
    step = done.get("final_step", files.progress.get("step"))
    if step is None and files.steps:
        step = files.steps[-1].step
    total = done.get("total_steps") or files.progress.get("total_steps")
    return int(step or 0), (int(total) if isinstance(total, (int, float)) else None), bool(done)


def restart_gaps(jobs: list[JobRun]) -> tuple[float, ...]:
    """From each job run's end to the first step of the next job run that trained."""
    gaps = []
    for before, after in zip(jobs, jobs[1:]):
        first = next((s.start for s in after.segments if s.kind == "training"), None)
        if before.end is not None and first is not None:
            gaps.append(max(0.0, (first - before.end).total_seconds()))
    return tuple(gaps)


# -- a run on disk ----------------------------------------------------------------------------------------


def sibling_ledgers(run: RunDir) -> list[list[Record]]:
    """The ledgers of the runs beside this one (a pack job's other runs share its jobs)."""
    try:
        beside = sorted(run.path.parent.iterdir())
    except OSError:
        return []
    # What another run's ledger holds that is not a record is that run's to show, not this one's.
    return [ledger.readable(RunDir(path)) for path in beside if path != run.path]


def account_run(run: RunDir, now: datetime | None = None) -> RunAccounting:
    """The accounting of one run directory: its own sacct call (status.sh makes one for all runs)."""
    files = RunFiles.read(run)
    rows = calls.job_runs(ledger.job_ids(files.ledger))
    starts = job_starts([files.ledger, *sibling_ledgers(run)])
    return account(run.name, files, rows, charging_of(ledger.cluster_of(files.ledger)), starts, now,
                   stall_settings())


def stall_settings() -> Any:
    """The STALLED thresholds from the environment (HPC_STALL_*), as status.sh reads them; their
    defaults where a variable is not a number (status.sh says so)."""
    try:
        return health.HealthSettings.from_env()
    except health.SettingError:
        return health.HealthSettings()
