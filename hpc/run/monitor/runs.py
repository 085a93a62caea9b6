"""status.sh's runs view: one row per run (its job and state, step, checkpoint, reward, validation,
ETA, GPU-hours, continuations, result or health flag), the goodput lines, parked runs and how to
resume them, and where a running serve job listens. One squeue and one sacct call for all runs."""

from __future__ import annotations

import shlex
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional, Sequence

from hpc.job.continuation import continuations
from hpc.run import accounting
from hpc.run.checkpoints import latest_complete
from hpc.run.health import Flag, HealthSettings, SettingError, check as health_check
from hpc.run.monitor.display import Failure, duration, printable, table
from hpc.run.monitor.queue import user_queue
from hpc.run.monitor.rundirs import ledger, ledger_job_ids, model_dir_of, read_marker, run_dirs
from hpc.run.rundir import RunDir
from hpc.run.serving import address_of, ssh_line
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import latest_states

REPO = Path(__file__).resolve().parents[3]
# Ledger events that start, continue or stop a run's jobs (docs/design.md).
JOB_EVENTS = ("submit", "chain", "job_start", "requeue", "resubmit", "cancelled")


def sacct_rows(job_ids: set[str]) -> list[accounting.SacctRow]:
    """Every run of these jobs, in one sacct call for all runs (status.sh refreshes every
    few seconds); a sacct that fails leaves states and GPU-hours unknown, not the view."""
    try:
        return calls.job_runs(job_ids, timeout=120)
    except SlurmError:
        return []


def pick_job(job_ids: list[str], active: dict[str, str]) -> str:
    """The job to show for a run: its running job (with --chain the newest
    ledger entries are jobs still waiting for it), else its newest job."""
    running = [j for j in job_ids if active.get(j) == "RUNNING"]
    return (running or job_ids or [""])[-1]


def checkpoint_text(records: list[dict], run_dir: Optional[RunDir] = None) -> str:
    """Latest complete checkpoint step (where the next job resumes), via hpc.run.checkpoints: in
    the jobs' model dir, else in the one the run claimed (model.json: a trainer.train started by
    hand or by a bench, with no job script)."""
    claimed = (run_dir.read_model_record() or {}).get("model_dir") if run_dir else None
    folder = model_dir_of(records) or (Path(claimed) if isinstance(claimed, str) and claimed else None)
    latest = latest_complete(folder) if folder else None
    return "-" if latest is None else str(latest.step)


def validation_text(run_dir: RunDir) -> str:
    """The latest validation's accuracy and step, and the best step (the checkpoint pruning keeps)."""
    validations = run_dir.read_validations()
    if not validations:
        return "-"
    latest = validations[-1]
    best = max(validations, key=lambda v: (v.get("accuracy", 0), v.get("step", 0)))
    return f"{100 * latest['accuracy']:.0f}%@{latest['step']} best@{best['step']}"


def cancelled_by_user(records: list[dict]) -> bool:
    """The run's latest job was scancel'ed and nothing was submitted since (a
    `cancelled` record is the end hook's; a launch resumes the run)."""
    events = [r.get("event") for r in records if r.get("event") in JOB_EVENTS]
    return bool(events) and events[-1] == "cancelled"


@dataclass(frozen=True)
class Parked:
    """A run nothing continues: no job of it in the queue, and not finished, failed or
    cancelled by its user (docs/design.md: a run across jobs). Launching it again resumes it."""

    job: str  # the job that ended it
    state: str  # that job's state in accounting
    resume: str  # the command that resumes the run

    @property
    def text(self) -> str:
        return f"PARKED: job {self.job or '?'} ended {self.state or '?'} and nothing continues the run"


def parked(run_dir: RunDir, records: list[dict], active: dict[str, str], states: dict[str, str]) -> Optional[Parked]:
    launches = [r for r in records if r.get("event") == "submit"]
    if not launches or read_marker(run_dir.read_done) or read_marker(run_dir.read_failed) or cancelled_by_user(records):
        return None
    ids = ledger_job_ids(records)
    if any(job in active for job in ids):
        return None
    started = [str(r.get("job_id")) for r in records if r.get("event") == "job_start"]
    ended = started[-1] if started else str(launches[-1].get("job_id") or "")
    return Parked(ended, states.get(ended, ""), resume_command(launches[-1]))


def resume_command(launch: dict) -> str:
    """The newest launch's command (its secrets already redacted in the ledger), run again."""
    argv = launch.get("argv")
    words = " ".join(shlex.quote(str(word)) for word in argv) if isinstance(argv, list) else "<the same arguments>"
    secret = " (give the secret --env values shown as *** again)" if "***" in words else ""
    return f"cd {shlex.quote(str(REPO))} && .venv/bin/python -m hpc.launch {words}{secret}"


def run_row(run_dir: RunDir, job: str, state: str, records: list[dict],
            account: Optional[accounting.RunAccounting] = None, flags: Sequence[Flag] = (),
            parked_run: Optional[Parked] = None) -> list[object]:
    progress = read_marker(run_dir.read_progress)
    done, failed = read_marker(run_dir.read_done), read_marker(run_dir.read_failed)
    step, total = progress.get("step"), progress.get("total_steps")
    if done:
        result = "finished"
        step = done.get("final_step", step)
        total = done.get("total_steps") or total
    elif failed:
        result = f"failed: {failed.get('reason') or '?'}"
    elif cancelled_by_user(records):
        result = "cancelled (launch again to resume)"
    elif parked_run is not None:
        result = parked_run.text
    else:
        result = "; ".join(flag.message for flag in flags) or "-"
    step_text = "-" if step is None else f"{step}/{'?' if total is None else total}"
    reward = progress.get("reward_mean")
    reward_text = f"{reward:.3f}" if isinstance(reward, (int, float)) and not isinstance(reward, bool) else "-"
    over = done or failed or result.startswith(("cancelled", "PARKED"))
    eta = "-" if over else duration(progress.get("eta_seconds"))
    return [run_dir.name, job or "-", state or "-", step_text, checkpoint_text(records, run_dir), reward_text,
            validation_text(run_dir), eta, gpu_hours_text(account), continuations(records), result]


def gpu_hours_text(account: Optional[accounting.RunAccounting]) -> str:
    """GPU-hours charged so far; '-' before any job of the run started."""
    if account is None or not any(job.start for job in account.jobs):
        return "-"
    return accounting.hours(account.gpu_hours)


@dataclass(frozen=True)
class RunView:
    """One run as the runs view shows it: its job and that job's state, its accounting, its health."""

    run_dir: RunDir
    records: list[dict]
    job: str
    state: str
    account: accounting.RunAccounting
    flags: list[Flag]
    parked: Optional[Parked] = None

    def row(self) -> list[object]:
        return run_row(self.run_dir, self.job, self.state, self.records, self.account, self.flags, self.parked)


class Chargings:
    """How each cluster charges (hpc/launcher/clusters.yaml), loaded once, and only for runs that have jobs."""

    def __init__(self) -> None:
        self.known: dict[Optional[str], Optional[accounting.Charging]] = {}

    def of(self, records: list[dict]) -> Optional[accounting.Charging]:
        cluster = accounting.cluster_of(records)
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
        raise Failure(str(err), 2)


def run_views(user: str, runs: list[RunDir]) -> list[RunView]:
    """Every run's view, from one squeue and one sacct call for all of them."""
    records = {r.path: ledger(r) for r in runs}
    active: dict[str, str] = {job.job_id: job.state for job in user_queue(user)}
    rows = sacct_rows({job for recs in records.values() for job in ledger_job_ids(recs)})
    states: dict[str, str] = {**latest_states(rows), **active}
    starts, chargings = accounting.job_starts(records.values()), Chargings()
    settings, now = health_settings(), datetime.now(timezone.utc)
    views = []
    for run_dir in runs:
        recs = records[run_dir.path]
        job = pick_job(ledger_job_ids(recs), active)
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
    validations = accounting.objects(run_dir.read_validations)
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
    parked_views = [v for v in views if v.parked is not None]
    if parked_views:
        print("\nParked runs (no job queued, not finished, failed or cancelled): launch again to resume")
    for view in parked_views:
        print(f"  {printable(view.run_dir.name)}: {printable(view.parked.resume)}")


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
