"""The commands of ``python -m hpc.run.monitor`` (scripts/common.sh runs them for the helpers):

    runs-dir                                               the launcher's default runs directory
    queue USER RUNS_DIR [RUN]                              the user's queued and running jobs
    runs USER RUNS_DIR [RUN]                               one line per run directory
    status USER RUNS_DIR [RUN]                             both, from one squeue call (status.sh)
    ended LABEL STATES START USER RUNS_DIR PREFIX TAIL_LINES   sacct view of ended jobs with their logs
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from hpc.job.workload_env import HPC_CALLER_DIR, HPC_PROG
from hpc.run.monitor.display import Failure

PROG = os.environ.get(HPC_PROG) or "python -m hpc.run.monitor"


def launcher_runs_dir() -> Path:
    """The launcher's default, by the launcher's code (hpc/launcher/single_run.py spec_from_args):
    RUNS_DIR from the merged dotenv of the detected cluster, else <repo>/runs."""
    try:
        from hpc.errors import UsageError
        from hpc.launcher.jobspec import runs_dir_here
    except ImportError as err:
        raise Failure(f"cannot work out the launcher's runs directory ({err}; run setup.sh, "
                      "or pass --runs_dir DIR)") from None
    try:
        return runs_dir_here()
    except UsageError as err:
        raise Failure(f"cannot work out the launcher's runs directory: {err} (pass --runs_dir DIR)") from None


def views(command: str, user: str, runs_dir: Path, only: str) -> int:
    """status.sh's parts: ``status`` is both, from one squeue call."""
    if command == "queue":
        from hpc.run.monitor.queue import queue_view

        queue_view(user, runs_dir, only)
        return 0
    from hpc.run.monitor.runs_table import runs_view, status_view

    if command == "status":
        return status_view(user, runs_dir, only)
    runs_view(user, runs_dir, only)
    return 0


# --- command line ----------------------------------------------------------------------


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    caller = os.environ.pop(HPC_CALLER_DIR, "")
    if caller:  # scripts/common.sh runs this from the repository: relative paths are the user's
        with contextlib.suppress(OSError):
            os.chdir(caller)
    try:
        if command == "runs-dir" and not args:
            print(launcher_runs_dir())
        elif command in ("queue", "runs", "status") and len(args) in (2, 3):
            return views(command, args[0], Path(args[1]), args[2] if len(args) == 3 else "")
        elif command == "ended" and len(args) == 7:
            from hpc.run.monitor.ended import ended_view  # each command imports only what it shows

            label, states, start, user, runs_dir, prefix, lines = args
            ended_view(label, states, start, user, Path(runs_dir), prefix, int(lines))
        else:
            raise Failure(f"hpc.run.monitor: bad arguments {argv!r} (see its docstring)", 2)
    except Failure as err:
        print(f"{PROG}: error: {err}" if err.code == 1 else f"{PROG}: {err}", file=sys.stderr)
        return err.code
    return 0
