"""``python -m hpc.remote``: the shared connection, and the bash helpers' way in.

    python -m hpc.remote open DEST      log in now (a second factor is typed here, once)
    python -m hpc.remote close DEST     end the shared connection (the login) to DEST
    python -m hpc.remote run COMMAND ARGS...   COMMAND (scripts/status.sh, ...) with --remote among ARGS
    python -m hpc.remote help           the remote flags, as the commands' -h shows them
"""

from __future__ import annotations

import sys

from hpc.errors import UsageError
from hpc.remote.commands import COMMANDS, run_command
from hpc.remote.options import HELP, checked_dest
from hpc.remote.ssh import Connection, RemoteError

USAGE = "usage: python -m hpc.remote {open DEST | close DEST | run COMMAND ARGS... | help}"


def connection_command(action: str, dest: str) -> int:
    conn = Connection.to(checked_dest(dest))
    if action == "open":
        conn.open()
        print(f"connected to {dest}; later commands with --remote {dest} use this login "
              f"(python -m hpc.remote close {dest} ends it)")
    elif conn.close():
        print(f"closed the connection to {dest}")
    else:
        print(f"no open connection to {dest}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["help"]:
        print(HELP, end="")
        return 0
    if len(argv) >= 2 and argv[0] == "run" and argv[1] in COMMANDS:
        return run_command(argv[1], argv[2:])
    try:
        if len(argv) == 2 and argv[0] in ("open", "close"):
            return connection_command(argv[0], argv[1])
        raise UsageError(f"bad arguments {' '.join(argv) or '(none)'} ({USAGE}; COMMAND: {', '.join(COMMANDS)})")
    except UsageError as error:
        print(f"hpc.remote: error: {error}", file=sys.stderr)
        return UsageError.exit_code
    except RemoteError as error:
        print(f"hpc.remote: error: {error}", file=sys.stderr)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
