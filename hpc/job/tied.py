"""Run a command tied to the shell that starts it: it is killed when that shell dies.

    python -S -m hpc.job.tied SHELL_PID COMMAND [ARG ...]

Job control starts the workload (and a pack job each run's script) with this, so that a
batch script killed outright (kill -9 by an administrator; a node's processes dying one by
one) takes its workload with it. Otherwise the workload, orphaned, trains on: where Slurm
tracks a job's processes by their parent (proctrack/linuxproc) it no longer sees it, and
the job's successor (hpc/job/successor.py) would train the same run beside it.

Linux's PR_SET_PDEATHSIG asks the kernel to send SIGKILL when the parent dies; it survives
the exec into the command, so the command keeps this process's pid (job control passes
its signals to that pid). If the shell died before the request was made, the command is
not started. Stdlib only (its one import of the package, hpc/job/exit_codes.py, imports nothing),
started with ``-S``: a few milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

from hpc.job.exit_codes import EXIT_BAD_INPUT

PR_SET_PDEATHSIG = 1


def tie_to_parent(parent: int) -> bool:
    """Ask for SIGKILL when the parent dies; False when it is already gone (or not ``parent``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: run untied, as before
        return True
    return os.getppid() == parent


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python -S -m hpc.job.tied SHELL_PID COMMAND [ARG ...]", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not tie_to_parent(int(argv[0])):
        print(f"hpc.job.tied: the shell {argv[0]} is gone; not starting {argv[1]}", file=sys.stderr)
        return 1
    os.execvp(argv[1], argv[1:])
    return 127  # not reached: execvp raises on failure


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
