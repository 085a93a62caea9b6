"""Stop at a step boundary, end to end in the project's real local Slurm.

The real launcher submits the real job template with the step double
(tests.doubles.step_trainer) as the workload, in 1-minute jobs with --signal_grace
10: Slurm may send USR1 from 40 s before the limit (grace + its 30 s tick), so
the stop-at-boundary rule (hpc/job/deadline.py, the trainer's defaults) lets a job
start steps only while the longest recent step x 1.2 ends in the first ~20 s.
Steps take 3-6 s (a rollout phase a signal would abandon, then training and the
save), so each job trains a few steps, stops at a step boundary without any
signal, and its afterany follower continues the run at once. About 1.5 minutes.

Also: the job's end as the in-job code reads it from Slurm (in UTC whatever the
caller's zone, and again after `scontrol update TimeLimit=`).
"""

from __future__ import annotations

import subprocess
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from hpc.job.deadline import JobEnd, query_slurm_end
from hpc.run.rundir import RunDir
from hpc.slurm.times import parse_time
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.step_trainer import read_steps
from tests.hpc.slurm_helpers import launch
from tests.scripts.slurm_util import cancel, sacct_row, sbatch, unique_prefix, wait_final, wait_running

pytestmark = pytest.mark.slurm

STEPS, LIMIT, GRACE, TICK = 10, 60, 10, 30
SHORTEST, LONGEST, FACTOR = 3.0, 6.0, 1.2  # step_seconds=3-6; the rule's default safety factor
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"}


def job_ids(run: RunDir) -> list[str]:
    return list(dict.fromkeys(str(r["job_id"]) for r in ledger_lines(run) if r["event"] in ("submit", "resubmit")))


def settled(run: RunDir) -> bool:
    if not (run.done_file.exists() or run.failed_file.exists()):
        return False
    states = subprocess.run(["squeue", "-h", "-o", "%T", "-j", ",".join(job_ids(run))], capture_output=True,
                            text=True, timeout=30).stdout.split()
    return not ACTIVE & set(states)


def wait_settled(run: RunDir, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not settled(run):
        if time.monotonic() > deadline:
            logs = "".join(p.read_text(errors="replace") for p in sorted(run.logs_dir.glob("*")))
            raise AssertionError(f"run {run.name} did not finish in {timeout:.0f}s\n{run.ledger.read_text()}\n{logs[-4000:]}")
        time.sleep(0.5)


def started_at(job_id: str) -> float:
    """The job's start as accounting has it (sacct prints this process's local time)."""
    return datetime.fromisoformat(sacct_row(job_id, "JobID,Start")["Start"]).timestamp()


@pytest.fixture
def boundary_run(slurm, tmp_path: Path):
    runs_dir = tmp_path / "runs"
    run = RunDir(runs_dir / "boundary")
    result = launch("--cluster", "local", "--job_name", run.name, "--runs_dir", str(runs_dir),
                    "--env", f"ART_PATH={run.path / 'art'}", "--time_limit", "1", "--signal_grace", str(GRACE),
                    "--gpus_per_node", "0", "--cpus_per_task", "1", "--entrypoint", "tests.doubles.step_trainer",
                    "--continuation", "afterany", "--train_arg", f"steps={STEPS}",
                    "--train_arg", f"step_seconds={SHORTEST:g}-{LONGEST:g}", "--train_arg", "rollout_share=0.8",
                    "--train_arg", "stop_at_boundary=true")
    assert result.returncode == 0, result.stderr
    try:
        wait_settled(run, 240)
        yield run
    finally:
        cancel(job_ids(run))


def test_no_step_starts_that_could_not_end_before_the_stop_signal_and_the_run_continues_at_once(
    boundary_run: RunDir,
) -> None:
    run = boundary_run
    steps = read_steps(run)
    assert [s.step for s in steps] == list(range(1, STEPS + 1)), "each step trained once: none lost or repeated"
    jobs = list(dict.fromkeys(s.job for s in steps))
    assert len(jobs) >= 2, jobs

    stops = run.read_stops()
    assert [s["reason"] for s in stops] == ["boundary"] * (len(jobs) - 1) + ["finished"], stops
    assert all(s["lost_rollout_seconds"] == 0 for s in stops), "no rollout abandoned"
    for stop in stops[:-1]:
        assert stop["predicted_step_seconds"] > stop["seconds_left"], stop  # stopped because the next one did not fit
    out = "".join(p.read_text(errors="replace") for p in sorted(run.logs_dir.glob("*.out")))
    assert "[job] SIGUSR1" not in out and "got SIGUSR1" not in out, "no job was ever told to stop"

    # Every step ended before its job's stop signal could come (the signal's earliest time,
    # allowing for a step longer than predicted: at most LONGEST - FACTOR x SHORTEST seconds).
    overrun = LONGEST - FACTOR * SHORTEST
    wait_final(jobs, 60)  # accounting has every job
    starts = {job: started_at(job) for job in jobs}
    for step in steps:
        assert step.end <= starts[step.job] + LIMIT - GRACE - TICK + overrun, (step, starts[step.job])

    # Each job continued the run at once: its afterany follower starts from the step it stopped at.
    ends = [e for e in ledger_lines(run) if e["event"] == "job_end"]
    assert [e["outcome"] for e in ends] == ["stopped_for_time"] * (len(jobs) - 1) + ["finished"]
    assert [e["step"] for e in ends[:-1]] == [s["step"] for s in stops[:-1]]
    assert [str(r["after"]) for r in ledger_lines(run) if r["event"] == "resubmit"] == jobs[:-1]


def test_the_jobs_end_is_read_from_slurm_in_utc_and_a_longer_time_limit_is_seen(
    slurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = sbatch("--time=2", "--cpus-per-task=1", "-J", unique_prefix("end"), "-o", "/dev/null", "--wrap", "sleep 300")
    try:
        wait_running([job], 60)
        monkeypatch.setenv("TZ", "Europe/Berlin")  # the caller's zone does not matter
        berlin = subprocess.run(["squeue", "-h", "-j", job, "-o", "%S %e"], capture_output=True, text=True,
                                timeout=30).stdout.split()
        start, end = (parse_time(t, ZoneInfo("Europe/Berlin")).timestamp() for t in berlin)  # type: ignore[union-attr]
        assert end - start == 120
        clock = [0.0]
        job_end = JobEnd({"SLURM_JOB_ID": job}, clock=lambda: clock[0])
        assert query_slurm_end(job) == job_end.get() == end

        subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=5"], check=True, timeout=30)
        assert job_end.get() == end, "read again only once the value is 30 s old"
        clock[0] = 30.0
        assert job_end.get() == end + 180
    finally:
        cancel([job])
        wait_final([job], 60)
