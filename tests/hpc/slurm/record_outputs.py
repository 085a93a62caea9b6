"""Record what a real Slurm prints for the commands of hpc/slurm/calls.py, as test fixtures.

    python -m tests.hpc.slurm.record_outputs tests/fixtures/slurm/22.05.8

Submits a handful of short jobs on the Slurm at hand (the local one: scripts/local_slurm.sh up),
each named with one fresh prefix, and brings them into the states the parsers must read:
completed, failed (exit 3), cancelled while running, cancelled before it started, requeued
and run again, an array of two tasks, one with GPUs, one whose name holds a space, a '|', a
quote and a newline and whose logs are in a folder with a space, one timed out, and one
pending until a later start. Then it runs each command exactly as calls.py builds it (its
argv functions; the sacct view of ended jobs limited with -j to these jobs) with calls.py's
environment, and writes stdout (and stderr where it is the answer) to one file per command,
plus ``jobs.json``: which job id plays which part, and the Slurm version. The tests in
tests/hpc/slurm/ read these files; nothing here is edited by hand. Only the jobs it
submitted are cancelled. About three minutes (the timed-out job waits for its limit).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from hpc.slurm import calls
from hpc.slurm.states import QUEUED, JobState

ENDED_STATES = "COMPLETED,FAILED,CANCELLED,TIMEOUT,NODE_FAIL,OUT_OF_MEMORY,PREEMPTED"
ODD_NAME = "odd name|'q'\nsecond line"


def sbatch(*args: str) -> str:
    result = calls.run(["sbatch", "--parsable", *args], 60)
    if result.returncode != 0:
        raise SystemExit(f"sbatch {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip().split(";")[0]


def wait_for(what: str, check, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(1)


def state_of(job_id: str) -> JobState | None:
    return calls.queue_states([job_id]).get(job_id)


def accounted(job_ids: list[str]) -> bool:
    """Every job (an array: each of its tasks) has its final state in accounting."""
    rows = {r.job_id.partition("_")[0]: r for r in calls.job_runs(job_ids)}  # the latest run and task
    return all(j in rows and rows[j].end is not None and rows[j].state not in QUEUED for j in job_ids)


def submit_jobs(prefix: str, folder: Path) -> dict[str, str]:
    """Submit every job and bring it to its state; their ids by part."""
    logs = folder / "logs with space"
    logs.mkdir()
    out = ["-o", str(logs / "%x-%j.out"), "-e", str(logs / "%x-%j.err")]
    jobs = {"completed": sbatch("-J", f"{prefix}_ok", "--time=2", *out, "--wrap", "sleep 2"),
            "failed": sbatch("-J", f"{prefix}_fail", "--time=2", *out, "--wrap", "echo boom >&2; exit 3"),
            "gpus": sbatch("-J", f"{prefix}_gpu", "--time=2", "--gres=gpu:2", *out, "--wrap", "sleep 2"),
            "odd_name": sbatch("-J", ODD_NAME, "--time=2", *out, "--wrap", "sleep 40"),
            "running_cancelled": sbatch("-J", f"{prefix}_cancel", "--time=2", *out, "--wrap", "sleep 60"),
            "requeued": sbatch("-J", f"{prefix}_requeue", "--time=2", "--requeue", *out, "--wrap", "sleep 8"),
            "array": sbatch("-J", f"{prefix}_array", "--time=2", "--array=0-1", *out, "--wrap", "sleep 2"),
            "timeout": sbatch("-J", f"{prefix}_timeout", "--time=1", *out, "--wrap", "sleep 300"),
            "later": sbatch("-J", f"{prefix}_later", "--time=2", "--begin=now+2hours", *out, "--wrap", "true")}
    jobs["pending_cancelled"] = sbatch("-J", f"{prefix}_never", "--time=2", f"--dependency=afterok:{jobs['later']}",
                                       *out, "--wrap", "true")
    for part in ("running_cancelled", "requeued", "odd_name"):
        wait_for(f"job {jobs[part]} to run", lambda j=jobs[part]: state_of(j) == JobState.RUNNING)
    return jobs


def record(out_dir: Path) -> None:
    prefix = f"rec{uuid.uuid4().hex[:6]}"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = submit_jobs(prefix, Path(tmp))
        try:
            record_outputs(jobs, out_dir, Path(tmp))
        finally:
            subprocess.run(["scancel", *jobs.values()], capture_output=True, timeout=60)


def write(out_dir: Path, name: str, text: str) -> None:
    (out_dir / name).write_text(text)


def record_outputs(jobs: dict[str, str], out_dir: Path, folder: Path) -> None:
    ids = list(jobs.values())
    write(out_dir, "squeue_running.txt", calls.run(calls.queue_argv(calls.slurm_ids(ids)), 60).stdout)
    write(out_dir, "scontrol_show_job_running.txt", calls.run(calls.show_job_argv(jobs["odd_name"]), 60).stdout)
    write(out_dir, "scontrol_show_job_pending.txt", calls.run(calls.show_job_argv(jobs["later"]), 60).stdout)
    write(out_dir, "scontrol_show_job_array.txt", calls.run(calls.show_job_argv(jobs["array"]), 60).stdout)
    write(out_dir, "scontrol_show_job_unknown.stderr", calls.run(calls.show_job_argv("4000000"), 60).stderr)
    write(out_dir, "squeue_one_job_gone.stderr", calls.run(calls.queue_argv(["4000000"]), 60).stderr)
    calls.cancel([jobs["running_cancelled"], jobs["pending_cancelled"]])
    calls.run(["scontrol", "requeue", jobs["requeued"]], 60)
    script = folder / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --time=1\ntrue\n")
    write(out_dir, "sbatch_test_only_ok.stderr", calls.run(["sbatch", "--test-only"], 60, stdin=script.read_text()).stderr)
    write(out_dir, "sbatch_test_only_refused.stderr",
          calls.run(["sbatch", "--test-only", "--gres=gpu:9"], 60, stdin=script.read_text()).stderr)
    write(out_dir, "sbatch_parsable.txt", calls.run(calls.sbatch_command(script, None, ("-J", "rec_parsable", "-o", "/dev/null")), 60).stdout)
    ended = [jobs[p] for p in jobs if p != "later"]
    wait_for("the jobs to end in accounting", lambda: accounted(ended), timeout=300)
    write(out_dir, "sacct_runs.txt", calls.run(calls.runs_argv(calls.slurm_ids(ids)), 60).stdout)
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 3600))
    argv = calls.ended_argv(calls.run(["id", "-un"], 10).stdout.strip(), ENDED_STATES, start)
    write(out_dir, "sacct_ended.txt", calls.run([*argv, "-j", ",".join(calls.slurm_ids(ended))], 60).stdout)
    version = calls.run(["sinfo", "--version"], 10).stdout.strip()
    (out_dir / "jobs.json").write_text(json.dumps({"version": version, "odd_name": ODD_NAME, "jobs": jobs}, indent=2)
                                       + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    record(Path(sys.argv[1]))
