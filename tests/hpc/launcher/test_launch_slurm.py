"""The launcher against the project's real local Slurm (scripts/local_slurm.sh up)."""

import json
import re
import threading

import pytest

from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines
from tests.hpc.slurm_helpers import cancel, launch, wait_for_final_state

pytestmark = pytest.mark.slurm


def job_ids_in(text: str) -> list[str]:
    match = re.search(r"submitted job ([\d >-]+) on", text)
    assert match, text
    return match.group(1).split(" -> ")


def test_launch_submits_a_job_that_completes_with_ledger_and_logs(slurm, tmp_path):
    runs = tmp_path / "runs"
    result = launch("--cluster", "local", "--job_name", "it_echo", "--time_limit", "5", "--runs_dir", str(runs),
                    "--entrypoint", "tests.doubles.echo_workload", "--train_arg", "x=1", "--gpus_per_node", "0")
    assert result.returncode == 0, result.stderr
    (job_id,) = job_ids_in(result.stdout)
    run = RunDir(runs / "it_echo")
    out_log, err_log = run.log_paths(job_id)
    assert str(out_log) in result.stdout and str(err_log) in result.stdout

    info = wait_for_final_state(job_id)
    assert info["State"] == "COMPLETED", info
    assert json.loads((run.path / "echo.json").read_text())["argv"] == ["--config", "agent_008", "x=1"]
    assert "echo_workload: wrote" in out_log.read_text()

    (record,) = [r for r in ledger_lines(run) if r["event"] == "submit"]
    assert record["job_id"] == job_id and record["cluster"] == "local"
    assert record["log_out"] == str(out_log) and record["log_err"] == str(err_log)
    assert record["script"].startswith(str(run.scripts_dir)) and record["argv"][:2] == ["--cluster", "local"]
    assert record["git_commit"]


def test_gpus_per_node_1_job_gets_its_gres(slurm, tmp_path):
    runs = tmp_path / "runs"
    result = launch("--cluster", "local", "--job_name", "it_gpu", "--time_limit", "5", "--runs_dir", str(runs),
                    "--entrypoint", "tests.doubles.echo_workload", "--gpus_per_node", "1")
    assert result.returncode == 0, result.stderr
    (job_id,) = job_ids_in(result.stdout)
    info = wait_for_final_state(job_id)
    assert info["State"] == "COMPLETED", info
    assert "gres/gpu=1" in info["AllocTRES"]
    echoed = json.loads((runs / "it_gpu" / "echo.json").read_text())
    assert echoed["env"]["CUDA_VISIBLE_DEVICES"] not in (None, "")


def test_dry_run_shows_the_schedulers_test_only_answer_and_submits_nothing(slurm, tmp_path):
    runs = tmp_path / "runs"
    result = launch("--cluster", "local", "--job_name", "it_preview", "--time_limit", "5", "--runs_dir", str(runs),
                    "--dry_run")
    assert result.returncode == 0, result.stderr
    assert re.search(r"sbatch --test-only: ok: .*to start at", result.stdout), result.stdout
    assert not runs.exists()


def test_dry_run_reports_the_schedulers_refusal(slurm, tmp_path):
    result = launch("--cluster", "local", "--job_name", "it_refused", "--time_limit", "5",
                    "--runs_dir", str(tmp_path), "--partition", "no_such_partition", "--dry_run")
    assert result.returncode == 0
    assert "sbatch --test-only: REFUSED" in result.stdout


def test_two_launches_at_once_of_one_run_submit_one_job_and_refuse_the_other(slurm, tmp_path):
    runs = tmp_path / "runs"
    args = ("--cluster", "local", "--job_name", "it_twice", "--time_limit", "5", "--runs_dir", str(runs),
            "--entrypoint", "tests.doubles.echo_workload", "--gpus_per_node", "0", "--env", "ECHO_SLEEP=30")
    results = [None, None]

    def run(k):
        results[k] = launch(*args)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    submitted = [r for r in results if r.returncode == 0]
    refused = [r for r in results if r.returncode == 2]
    try:
        assert len(submitted) == 1 and len(refused) == 1, [(r.returncode, r.stdout, r.stderr) for r in results]
        assert "already has active job" in refused[0].stderr
        run_dir = RunDir(runs / "it_twice")
        assert len([r for r in ledger_lines(run_dir) if r["event"] == "submit"]) == 1
        assert len(list(run_dir.scripts_dir.iterdir())) == 1
    finally:
        cancel([job for r in submitted for job in job_ids_in(r.stdout)])
