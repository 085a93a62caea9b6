"""Module paths kept apart from their code (what users type, what job scripts rendered by 0.1.0 run) reach it."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpc.forwarding import OLD_JOB_PATHS, REMOVED_IN

REPO = Path(__file__).resolve().parents[1]

# The commands users type (for good), and the old paths job scripts rendered by 0.1.0 call (until 0.3.0).
COMMANDS = {'hpc.accounting': 'hpc.run.accounting_cli', 'hpc.launch': 'hpc.launcher.launch', 'hpc.report': 'hpc.run.report',
            'trainer.ask': 'trainer.serving.ask', 'trainer.data': 'trainer.staging.data',
            'trainer.eval': 'trainer.evaluation.eval', 'trainer.preflight': 'trainer.training.preflight',
            'trainer.serve': 'trainer.serving.serve', 'trainer.train': 'trainer.training.train',
            'trainer.warmup': 'trainer.staging.warmup'}
FORWARDED = {**COMMANDS, **OLD_JOB_PATHS}
IN_JOB = ['hpc.continuation', 'hpc.pack', 'hpc.ray_cluster', 'hpc.watch', 'trainer.vllm_server']


@pytest.mark.parametrize("old", sorted(FORWARDED))
def test_an_old_module_path_imports_the_moved_module(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(FORWARDED[old])


@pytest.mark.parametrize("old", sorted(IN_JOB))
def test_a_job_script_rendered_by_0_1_0_still_runs_its_hooks(old: str) -> None:
    done = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_a_job_script_rendered_by_0_1_0_still_ties_its_workload() -> None:
    """Job scripts run ``python -S -m hpc.tied SHELL_PID COMMAND`` (no --help): it runs COMMAND."""
    command = [sys.executable, "-S", "-m", "hpc.tied", str(os.getpid()), sys.executable, "-S", "-c", "print('tied')"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "tied\n"


def test_every_forwarding_module_is_a_command_or_in_the_one_list_of_old_job_paths() -> None:
    forwarding = {f"{path.parent.name}.{path.stem}" for folder in ("hpc", "trainer")
                  for path in (REPO / folder).glob("*.py") if "hpc.forwarding import" in path.read_text()}
    assert forwarding == set(FORWARDED)
    assert set(IN_JOB) | {"hpc.tied"} == set(OLD_JOB_PATHS)


def test_the_old_job_paths_are_gone_by_the_release_that_removes_them() -> None:
    version = re.search(r'^version = "([0-9.]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    if tuple(map(int, version.split("."))) >= tuple(map(int, REMOVED_IN.split("."))):
        left = [old for old in OLD_JOB_PATHS if (REPO / (old.replace(".", "/") + ".py")).exists()]
        assert not left, f"release {version} removes {left} (hpc/forwarding.py's OLD_JOB_PATHS)"
