"""Resubmission with resume, end to end in the project's real local Slurm.

The real launcher submits the real job template with tests.doubles.step_trainer
as the workload (a "training step" every 2 s, a LoRA checkpoint per step in
ART's layout, every step logged to steps.log). One-minute jobs get SIGUSR1
before their limit, stop after the step in flight, and the run goes on in the
next job until all steps are trained: each step exactly once.

When the signal comes: Slurm checks time limits every 30 s and sends the
--signal once the job is within grace + 30 s of its end, so a job with a 60 s
limit gets it between 30 - grace and 60 - grace seconds after it starts. With
--signal_grace 10 a job trains 10 to 25 steps, so 55 steps take 3 to 6 jobs
(afterany, chain). A requeued job starts on Slurm's scheduling tick and gets
the signal on the time-limit tick about 28 s later (13-15 steps), the first
job at any time in its first 30 s, so 33 steps (at most 16 a job) take 3 jobs,
or 4 when the first one is told very early. Each requeue costs Slurm's hold of
AuthInfo cred_expire (120 s by default) plus up to a minute until the next
scheduling pass.

All scenarios are launched together when the module starts, each followed by
its own thread (some act mid-run: kill -9, scancel, a whole-job kill), so
the module takes as long as its slowest scenario, requeue (7-9 min with the
default hold; a smaller cred_expire shortens it). Each job uses 1 CPU and no GPU.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from hpc.run.rundir import RunDir
from tests.doubles import slurm_faults
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.step_trainer import TrainedStep as Step
from tests.doubles.step_trainer import read_steps as steps_log
from tests.scripts.slurm_util import wait_final

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[3]
COMMON = ("--cluster", "local", "--time_limit", "1", "--gpus_per_node", "0", "--cpus_per_task", "1",
          "--entrypoint", "tests.doubles.step_trainer")
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"}


# -- reading a run -------------------------------------------------------------------------


def events(run: RunDir, name: str) -> list[dict]:
    return [r for r in ledger_lines(run) if r["event"] == name]


def job_ids(run: RunDir) -> list[str]:
    ids = [str(r["job_id"]) for r in ledger_lines(run) if r["event"] in ("submit", "chain", "resubmit")]
    return list(dict.fromkeys(ids))


def queue_states(ids: list[str]) -> dict[str, str]:
    if not ids:
        return {}
    out = subprocess.run(["squeue", "-h", "-o", "%i %T", "-j", ",".join(ids)], capture_output=True, text=True,
                         timeout=30).stdout
    return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)


def sacct_rows(ids: list[str]) -> list[dict[str, str]]:
    """Every instance of the jobs (-D: a requeued job has one row per run)."""
    out = subprocess.run(["sacct", "-X", "-D", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,State,ExitCode,Start,End"],
                         capture_output=True, text=True, timeout=30).stdout
    keys = ("JobID", "State", "ExitCode", "Start", "End")
    return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]


def log_text(run: RunDir, suffix: str) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(run.logs_dir.glob(f"*{suffix}")))


# -- scenarios ------------------------------------------------------------------------------


@dataclass
class Scenario:
    """One run: launched at module start, followed to its end by a thread."""

    name: str
    args: tuple[str, ...]
    during: Callable[[Scenario], None] | None = None  # acts on the run while it goes
    timeout: float = 420
    run: RunDir | None = None
    launch_result: subprocess.CompletedProcess | None = None
    error: BaseException | None = None
    notes: dict = field(default_factory=dict)
    thread: threading.Thread | None = None

    def start(self, runs_dir: Path) -> None:
        self.run = RunDir(runs_dir / self.name)
        self.thread = threading.Thread(target=self._follow, name=self.name, daemon=True)
        self.thread.start()

    def launch(self, *extra: str) -> subprocess.CompletedProcess:
        """The real launcher on this scenario's run, as a user types it."""
        return launch("--job_name", self.name, "--runs_dir", str(self.run.path.parent),
                      "--env", f"ART_PATH={self.run.path / 'art'}", *COMMON, *self.args, *extra)

    def _follow(self) -> None:
        try:
            self.launch_result = self.launch()
            assert self.launch_result.returncode == 0, self.launch_result.stderr
            if self.during:
                self.during(self)
            wait_until(self.settled, self.timeout, f"run {self.name} to finish or fail")
        except BaseException as err:  # noqa: BLE001 - re-raised in the test that owns the scenario
            self.error = err

    def settled(self) -> bool:
        """Done or failed, and no job of the run still queued or running."""
        if not (self.run.done_file.exists() or self.run.failed_file.exists()):
            return False
        return not ACTIVE & set(queue_states(job_ids(self.run)).values())

    def result(self) -> RunDir:
        self.thread.join(self.timeout + 60)
        if self.error is not None:
            raise AssertionError(f"scenario {self.name}: {self.error}\n{diagnostics(self.run)}") from self.error
        return self.run


def launch(*args: str) -> subprocess.CompletedProcess:
    """The real launcher, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "hpc.launch", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def diagnostics(run: RunDir | None) -> str:
    if run is None or not run.path.exists():
        return "(no run directory)"
    ledger = run.ledger.read_text() if run.ledger.exists() else ""
    return f"--- ledger\n{ledger}--- .out\n{log_text(run, '.out')[-4000:]}--- .err\n{log_text(run, '.err')[-3000:]}"


def saved_steps(run: RunDir) -> int:
    """The last step whose checkpoint is saved (progress.json comes after the save)."""
    return (run.read_progress() or {}).get("step", 0)


def kill_mid_save(s: Scenario) -> None:
    """kill -9 the trainer while it sleeps half-way through writing a checkpoint."""
    saving, pid_file = s.run.path / "saving", s.run.path / "trainer.pid"
    wait_until(saving.exists, 120, "the trainer to start saving the checkpoint")
    s.notes["killed_step"] = int(saving.read_text())
    os.kill(int(pid_file.read_text()), signal.SIGKILL)


def preempt(s: Scenario) -> None:
    """A plain `scancel --signal=TERM <job>` after two trained steps (no USR1 is due yet)."""
    wait_until(lambda: len(steps_log(s.run)) >= 2, 120, "two trained steps")
    (job,) = job_ids(s.run)
    s.notes["job"] = job
    subprocess.run(["scancel", "--signal=TERM", job], check=True, timeout=30)


def kill_whole_job(s: Scenario) -> None:
    """What a cgroup OOM kill of the whole job (or a node's processes lost) does to a run: every
    process of the job dies at once (tests/doubles/slurm_faults.py), so no end hook runs and
    sacct says FAILED. The job's successor, queued when it started, continues the run. Then
    an administrator requeues the dead job: it finds its successor running the run and leaves it."""
    wait_until(lambda: saved_steps(s.run) >= 2, 120, "two saved steps")
    (job,) = job_ids(s.run)
    assert slurm_faults.kill_job_processes(job) > 0
    s.notes["job"] = job
    wait_until(lambda: queue_states([job]).get(job) not in ("RUNNING", "COMPLETING", "CONFIGURING"), 60,
               f"job {job} to end")
    wait_until(lambda: len(events(s.run, "job_start")) >= 2, 60, "the successor to start")
    wait_until(lambda: subprocess.run(["scontrol", "requeue", job], capture_output=True, timeout=30).returncode == 0,
               30, f"scontrol requeue {job}", every=2)


def cancel_then_relaunch(s: Scenario) -> None:
    """A user's `scancel <job>` stops the run (nothing continues it); launching the
    same run again resumes it from its last complete checkpoint."""
    wait_until(lambda: saved_steps(s.run) >= 2, 120, "two saved steps")
    (job,) = job_ids(s.run)
    subprocess.run(["scancel", job], check=True, timeout=30)
    wait_until(lambda: events(s.run, "cancelled") and not ACTIVE & set(queue_states([job]).values()), 90,
               f"job {job} to record its cancellation and leave the queue")
    s.notes.update(job=job, ledger_after_cancel=ledger_lines(s.run))
    again = s.launch()
    assert again.returncode == 0, again.stderr


SCENARIOS = {
    "crash": Scenario("rs_crash", ("--continuation", "afterany", "--signal_grace", "30", "--max_failures", "2",
                                   "--train_arg", "crash=always"), timeout=180),
    "preempt": Scenario("rs_preempt", ("--continuation", "afterany", "--time_limit", "3", "--signal_grace", "30",
                                       "--train_arg", "steps=8"), during=preempt, timeout=180),
    "cancel": Scenario("rs_cancel", ("--continuation", "requeue", "--time_limit", "3", "--signal_grace", "30",
                                     "--train_arg", "steps=6"), during=cancel_then_relaunch, timeout=180),
    "kill9": Scenario("rs_kill9", ("--continuation", "afterany", "--signal_grace", "30", "--train_arg", "steps=6",
                                   "--train_arg", "save_sleep=60", "--train_arg", "save_sleep_at=3"),
                      during=kill_mid_save, timeout=240),
    "afterany": Scenario("rs_afterany", ("--continuation", "afterany", "--signal_grace", "10",
                                         "--train_arg", "steps=55"), timeout=480),
    "chain": Scenario("rs_chain", ("--chain", "7", "--signal_grace", "10", "--train_arg", "steps=55"), timeout=480),
    "requeue": Scenario("rs_requeue", ("--continuation", "requeue", "--signal_grace", "30",
                                       "--train_arg", "steps=33"), timeout=900),
    "killed": Scenario("rs_killed", ("--continuation", "afterany", "--time_limit", "3", "--signal_grace", "30",
                                     "--train_arg", "steps=8"), during=kill_whole_job, timeout=420),
}


@pytest.fixture(scope="module")
def scenarios(slurm, tmp_path_factory):
    runs_dir = tmp_path_factory.mktemp("resubmission") / "runs"
    for scenario in SCENARIOS.values():
        scenario.error = None
        scenario.start(runs_dir)
    yield SCENARIOS
    for scenario in SCENARIOS.values():
        if scenario.run is not None and scenario.run.path.exists():
            ids = job_ids(scenario.run)
            if ids:
                subprocess.run(["scancel", *ids], capture_output=True, timeout=30)


# -- checks shared by the modes ---------------------------------------------------------------


def assert_each_step_trained_once(run: RunDir, total: int) -> list[Step]:
    steps = steps_log(run)
    assert [s.step for s in steps] == list(range(1, total + 1)), [s.step for s in steps]
    assert run.read_done()["final_step"] == total
    assert run.read_progress()["step"] == total
    return steps


def assert_continued_by_time(run: RunDir, jobs_trained: int) -> None:
    """Every job but the last stopped for time; the last finished; the run is done once."""
    outcomes = [e["outcome"] for e in events(run, "job_end")]
    assert outcomes[:jobs_trained] == ["stopped_for_time"] * (jobs_trained - 1) + ["finished"], outcomes
    starts = [e["step"] for e in events(run, "job_start")][:jobs_trained]
    ends = [e["step"] for e in events(run, "job_end")][:jobs_trained]
    assert starts[1:] == ends[:-1], (starts, ends)  # each job starts where the previous one stopped
    assert len(events(run, "done")) == 1 and not run.failed_file.exists()
    assert "[job] SIGUSR1" in log_text(run, ".out")


# -- the tests ----------------------------------------------------------------------------------


def test_a_workload_that_always_crashes_stops_after_max_failures_and_the_run_shows_failed(scenarios):
    run = scenarios["crash"].result()
    ids = job_ids(run)
    assert len(ids) == 2, ids  # the first failure is retried, the second gives up
    assert [e["outcome"] for e in events(run, "job_end")] == ["failed", "failed"]
    failed = run.read_failed()
    assert "2 failed job(s) in a row without progress" in failed["reason"]
    assert failed["log_tail"] == str(run.log_paths(ids[1])[1])
    assert "crashing before any step" in Path(failed["log_tail"]).read_text()
    assert len(events(run, "failed")) == 1 and len(events(run, "resubmit")) == 1
    wait_final(ids)
    assert {r["State"] for r in sacct_rows(ids)} == {"FAILED"}
    assert not run.done_file.exists()


def test_scancel_signal_term_preemption_continues_the_run(scenarios):
    s = scenarios["preempt"]
    run = s.result()
    steps = assert_each_step_trained_once(run, 8)
    first, *rest = events(run, "job_end")
    assert first["job_id"] == s.notes["job"] and first["outcome"] == "stopped_for_time" and first["exit_code"] == 75
    assert first["step"] >= 2 and rest and rest[-1]["outcome"] == "finished"
    out = log_text(run, ".out")
    assert "[job] SIGTERM" in out and "step_trainer: got SIGTERM" in out and "[job] SIGUSR1" not in out
    assert s.notes["job"] not in {st.job for st in steps if st.step > first["step"]}


def test_kill_9_while_saving_resumes_from_the_previous_complete_step(scenarios):
    s = scenarios["kill9"]
    run = s.result()
    killed = s.notes["killed_step"]
    steps = steps_log(run)
    # The killed step was trained, lost with its half-written checkpoint, and trained again; no other repeat.
    assert sorted(st.step for st in steps) == sorted([*range(1, 7), killed]), [st.step for st in steps]
    assert run.read_done()["final_step"] == 6
    model = run.path / "art" / "email_agent" / "models"
    (moved,) = list(model.glob(f"*/checkpoints_incomplete/{killed:04d}-*"))
    assert (moved / "adapter_model.safetensors").stat().st_size > 0  # kept, not deleted
    # The job that trained the killed step again had started from the step before it.
    retrained_by = [st.job for st in steps if st.step == killed][1]
    starts = {e["job_id"]: e["step"] for e in events(run, "job_start")}
    assert starts[retrained_by] == killed - 1, (retrained_by, starts)
    assert re.search(rf"checkpoint step {killed} is incomplete .*moved .* aside", log_text(run, ".err"))
    assert any(e["exit_code"] == 137 or e["outcome"] == "stopped_for_time" for e in events(run, "job_end"))


def test_afterany_mode_carries_a_run_across_at_least_3_jobs_each_step_once(scenarios):
    run = scenarios["afterany"].result()
    steps = assert_each_step_trained_once(run, 55)
    trained_in = list(dict.fromkeys(st.job for st in steps))
    assert len(trained_in) >= 3, trained_in
    assert_continued_by_time(run, len(trained_in))
    resubmits = events(run, "resubmit")
    assert [r["job_id"] for r in resubmits] == trained_in[1:]
    assert [r["after"] for r in resubmits] == trained_in[:-1]
    rows = wait_final(trained_in)  # the last job may still be COMPLETING when the run is done
    assert all(r["State"] == "COMPLETED" for r in rows.values()), rows


def test_launching_a_finished_run_says_so_and_submits_nothing(scenarios):
    s = scenarios["afterany"]
    run = s.result()
    before = run.ledger.read_text()
    again = s.launch()
    assert again.returncode == 0, again.stderr
    assert "finished at step 55" in again.stdout and "nothing submitted" in again.stdout
    assert run.ledger.read_text() == before
    preview = s.launch("--dry_run")
    assert "finished at step 55" in preview.stdout, preview.stdout + preview.stderr


def test_chain_mode_pre_submits_jobs_and_a_chained_job_of_a_finished_run_exits_at_once(scenarios):
    run = scenarios["chain"].result()
    steps = assert_each_step_trained_once(run, 55)
    ids = job_ids(run)
    assert len(ids) == 7 and len(events(run, "chain")) == 6 and not events(run, "resubmit")
    trained_in = list(dict.fromkeys(st.job for st in steps))
    assert len(trained_in) >= 3 and trained_in == ids[: len(trained_in)]
    assert_continued_by_time(run, len(trained_in))
    idle = ids[len(trained_in):]
    assert idle, "7 chained jobs for at most 6 jobs of work: the last must find the run finished"
    assert {e["job_id"] for e in events(run, "job_start")} == set(trained_in)
    for job in idle:
        assert "nothing to do" in run.log_paths(job)[0].read_text()
    wait_final(ids)
    assert {r["State"] for r in sacct_rows(ids)} == {"COMPLETED"}


def test_requeue_mode_carries_a_run_across_at_least_3_jobs_each_step_once(scenarios):
    run = scenarios["requeue"].result()
    steps = assert_each_step_trained_once(run, 33)
    (job,) = job_ids(run)
    assert {st.job for st in steps} == {job}  # one job id throughout
    restarts = list(dict.fromkeys(st.restart for st in steps))
    assert len(restarts) >= 3 and restarts == list(range(len(restarts))), restarts
    assert_continued_by_time(run, len(restarts))
    assert [e["restart_count"] for e in events(run, "job_start")] == restarts
    requeues = events(run, "requeue")
    assert len(requeues) == len(restarts) - 1 and {r["by"] for r in requeues} == {"job"}
    assert not events(run, "resubmit")
    states = [r["State"] for r in sacct_rows([job])]
    assert states.count("REQUEUED") == len(restarts) - 1 and states[-1] == "COMPLETED", states


def test_a_job_killed_without_its_end_hook_is_continued_by_its_successor_and_a_requeue_trains_nothing_twice(
        scenarios):
    s = scenarios["killed"]
    run = s.result()
    job = s.notes["job"]
    steps = assert_each_step_trained_once(run, 8)
    lost, *_ = events(run, "job_end")
    assert (lost["job_id"], lost["outcome"], lost["exit_code"], lost["slurm_state"]) == (job, "failed", None, "FAILED")
    assert "without its end hook" in lost["note"]
    (successor,) = [r["job_id"] for r in events(run, "successor") if r["after"] == job]
    resubmit = events(run, "resubmit")[0]
    assert (resubmit["job_id"], resubmit["after"], resubmit["by"]) == (successor, job, "successor")
    first, second = events(run, "job_start")[:2]
    assert (second["job_id"], second["step"]) == (successor, lost["step"]) and lost["step"] > first["step"]
    assert {st.job for st in steps} == {job, successor} and {st.restart for st in steps} == {0}
    assert min(st.step for st in steps if st.job == successor) - 1 == lost["step"]
    # The administrator's requeue ran the dead job again: it found the run finished, or its successor
    # holding it (the run's lease) or running it, and left it alone.
    out, err = (path.read_text() for path in run.log_paths(job))
    assert len(events(run, "job_start")) == 2 and "(restart 1)" in out
    assert re.search(r"(finished at step 8|is running this run).*nothing to do|is held by job", out + err)
    assert len(events(run, "done")) == 1 and not run.failed_file.exists()


def test_scancel_stops_the_run_and_a_new_launch_resumes_it(scenarios):
    s = scenarios["cancel"]
    run = s.result()
    steps = assert_each_step_trained_once(run, 6)
    cancelled = s.notes["ledger_after_cancel"]
    assert [r["event"] for r in cancelled][-2:] == ["job_end", "cancelled"]
    assert cancelled[-2]["outcome"] == "stopped_for_time" and cancelled[-1]["job_id"] == s.notes["job"]
    assert not [r for r in cancelled if r["event"] in ("requeue", "resubmit", "failed")]
    first, second = job_ids(run)
    assert first == s.notes["job"] and [r["event"] for r in ledger_lines(run)].count("submit") == 2
    starts = {e["job_id"]: e["step"] for e in events(run, "job_start")}
    assert starts[second] == cancelled[-2]["step"] >= 2
    assert {st.job for st in steps} == {first, second}
    assert sacct_rows([first])[-1]["State"].startswith("CANCELLED")
