"""The remote flags, taken off a command's own: ``--remote DEST``, ``--remote_dir DIR``,
``--remote_uncommitted`` (and a command's own extras, hpc.report's ``--out DIR``).

The command's other arguments go to the login node unchanged, so every flag works there as
it does locally. Stdlib only: intercept.py asks ``wants_remote`` on every start.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from hpc.errors import UsageError
from hpc.job.workload_env import HPC_REMOTE_DIR, HPC_REMOTE_SSH_OPTS

DEFAULT_DIR = "~/hpc-art-launcher-remote"
SWITCH = "--remote_uncommitted"
DEST_ACCEPTED = "an ssh destination: [user@]host, or a Host alias of your ~/.ssh/config"
DIR_ACCEPTED = "a folder on the cluster: absolute, or relative to your home there (~/ allowed)"

HELP = f"""
remote (run this command on a cluster's login node from here, over SSH; docs/remote.md):
  --remote DEST         ssh destination, as ssh takes it: [user@]host or a Host alias of
                        ~/.ssh/config (its ProxyJump, keys and options apply); one login is
                        kept open for later commands (python -m hpc.remote close DEST ends it)
  --remote_dir DIR      the project's checkout there, which this command keeps in sync with
                        your committed tree (never .venv, runs/, data/ or .env; `bash setup.sh`
                        runs there on first use); default: ${HPC_REMOTE_DIR}, else
                        {DEFAULT_DIR}
  {SWITCH}  also sync your uncommitted changes (the ledger records HEAD-dirty);
                        without it a checkout with uncommitted changes is refused
  --out DIR             hpc.report only: where report.md and its pictures come back here
                        (default: RUN-report in the current folder)
  extra ssh options: {HPC_REMOTE_SSH_OPTS}, e.g. "-o ConnectTimeout=20 -J gateway"
"""


@dataclass(frozen=True)
class RemoteOptions:
    """Where the command runs (``dest``, ``remote_dir``), what is synced, and a command's extras."""

    dest: str
    remote_dir: str
    uncommitted: bool
    extras: dict[str, str]


def wants_remote(argv: list[str]) -> bool:
    return any(arg == "--remote" or arg.startswith("--remote=") for arg in argv)


def wants_help(argv: list[str]) -> bool:
    return any(arg in ("-h", "--help") for arg in argv)


def split(argv: list[str], extra_flags: tuple[str, ...] = ()) -> tuple[RemoteOptions, list[str]]:
    """The remote options and the command's own arguments (in their order)."""
    taken: dict[str, str] = {}
    rest: list[str] = []
    uncommitted = False
    flags = ("--remote", "--remote_dir", *extra_flags)
    args = iter(argv)
    for arg in args:
        name, has_value, value = arg.partition("=")
        if arg == SWITCH:
            uncommitted = True
        elif name in flags:
            taken[name] = value if has_value else next_value(args, name)
        else:
            refuse_near_miss(name, (*flags, SWITCH))
            rest.append(arg)
    folder = taken["--remote_dir"] if "--remote_dir" in taken else os.environ.get(HPC_REMOTE_DIR) or DEFAULT_DIR
    options = RemoteOptions(dest=checked_dest(taken.get("--remote", "")), remote_dir=checked_dir(folder),
                            uncommitted=uncommitted, extras={k: v for k, v in taken.items() if k in extra_flags})
    return options, rest


def refuse_near_miss(name: str, flags: tuple[str, ...]) -> None:
    """A mistyped remote flag (``--remote_di``, ``--remote-dir``, ``--Remote_Dir``, ``--remote_uncommited``)
    would reach the command there, which refuses it only after the sync and a first setup.sh
    on the wrong folder: refused here, before anything leaves this machine."""
    if not name.startswith("--"):
        return
    spelled = name.lower().replace("-", "_")[2:]
    known = [flag[2:] for flag in flags]
    remote_like = spelled.startswith(("remot", "rmote", "reomte")) or (len(spelled) >= 3 and "remote".startswith(spelled))
    if remote_like or difflib.get_close_matches(spelled, known, n=1, cutoff=0.8):
        raise UsageError(f"unknown remote flag '{printable(name)}' (accepted: {', '.join(flags)})")


def next_value(args: Iterator[str], flag: str) -> str:
    value = next(args, None)
    if value is None:
        accepted = {"--remote": DEST_ACCEPTED, "--remote_dir": DIR_ACCEPTED}.get(flag, "a folder here")
        raise UsageError(f"{flag} needs a value (accepted: {accepted})")
    return value


def printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)


def checked_dest(dest: str) -> str:
    """Refused: empty, an ssh option in disguise ('-oProxyCommand=...'), spaces or control characters."""
    if not dest or dest.startswith("-") or any(c.isspace() or not c.isprintable() for c in dest):
        raise UsageError(f"bad --remote '{printable(dest)}' (accepted: {DEST_ACCEPTED})")
    return dest


def checked_dir(folder: str) -> str:
    if not folder.strip() or any(not c.isprintable() for c in folder) or folder.startswith("-"):
        raise UsageError(f"bad --remote_dir '{printable(folder)}' (accepted: {DIR_ACCEPTED})")
    return folder
