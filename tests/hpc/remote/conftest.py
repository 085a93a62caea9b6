"""The --remote tests' world: a laptop, a login node and the cluster, all real and all here.

- the **login node** is an sshd of the tests' own on 127.0.0.1 (tests/hpc/sshd_helpers.py;
  its sessions get ``LITELLM_LOCAL_MODEL_COST_MAP`` and setup.sh's documented ``PYTHON``);
  the **cluster** behind it is the local Slurm;
- the **laptop** is a git checkout in a temporary folder holding this tree's files, committed
  (so the tests sync what is being tested, and may commit more), with a HOME of its own
  (the connection's socket folder; -F none: no ssh configuration of the machine is read);
- the **checkout on the cluster** is a temporary folder whose ``.venv`` was made beforehand
  (the first-use rule allows a .venv there): a venv that sees this test run's packages
  through a .pth file, so the real ``bash setup.sh`` that the first command runs there finds
  its requirements installed and only installs the project itself (pip's editable install;
  its build backend, setuptools, comes from PyPI as in any setup.sh run).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from tests.hpc.sshd_helpers import Sshd, running_sshd

REPO = Path(__file__).resolve().parents[3]
DEST = f"{pwd.getpwuid(os.getuid()).pw_name}@127.0.0.1"  # sshd logs in the account, whatever $USER says


def base_python() -> str:
    """The Python this test run's venv was made from (setup.sh's PYTHON there)."""
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


@pytest.fixture(scope="session")
def login_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    env = f"SetEnv LITELLM_LOCAL_MODEL_COST_MAP=True PYTHON={base_python()}\n"
    with running_sshd(tmp_path_factory.mktemp("login") / "sshd", env) as sshd:
        yield sshd


@pytest.fixture(scope="session")
def laptop_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean git checkout of this tree as it is now (committed and not)."""
    repo = tmp_path_factory.mktemp("laptop") / "hpc-art-launcher"
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    commit(repo, "the tree under test")
    return repo


def commit(repo: Path, message: str) -> str:
    git = ["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.org"]
    if not (repo / ".git").exists():
        subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", message], check=True)
    return head(repo)


def head(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def checkout_with_venv(folder: Path) -> Path:
    """A new checkout folder there holding only a .venv that sees this run's packages."""
    venv = folder / ".venv"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (site / "tests_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return folder


@dataclass
class Laptop:
    """Commands typed on the laptop: its checkout, its HOME, and the ssh options to the login node."""

    repo: Path
    home: Path
    ssh_opts: str
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPC_"))}
        return {**base, "HOME": str(self.home), "HPC_REMOTE_SSH_OPTS": self.ssh_opts,
                "PYTHONPATH": str(self.repo), **self.extra_env}

    def python(self, *args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=cwd or self.repo, env=self.env(), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def script(self, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(self.repo / "scripts" / name), *args], cwd=self.repo, env=self.env(),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def close(self) -> subprocess.CompletedProcess:
        return self.python("-m", "hpc.remote", "close", DEST)


def ssh_opts(sshd: Sshd, key: Path | None = None, known_hosts: str | None = None) -> str:
    """Options to the test's sshd; host keys unchecked unless a known_hosts file is given."""
    hosts = (f"-o StrictHostKeyChecking=yes -o UserKnownHostsFile={known_hosts}" if known_hosts
             else "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null")
    return f"-F none -p {sshd.port} -i {key or sshd.key} -o IdentitiesOnly=yes {hosts} -o LogLevel=ERROR"


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A laptop HOME with a short path: the socket path (home/.ssh/hpc-remote/<40 hex>.<17>) must
    fit a Unix socket's 108 bytes, which a pytest tmp_path does not."""
    home = Path(tempfile.mkdtemp(prefix="hr", dir="/tmp"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def laptop(laptop_repo: Path, login_node: Sshd, short_home: Path) -> Iterator[Laptop]:
    """A laptop with no connection open yet; its connection is closed at the end."""
    machine = Laptop(laptop_repo, short_home, ssh_opts(login_node))
    yield machine
    machine.close()
