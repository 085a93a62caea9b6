"""The users' commands that take ``--remote DEST``, and running one on the login node.

Each runs there as it would here, from the synced checkout (where the cluster is detected
from that host's name as on a login), with the same arguments less the remote ones; its
output streams back and its exit code is this command's. hpc.report's report comes back
into ``--out`` (report_fetch.py).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hpc.errors import UsageError
from hpc.job.workload_env import REPO_DIR
from hpc.remote.options import RemoteOptions, split
from hpc.remote.ssh import Connection, RemoteError
from hpc.remote.sync import IN_CHECKOUT, ensure_synced, local_tree

# $2...: the command, run from the checkout.
RUN = IN_CHECKOUT + """cd "$d" || exit 1
shift
exec "$@"
"""
Runner = Callable[["Command", Connection, RemoteOptions, list[str]], int]


@dataclass(frozen=True)
class Command:
    """A command as the user types it here (``hpc.launch``, ``scripts/status.sh``)."""

    name: str
    extra_flags: tuple[str, ...] = ()  # flags of its remote form only (hpc.report's --out)
    runner: Runner | None = None  # how it runs there, when not simply streamed
    check: Callable[[RemoteOptions], None] | None = None  # its extras, checked before anything leaves here

    @property
    def prog(self) -> str:
        return Path(self.name).name

    def argv_there(self, args: list[str]) -> list[str]:
        """Scripts with bash, Python commands with the checkout's venv."""
        if self.name.endswith(".sh"):
            return ["bash", self.name, *args]
        return [".venv/bin/python", "-m", self.name, *args]


def stream(command: Command, conn: Connection, options: RemoteOptions, args: list[str]) -> int:
    """Run it there with our terminal (a pseudo-terminal when we have one: prompts, --watch)."""
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    code = subprocess.run(conn.command(RUN, options.remote_dir, *command.argv_there(args), tty=tty)).returncode
    conn.lost(code)
    return code


def run_report(command: Command, conn: Connection, options: RemoteOptions, args: list[str]) -> int:
    from hpc.remote.report_fetch import report_and_fetch  # only hpc.report brings files back

    return report_and_fetch(conn, options, command.argv_there(args), RUN)


def check_report_out(options: RemoteOptions) -> None:
    from hpc.remote.report_fetch import check_out  # only hpc.report brings files back

    check_out(options.extras.get("--out"))


COMMANDS = {command.name: command for command in (
    Command("hpc.launch"),
    Command("hpc.report", ("--out",), run_report, check_report_out),
    Command("hpc.accounting"),
    Command("scripts/status.sh"),
    Command("scripts/scancelall.sh"),
)}


def run_command(name: str, argv: list[str]) -> int:
    """``name`` with ``argv`` (its remote flags among them) on the login node: the exit code."""
    command = COMMANDS[name]
    try:
        options, args = split(argv, command.extra_flags)
        if command.check is not None:
            command.check(options)
        local = local_tree(REPO_DIR, options.uncommitted)
        conn = Connection.to(options.dest)
        conn.open()
        ensure_synced(conn, options.remote_dir, local, command.prog)
        return (command.runner or stream)(command, conn, options, args)
    except UsageError as error:
        return failed(command, str(error), UsageError.exit_code)
    except RemoteError as error:
        return failed(command, str(error), error.exit_code)
    except KeyboardInterrupt:
        return 130


def failed(command: Command, message: str, code: int) -> int:
    print(f"{command.prog}: error: {message}", file=sys.stderr)
    return code
