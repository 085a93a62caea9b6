"""hpc/job/tied.py: a workload started tied to its job's shell dies with it (a batch script killed
outright must not leave its trainer training beside the run's next job)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_the_command_runs_with_its_own_pid_and_dies_when_its_shell_is_killed(tmp_path):
    pid_file = tmp_path / "pid"
    shell = subprocess.Popen(["bash", "-c", f'{sys.executable} -S -m hpc.job.tied "$$" bash -c \'echo $$ > {pid_file}; '
                                            f'exec sleep 60\' & wait'], cwd=REPO)
    try:
        deadline = time.monotonic() + 10
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline, "the tied command did not start"
            time.sleep(0.05)
        workload = int(pid_file.read_text())
        assert alive(workload) and "sleep" in Path(f"/proc/{workload}/cmdline").read_text()
        os.kill(shell.pid, signal.SIGKILL)  # the batch shell killed outright
        deadline = time.monotonic() + 5
        while alive(workload):
            assert time.monotonic() < deadline, "the tied command outlived its shell"
            time.sleep(0.05)
    finally:
        shell.kill()
        shell.wait()


def test_a_shell_already_gone_starts_nothing():
    result = subprocess.run([sys.executable, "-S", "-m", "hpc.job.tied", "1", "echo", "started"], cwd=REPO,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "started" not in result.stdout and "is gone" in result.stderr
