"""A node lost near a job's time limit, on the project's real 2-node Slurm: the run goes on.

The job's node is lost (its slurmd and every process of the job killed:
tests/doubles/slurm_faults.py) while the job trains. Its time limit comes before
Slurm declares the node down (SlurmdTimeout: 60 s in scripts/local_slurm.sh), so
the job ends TIMEOUT and is not requeued, and its end hook never runs. The
successor its begin hook queued (hpc/job/successor.py) starts once Slurm lets the job go, records it with the state
accounting gives it, and resumes on the other node from the last complete checkpoint.

Timing: 40 s steps (one in flight when the node goes, ~30 s into a 1-minute job,
so the job's own USR1 cannot stop it first); Slurm ends it TIMEOUT 60-90 s after
its start and declares the node down 60-80 s after the kill; the successor then
trains the one step. About 2.5 minutes; the node comes back at the end.
"""

from __future__ import annotations

import subprocess
import time

import pytest

from hpc.run.rundir import RunDir
from tests.doubles import slurm_faults
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.step_trainer import read_steps
from tests.hpc.job.test_resubmission_slurm import ACTIVE, events, launch, queue_states, wait_until

pytestmark = pytest.mark.slurm
IN_FLIGHT = 33  # seconds into the 40 s step when the node goes (the job is ~35 s old)


def run_ids(run: RunDir) -> list[str]:
    return list(dict.fromkeys(str(r["job_id"]) for r in ledger_lines(run) if r.get("job_id")))


@pytest.fixture
def lost_node_run(slurm, tmp_path):
    """The run, its first job, and the node that job lost; every node back afterwards."""
    run = RunDir(tmp_path / "runs" / "lost_node")
    result = launch("--job_name", run.name, "--runs_dir", str(run.path.parent), "--env", f"ART_PATH={run.path / 'art'}",
                    "--env", "HPC_STOP_TIMEOUT=none", "--cluster", "local", "--time_limit", "1", "--signal_grace", "10",
                    "--gpus_per_node", "0", "--cpus_per_task", "1", "--entrypoint", "tests.doubles.step_trainer",
                    "--continuation", "afterany", "--train_arg", "steps=1", "--train_arg", "step_seconds=40")
    assert result.returncode == 0, result.stderr
    (job,) = [r["job_id"] for r in events(run, "submit")]
    try:
        wait_until(lambda: events(run, "successor"), 90, "the job to start and queue its successor")
        wait_until(lambda: (run.path / "trainer.pid").exists(), 60, "the step to be in flight")
        time.sleep(IN_FLIGHT)  # late in the job, the step still in flight: the time limit beats the node check
        node = slurm_faults.lose_node(job)
        yield run, job, node
    finally:
        subprocess.run(["scancel", *run_ids(run)], capture_output=True, timeout=30)
        slurm_faults.restore_nodes(2)


def test_a_node_lost_when_the_time_limit_comes_first_is_continued_by_the_successor(lost_node_run):
    run, job, node = lost_node_run
    wait_until(lambda: run.done_file.exists(), 240, "the run to finish on the other node")
    wait_until(lambda: not ACTIVE & set(queue_states(run_ids(run)).values()), 60, "the run's jobs to leave the queue")
    lost, finished = events(run, "job_end")
    assert (lost["job_id"], lost["slurm_state"], lost["outcome"]) == (job, "TIMEOUT", "failed"), lost
    (successor,) = [r["job_id"] for r in events(run, "successor") if r["after"] == job]
    assert [(r["job_id"], r["after"], r["by"]) for r in events(run, "resubmit")] == [(successor, job, "successor")]
    assert (finished["job_id"], finished["outcome"]) == (successor, "finished")
    assert [(s.step, s.job) for s in read_steps(run)] == [(1, successor)]  # the step in flight, trained once
    ran_on = subprocess.run(["sacct", "-X", "-n", "-P", "-j", successor, "-o", "NodeList"], capture_output=True,
                            text=True, timeout=30).stdout.split()
    assert ran_on and node not in ran_on and len(events(run, "done")) == 1
