"""A neighbour's attack on a run's folder, on the real local Slurm: a run launched to start later, its folder
made writable by others and its secrets.env replaced with shell code before the job starts. The job
checks its folder first (hpc/job/trusted_run.py): the code never runs, the job fails in one line in its
.err log, and nothing is written into the run or submitted after it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpc.run import ledger
from hpc.run.rundir import RunDir
from tests.hpc.slurm_helpers import launch, wait_for_final_state

pytestmark = pytest.mark.slurm


def test_a_job_whose_folder_became_writable_by_others_runs_none_of_the_code_planted_there(slurm, tmp_path):
    runs, marker = tmp_path / "runs", tmp_path / "PWNED"
    result = launch("--cluster", "local", "--job_name", "nb2", "--time_limit", "5", "--runs_dir", str(runs),
                    "--entrypoint", "tests.doubles.step_trainer", "--gpus_per_node", "0", "--no_preflight",
                    "--env", "WANDB_API_KEY=sk-real-key", "--sbatch_arg=--begin=now+10")
    assert result.returncode == 0, result.stderr
    job_id = re.search(r"submitted job (\d+)", result.stdout).group(1)
    run = RunDir(runs / "nb2")
    run.path.chmod(0o777)  # a neighbour's doing, or a careless chmod: either way someone else could write
    run.secrets_file.write_text(f"touch {marker}\n")
    state = wait_for_final_state(job_id, timeout=180)
    assert state["State"] == "FAILED" and state["ExitCode"].startswith("1:"), state
    assert not marker.exists()
    err = (run.logs_dir / f"nb2-{job_id}.err").read_text()
    [line] = [line for line in err.splitlines() if line.startswith("[job] error")]
    assert f"{run.path} is writable by group and others (mode 0777)" in line and "the job stops" in line
    assert [type(record).__name__ for record in ledger.read(run)] == ["Submit"]  # no job_start, no successor
    assert not Path(run.path / "progress.json").exists()
