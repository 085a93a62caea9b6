"""The connection's faults, against a real sshd on 127.0.0.1: each one line that says what to do,
exit 255, within seconds (no prompt waits: BatchMode without a terminal, ConnectTimeout), no
traceback, and nothing written on either side."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from hpc.job.workload_env import HPC_REMOTE_SSH_OPTS
from tests.hpc.remote.conftest import DEST, Laptop, ssh_opts
from tests.hpc.sshd_helpers import Sshd, _free_port


def fails_fast(laptop: Laptop, checkout: Path, limit: float = 15) -> str:
    """hpc.launch --remote as a user types it: exit 255 within ``limit`` seconds; its one stderr line."""
    began = time.monotonic()
    result = laptop.python("-m", "hpc.launch", "--remote", DEST, "--remote_dir", str(checkout),
                           "--job_name", "x", "--time_limit", "5", "--dry_run", timeout=60)
    assert time.monotonic() - began < limit
    assert result.returncode == 255 and result.stdout == "", (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert not checkout.exists()
    return result.stderr


def test_an_unreachable_host_is_said_at_once(laptop: Laptop, login_node: Sshd, tmp_path: Path):
    laptop.ssh_opts = ssh_opts(login_node).replace(f"-p {login_node.port}", f"-p {_free_port()}")
    error = fails_fast(laptop, tmp_path / "checkout", limit=10)
    assert error.startswith(f"hpc.launch: error: cannot reach {DEST} (ssh: ") and "Connection refused" in error
    assert "check the host, your network or VPN" in error


def test_a_host_that_never_answers_is_given_up_after_the_connect_timeout(laptop: Laptop, login_node: Sshd,
                                                                          tmp_path: Path):
    with socket.socket() as silent:  # accepts the TCP connection, never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        laptop.ssh_opts = f"-o ConnectTimeout=2 {ssh_opts(login_node).replace(f'-p {login_node.port}', f'-p {port}')}"
        error = fails_fast(laptop, tmp_path / "checkout", limit=10)
    assert f"cannot reach {DEST}" in error and "timed out" in error


def test_a_refused_key_says_to_check_the_key(laptop: Laptop, login_node: Sshd, tmp_path: Path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    laptop.ssh_opts = ssh_opts(login_node, key=stranger)
    error = fails_fast(laptop, tmp_path / "checkout")
    assert f"{DEST} refused the login (ssh: " in error and "Permission denied" in error
    assert "check your key (ssh-add -l; IdentityFile" in error


def test_a_changed_host_key_is_refused_with_what_to_check(laptop: Laptop, login_node: Sshd, tmp_path: Path):
    impostor = tmp_path / "impostor"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(impostor)], check=True)
    known_hosts = tmp_path / "known_hosts"  # the login node known under another key than the one it shows
    known_hosts.write_text(f"[127.0.0.1]:{login_node.port} {impostor.with_suffix('.pub').read_text()}")
    laptop.ssh_opts = ssh_opts(login_node, known_hosts=str(known_hosts))
    error = fails_fast(laptop, tmp_path / "checkout")
    assert f"{DEST}'s host key has changed since you last logged in" in error
    assert "ssh-keygen -R <host>" in error and "otherwise do not connect" in error


def test_without_a_terminal_an_unknown_host_key_fails_instead_of_asking(laptop: Laptop, login_node: Sshd,
                                                                         tmp_path: Path):
    """ssh's default would ask "continue connecting (yes/no)?" on a terminal nobody watches: BatchMode."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    laptop.ssh_opts = ssh_opts(login_node, known_hosts=str(known_hosts)).replace("StrictHostKeyChecking=yes",
                                                                                 "StrictHostKeyChecking=ask")
    error = fails_fast(laptop, tmp_path / "checkout")
    assert f"{DEST}'s host key is not known here (ssh: Host key verification failed): log in once" in error


@pytest.mark.parametrize("opts", ["-o 'unclosed", ""])
def test_bad_ssh_options_are_one_line_exit_2(laptop: Laptop, opts: str):
    laptop.ssh_opts = opts
    result = laptop.python("-m", "hpc.accounting", "run", "--remote", "-oProxyCommand=x" if not opts else DEST)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    expected = f"bad {HPC_REMOTE_SSH_OPTS}" if opts else "bad --remote '-oProxyCommand=x' (accepted: an ssh destination"
    assert expected in result.stderr
