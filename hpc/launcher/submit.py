"""Talking to Slurm: sbatch (test-only and real), squeue for active jobs.

Every call takes an explicit argument list (no shell), so paths and names are
passed exactly as they are.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from hpc.errors import UsageError
from hpc.synced_checkout import synced_commit

NO_SLURM = (
    "no Slurm found: 'sbatch' is not on the PATH. Preview with --dry_run, or start the "
    "project's own Slurm on this machine with: bash scripts/local_slurm.sh up"
)
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
                 "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"}


class SlurmError(RuntimeError):
    """Slurm refused or failed a command; the message carries its stderr."""


@dataclass(frozen=True)
class TestOnly:
    ok: bool
    message: str


def sbatch_path() -> str | None:
    return shutil.which("sbatch")


def require_sbatch() -> str:
    path = sbatch_path()
    if path is None:
        raise UsageError(NO_SLURM)
    return path


def sbatch_command(script: Path, dependency: str | None = None, options: tuple[str, ...] = ()) -> list[str]:
    """The exact sbatch command for a script (shown by the dry run, run by submit); ``options``
    override the script's own #SBATCH lines (a pack job with fewer runs asks for fewer GPUs)."""
    command = ["sbatch", "--parsable", *options]
    if dependency:
        command.append(f"--dependency={dependency}")
    command.append(str(script))
    return command


def test_only(script_text: str) -> TestOnly:
    """Ask the live scheduler whether it would accept the script; submits nothing.

    The script goes through stdin so a dry run writes no file."""
    result = subprocess.run(
        ["sbatch", "--test-only"], input=script_text, capture_output=True, text=True, timeout=60
    )
    message = (result.stderr + result.stdout).strip()
    return TestOnly(result.returncode == 0, message)


def submit(script: Path, dependency: str | None = None, env: dict[str, str] | None = None,
           options: tuple[str, ...] = ()) -> str:
    """Submit and return the job id (``sbatch --parsable`` prints ``id[;cluster]``).

    ``env``: the environment for sbatch (a job submitting its follower passes one
    without its own SLURM_* variables; see hpc.job.slurm_calls.slurm_env)."""
    result = subprocess.run(sbatch_command(script, dependency, options), capture_output=True, text=True,
                            timeout=120, env=env)
    if result.returncode != 0:
        raise SlurmError(f"sbatch of {script} failed (exit {result.returncode}): "
                         f"{(result.stderr or result.stdout).strip()}")
    job_id = result.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed no job id: {result.stdout.strip()!r}")
    return job_id


def job_states(job_ids: list[str]) -> dict[str, str]:
    """State of each job Slurm still knows in its queue (finished ones drop out)."""
    if not job_ids or shutil.which("squeue") is None:
        return {}
    result = subprocess.run(
        ["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)],
        capture_output=True, text=True, timeout=60,
    )
    states = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def active_jobs(job_ids: list[str]) -> dict[str, str]:
    return {job: state for job, state in job_states(job_ids).items() if state in ACTIVE_STATES}


def git_commit(repo: Path) -> str | None:
    """HEAD of the repo, with '-dirty' when the work tree has changes; in a checkout synced by
    ``--remote`` (no .git), the laptop's HEAD it was synced from; None outside git."""
    synced = synced_commit(repo)
    if synced is not None:
        return synced
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None
