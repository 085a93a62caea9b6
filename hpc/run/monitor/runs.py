"""status.sh's runs view, its rows: one per run (its job and state, step, checkpoint, reward, validation,
ETA, GPU-hours, continuations, result or health flag), with its goodput line and whether it is parked
(where the run stands: run_state.py; the table on the terminal: runs_table.py). One squeue and at most
one sacct call for all runs; a run unchanged since the last call, its jobs ended, is shown as it was
kept (status_cache.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

from hpc.job.workload_env import REPO_DIR
from hpc.run import accounting, accounting_text, ledger
from hpc.run.best import best_of, last_of
from hpc.run.checkpoints import is_complete, list_checkpoints
from hpc.run.health import Flag, HealthSettings, SettingError
from hpc.run.health import check as health_check
from hpc.run.ledger import Record
from hpc.run.monitor import status_cache
from hpc.run.monitor.display import Failure, duration
from hpc.run.monitor.queue import SLURM_TIMEOUT
from hpc.run.monitor.run_state import Parked, parked, result_text, run_state, state_of, sweep_word
from hpc.run.monitor.rundirs import read_marker, unreadable_folder
from hpc.run.ownership import model_dir_of
from hpc.run.records import Skipped
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import latest_states
from hpc.slurm.states import QUEUED, JobState

CODE_FILES = [REPO_DIR / "hpc" / "run" / name for name in (
    "monitor/runs.py", "monitor/run_state.py", "monitor/runs_table.py", "monitor/status_cache.py",
    "monitor/display.py", "monitor/rundirs.py", "accounting.py", "accounting_records.py", "accounting_text.py",
    "health.py", "ledger.py", "ledger_fields.py", "fields.py", "rundir.py", "records.py", "safe_io.py", "steps.py",
    "best.py", "decline.py", "lease.py", "checkpoints.py", "ownership.py")] + [REPO_DIR / "hpc" / "launcher" / "clusters.yaml"]


def sacct_rows(job_ids: set[str]) -> tuple[list[accounting.SacctRow], str]:
    """Every run of these jobs, in one sacct call for all runs (status.sh refreshes every
    few seconds); a sacct that fails leaves states and GPU-hours unknown (the note says why), not the view."""
    try:
        rows = calls.job_runs(job_ids, timeout=SLURM_TIMEOUT)
    except SlurmError as err:
        if calls.NO_ACCOUNTING in str(err):
            return [], f"Slurm accounting is not available (sacct: {str(err).split('sacct: ')[-1]}); " \
                       "this view needs slurmdbd"
        return [], str(err)
    return rows, ""


def pick_job(job_ids: list[str], active: dict[str, str]) -> str:
    """The job to show for a run (``job_ids`` as hpc.run.ledger.job_ids orders them: the one that
    did something last comes last): its running job (with --chain the newest ledger entries
    are jobs still waiting for it), else its newest job."""
    running = [j for j in job_ids if active.get(j) == JobState.RUNNING]
    return (running or job_ids or [""])[-1]


def checkpoint_text(run_dir: RunDir) -> str:
    """Latest complete checkpoint step (where the next job resumes) in the model folder the run
    owns (its model.json: hpc/run/ownership.py), via hpc.run.checkpoints."""
    return checkpoint_cell(run_dir).text


@dataclass(frozen=True)
class CheckpointCell:
    """The checkpoint column, and what it was read from (status.sh keeps it: status_cache.py)."""

    text: str
    model_dir: Optional[str] = None
    names: tuple[str, ...] = ()  # the step folders from the latest complete one on, newest last


def checkpoint_cell(run_dir: RunDir) -> CheckpointCell:
    folder = model_dir_of(run_dir)
    if folder is None:
        return CheckpointCell("-")
    found = list_checkpoints(folder)
    latest = next((k for k in reversed(range(len(found))) if is_complete(found[k].path)), None)
    names = tuple(c.path.name for c in found[latest or 0:])
    return CheckpointCell("-" if latest is None else str(found[latest].step), str(folder), names)


def validation_text(run_dir: RunDir) -> str:
    """The latest validation's accuracy and step, and the best step (the checkpoint pruning keeps)."""
    validations = run_dir.read_validations()
    if not validations:
        return "-"
    latest, best = last_of(validations), best_of(validations)
    assert latest is not None and best is not None
    return f"{100 * latest.accuracy:.0f}%@{latest.step} best {100 * best.accuracy:.0f}%@{best.step}"


def run_row(run_dir: RunDir, job: str, state: str, records: list[Record],
            account: Optional[accounting.RunAccounting] = None, flags: Sequence[Flag] = (),
            parked_run: Optional[Parked] = None) -> list[object]:
    progress = read_marker(run_dir.read_progress)
    done, failed = read_marker(run_dir.read_done), read_marker(run_dir.read_failed)
    at = run_state(done, failed, records, parked_run)
    step, total = progress.get("step"), progress.get("total_steps")
    if done:
        step = done.get("final_step", step)
        total = done.get("total_steps") or total
    step_text = "-" if step is None else f"{step}/{'?' if total is None else total}"
    reward = progress.get("reward_mean")
    reward_text = f"{reward:.3f}" if isinstance(reward, (int, float)) and not isinstance(reward, bool) else "-"
    eta = "-" if at.over else duration(progress.get("eta_seconds"))
    return [run_dir.name, job or "-", state or "-", step_text, checkpoint_text(run_dir), reward_text,
            validation_text(run_dir), eta, gpu_hours_text(account), ledger.continuations(records),
            result_text(at, done, failed, records, parked_run, flags)]


def gpu_hours_text(account: Optional[accounting.RunAccounting]) -> str:
    """GPU-hours charged so far; '-' before any job of the run started."""
    if account is None or not any(job.start for job in account.jobs):
        return "-"
    return accounting_text.hours(account.gpu_hours)


@dataclass(frozen=True)
class RunView:
    """One run as the runs view shows it: its row's cells, its job's state, its goodput line (a run
    that has had a job), whether it is parked, and where it stands in its sweep. Made from the run's
    files (``computed``) or kept from the last call (hpc/run/monitor/status_cache.py)."""

    run_dir: RunDir
    cells: list[object]
    state: str = ""
    goodput: Optional[str] = None
    parked: Optional[Parked] = None
    sweep: str = ""
    word: str = "no job"  # in its sweep's summary: finished, failed, parked, its job's state

    def row(self) -> list[object]:
        return list(self.cells)


HEADERS = ["RUN", "JOB", "STATE", "STEP", "CKPT", "REWARD", "VAL", "ETA", "GPU-H", "CONT", "RESULT"]


def computed(run_dir: RunDir, records: list[Record], job: str, state: str, account: accounting.RunAccounting,
             flags: list[Flag], parked_run: Optional[Parked]) -> RunView:
    """The run's view from its files (read now) and Slurm's answers."""
    cells = run_row(run_dir, job, state, records, account, flags, parked_run)
    if run_dir.unreadable:  # what its readers skipped (hpc/run/rundir.py), listed under the table
        flag = f"UNREADABLE: {len(run_dir.unreadable)} record(s) skipped (below)"
        cells[-1] = flag if cells[-1] == "-" else f"{flag}; {cells[-1]}"
    goodput = accounting_text.summary_line(account) if any(j.start for j in account.jobs) else None
    member = read_marker(run_dir.read_sweep_member)
    return RunView(run_dir, cells, state, goodput, parked_run, str(member.get("sweep") or ""),
                   sweep_word(state_of(run_dir, records, parked_run), state))


class Chargings:
    """How each cluster charges (hpc/launcher/clusters.yaml), loaded once, and only for runs that have jobs."""

    def __init__(self) -> None:
        self.known: dict[Optional[str], Optional[accounting.Charging]] = {}

    def of(self, records: list[Record]) -> Optional[accounting.Charging]:
        cluster = ledger.cluster_of(records)
        if cluster not in self.known:
            try:
                self.known[cluster] = accounting.charging_of(cluster)
            except (ImportError, OSError, ValueError):  # no registry here: charged as allocated
                self.known[cluster] = None
        return self.known[cluster]


def health_settings() -> HealthSettings:
    try:
        return HealthSettings.from_env()
    except SettingError as err:
        raise Failure(str(err), 2) from None


@dataclass
class SlurmAnswers:
    """What the one squeue and the one sacct of a call said; ``None``/a note where one did not answer."""

    active: Optional[dict[str, str]]  # the user's queued and running jobs' states; None: unknown
    queue_note: str = ""
    rows: list[accounting.SacctRow] = field(default_factory=list)
    sacct_note: str = ""

    def ended(self, job_ids: list[str]) -> bool:
        """Every Slurm job of these has ended in accounting and none is in the queue: nothing that
        moves is left in the run's row."""
        if self.active is None or self.sacct_note:
            return False
        ids = calls.slurm_ids(job_ids)
        ended = {r.job_id for r in self.rows if r.end is not None and r.state not in QUEUED}
        waiting = {r.job_id for r in self.rows if r.end is None or r.state in QUEUED}
        return not (set(ids) & (self.active.keys() | waiting)) and set(ids) <= ended


def run_views(every: list[RunDir], answers: SlurmAnswers, cache: status_cache.StatusCache) -> list[RunView]:
    """Every run's view: kept from the last call where nothing it depends on changed, else read now,
    with one sacct call for the runs read (the queue is asked once, before: ``answers.active``)."""
    taken, settings = status_cache.now_ns(), health_settings()
    closed = {r.name: folder_view(r) for r in every if unreadable_folder(r) is not None}
    runs = [r for r in every if r.name not in closed]
    sigs = {r.name: status_cache.signature(r) for r in runs}  # before anything is read
    kept = {r.name: e for r in runs if (e := cache.valid(r.name, sigs[r.name])) is not None}
    records = {r.name: ledger.readable(r) for r in runs if r.name not in kept}
    starts = all_starts(kept, records)
    contexts = Contexts(starts, settings)
    queued = answers.active.keys() if answers.active is not None else set()  # squeue silent: the kept rows stand
    reused = {name for name, e in kept.items() if not set(e.job_ids) & queued and e.context == contexts.of(e.job_ids)}
    records.update({r.name: ledger.readable(r) for r in runs if r.name in kept and r.name not in reused})
    answers.rows, answers.sacct_note = sacct_rows({job for recs in records.values() for job in ledger.job_ids(recs)})
    fresh = [r for r in runs if r.name not in reused]
    made = {v.run_dir.name: v for v in read_views(fresh, records, answers, starts, settings)}
    for run_dir in fresh:
        remember(cache, made[run_dir.name], records[run_dir.name], sigs[run_dir.name], taken, answers,
                 contexts.of(ledger.job_ids(records[run_dir.name])))
    views = {r.name: made[r.name] if r.name in made else kept_view(r, kept[r.name], cache, taken) for r in runs}
    return [views.get(r.name) or closed[r.name] for r in every]


def folder_view(run_dir: RunDir) -> RunView:
    """A run whose folder cannot be read: shown, and named unreadable (never left out)."""
    cells: list[object] = [run_dir.name, *["-"] * (len(HEADERS) - 2), "UNREADABLE: the run folder cannot be read (below)"]
    return RunView(run_dir, cells)


def read_views(runs: list[RunDir], records: dict[str, list[Record]], answers: SlurmAnswers,
               starts: dict[str, list[datetime]], settings: HealthSettings) -> list[RunView]:
    """The views of runs read now."""
    active = answers.active or {}
    states: dict[str, str] = {**latest_states(answers.rows), **active}
    chargings, now = Chargings(), datetime.now(timezone.utc)
    views = []
    for run_dir in runs:
        recs = records[run_dir.name]
        job = pick_job(ledger.job_ids(recs), active)
        files = accounting.RunFiles.read(run_dir, recs)
        account = accounting.account(run_dir.name, files, answers.rows, chargings.of(recs), starts, now, settings)
        flags = run_health(run_dir, files, account, job, states.get(job, ""), settings, now)
        parked_run = parked(run_dir, recs, active, states) if answers.active is not None else None
        views.append(computed(run_dir, recs, job, states.get(job, ""), account, flags, parked_run))
    return views


def all_starts(kept: dict[str, status_cache.Entry], records: dict[str, list[Record]]) -> dict[str, list[datetime]]:
    """When runs' begin hooks started each job, over every run (a pack job is shared: accounting)."""
    starts = accounting.job_starts(records.values())
    for entry in kept.values():
        for job, moments in entry.starts.items():
            starts.setdefault(job, []).extend(datetime.fromisoformat(m) for m in moments)
    return starts


class Contexts:
    """What a run's row depends on beside its own files and its jobs' accounting: the health
    thresholds, the code and cluster table, and when every run's begin hook started each of its jobs
    (a job several runs started is shared: a pack job). Each job's starts are hashed once per call."""

    def __init__(self, starts: dict[str, list[datetime]], settings: HealthSettings):
        self.starts, self.settings = starts, asdict(settings)
        self.jobs: dict[str, str] = {}

    def of(self, job_ids: list[str]) -> str:
        for job in job_ids:
            if job not in self.jobs:
                self.jobs[job] = status_cache.context_key(starts=sorted(m.isoformat() for m in self.starts.get(job, [])))
        return status_cache.context_key(starts=[self.jobs[job] for job in job_ids], settings=self.settings, code=CODE)


def remember(cache: status_cache.StatusCache, view: RunView, records: list[Record], sig: Optional[list[Any]],
             taken: int, answers: SlurmAnswers, context: str) -> None:
    """Keep the view for the next call when nothing in it can move and its files held still."""
    run_dir, job_ids = view.run_dir, ledger.job_ids(records)
    unknown = view.parked is not None and bool(view.parked.unknown)  # a lease lapses with time, not a file
    if view.state == JobState.RUNNING or unknown or not answers.ended(job_ids) or sig is None \
            or status_cache.racy(sig, taken) or status_cache.signature(run_dir) != sig:
        cache.drop(run_dir.name)
        return
    own = {job: [m.isoformat() for m in moments] for job, moments in accounting.job_starts([records]).items()}
    parked_run = None if view.parked is None else [view.parked.job, view.parked.state, view.parked.resume]
    skipped = [[s.file, s.line, s.why] for s in run_dir.unreadable]
    entry = status_cache.Entry(sig, context, job_ids, own, list(view.cells), view.goodput, parked_run, skipped,
                               view.sweep, view.word)
    cache.keep(run_dir.name, with_checkpoint(entry, run_dir, taken))


def with_checkpoint(entry: status_cache.Entry, run_dir: RunDir, taken: int) -> status_cache.Entry:
    """The entry with its checkpoint column read now, and that column's signature when it can be kept:
    taken between two readings that agree, and not racy."""
    first = checkpoint_cell(run_dir)
    sig = status_cache.checkpoint_signature(first.model_dir, list(first.names))
    again = checkpoint_cell(run_dir)
    keep = sig is not None and again == first and not status_cache.racy_checkpoints(sig, taken)
    entry.cells[HEADERS.index("CKPT")] = again.text
    entry.model_dir, entry.checkpoints, entry.checkpoint_sig = again.model_dir, list(again.names), sig if keep else None
    return entry


def kept_view(run_dir: RunDir, entry: status_cache.Entry, cache: status_cache.StatusCache, taken: int) -> RunView:
    for file, line, why in entry.unreadable:  # named under the table, as when they were read
        run_dir.skipped.setdefault((file, line), Skipped(file, line, why))
    sig = status_cache.checkpoint_signature(entry.model_dir, entry.checkpoints)
    if entry.checkpoint_sig is None or sig != entry.checkpoint_sig:  # a checkpoint came, went or changed
        cache.keep(run_dir.name, with_checkpoint(entry, run_dir, taken))
    parked_run = None if entry.parked is None else Parked(*entry.parked)
    state = str(entry.cells[HEADERS.index("STATE")])
    return RunView(run_dir, list(entry.cells), "" if state == "-" else state, entry.goodput, parked_run,
                   entry.sweep, entry.word)


def code_signature() -> list[Any]:
    """The modules that shape a row, and the cluster table: a row kept by other code is made again."""
    found: list[Any] = []
    for path in CODE_FILES:
        try:
            info = path.stat()
            found.append([str(path), info.st_size, info.st_mtime_ns])
        except OSError:
            found.append([str(path), None])
    return found


CODE = code_signature()


def run_health(run_dir: RunDir, files: accounting.RunFiles, account: accounting.RunAccounting, job: str,
               state: str, settings: HealthSettings, now: datetime) -> list[Flag]:
    """STALLED (the running job made no step in a while) and COLLAPSED (no reward spread): hpc/run/health.py."""
    start = next((j.start for j in reversed(account.jobs) if j.job_id == job and j.end is None), None)
    validations = run_dir.read_validations()
    return health_check(files.steps, validations, job, state, start, now, settings)
