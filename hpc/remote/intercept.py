"""The one hook: the first thing each user command does (hpc/launch.py, hpc/report.py,
hpc/accounting.py; scripts/status.sh and scripts/scancelall.sh through common.sh's
``hpc_remote_intercept``, which runs ``python -m hpc.remote run``).

With ``--remote DEST`` the command runs on DEST's login node instead (commands.py) and this
process exits with its exit code; with ``-h`` the remote flags are added under the command's
own help. Otherwise it returns at once, having imported nothing heavy (``--dry_run`` stays fast).
"""

from __future__ import annotations

import atexit
import sys

from hpc.remote.options import HELP, wants_help, wants_remote


def run_remotely_if_asked(module_name: str, command: str) -> None:
    """Call at the top of a command module as ``run_remotely_if_asked(__name__, "hpc.launch")``."""
    if module_name != "__main__":
        return
    argv = sys.argv[1:]
    if wants_remote(argv):
        from hpc.remote.commands import run_command

        sys.exit(run_command(command, argv))
    if wants_help(argv):
        atexit.register(print_help)  # after argparse's help, which exits


def print_help() -> None:
    print(HELP, end="")
