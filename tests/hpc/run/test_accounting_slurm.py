"""Accounting, health and the webhook against the project's real local Slurm.

Three runs of the step-double trainer are launched together by the real launcher,
each with the webhook (a local receiver) in its .env-style --env:

- ``acct``: 9 steps of 3 s on 1 GPU with a 2 s start-up, requeued twice: after its
  3rd and 6th steps a USR1 (`scancel --batch --signal=USR1`) comes during the next
  step's rollouts, which are abandoned; Slurm holds each requeued run ~30 s. Three
  runs of one job id: hpc.accounting must agree with sacct (GPU-hours = ElapsedRaw x
  AllocTRES gpus, summed over every run), place every step in its own job run and
  count each requeued run's wait from its requeue. Its report is docs/evaluation.md's
  picture (UPDATE_README=1 refreshes docs/images/report-accounting.png).
- ``stall``: hangs before its 3rd step (``hang_at=3``): status.sh flags it STALLED and
  its in-job watcher tells the webhook, once; then it is cancelled.
- ``fail``: fails at once with ``--max_failures 1``: the end hook tells the webhook.

About 2 minutes (the two requeue holds); 2 fake GPUs and 3 CPUs at once.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from hpc.run import accounting, accounting_text, ledger
from hpc.run.accounting_records import JobRun
from hpc.run.report import DPI, FIG_SIZE
from hpc.run.report import main as report_main
from hpc.run.rundir import RunDir
from hpc.run.steps import Step, trained_steps
from hpc.slurm.output import tres_gpus
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.webhook_receiver import WebhookReceiver
from tests.hpc.slurm_helpers import cancel, launch
from tests.scripts.slurm_util import run_script, unique_prefix

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[3]
IMAGE = REPO / "docs" / "images" / "report-accounting.png"
TOKEN = "w3bh00k-T0KEN"
COMMON = ("--cluster", "local", "--time_limit", "3", "--cpus_per_task", "1", "--signal_grace", "30",
          "--entrypoint", "tests.doubles.step_trainer", "--continuation", "requeue")
FINAL = ("COMPLETED", "FAILED", "CANCELLED")
STALL_ENV = {"HPC_STALL_MIN": "2", "HPC_STALL_STARTUP": "20"}  # status.sh and the watcher: steps of 1 s


def wait_until(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.5) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def job_ids(run: RunDir) -> list[str]:
    """The jobs that ran the run (a successor cancelled while it waited never did)."""
    return list(dict.fromkeys(str(r["job_id"]) for r in ledger_lines(run) if r["event"] == "job_start"))


def sacct_rows(ids: list[str]) -> list[tuple[str, int, str, str]]:
    """JobID, ElapsedRaw, AllocTRES and State of every run of the jobs, as sacct says."""
    out = subprocess.run(["sacct", "-X", "-D", "-n", "-P", "-j", ",".join(ids), "-o",
                          "JobID,ElapsedRaw,AllocTRES,State"], capture_output=True, text=True, timeout=30).stdout
    return [(j, int(e), tres, state.split()[0]) for j, e, tres, state in
            (line.split("|") for line in out.splitlines() if line.count("|") == 3)]


def settled(run: RunDir) -> bool:
    """The run is over and accounting has closed every run of its jobs."""
    over = run.done_file.exists() or run.failed_file.exists() or any(
        r["event"] == "cancelled" for r in ledger_lines(run))
    states = [state for *_, state in sacct_rows(job_ids(run))] if over else []
    return bool(states) and states[-1] in FINAL and not {"RUNNING", "PENDING"} & set(states)


def stop_during_rollouts(run: RunDir, after_steps: int) -> None:
    """USR1 to the batch shell just after the run's ``after_steps``-th step: the next step's
    rollouts (the first 3 s of its 4 s) are under way and are abandoned."""
    wait_until(lambda: len(run.read_steps()) >= after_steps, 120, f"{after_steps} steps of {run.name}", every=0.1)
    time.sleep(1.5)  # the records say whole seconds: the abandoned rollouts then show
    (job,) = job_ids(run)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True, timeout=30)


@pytest.fixture(scope="module")
def runs(slurm, tmp_path_factory):
    """The three runs, launched together, followed until each is over."""
    runs_dir = tmp_path_factory.mktemp("runs")
    prefix = unique_prefix("acct")
    names = {k: f"{prefix}-{k}" for k in ("acct", "stall", "fail")}
    args = {"acct": ("--gpus_per_node", "1", "--train_arg", "steps=9", "--train_arg", "step_seconds=4",
                     "--train_arg", "rollout_share=0.75", "--train_arg", "startup_seconds=2"),
            "stall": ("--gpus_per_node", "1", "--train_arg", "steps=6", "--train_arg", "step_seconds=1",
                      "--train_arg", "hang_at=3", *(f"--env={k}={v}" for k, v in STALL_ENV.items()),
                      "--env", "HPC_WATCH_INTERVAL=1"),
            "fail": ("--gpus_per_node", "0", "--max_failures", "1", "--train_arg", "crash=always")}
    with WebhookReceiver() as hook:
        for key, name in names.items():
            result = launch("--job_name", name, "--runs_dir", str(runs_dir), *COMMON, *args[key],
                            "--env", f"ART_PATH={runs_dir / name / 'art'}",
                            "--env", f"HPC_WEBHOOK_URL={hook.url(f'/services/{TOKEN}')}")
            assert result.returncode == 0, result.stderr
        dirs = {key: RunDir(runs_dir / name) for key, name in names.items()}
        try:
            yield {"dirs": dirs, "hook": hook, "runs_dir": runs_dir}
        finally:
            cancel([job for run in dirs.values() for job in ledger.job_ids(ledger.read(run))])


@pytest.fixture(scope="module")
def finished(runs):
    """The acct run stopped twice during rollouts (in a thread) and finished; meanwhile
    the stall run flagged by status.sh and the webhook, then cancelled."""
    acct, stall, hook = runs["dirs"]["acct"], runs["dirs"]["stall"], runs["hook"]
    errors: list[BaseException] = []

    def stop_twice() -> None:
        try:
            stop_during_rollouts(acct, 3)
            stop_during_rollouts(acct, 6)
        except BaseException as err:  # noqa: BLE001 - re-raised below
            errors.append(err)

    stopper = threading.Thread(target=stop_twice, daemon=True)
    stopper.start()
    stall_seen = stalled_status(runs["runs_dir"], stall)
    wait_until(lambda: any(r.body["run"] == stall.name for r in hook.received), 60, "the watcher's notice")
    (job,) = job_ids(stall)
    subprocess.run(["scancel", job], check=True, timeout=30)
    stopper.join(300)
    if errors:
        raise errors[0]
    for run in runs["dirs"].values():
        wait_until(lambda run=run: settled(run), 240, f"run {run.name} to end")
    return {**runs, "stall_seen": stall_seen}


def stalled_status(runs_dir: Path, run: RunDir) -> str:
    """status.sh's row of the stalled run once it says STALLED."""
    def row() -> str:
        out = run_script("status.sh", "--runs_dir", str(runs_dir), "--run", run.name, env=STALL_ENV).stdout
        line = next((line for line in out.splitlines() if line.startswith(run.name + " ")), "")
        return line if "STALLED" in line else ""

    wait_until(lambda: len(run.read_steps()) >= 2, 90, "two steps of the stalling run")
    return wait_until(row, 60, "status.sh to flag the stall", every=1)  # type: ignore[return-value]


def test_gpu_hours_are_what_sacct_says_for_every_run_of_every_job(finished):
    run = finished["dirs"]["acct"]
    acc = accounting.account_run(run)
    rows = sacct_rows(job_ids(run))
    assert [state for *_, state in rows] == ["REQUEUED", "REQUEUED", "COMPLETED"]
    assert len(acc.jobs) == 3 and [j.attempt for j in acc.jobs] == [0, 1, 2]
    by_sacct = sum(elapsed * tres_gpus(tres) for _, elapsed, tres, _ in rows) / 3600
    assert acc.gpu_hours == pytest.approx(by_sacct) and by_sacct > 0
    assert acc.node_hours == pytest.approx(sum(elapsed for _, elapsed, _, _ in rows) / 3600)
    assert [j.gpus for j in acc.jobs] == [1, 1, 1]


def test_every_step_is_in_the_job_run_that_trained_it_and_the_time_adds_up(finished):
    run = finished["dirs"]["acct"]
    acc = accounting.account_run(run)
    assert [j.steps for j in acc.jobs] == [3, 3, 3] and acc.steps_done == 9 and acc.finished
    for job in acc.jobs:
        allocated = sum(s.seconds for s in job.segments if s.kind != "queued")
        assert allocated == pytest.approx(job.elapsed, abs=1)
        assert job.productive == pytest.approx(sum(s.seconds for s in run_steps(run, job)), abs=1.5)
        assert job.seconds("starting") >= 1.5  # the double's 2 s start-up (records round to seconds)
    first, second, third = acc.jobs
    assert (first.stop_reason, second.stop_reason, third.stop_reason) == ("signal", "signal", "finished")
    assert first.lost_rollout_seconds > 0 and second.lost_rollout_seconds > 0
    assert first.seconds("lost") > 0 and acc.lost_rollout_seconds > 0
    assert 0.2 < acc.goodput < 0.95


def run_steps(run: RunDir, job: JobRun) -> list[Step]:
    return [s for s in trained_steps(run) if job.start <= s.end <= job.end]


def test_a_requeued_runs_wait_counts_from_its_requeue_and_gaps_span_hold_and_start_up(finished):
    acc = accounting.account_run(finished["dirs"]["acct"])
    for before, after in zip(acc.jobs, acc.jobs[1:]):
        queued = after.seconds("queued")
        assert queued == pytest.approx((after.start - after.submit).total_seconds(), abs=1)
        assert (after.submit - before.end).total_seconds() < 5  # submitted again at its requeue
        assert queued >= 20  # the local Slurm holds a requeued job ~30 s
    assert len(acc.restart_gaps) == 2
    for gap, job in zip(acc.restart_gaps, acc.jobs[1:]):
        assert gap >= job.seconds("queued") + job.seconds("starting") - 1


def test_status_shows_the_gpu_hours_and_the_goodput_line_and_the_command_the_breakdown(finished):
    run = finished["dirs"]["acct"]
    acc = accounting.account_run(run)
    out = run_script("status.sh", "--runs_dir", str(finished["runs_dir"]), "--run", run.name).stdout
    row = re.split(r"\s{2,}", next(line for line in out.splitlines() if line.startswith(run.name + " ")))
    assert row[8] == accounting_text.hours(acc.gpu_hours) and row[-1] == "finished"
    assert f"  {accounting_text.summary_line(acc)}\n" in out
    command = subprocess.run([".venv/bin/python", "-m", "hpc.accounting", str(run.path)], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert command.returncode == 0, command.stderr
    assert command.stdout.count("\n" + job_ids(run)[0]) == 3  # one line per job run


def test_a_stalled_run_is_flagged_by_status_and_the_webhook_is_told_once(finished):
    stall = finished["dirs"]["stall"]
    assert re.search(r"\sRUNNING\s+2/6\s.*STALLED: no step for \d+s \(limit \d+s: 3x the usual step of 1s\)$",
                     finished["stall_seen"]), finished["stall_seen"]
    told = [r for r in finished["hook"].received if r.body["run"] == stall.name]
    assert [r.body["event"] for r in told] == ["stalled"]
    assert told[0].body["step"] == 2 and told[0].body["job_id"] == job_ids(stall)[0]


def test_the_webhook_is_told_that_a_run_is_done_or_failed_and_never_sees_its_url_in_a_file(finished):
    events = {(r.body["run"], r.body["event"]) for r in finished["hook"].received}
    dirs = finished["dirs"]
    assert {(dirs["acct"].name, "done"), (dirs["fail"].name, "failed")} <= events
    assert (dirs["stall"].name, "done") not in events and (dirs["stall"].name, "failed") not in events
    for run in dirs.values():
        leaks = [p for p in run.path.rglob("*") if p.is_file() and p.name != "secrets.env"
                 and TOKEN in p.read_text(errors="replace")]
        assert leaks == [], f"the webhook's token is in {leaks}"
        assert TOKEN in run.secrets_file.read_text() and run.secrets_file.stat().st_mode & 0o777 == 0o600


def test_the_report_draws_the_timeline_of_the_jobs(finished):
    run = finished["dirs"]["acct"]
    assert report_main([str(run.path)]) == 0
    picture = run.report_dir / "accounting.png"
    markdown = (run.report_dir / "report.md").read_text()
    assert "![where the GPU-hours went](accounting.png)" in markdown and "| goodput |" in markdown
    import matplotlib.image

    assert matplotlib.image.imread(picture).shape[:2] == (FIG_SIZE[1] * DPI, FIG_SIZE[0] * DPI)
    if os.environ.get("UPDATE_README") == "1":
        shutil.copy(picture, IMAGE)
