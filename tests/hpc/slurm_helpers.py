"""Small helpers for tests that drive the real local Slurm with the launcher.

Accounting and cancelling are tests/scripts/slurm_util.py's (one way to read
sacct for the whole suite); this adds running the launcher as a user would."""

from __future__ import annotations

import subprocess
import sys

from tests.scripts.slurm_util import REPO, cancel, sacct_row, wait_final

__all__ = ["cancel", "launch", "sacct_state", "wait_for_final_state"]


def launch(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run the real launcher as a user would."""
    return subprocess.run([sys.executable, "-m", "hpc.launch", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def sacct_state(job_id: str) -> dict[str, str]:
    """State, ExitCode, AllocTRES (and JobName) of the job allocation, as accounting has them."""
    return sacct_row(job_id)


def wait_for_final_state(job_id: str, timeout: float = 120) -> dict[str, str]:
    return wait_final([job_id], timeout)[job_id]
