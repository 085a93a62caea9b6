"""Slurm calls from inside a job: sbatch, scontrol and squeue/sacct queries without the job's own
SLURM_* variables.

The end hook (hpc/job/continuation.py), the successor (hpc/job/successor.py) and a pack job
(hpc/job/pack.py, through continuation) make them; they live apart so that continuation and
successor, which use each other's ideas, do not import each other."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def slurm_env() -> dict[str, str]:
    """The environment for sbatch/scontrol inside a job: without the job's own
    SLURM_* output variables, which sbatch would otherwise carry into the new
    job's environment (SLURM_CONF stays: it locates the cluster's config)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def slurm_query(command: list[str]) -> str:
    """stdout of a read-only Slurm command, or "" if it fails (briefly: the job is near its limit)."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=20, env=slurm_env())
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def requeue(job_id: str) -> None:
    result = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True,
                            timeout=120, env=slurm_env())
    if result.returncode != 0:
        raise RuntimeError(f"scontrol requeue {job_id} failed (exit {result.returncode}): {result.stderr.strip()}")


def resubmit(script: Path, after: str, options: tuple[str, ...] = ()) -> str:
    """Submit ``script`` again to start once job ``after`` has ended; return the new id
    (``options`` override the script's #SBATCH lines: a smaller pack job asks for fewer GPUs)."""
    from hpc.launcher.submit import submit

    return submit(script, f"afterany:{after}", env=slurm_env(), options=options)
