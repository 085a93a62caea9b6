"""status.sh's runs view: one row per run (its job and state, step, checkpoint, reward, validation,
ETA, GPU-hours, continuations, result or health flag), the goodput lines, parked runs and how to
resume them, and where a running serve job listens. One squeue and one sacct call for all runs."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from hpc.run import accounting, lease, ledger
from hpc.run.best import best_of, last_of
from hpc.run.checkpoints import latest_complete
from hpc.run.decline import Decisions
from hpc.run.health import Flag, HealthSettings, SettingError
from hpc.run.health import check as health_check
from hpc.run.ledger import JobStart, Record, resume_command
from hpc.run.monitor.display import Failure, duration, printable, table
from hpc.run.monitor.queue import user_queue
from hpc.run.monitor.rundirs import read_marker, run_dirs
from hpc.run.ownership import model_dir_of
from hpc.run.rundir import RunDir
from hpc.run.serving import address_of, ssh_line
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import latest_states
from hpc.slurm.states import QUEUED, JobState


def sacct_rows(job_ids: set[str]) -> list[accounting.SacctRow]:
    """Every run of these jobs, in one sacct call for all runs (status.sh refreshes every
    few seconds); a sacct that fails leaves states and GPU-hours unknown, not the view."""
    try:
        return calls.job_runs(job_ids, timeout=120)
    except SlurmError:
        return []


def pick_job(job_ids: list[str], active: dict[str, str]) -> str:
    """The job to show for a run (``job_ids`` as hpc.run.ledger.job_ids orders them: the one that
    did something last comes last): its running job (with --chain the newest ledger entries
    are jobs still waiting for it), else its newest job."""
    running = [j for j in job_ids if active.get(j) == JobState.RUNNING]
    return (running or job_ids or [""])[-1]


def checkpoint_text(run_dir: RunDir) -> str:
    """Latest complete checkpoint step (where the next job resumes) in the model folder the run
    owns (its model.json: hpc/run/ownership.py), via hpc.run.checkpoints."""
    folder = model_dir_of(run_dir)
    latest = latest_complete(folder) if folder else None
    return "-" if latest is None else str(latest.step)


def validation_text(run_dir: RunDir) -> str:
    """The latest validation's accuracy and step, and the best step (the checkpoint pruning keeps)."""
    validations = run_dir.read_validations()
    if not validations:
        return "-"
    latest, best = last_of(validations), best_of(validations)
    assert latest is not None and best is not None
    return f"{100 * latest.accuracy:.0f}%@{latest.step} best {100 * best.accuracy:.0f}%@{best.step}"


@dataclass(frozen=True)
class Parked:
    """A run nothing continues: no job of it in the queue, and not finished, failed or
    cancelled by its user (docs/design.md: a run across jobs). Launching it again resumes it."""

    job: str  # the job that ended it
    state: str  # that job's state in accounting
    resume: str  # the command that resumes the run
    unknown: str = ""  # not parked as far as the run directory knows: why Slurm's state of it is unknown

    @property
    def text(self) -> str:
        if self.unknown:
            return f"Slurm state unknown: {self.unknown}"
        return f"PARKED: job {self.job or '?'} ended {self.state or '?'} and nothing continues the run"


def parked(run_dir: RunDir, records: list[Record], active: dict[str, str],
           states: dict[str, str]) -> Optional[Parked]:
    launch = ledger.latest_launch(ledger.since_arrival(records))
    if launch is None or ledger.moved_away(records) is not None or read_marker(run_dir.read_done) or read_marker(run_dir.read_failed) \
            or ledger.cancelled_since_launch(records):
        return None
    if any(job in active for job in ledger.job_ids(records)):
        return None
    started = [r.job_id for r in ledger.of_kind(records, JobStart)]
    ended = started[-1] if started else launch.job_id
    return Parked(ended, states.get(ended, ""), resume_command(launch), unknown_state(run_dir, records, states))


def unknown_state(run_dir: RunDir, records: list[Record], states: dict[str, str]) -> str:
    """Why a run squeue shows no job of is not PARKED as far as its directory knows (its job holds the
    run's lease; the ledger shows a job running that accounting has not seen end; accounting has a job
    of it still queued), or ''."""
    holder = lease.read(run_dir)
    if holder is not None and not lease.free(holder, datetime.now(timezone.utc).timestamp()):
        return f"squeue shows no job, but {holder.holder()} holds the run (lease renewed at {holder.renewed})"
    running = [job for job in ledger.open_jobs(records) if states.get(job, "") in ("", *QUEUED)]
    running += [job for job in ledger.job_ids(records) if job not in running and states.get(job, "") in QUEUED]
    if running:
        said = {job: states.get(job) or "not yet recorded by sacct" for job in running}
        return "squeue omits job(s) of the run: " + ", ".join(f"{j} ({s} as far as sacct knows)"
                                                             if s in QUEUED else f"{j} ({s})" for j, s in said.items())
    return ""


def run_row(run_dir: RunDir, job: str, state: str, records: list[Record],
            account: Optional[accounting.RunAccounting] = None, flags: Sequence[Flag] = (),
            parked_run: Optional[Parked] = None) -> list[object]:
    progress = read_marker(run_dir.read_progress)
    done, failed = read_marker(run_dir.read_done), read_marker(run_dir.read_failed)
    step, total = progress.get("step"), progress.get("total_steps")
    if done:
        result = f"finished ({done['reason']})" if done.get("reason") else "finished"
        step = done.get("final_step", step)
        total = done.get("total_steps") or total
    elif failed:
        result = f"failed: {failed.get('reason') or '?'}"
    elif ledger.cancelled_since_launch(records):
        result = "cancelled (launch again to resume)"
    elif moved_text(records):
        result = moved_text(records)
    elif parked_run is not None:
        result = parked_run.text
    else:
        said = [flag.message for flag in flags] + [Decisions.of(records).summary()]
        result = "; ".join(filter(None, said)) or "-"
    step_text = "-" if step is None else f"{step}/{'?' if total is None else total}"
    reward = progress.get("reward_mean")
    reward_text = f"{reward:.3f}" if isinstance(reward, (int, float)) and not isinstance(reward, bool) else "-"
    over = done or failed or result.startswith(("cancelled", "PARKED", "MOVED"))
    eta = "-" if over else duration(progress.get("eta_seconds"))
    return [run_dir.name, job or "-", state or "-", step_text, checkpoint_text(run_dir), reward_text,
            validation_text(run_dir), eta, gpu_hours_text(account), ledger.continuations(records), result]


def moved_text(records: list[Record]) -> str:
    """A run that moved away (it trains elsewhere), or one that arrived and has not been launched here."""
    moved = ledger.moved_away(records)
    if moved is not None:
        return f"MOVED to {moved.to} at step {moved.step} (python -m hpc.run reclaim takes it back)"
    arrived = ledger.since_arrival(records)
    if arrived and isinstance(arrived[0], ledger.MovedIn) and ledger.latest_launch(arrived) is None:
        return f"MOVED in at step {arrived[0].step} from {arrived[0].source}: launch it here to continue"
    return ""


def gpu_hours_text(account: Optional[accounting.RunAccounting]) -> str:
    """GPU-hours charged so far; '-' before any job of the run started."""
    if account is None or not any(job.start for job in account.jobs):
        return "-"
    return accounting.hours(account.gpu_hours)


@dataclass(frozen=True)
class RunView:
    """One run as the runs view shows it: its job and that job's state, its accounting, its health."""

    run_dir: RunDir
    records: list[Record]
    job: str
    state: str
    account: accounting.RunAccounting
    flags: list[Flag]
    parked: Optional[Parked] = None

    def row(self) -> list[object]:
        cells = run_row(self.run_dir, self.job, self.state, self.records, self.account, self.flags, self.parked)
        if self.run_dir.unreadable:  # what its readers skipped (hpc/run/rundir.py), listed under the table
            flag = f"UNREADABLE: {len(self.run_dir.unreadable)} record(s) skipped (below)"
            cells[-1] = flag if cells[-1] == "-" else f"{flag}; {cells[-1]}"
        return cells


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


def run_views(user: str, runs: list[RunDir]) -> list[RunView]:
    """Every run's view, from one squeue and one sacct call for all of them."""
    records = {r.path: ledger.readable(r) for r in runs}
    active: dict[str, str] = {job.job_id: job.state for job in user_queue(user)}
    rows = sacct_rows({job for recs in records.values() for job in ledger.job_ids(recs)})
    states: dict[str, str] = {**latest_states(rows), **active}
    starts, chargings = accounting.job_starts(records.values()), Chargings()
    settings, now = health_settings(), datetime.now(timezone.utc)
    views = []
    for run_dir in runs:
        recs = records[run_dir.path]
        job = pick_job(ledger.job_ids(recs), active)
        files = accounting.RunFiles.read(run_dir, recs)
        account = accounting.account(run_dir.name, files, rows, chargings.of(recs), starts, now, settings)
        flags = run_health(run_dir, files, account, job, states.get(job, ""), settings, now)
        views.append(RunView(run_dir, recs, job, states.get(job, ""), account, flags,
                             parked(run_dir, recs, active, states)))
    return views


def run_health(run_dir: RunDir, files: accounting.RunFiles, account: accounting.RunAccounting, job: str,
               state: str, settings: HealthSettings, now: datetime) -> list[Flag]:
    """STALLED (the running job made no step in a while) and COLLAPSED (no reward spread): hpc/run/health.py."""
    start = next((j.start for j in reversed(account.jobs) if j.job_id == job and j.end is None), None)
    validations = run_dir.read_validations()
    return health_check(files.steps, validations, job, state, start, now, settings)


def runs_view(user: str, runs_dir: Path, only: str) -> None:
    runs = run_dirs(runs_dir, only)
    if not runs:
        missing = "" if runs_dir.is_dir() else " (the directory does not exist)"
        print(f"No runs under {runs_dir}{missing}" + (f" named {only}" if only else ""))
        return
    views = run_views(user, runs)
    print(f"Runs under {runs_dir}:")
    headers = ["RUN", "JOB", "STATE", "STEP", "CKPT", "REWARD", "VAL", "ETA", "GPU-H", "CONT", "RESULT"]
    header, *rows = table(headers, [view.row() for view in views])
    row_of = {id(view): row for view, row in zip(views, rows)}
    print(header)
    for sweep, group in by_sweep(views):
        if sweep:
            print(f"sweep {printable(sweep)}: {sweep_summary(group)}")
        for view in group:
            print(("  " if sweep else "") + row_of[id(view)])
    print_goodput(views)
    print_parked(views)
    print_unreadable(views)
    for view in views:
        if view.state == "RUNNING":
            print_service(view.run_dir)


def by_sweep(views: list[RunView]) -> list[tuple[str, list[RunView]]]:
    """Runs on their own first, then each sweep's runs together (sweep_member.json, hpc/launcher/sweeps.py)."""
    groups: dict[str, list[RunView]] = {}
    for view in views:
        member = read_marker(view.run_dir.read_sweep_member)
        groups.setdefault(str(member.get("sweep") or ""), []).append(view)
    alone = groups.pop("", [])
    return ([("", alone)] if alone else []) + sorted(groups.items())


def sweep_summary(group: list[RunView]) -> str:
    """``6 runs: 2 finished, 3 RUNNING, 1 failed``: where the sweep stands."""
    counts: dict[str, int] = {}
    for view in group:
        if read_marker(view.run_dir.read_done):
            word = "finished"
        elif read_marker(view.run_dir.read_failed):
            word = "failed"
        elif view.parked is not None:
            word = "parked"
        else:
            word = view.state or "no job"
        counts[word] = counts.get(word, 0) + 1
    return f"{len(group)} runs: " + ", ".join(f"{n} {word}" for word, n in counts.items())


def print_goodput(views: list[RunView]) -> None:
    """Under the table, one line per run that has had a job: goodput, GPU-hours, to finish."""
    lines = [accounting.summary_line(v.account) for v in views if any(j.start for j in v.account.jobs)]
    if lines:
        print("\nGPU-hours (python -m hpc.accounting RUN for the breakdown):")
    for line in lines:
        print(f"  {printable(line)}")


def print_parked(views: list[RunView]) -> None:
    """Under the table, how to resume each parked run."""
    parked_views = [v for v in views if v.parked is not None and not v.parked.unknown]
    if parked_views:
        print("\nParked runs (no job queued, not finished, failed or cancelled): launch again to resume")
    for view in parked_views:
        resume = view.parked.resume if view.parked is not None else ""
        print(f"  {printable(view.run_dir.name)}: {printable(resume)}")


def print_unreadable(views: list[RunView]) -> None:
    """Under the table, what each run's readers skipped: the rest of the run is shown above."""
    unreadable = [v.run_dir for v in views if v.run_dir.unreadable]
    if unreadable:
        print("\nUnreadable records, skipped (the rest of each run is shown above):")
    for run_dir in unreadable:
        print(f"  {printable(run_dir.name)}: {printable(run_dir.unreadable_line())}")


def print_service(run_dir: RunDir) -> None:
    """A running serve job's address, and the ssh line that reaches it from a laptop."""
    address = address_of(run_dir)
    if address is None:
        return
    print(f"\n{printable(run_dir.name)} serves {printable(address.get('model'))} on "
          f"{printable(address.get('node'))}:{address.get('port')}; from a laptop:")
    print(f"  {printable(ssh_line(address, login_host()))}")


def login_host() -> str:
    """The cluster's login host (hpc/launcher/clusters.yaml), else this machine's name."""
    try:
        from hpc.launcher.clusters import load_registry

        return load_registry().detect().cluster.login_host or socket.getfqdn()
    except Exception:  # noqa: BLE001 - a hint line must never break the status view
        return socket.getfqdn()
