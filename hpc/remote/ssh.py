"""One SSH connection to the login node, opened once and reused by every later command.

OpenSSH's connection sharing: the first command starts a master connection in the
background (``ControlMaster``; the login, a second factor included, happens then), which
stays ``ControlPersist`` after its last use; every later ssh goes through its socket without
logging in again. The socket lives in a folder only its user may enter (0700,
``~/.ssh/hpc-remote``), one per destination (``%C``). Your own ssh, scp and rsync share it
with ``ControlPath ~/.ssh/hpc-remote/%C`` in ~/.ssh/config (docs/remote.md).

Nothing waits past a connect timeout: ``ConnectTimeout`` (10 s, the SSH banner included),
``BatchMode`` where no terminal can answer a prompt, and ssh's own failures are turned into
one line that says what to do (``explain``).
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hpc.errors import UsageError
from hpc.job.exit_codes import EXIT_CONNECTION
from hpc.job.workload_env import HPC_REMOTE_SSH_OPTS

SOCKET_DIR = "~/.ssh/hpc-remote"
PERSIST = "8h"
CONNECT_TIMEOUT = 10
BATCH_LOGIN_LIMIT = 120  # seconds a login without a terminal may take (a slow ProxyJump chain)


class RemoteError(Exception):
    """A failure on the way to the command (connection, sync, setup): one line, and the exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Connection:
    """ssh to ``dest`` through the shared connection: the user's options first (ssh takes the
    first value it is given for an option, so HPC_REMOTE_SSH_OPTS wins over ours), then ours."""

    dest: str
    user_options: tuple[str, ...]
    socket_dir: Path
    batch: bool

    @classmethod
    def to(cls, dest: str) -> Connection:
        return cls(dest, user_ssh_options(), private_socket_dir(), batch=not sys.stdin.isatty())

    def ssh(self, *extra: str) -> list[str]:
        ours = [f"ControlPath={self.socket_dir}/%C", f"ConnectTimeout={CONNECT_TIMEOUT}",
                "ServerAliveInterval=15", "ServerAliveCountMax=4", *(["BatchMode=yes"] if self.batch else [])]
        return ["ssh", *self.user_options, *(arg for option in ours for arg in ("-o", option)), *extra]

    def is_open(self) -> bool:
        check = subprocess.run(self.ssh("-O", "check", self.dest), capture_output=True, text=True)
        return check.returncode == 0

    def open(self) -> None:
        """The master connection, unless one is open: the one login of the session."""
        if self.is_open():
            return
        with tempfile.TemporaryFile(mode="w+") as errors:  # a file: the master keeps its stderr open
            master = self.ssh("-o", "ControlMaster=yes", "-o", f"ControlPersist={PERSIST}", "-f", "-N", self.dest)
            try:
                code = subprocess.run(master, stderr=errors, timeout=BATCH_LOGIN_LIMIT if self.batch else None,
                                      stdout=subprocess.DEVNULL).returncode
            except subprocess.TimeoutExpired:
                raise RemoteError(f"the login to {self.dest} did not finish within {BATCH_LOGIN_LIMIT} s: "
                                  f"check that `ssh {self.dest}` logs in", EXIT_CONNECTION) from None
            errors.seek(0)
            if code != 0:
                raise RemoteError(explain(self.dest, errors.read()), EXIT_CONNECTION)

    def close(self) -> bool:
        """End the master connection (and with it the login); False when none was open."""
        if not self.is_open():
            return False
        subprocess.run(self.ssh("-O", "exit", self.dest), capture_output=True, text=True)
        return True

    def command(self, script: str, *args: str, tty: bool = False) -> list[str]:
        """ssh argv running the POSIX sh ``script`` with ``args`` ($1...) on the login node,
        through the open connection (never a second login)."""
        line = " ".join(["sh", "-c", shlex.quote(script), "hpc-remote", *map(shlex.quote, args)])
        return self.ssh("-o", "ControlMaster=no", *(["-t"] if tty else []), self.dest, line)

    def lost(self, code: int) -> None:
        """After a command exited 255: ssh's (the connection dropped), unless the master lives."""
        if code == EXIT_CONNECTION and not self.is_open():
            raise RemoteError(f"the connection to {self.dest} was lost: run the command again "
                              "(a job it submitted shows in scripts/status.sh --remote)", EXIT_CONNECTION)


def user_ssh_options() -> tuple[str, ...]:
    text = os.environ.get(HPC_REMOTE_SSH_OPTS, "")
    try:
        return tuple(shlex.split(text))
    except ValueError as error:
        raise UsageError(f"bad {HPC_REMOTE_SSH_OPTS} '{text}' ({error}; accepted: ssh options as a "
                         "shell would split them, e.g. \"-o ConnectTimeout=20 -J gateway\")") from None


def private_socket_dir() -> Path:
    """~/.ssh/hpc-remote, made 0700; refused when others may enter it (they could use the login)."""
    folder = Path(os.path.expanduser(SOCKET_DIR))
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RemoteError(f"{folder} holds the shared SSH connection and must be a folder of yours that only "
                          f"you may enter (mode {stat.filemode(info.st_mode)}): chmod 700 {folder}")
    return folder


# What ssh says, and what to do about it (first match wins).
EXPLANATIONS = (
    (("REMOTE HOST IDENTIFICATION HAS CHANGED",),
     "{dest}'s host key has changed since you last logged in ({reason}): if the site announced new "
     "keys, remove the old one (ssh-keygen -R <host>) and log in once with `ssh {dest}` to check and "
     "accept the new one; otherwise do not connect"),
    (("Host key verification failed",),
     "{dest}'s host key is not known here ({reason}): log in once with `ssh {dest}` to check and accept it"),
    (("Permission denied", "Too many authentication failures"),
     "{dest} refused the login ({reason}): check your key (ssh-add -l; IdentityFile for {dest} in "
     "~/.ssh/config) and that `ssh {dest}` logs in"),
    (("Could not resolve hostname",),
     "cannot find the host of {dest} ({reason}): check the name, or its Host entry in ~/.ssh/config"),
    (("too long for Unix domain socket",),
     "the connection's socket path is too long ({reason}): use a shorter home folder path"),
    (("Connection refused", "timed out", "No route to host", "Network is unreachable", "Connection closed",
      "Connection reset", "banner exchange"),
     "cannot reach {dest} ({reason}): check the host, your network or VPN, and that `ssh {dest}` logs in"),
)


def explain(dest: str, stderr: str) -> str:
    """ssh's failure as one line: what happened, and what to do."""
    lines = [line.strip("@ \t") for line in stderr.splitlines() if line.strip("@ \t")]
    for needles, message in EXPLANATIONS:
        hit = next((line for line in lines if any(needle in line for needle in needles)), None)
        if hit is not None:
            return message.format(dest=dest, reason=f"ssh: {hit.removeprefix('ssh: ').rstrip('.')}")
    last = lines[-1].removeprefix("ssh: ") if lines else "no message"
    return f"ssh to {dest} failed (ssh: {last}): check that `ssh {dest}` logs in"
