"""What the launcher asks of Slurm (through hpc/slurm, the one Slurm layer): whether sbatch is
here at all (the message when it is not), the job script submitted (test-only and real),
the run's jobs still in the queue; and the git commit a launch records.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hpc.errors import UsageError
from hpc.slurm.calls import (
    SlurmError,
    SlurmFailed,
    SlurmMissing,
    TestOnly,
    queue_states,
    sbatch_command,
    submit,
    test_only,
)
from hpc.slurm.states import QUEUED
from hpc.synced_checkout import synced_commit

__all__ = ["SlurmError", "TestOnly", "sbatch_command", "submit", "test_only", "active_jobs", "require_sbatch",
           "sbatch_path", "git_commit"]

NO_SLURM = (
    "no Slurm found: 'sbatch' is not on the PATH. Preview with --dry_run, or start the "
    "project's own Slurm on this machine with: bash scripts/local_slurm.sh up"
)


def sbatch_path() -> str | None:
    return shutil.which("sbatch")


def require_sbatch() -> str:
    path = sbatch_path()
    if path is None:
        raise UsageError(NO_SLURM)
    return path


def active_jobs(job_ids: list[str]) -> dict[str, str]:
    """The state of each of these jobs still in the queue; none known where squeue is missing or
    refuses (a squeue that does not answer in time is a SlurmError: the launch stops)."""
    try:
        states = queue_states(job_ids)
    except (SlurmMissing, SlurmFailed):
        return {}
    return {job: state for job, state in states.items() if state in QUEUED}


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
