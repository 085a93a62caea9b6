"""Old module paths (what users type, what job scripts submitted before the move run) reach the moved code."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FORWARDED = {'hpc.accounting': 'hpc.run.accounting', 'hpc.continuation': 'hpc.job.continuation', 'hpc.launch': 'hpc.launcher.launch', 'hpc.pack': 'hpc.job.pack', 'hpc.ray_cluster': 'hpc.job.ray_cluster', 'hpc.report': 'hpc.run.report', 'hpc.tied': 'hpc.job.tied', 'hpc.watch': 'hpc.job.watch', 'trainer.ask': 'trainer.serving.ask', 'trainer.data': 'trainer.staging.data', 'trainer.eval': 'trainer.evaluation.eval', 'trainer.preflight': 'trainer.training.preflight', 'trainer.serve': 'trainer.serving.serve', 'trainer.train': 'trainer.training.train', 'trainer.vllm_server': 'trainer.serving.vllm_server', 'trainer.warmup': 'trainer.staging.warmup'}
IN_JOB = ['hpc.continuation', 'hpc.pack', 'hpc.ray_cluster', 'hpc.watch', 'trainer.vllm_server']


@pytest.mark.parametrize("old", sorted(FORWARDED))
def test_an_old_module_path_imports_the_moved_module(old: str) -> None:
    assert importlib.import_module(old) is importlib.import_module(FORWARDED[old])


@pytest.mark.parametrize("old", sorted(IN_JOB))
def test_a_job_script_submitted_before_the_move_still_runs_its_hooks(old: str) -> None:
    done = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_a_job_script_submitted_before_the_move_still_ties_its_workload() -> None:
    """Job scripts run ``python -S -m hpc.tied SHELL_PID COMMAND`` (no --help): it runs COMMAND."""
    command = [sys.executable, "-S", "-m", "hpc.tied", str(os.getpid()), sys.executable, "-S", "-c", "print('tied')"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "tied\n"
