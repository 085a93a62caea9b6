"""A run moved mid-training between two runs directories (two clusters as the launcher sees them:
each its own --runs_dir and ART_PATH), in the real local Slurm with the step double: it trains
steps 1-5 in A, is stopped, bundled and unbundled into B, refuses to launch in A again, and its
next launch in B trains steps 6-10, each step once, with the optimizer state it had at step 5."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc.run.checkpoints import latest_complete, list_checkpoints, step_dir
from hpc.run.ownership import model_dir_of
from hpc.run.rundir import RunDir
from tests.doubles.step_trainer import expected_optimizer, read_optimizer
from tests.doubles.step_trainer import read_steps as steps_log
from tests.hpc.slurm_helpers import cancel, launch
from tests.scripts.slurm_util import REPO, unique_prefix, wait_final

pytestmark = pytest.mark.slurm

# Ten steps of a second; before step 6 the double waits for a stop signal (once per run: the marker
# it leaves in the run directory travels with the bundle, so in B it trains on).
ARGS = ("--cluster", "local", "--time_limit", "3", "--config", "smoke", "--entrypoint", "tests.doubles.step_trainer",
        "--gpus_per_node", "0", "--cpus_per_task", "1", "--chain", "1", "--no_preflight",
        "--train_arg", "steps=10", "--train_arg", "step_seconds=1", "--train_arg", "hang_at=6")


def launch_in(name: str, runs: Path, art: Path) -> subprocess.CompletedProcess:
    return launch("--job_name", name, "--runs_dir", str(runs), "--env", f"ART_PATH={art}", *ARGS)


def job_of(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    match = re.search(r"submitted job (\d+)", result.stdout)
    assert match, result.stdout
    return match.group(1)


def hpc_run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpc.run", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def wait_for_steps(run: RunDir, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(steps_log(run)) < count or not (run.path / ".hang_at_6").exists():
        assert time.monotonic() < deadline, f"{count} steps not trained within {timeout}s: {steps_log(run)}"
        time.sleep(0.5)


def test_a_run_moved_at_step_5_continues_in_the_other_runs_directory_to_its_end_with_no_step_repeated(
        slurm, tmp_path: Path) -> None:
    name = unique_prefix("moved")
    runs_a, art_a, runs_b, art_b = (tmp_path / part for part in ("runs_a", "art_a", "runs_b", "art_b"))
    jobs: list[str] = []
    try:
        jobs.append(job_of(launch_in(name, runs_a, art_a)))
        source = RunDir(runs_a / name)
        wait_for_steps(source, 5)
        subprocess.run(["scancel", "--batch", "--signal=USR1", jobs[0]], check=True, timeout=30)  # a stop
        wait_final(jobs[:1], timeout=120)
        assert latest_complete(model_dir_of(source)).step == 5 and source.read_done() is None

        bundled = hpc_run("bundle", name, "--runs_dir", runs_a, "--out", tmp_path / "bundle", "--part_mib", "1")
        assert bundled.returncode == 0, bundled.stderr
        again = launch_in(name, runs_a, art_a)
        assert again.returncode == 2 and "moved to" in again.stderr and "hpc.run reclaim" in again.stderr
        unbundled = hpc_run("unbundle", tmp_path / "bundle", "--runs_dir", runs_b, "--cluster", "local",
                            "--env", f"ART_PATH={art_b}")
        assert unbundled.returncode == 0, unbundled.stderr

        jobs.append(job_of(launch_in(name, runs_b, art_b)))
        assert wait_final(jobs[1:], timeout=180)[jobs[1]]["State"] == "COMPLETED"
    finally:
        cancel(jobs)

    moved = RunDir(runs_b / name)
    trained = steps_log(moved)
    assert [s.step for s in trained] == list(range(1, 11)), "each step once, in order, across the move"
    assert {s.job for s in trained[:5]} == {jobs[0]} and {s.job for s in trained[5:]} == {jobs[1]}
    assert moved.read_done()["final_step"] == 10
    folder = model_dir_of(moved)
    assert folder is not None and folder.is_relative_to(art_b)  # the new cluster's ART_PATH
    assert read_optimizer(step_dir(folder, 5)) == read_optimizer(step_dir(model_dir_of(source), 5))
    assert read_optimizer(step_dir(folder, 10)) == expected_optimizer(10) != expected_optimizer(10, start=6)
    assert [c.step for c in list_checkpoints(model_dir_of(source))][-1] == 5  # nothing trained in A after the move
