"""Faults a job meets on a real cluster, done to the project's local Slurm (scripts/local_slurm.sh).

docs/design.md (a run across jobs) and /work notes on the local Slurm: a lost node is its
slurmd killed with every process of its jobs; a whole-job kill (what a cgroup OOM kill
does) is every descendant of the job's slurmstepd processes killed, the slurmstepd kept.
Used by the real-Slurm tests (tests/hpc/test_lost_job_slurm.py) and bench/fault_drill.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROC = Path("/proc")


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _parent(pid: int) -> int | None:
    try:
        return int((PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def stepd_pids(job_id: str) -> list[int]:
    """The job's slurmstepd processes (``slurmstepd: [JOB.batch]``, ``[JOB.0]``...)."""
    tag = f"slurmstepd: [{job_id}."
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit() and _cmdline(int(p.name)).startswith(tag)]


def descendants(roots: list[int]) -> list[int]:
    """Every process below ``roots`` (processes only: /proc lists threads under task/)."""
    children: dict[int, list[int]] = {}
    for p in PROC.iterdir():
        if p.name.isdigit():
            parent = _parent(int(p.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(p.name))
    found, todo = [], list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def kill_job_processes(job_id: str) -> int:
    """kill -9 every process of the job but its slurmstepd: what an OOM kill of the whole job's
    cgroup does (sacct then says FAILED, and no end hook ran). Returns how many were killed."""
    victims = descendants(stepd_pids(job_id))
    _kill(victims)
    return len(victims)


def kill_batch_script(job_id: str) -> int:
    """kill -9 the job's batch shell only (an administrator's kill): its workload lives on a
    moment, orphaned; the job ends when the shell does. Returns the shell's pid."""
    batch = [pid for pid in stepd_pids(job_id) if f"[{job_id}.batch]" in _cmdline(pid)]
    shells = [pid for pid in descendants(batch) if _parent(pid) in batch]
    for pid in shells:
        os.kill(pid, signal.SIGKILL)
    return shells[0] if shells else 0


def node_of(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-o", "%N", "-j", job_id], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def slurmd_pid(node: str) -> int | None:
    """The node's slurmd (its pid file, as scripts/local_slurm.sh writes it), else by command line."""
    for p in PROC.iterdir():
        if p.name.isdigit() and _cmdline(int(p.name)).split()[:3] in (["/usr/sbin/slurmd", "-N", node],
                                                                       ["slurmd", "-N", node]):
            return int(p.name)
    return None


def jobs_on(node: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i", "-w", node], capture_output=True, text=True, timeout=30)
    return out.stdout.split()


def lose_node(job_id: str) -> str:
    """The job's node lost: its slurmd and every process of every job on it killed at once (the
    local nodes share one host: only these processes are the node's). Slurm notices after
    SlurmdTimeout (scripts/local_slurm.sh --slurmd_timeout). Returns the node's name."""
    node = node_of(job_id)
    pid = slurmd_pid(node)
    if pid is None:
        raise RuntimeError(f"no slurmd found for node {node!r} of job {job_id}")
    stepds = [stepd for job in jobs_on(node) for stepd in stepd_pids(job)]
    workload = descendants(stepds)
    _kill([pid, *stepds])  # first: a slurmstepd that outlived its workload would report it FAILED
    _kill(workload)
    return node


def restore_nodes(nodes: int = 2) -> None:
    """Bring every node back (ReturnToService=2 lets a node that answers again go idle)."""
    subprocess.run(["bash", str(REPO / "scripts/local_slurm.sh"), "up", "--nodes", str(nodes)], check=True,
                   capture_output=True, timeout=300)
