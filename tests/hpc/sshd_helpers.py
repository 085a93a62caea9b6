"""An sshd of the test's own on 127.0.0.1 (its own keys, config and HOME; the machine's ssh
configuration is never read or written): the fixture the SSH tunnel tests share."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_openssh() -> None:
    """Skip without OpenSSH's client and server, but fail under CI=true, where .ci/run installs them."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    missing = [tool for tool in ("ssh", "ssh-keygen") if shutil.which(tool) is None]
    missing += [] if os.path.exists(sshd) else ["sshd"]
    if missing:
        message = f"needs {', '.join(missing)} (apt-get install openssh-server openssh-client)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@dataclass(frozen=True)
class Sshd:
    """A running sshd: its port, the one key it accepts (``user``), its log and folder."""

    port: int
    key: Path
    log: Path
    folder: Path

    def logins(self) -> int:
        """Logins it accepted so far (one per authentication, however many commands follow)."""
        return self.log.read_text().count("Accepted publickey")


@contextmanager
def running_sshd(folder: Path, extra_config: str = "") -> Iterator[Sshd]:
    """An sshd of our own on 127.0.0.1 in ``folder``, accepting one key, logging every login
    and forwarded connection; ``extra_config``: more sshd_config lines (e.g. SetEnv)."""
    require_openssh()
    d = folder
    d.mkdir(parents=True)
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    shutil.copy(d / "user.pub", d / "authorized_keys")
    port, log = _free_port(), d / "sshd.log"
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"PidFile {d / 'sshd.pid'}\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nAllowTcpForwarding yes\nLogLevel DEBUG1\n{extra_config}"
    )
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    proc = subprocess.Popen([sshd, "-D", "-f", str(d / "sshd_config"), "-E", str(log)])
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"sshd did not start: {log.read_text() if log.exists() else '(no log)'}")
            time.sleep(0.1)
    try:
        yield Sshd(port, d / "user", log, d)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def local_sshd(tmp_path):
    """An sshd of our own on 127.0.0.1, accepting one key, logging the
    forwarded connections; yields (port, key path, log path)."""
    with running_sshd(tmp_path / "sshd") as sshd:
        yield sshd.port, sshd.key, sshd.log
