"""Sweeps, pack jobs and a judge served in the job, end to end in the project's real local Slurm.

Its nodes have 2 fake GPUs each. A sweep of 4 runs of the step double
(tests.doubles.step_trainer) packs 2 runs per job with ``--pack 2``: two pack
jobs, each run on its own GPU. Half the runs crash every time (``crash=always``)
and sit in a pack with a healthy run, which must not notice: the crashing run is
given up after ``--max_failures`` jobs, the healthy one goes on across 1-minute
time limits, alone in its pack's later jobs (which then ask for one GPU), until
it is done with every step trained once. A relaunch leaves finished runs alone
and packs only the unfinished ones; ``scancelall.sh --sweep`` cancels them all.

A second run serves a judge in its job (``--judge_serve``, with tests/doubles/fake_vllm
as vLLM): the judge gets the job's second GPU, the workload the first and the
judge's address, and the judge stops with the job.

Both start when the module starts and take about 2 minutes together.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc.run.rundir import RunDir
from tests.doubles.fake_vllm import write_executable
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.step_trainer import read_steps
from tests.scripts.slurm_util import REPO, run_script, sacct_row
from trainer.serving.vllm_server import free_port

pytestmark = pytest.mark.slurm

STEPS = 25
SWEEP = ("--cluster", "local", "--job_name", "sw", "--time_limit", "1", "--sweep", "step_seconds=2,3",
         "--sweep", "crash=never,always", "--train_arg", f"steps={STEPS}", "--pack", "2",
         "--entrypoint", "tests.doubles.step_trainer", "--cpus_per_task", "1", "--continuation", "afterany",
         "--max_failures", "2")
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"}


def launch(runs_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpc.launch", "--runs_dir", str(runs_dir), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def job_ids(run: RunDir) -> list[str]:
    return list(dict.fromkeys(str(r["job_id"]) for r in ledger_lines(run)
                              if r["event"] in ("submit", "resubmit")))


def active(ids: list[str]) -> bool:
    if not ids:
        return False
    out = subprocess.run(["squeue", "-h", "-o", "%T", "-j", ",".join(ids)], capture_output=True, text=True,
                         timeout=30).stdout
    return bool(ACTIVE & set(out.split()))


def wait_settled(runs: list[RunDir], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(r.read_done() or r.read_failed() for r in runs) and not active(
                [j for r in runs for j in job_ids(r)]):
            return
        time.sleep(2)
    pytest.fail(f"the sweep did not settle within {timeout:.0f} s")


@pytest.fixture(scope="module")
def world(slurm, tmp_path_factory):
    """Launch the sweep and the judge run at once; the tests then read what happened."""
    runs_dir = tmp_path_factory.mktemp("sweep_runs")
    first = launch(runs_dir, *SWEEP)
    assert first.returncode == 0, first.stderr
    port = free_port()
    judge_run = launch(runs_dir, "--cluster", "local", "--job_name", "judged", "--time_limit", "2",
                       "--entrypoint", "tests.doubles.echo_workload", "--cpus_per_task", "1",
                       "--judge_serve", "fake-org/judge-7b", "--env", f"VLLM_BIN={write_executable(runs_dir / "vllm")}",
                       "--env", f"JUDGE_SERVE_PORT={port}", "--env", f"FAKE_VLLM_GPUS={runs_dir / 'judge_gpus'}",
                       "--env", "ECHO_PROBE_JUDGE=1", "--env", "ECHO_ENV_NAMES=JUDGE_API_BASE,JUDGE_MODEL")
    assert judge_run.returncode == 0, judge_run.stderr
    runs = {p.name: RunDir(p) for p in runs_dir.iterdir() if p.name.startswith("sw.")}
    wait_settled([*runs.values(), RunDir(runs_dir / "judged")])
    return {"runs_dir": runs_dir, "first": first, "runs": runs, "port": port}


def healthy(world) -> list[RunDir]:
    return [r for name, r in world["runs"].items() if "crash=never" in name]


def crashing(world) -> list[RunDir]:
    return [r for name, r in world["runs"].items() if "crash=always" in name]


def test_a_sweep_of_four_runs_is_two_pack_jobs_of_two(world):
    out = world["first"].stdout
    assert out.count("submitted pack job") == 2
    assert "sw.step_seconds=2.crash=never, sw.step_seconds=2.crash=always" in out
    assert sorted(world["runs"]) == ["sw.step_seconds=2.crash=always", "sw.step_seconds=2.crash=never",
                                     "sw.step_seconds=3.crash=always", "sw.step_seconds=3.crash=never"]


def gpus_seen(run: RunDir) -> dict[str, str]:
    """The GPUs the run's workload saw, by job id (the double prints CUDA_VISIBLE_DEVICES at start)."""
    seen = {}
    for log in sorted(run.logs_dir.glob("*.out")):
        job = log.stem.rsplit("-", 1)[1]
        for line in log.read_text().splitlines():
            if line.startswith("step_trainer: GPUs "):
                seen[job] = line.split("'")[1]
    return seen


def test_each_run_of_a_pack_sees_only_its_own_gpu(world):
    by_job: dict[str, list[str]] = {}
    for run in world["runs"].values():
        for job, gpus in gpus_seen(run).items():
            assert gpus in ("0", "1"), f"{run.name} saw {gpus!r} in job {job}"
            by_job.setdefault(job, []).append(gpus)
    shared = [gpus for gpus in by_job.values() if len(gpus) == 2]
    assert len(shared) >= 2 and all(sorted(gpus) == ["0", "1"] for gpus in shared)


def test_healthy_runs_finish_across_time_limits_beside_a_crashing_neighbour(world):
    for run in healthy(world):
        assert run.read_done()["final_step"] == STEPS
        assert sorted(s.step for s in read_steps(run)) == list(range(1, STEPS + 1)), run.name  # each step once
        assert len([r for r in ledger_lines(run) if r["event"] == "job_start"]) >= 2, run.name
    for run in crashing(world):
        failed = run.read_failed()
        assert failed and "--max_failures 2" in failed["reason"], run.name
        assert len([r for r in ledger_lines(run) if r["event"] == "job_end"]) == 2


def test_a_pack_job_holding_one_unfinished_run_asks_for_one_gpu(world):
    alone = []
    for run in healthy(world):
        neighbours = {job for other in crashing(world) for job in job_ids(other)}
        alone += [job for job in job_ids(run)[1:] if job not in neighbours]
    assert alone, "the healthy runs never ran without their neighbour"
    assert all("gres/gpu=1" in sacct_row(job)["AllocTRES"] for job in alone)


def test_status_shows_a_sweeps_runs_together_with_their_state(world):
    shown = run_script("status.sh", "--run", "sw", "--runs_dir", str(world["runs_dir"]))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    header = next(k for k, line in enumerate(lines) if line.startswith("sweep sw: 4 runs"))
    assert "2 finished" in lines[header] and "2 failed" in lines[header]
    rows = lines[header + 1:header + 5]
    assert sorted(row.split()[0] for row in rows) == sorted(world["runs"])
    assert all(row.startswith("  sw.") for row in rows)
    assert sum(f"{STEPS}/{STEPS}" in row and "finished" in row for row in rows) == 2
    assert "judged" not in shown.stdout  # --run names the sweep: only its runs


def test_a_relaunch_leaves_finished_runs_alone_and_a_sweep_cancel_stops_the_rest(world):
    finished = {r.name: len(ledger_lines(r)) for r in healthy(world)}
    again = launch(world["runs_dir"], *SWEEP)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("submitted pack job") == 1
    assert "sw.step_seconds=2.crash=always, sw.step_seconds=3.crash=always" in again.stdout
    cancel = run_script("scancelall.sh", "--sweep", "sw", "-y")
    assert cancel.returncode == 0 and "cancelled 1 job(s)" in cancel.stdout, cancel.stdout + cancel.stderr
    deadline = time.monotonic() + 60
    while active([j for r in world["runs"].values() for j in job_ids(r)]) and time.monotonic() < deadline:
        time.sleep(1)
    assert not active([j for r in world["runs"].values() for j in job_ids(r)])
    assert {r.name: len(ledger_lines(r)) for r in healthy(world)} == finished


def test_a_served_judge_has_its_own_gpu_answers_the_workload_and_stops_with_the_job(world):
    run = RunDir(world["runs_dir"] / "judged")
    echo = json.loads((run.path / "echo.json").read_text())
    assert echo["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert (world["runs_dir"] / "judge_gpus").read_text() == "1"
    assert echo["env"]["JUDGE_API_BASE"] == f"http://127.0.0.1:{world['port']}/v1"
    assert echo["env"]["JUDGE_MODEL"] == "fake-org/judge-7b" and echo["judge_models"] == ["fake-org/judge-7b"]
    assert run.read_done() is not None
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", world["port"])) != 0  # nothing listens any more

