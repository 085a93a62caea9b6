"""Reports behind the job monitoring helpers (status.sh, sfail.sh, scompleted.sh,
scancelled.sh); the helpers parse their options in bash and call this with
`python -E -s -m hpc.run.monitor` from the repository's root (scripts/common.sh), so the
repository's own package is imported and a file in the user's working directory can never
shadow a module; ``HPC_CALLER_DIR`` (the user's directory) is where relative paths are read.

    python -m hpc.run.monitor runs-dir                          the launcher's default runs directory
    python -m hpc.run.monitor queue USER RUNS_DIR [RUN]         the user's queued and running jobs
    python -m hpc.run.monitor runs USER RUNS_DIR [RUN]          one line per run directory
    python -m hpc.run.monitor ended LABEL STATES START USER RUNS_DIR PREFIX TAIL_LINES
                                                                sacct view of ended jobs with their logs

Job names may hold spaces, quotes, '|', even newlines and terminal escapes
(Slurm accepts all of them): hpc/slurm asks Slurm and reads its answers so that
none of them can break a record, and every name and path goes through printable()
before it reaches the terminal.

The run directory layout comes from hpc.run.rundir and the latest complete
checkpoint from hpc.run.checkpoints (both stdlib only): the launcher, the trainer
and these reports share one definition of each.

Errors are one line on stderr: exit 1 at run time, 2 for a bad value.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence, Tuple

from hpc.run import accounting
from hpc.run.checkpoints import latest_complete
from hpc.job.continuation import continuations
from hpc.run.rundir import RunDir, SweepDir
from hpc.run.health import Flag, HealthSettings, SettingError, check as health_check
from hpc.run.serving import address_of, ssh_line
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError, SlurmFailed
from hpc.slurm.output import EndedJob, QueuedJob, latest_states
from hpc.slurm.states import JobState

REPO = Path(__file__).resolve().parents[2]

PROG = os.environ.get("HPC_PROG") or "python -m hpc.run.monitor"
# slurmctld forgets a finished job MinJobAge after its end (300 s by default);
# asking it about older ones, one RPC each, only costs time.
SCONTROL_WINDOW = timedelta(hours=1)
SCONTROL_MAX_CALLS = 50

Paths = Tuple[str, str]  # (stdout log, stderr log)
# Ledger events that start, continue or stop a run's jobs (docs/design.md).
JOB_EVENTS = ("submit", "chain", "job_start", "requeue", "resubmit", "cancelled")


class Failure(Exception):
    """One line for the user; exit code 1 (run time) or 2 (bad value)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# --- small helpers ----------------------------------------------------------------


def printable(text: object) -> str:
    """Control characters (newline, tab, ESC...) as escapes, so a job name can
    neither break a row nor drive the terminal; spaces and quotes stay as they are."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """Header and rows with columns padded to their widest cell; the last column
    (a name or a reason) is not padded, so any length fits."""
    cells = [[printable(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join([c.ljust(w) for c, w in zip(row[:-1], widths)] + [row[-1]]).rstrip() for row in cells]


def duration(seconds: object) -> str:
    """129002 -> 1d11h, 4000 -> 1h06m, 59 -> 0m; '-' when unknown."""
    try:
        s = int(float(seconds))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    if s < 0:
        return "-"
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{s // 60:02d}m"
    return f"{s // 60}m"


# --- run directories ------------------------------------------------------------------


def is_moved_aside(name: str) -> bool:
    """`hpc.launch --restart` renames an old run to <name>.<YYYYmmddTHHMMSSZ>."""
    stamp = name.rpartition(".")[2]
    return len(stamp) == 16 and stamp[8] == "T" and stamp.endswith("Z") and (stamp[:8] + stamp[9:15]).isdigit()


def sweep_runs(runs_dir: Path, name: str) -> list[str]:
    """The runs of the sweep ``name`` (its sweep.json, hpc/launcher/sweeps.py); [] when it is no sweep."""
    try:
        sweep = SweepDir(runs_dir / name)
        record = sweep.read_record() if sweep.is_sweep() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    runs = record.get("runs") if isinstance(record, dict) else None
    return [str(r.get("name")) for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def run_dirs(runs_dir: Path, only: str = "") -> list[RunDir]:
    """Run directories (a ledger or a progress file inside), by name; runs moved
    aside by --restart only when asked for by name; ``only`` names a run or a sweep."""
    try:
        entries = sorted(runs_dir.iterdir())
    except OSError:
        return []
    wanted = set(sweep_runs(runs_dir, only) or [only]) if only else set()
    runs = []
    for path in entries:
        if only and path.name not in wanted or not only and is_moved_aside(path.name):
            continue
        run_dir = RunDir(path)
        try:
            if path.is_dir() and (run_dir.ledger.exists() or run_dir.progress_file.exists()):
                runs.append(run_dir)
        except OSError:
            continue
    return runs


def ledger(run_dir: RunDir) -> list[dict]:
    """The ledger's records (objects only); an unreadable ledger reads as empty."""
    try:
        return [r for r in run_dir.read_ledger() if isinstance(r, dict)]
    except (OSError, UnicodeDecodeError):
        return []


def read_marker(read: Callable[[], Optional[dict]]) -> dict:
    """progress.json / done.json / failed.json as a dict ({} when missing or odd)."""
    try:
        data = read()
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ledger_job_ids(records: list[dict]) -> list[str]:
    """Job ids in the order the ledger last mentions them (latest last)."""
    ids: dict[str, None] = {}
    for record in records:
        job = str(record.get("job_id") or "")
        if job:
            ids.pop(job, None)
            ids[job] = None
    return list(ids)


def model_dir_of(records: list[dict]) -> Optional[Path]:
    """The checkpoint folder the run's jobs use: `export HPC_MODEL_DIR=...` in the
    newest job script the launcher wrote (the script is what the job really runs)."""
    for record in reversed(records):
        script = record.get("script") if record.get("event") in ("submit", "chain") else None
        if not script:
            continue
        try:
            lines = Path(script).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("export HPC_MODEL_DIR="):
                try:
                    return Path(shlex.split(line)[1].partition("=")[2])
                except (ValueError, IndexError):
                    return None
    return None


# --- queue ----------------------------------------------------------------------------

def user_queue(user: str) -> list[QueuedJob]:
    """The user's queued and running jobs (the view cannot do without them)."""
    try:
        return calls.queue(user=user, timeout=120)
    except SlurmError as err:
        raise Failure(str(err)) from None


def queue_view(user: str, runs_dir: Path, only: str) -> None:
    jobs = user_queue(user)
    if only:  # the run's jobs (a sweep's: its runs'): named after it (the launcher's -J) or in its ledger
        names = set(sweep_runs(runs_dir, only) or [only])
        ids = {job for name in names for job in ledger_job_ids(ledger(RunDir(runs_dir / name)))}
        jobs = [j for j in jobs if j.name in names or j.job_id in ids]
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    which = f" for run {only}" if only else ""
    print(f"Queued and running jobs of {user}{which} ({stamp}):")
    if not jobs:
        print("  none")
        return
    rows = []
    for j in jobs:
        waiting = j.state == JobState.PENDING
        rows.append([j.job_id, j.state, j.reason if waiting else "-", f"{j.elapsed}/{j.limit}", j.nodes,
                     "-" if waiting or not j.nodelist else j.nodelist, j.name])
    for line in table(["JOBID", "STATE", "REASON", "ELAPSED/LIMIT", "NODES", "NODELIST", "NAME"], rows):
        print(line)


# --- runs -----------------------------------------------------------------------------


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


def checkpoint_text(records: list[dict]) -> str:
    """Latest complete checkpoint step (where the next job resumes), via hpc.run.checkpoints."""
    folder = model_dir_of(records)
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
    return [run_dir.name, job or "-", state or "-", step_text, checkpoint_text(records), reward_text,
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


# --- log paths ---------------------------------------------------------------------------


def expand(pattern: str, job: EndedJob) -> str:
    """A filename pattern as sbatch expands it (%j %J %x %u %A %a %%), relative
    to the job's working directory."""
    array_id, _, task = job.job_id.partition("_")
    values = {"j": job.job_id_raw, "J": job.job_id_raw, "x": job.name, "u": job.user,
              "A": array_id, "a": task or "4294967294", "%": "%"}
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "%" and i + 1 < len(pattern) and pattern[i + 1] in values:
            out.append(values[pattern[i + 1]])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    path = "".join(out)
    if not os.path.isabs(path) and job.workdir:
        path = os.path.join(job.workdir, path)
    return path


def log_options(words: Sequence[str]) -> Tuple[str, str]:
    """-o/--output and -e/--error among sbatch options (the last of each wins)."""
    found = {"-o": "", "-e": ""}
    longs = {"--output": "-o", "--error": "-e"}
    for i, word in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if word in found or word in longs:
            found[longs.get(word, word)] = nxt
        elif word.split("=", 1)[0] in longs and "=" in word:
            found[longs[word.split("=", 1)[0]]] = word.split("=", 1)[1]
        elif word[:2] in found and len(word) > 2:
            found[word[:2]] = word[2:]
    return found["-o"], found["-e"]


def submitted_script(words: Sequence[str], workdir: str) -> Tuple[int, Optional[Path]]:
    """Where the batch script is in a submit line, and its path: the first
    argument naming a file that starts with '#!' (an option's value rarely
    does); (len(words), None) when there is none."""
    for index, word in enumerate(words):
        if index == 0 or word.startswith("-"):
            continue
        path = Path(workdir, word) if workdir else Path(word)
        try:
            with open(path, "rb") as handle:
                if handle.read(2) == b"#!":
                    return index, path
        except OSError:
            continue
    return len(words), None


def script_directives(path: Path) -> list[str]:
    """The options of the script's #SBATCH lines (sbatch reads them up to the
    first command)."""
    words: list[str] = []
    try:
        lines = path.read_text(errors="replace").splitlines()[1:]
    except OSError:
        return words
    for line in lines:
        line = line.strip()
        if line.startswith("#SBATCH"):
            try:
                words += shlex.split(line[len("#SBATCH"):], comments=True)
            except ValueError:
                continue
        elif line and not line.startswith("#"):
            break
    return words


def submitted_logs(job: EndedJob) -> Tuple[str, str]:
    """-o/-e from the sbatch command line (sacct's SubmitLine) up to --wrap or
    the script (what follows is the job's own), else from the script's #SBATCH
    lines. SubmitLine is argv joined by spaces, so a path with a space in it
    comes out cut short, and is then shown as missing."""
    words = job.submit_line.split(" ")
    wrap = next((i for i, w in enumerate(words) if w == "--wrap" or w.startswith("--wrap=")), None)
    cut, script = (wrap, None) if wrap is not None else submitted_script(words, job.workdir)
    out, err = log_options(words[:cut])
    if script is not None and not (out and err):
        script_out, script_err = log_options(script_directives(script))
        out, err = out or script_out, err or script_err
    return out, err


class LogFinder:
    """Where each job's stdout and stderr logs are, most reliable source first:

    1. slurmctld (`scontrol show job`): Slurm's own StdOut/StdErr, expanded; it
       remembers a job for a few minutes after its end, so only recent jobs are asked;
    2. the run's ledger (log_out/log_err of the launcher's submit records);
    3. -o/-e on the sbatch command line (sacct's SubmitLine), else in the
       script's #SBATCH lines (the launcher's scripts name their run's logs);
    4. the run directory layout, <runs_dir>/<run>/logs/<run>-<id>.out|.err,
       for jobs of a run submitted by a job (resubmission) or named after a run;
    5. sbatch's default, <workdir>/slurm-<id>.out, for both.
    """

    def __init__(self, runs_dir: Path):
        self.runs_dir = runs_dir
        self.ledger_logs: dict[str, Paths] = {}
        self.run_of: dict[str, RunDir] = {}
        successors: set[str] = set()
        started: set[str] = set()
        for run_dir in run_dirs(runs_dir):
            for record in ledger(run_dir):
                job = str(record.get("job_id") or "")
                if not job:
                    continue
                if record.get("event") == "successor":
                    successors.add(job)
                elif record.get("event") == "job_start":
                    started.add(job)
                self.run_of.setdefault(job, run_dir)
                if record.get("log_out"):
                    self.ledger_logs[job] = (str(record["log_out"]), str(record.get("log_err") or ""))
        self.scontrol_calls = 0
        # Successors (hpc/job/successor.py) that never started: a run withdraws its waiting successor when
        # it stops (scancel), which is bookkeeping, not a job anybody cancelled.
        self.withdrawn = successors - started

    def find(self, job: EndedJob) -> Paths:
        for source in (self.from_scontrol, self.from_ledger, self.from_submit_line):
            found = source(job)
            if found and found[0]:
                return found[0], found[1] or found[0]
        return self.from_layout(job)

    def from_scontrol(self, job: EndedJob) -> Optional[Paths]:
        if not self.recently_ended(job) or self.scontrol_calls >= SCONTROL_MAX_CALLS:
            return None
        self.scontrol_calls += 1
        try:
            shown = calls.show_job(job.job_id, timeout=120)
        except SlurmError as err:
            raise Failure(str(err)) from None
        return None if shown is None else (shown.std_out, shown.std_err)

    @staticmethod
    def recently_ended(job: EndedJob) -> bool:
        if job.end is None:
            return True  # "Unknown": still ending
        return datetime.now(timezone.utc) - job.end < SCONTROL_WINDOW

    def from_ledger(self, job: EndedJob) -> Optional[Paths]:
        return self.ledger_logs.get(job.job_id)

    def from_submit_line(self, job: EndedJob) -> Optional[Paths]:
        out, err = submitted_logs(job)
        if not out and not err:
            return None
        # sbatch writes stdout to slurm-%j.out unless --output is given, and
        # stderr to the stdout file unless --error is.
        out = expand(out, job) if out else default_log(job)
        return out, expand(err, job) if err else out

    def from_layout(self, job: EndedJob) -> Paths:
        name, job_id = job.name, job.job_id
        run_dir = self.run_of.get(job_id)
        if run_dir is None and name not in ("", ".", "..") and "/" not in name:
            named = RunDir(self.runs_dir / name)
            run_dir = named if named.logs_dir.is_dir() else None
        if run_dir is None:
            return default_log(job), default_log(job)
        out, err = run_dir.log_paths(job_id)
        return str(out), str(err)


def default_log(job: EndedJob) -> str:
    """sbatch's default log name, in the job's working directory."""
    return expand("slurm-%A_%a.out" if "_" in job.job_id else "slurm-%j.out", job)


# --- ended jobs ------------------------------------------------------------------------

def ended_jobs(states: str, start: str, user: str) -> list[EndedJob]:
    try:
        return calls.ended_jobs(user, states, start, timeout=120)
    except SlurmFailed as err:
        if "time" in err.stderr.lower() and "invalid" in err.stderr.lower():
            raise Failure(f"bad -S '{start}' (accepted: a time sacct accepts, e.g. now-3days, 2026-11-01, "
                          "2026-11-01T08:00)", 2) from None
        raise Failure(str(err)) from None
    except SlurmError as err:
        raise Failure(str(err)) from None


def end_text(job: EndedJob) -> str:
    """When the job ended, in this machine's local time as sacct prints it; Unknown while it ends."""
    return "Unknown" if job.end is None else job.end.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def tail(path: str, lines: int) -> Optional[list[str]]:
    """The last lines of a log, reading only its end (logs grow large)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 400 * lines - 4096))
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    return text.splitlines()[-lines:]


def shown(path: str) -> str:
    return printable(path) + ("" if os.path.exists(path) else " (missing)")


def ended_view(label: str, states: str, start: str, user: str, runs_dir: Path, prefix: str,
               tail_lines: int) -> None:
    finder = LogFinder(runs_dir)
    named = [j for j in ended_jobs(states, start, user) if j.name.startswith(prefix)]
    jobs = [j for j in named if not (j.state == JobState.CANCELLED and j.job_id in finder.withdrawn)]
    which = f" named {prefix}*" if prefix else ""
    print(f"{label.capitalize()} jobs of {user}{which} since {start} (runs dir: {runs_dir}): {len(jobs)}")
    if len(named) > len(jobs):
        print(f"  (not listed: {len(named) - len(jobs)} successor job(s) that their runs withdrew, unstarted, "
              "when the runs stopped)")
    if not jobs:
        return
    header, *rows = table(["JOBID", "STATE", "EXIT", "ELAPSED", "END", "NAME"],
                          [[j.job_id, j.state, j.exit_code, j.elapsed, end_text(j), j.name] for j in jobs])
    print(header)
    for index, (row, job) in enumerate(zip(rows, jobs)):
        out, err = finder.find(job)
        if tail_lines and index:
            print()  # a blank line between jobs whose log tails are shown
        print(row)
        print(f"  out: {shown(out)}")
        if err != out:
            print(f"  err: {shown(err)}")
        if tail_lines:
            print_tail(err, tail_lines)


def print_tail(path: str, lines: int) -> None:
    last = tail(path, lines)
    if last is None:
        print("  (no error log to show)")
    elif not last:
        print("  (the error log is empty)")
    else:
        print(f"  last {len(last)} line(s) of the error log:")
        for text in last:
            print(f"    | {printable(text)}")


# --- runs directory ------------------------------------------------------------------


def launcher_runs_dir() -> Path:
    """The launcher's default, by the launcher's code (hpc/launcher/single_run.py spec_from_args):
    RUNS_DIR from the merged dotenv of the detected cluster, else <repo>/runs."""
    try:
        from hpc.launcher.clusters import load_registry
        from hpc.errors import UsageError
        from hpc.launcher.jobspec import env_layers, outer_env, resolve_runs_dir
    except ImportError as err:
        raise Failure(f"cannot work out the launcher's runs directory ({err}; run setup.sh, "
                      "or pass --runs_dir DIR)")
    try:
        cluster = load_registry().detect().cluster
        return resolve_runs_dir(None, env_layers(cluster, []), outer_env(cluster))
    except UsageError as err:
        raise Failure(f"cannot work out the launcher's runs directory: {err} (pass --runs_dir DIR)")


# --- command line ----------------------------------------------------------------------


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    caller = os.environ.pop("HPC_CALLER_DIR", "")
    if caller:  # scripts/common.sh runs this from the repository: relative paths are the user's
        with contextlib.suppress(OSError):
            os.chdir(caller)
    try:
        if command == "runs-dir" and not args:
            print(launcher_runs_dir())
        elif command in ("queue", "runs") and len(args) in (2, 3):
            view = queue_view if command == "queue" else runs_view
            view(args[0], Path(args[1]), args[2] if len(args) == 3 else "")
        elif command == "ended" and len(args) == 7:
            label, states, start, user, runs_dir, prefix, lines = args
            ended_view(label, states, start, user, Path(runs_dir), prefix, int(lines))
        else:
            raise Failure(f"hpc.run.monitor: bad arguments {argv!r} (see its docstring)", 2)
    except Failure as err:
        print(f"{PROG}: error: {err}" if err.code == 1 else f"{PROG}: {err}", file=sys.stderr)
        return err.code
    return 0


if __name__ == "__main__":
    # `status.sh | head` ends quietly. Only as a program: tests call main() in
    # pytest's own process, which must not die of a later closed pipe.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
