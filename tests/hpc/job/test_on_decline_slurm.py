"""The decline rule's rollback and stop, end to end in the real local Slurm: the launcher submits the
real job template with the step double as the workload, on the learning curve's recorded seed 1
(docs/results: best 98.0% at step 20, then the fall). The first job rolls back at step 52 (exit 75),
job control continues the run in its successor, which starts from the copy of step 20 at half the
learning rate and, its one rollback spent, stops the run at step 72: done.json says why, the ledger
has both decisions and `done`, and status.sh's row says the run finished declined."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from hpc.run import ledger
from hpc.run.checkpoints import ADAPTER_WEIGHTS, list_checkpoints, step_dir
from hpc.run.ledger import Decline, Done, JobEnd
from hpc.run.monitor import runs
from hpc.run.ownership import model_dir_of
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines
from tests.hpc.slurm_helpers import launch
from tests.scripts.slurm_util import cancel

pytestmark = pytest.mark.slurm

CURVE = (Path(__file__).resolve().parents[3] / "docs/results/learning_curve_runs/2026-11-27-2xH100-copy-lesson"
         / "seed1/validation.jsonl")
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"}


def job_ids(run: RunDir) -> list[str]:
    return list(dict.fromkeys(str(r["job_id"]) for r in ledger_lines(run)
                              if r["event"] in ("submit", "resubmit", "successor")))


def settled(run: RunDir) -> bool:
    if not (run.done_file.exists() or run.failed_file.exists()):
        return False
    states = subprocess.run(["squeue", "-h", "-o", "%T", "-j", ",".join(job_ids(run))], capture_output=True,
                            text=True, timeout=30).stdout.split()
    return not ACTIVE & set(states)


@pytest.fixture
def declined_run(slurm, tmp_path: Path):
    runs_dir = tmp_path / "runs"
    run = RunDir(runs_dir / "declining")
    args = ("steps=80", "step_seconds=0.05", "validate_every=4", f"curve={CURVE}", "learning_rate=1e-5",
            "on_decline=rollback", "max_rollbacks=1")
    result = launch("--cluster", "local", "--job_name", run.name, "--runs_dir", str(runs_dir),
                    "--env", f"ART_PATH={run.path / 'art'}", "--time_limit", "5", "--gpus_per_node", "0",
                    "--cpus_per_task", "1", "--entrypoint", "tests.doubles.step_trainer", "--continuation",
                    "afterany", *(f"--train_arg={arg}" for arg in args))
    assert result.returncode == 0, result.stderr
    try:
        deadline = time.monotonic() + 240
        while not settled(run):
            assert time.monotonic() < deadline, f"not settled:\n{run.ledger.read_text()}"
            time.sleep(0.5)
        yield run
    finally:
        cancel(job_ids(run))


def test_a_rollback_continues_in_the_next_job_from_the_best_and_a_second_decline_stops_the_run(
        declined_run: RunDir) -> None:
    run = declined_run
    records = ledger.read(run)
    rollback, stop = ledger.of_kind(records, Decline)
    assert (rollback.action, rollback.step, rollback.best_step, rollback.to_step, rollback.lr_scale) == (
        "rollback", 52, 20, 53, 0.5)
    assert (stop.action, stop.step, stop.steps_left) == ("stop", 72, 8)
    assert [e.outcome for e in ledger.of_kind(records, JobEnd)] == ["stopped_for_time", "finished"]
    assert [d.step for d in ledger.of_kind(records, Done)] == [72]
    done = run.read_done()
    assert done is not None and done["reason"].startswith("declined: ") and done["best_step"] == 20

    model = model_dir_of(run)
    assert model is not None
    assert (step_dir(model, 53) / ADAPTER_WEIGHTS).read_bytes() == (step_dir(model, 20) / ADAPTER_WEIGHTS).read_bytes()
    assert [c.step for c in list_checkpoints(model)] == list(range(0, 73)), "no checkpoint deleted"
    jobs = {s["step"]: s["job_id"] for s in run.read_steps()}
    assert jobs[52] != jobs[54], "the next job trained on from the copy"
    assert runs.run_row(run, jobs[54], "COMPLETED", records)[-1].startswith("finished (declined: held-out accuracy")
