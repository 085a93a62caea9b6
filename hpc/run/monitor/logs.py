"""Where an ended job's stdout and stderr logs are (the sacct views of sfail.sh, scompleted.sh,
scancelled.sh), from the most reliable source to the least: slurmctld, the run's ledger, the
sbatch command line or the script's #SBATCH lines, the run directory layout, sbatch's default."""

from __future__ import annotations

import os
import shlex
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional, Sequence, Tuple

from hpc.run import ledger
from hpc.run.ledger import JobRecord, JobStart, Launched, Successor
from hpc.run.monitor.display import Failure
from hpc.run.monitor.rundirs import run_dirs
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError
from hpc.slurm.output import EndedJob

# slurmctld forgets a finished job MinJobAge after its end (300 s by default);
# asking it about older ones, one RPC each, only costs time.
SCONTROL_WINDOW = timedelta(hours=1)
SCONTROL_MAX_CALLS = 50

Paths = Tuple[str, str]  # (stdout log, stderr log)


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
            for record in ledger.readable(run_dir):
                if not isinstance(record, JobRecord) or not record.job_id:
                    continue
                job = record.job_id
                if isinstance(record, Successor):
                    successors.add(job)
                elif isinstance(record, JobStart):
                    started.add(job)
                self.run_of.setdefault(job, run_dir)
                if isinstance(record, Launched) and record.log_out:
                    self.ledger_logs[job] = (record.log_out, record.log_err or "")
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
