"""When Slurm answers badly, on the project's real local Slurm: never two jobs on one run, never a
run given up or continued for a moment's error.

Each test is one fault (docs/design.md, "When Slurm answers badly"): the fault is done as a cluster's Slurm does it for moments,
by wrappers first on PATH in front of the real commands (tests/doubles/slurm_wrappers.py), which the
launch's environment carries into the jobs and every job their hooks submit. The workload is the
step double (tests.doubles.step_trainer: each trained step logged with its job). All scenarios are
launched together when the module starts (the first alone, before the others), each followed by its own thread, so the module takes as
long as its slowest one (about three minutes: 1-minute jobs, --signal_grace 20).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from hpc.run.rundir import RunDir
from tests.doubles import slurm_wrappers
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.step_trainer import read_steps
from tests.hpc.job.test_resubmission_slurm import ACTIVE, diagnostics, queue_states, wait_until

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[3]
COMMON = ("--cluster", "local", "--time_limit", "1", "--gpus_per_node", "0", "--cpus_per_task", "1",
          "--entrypoint", "tests.doubles.step_trainer", "--signal_grace", "20")
QUERIES = ("squeue", "sacct", "scontrol")


@dataclass
class Case:
    """One run under one fault: launched at module start, followed by a thread."""

    name: str
    args: tuple[str, ...]
    during: Callable[[Case], None]
    settle: str = "done"  # what ends it: the run done, or its jobs gone from the queue ("queue")
    timeout: float = 300
    run: RunDir | None = None
    faults: slurm_wrappers.Faults | None = None
    notes: dict = field(default_factory=dict)
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self, root: Path) -> None:
        self.run = RunDir(root / "runs" / self.name)
        self.faults = slurm_wrappers.install(root / "wrappers" / self.name)
        self.thread = threading.Thread(target=self._follow, name=self.name, daemon=True)
        self.thread.start()

    def launch(self, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hpc.launch", "--job_name", self.name, "--runs_dir",
                               str(self.run.path.parent), "--env", f"ART_PATH={self.run.path / 'art'}", *COMMON,
                               *self.args, *extra], cwd=REPO, capture_output=True, text=True, timeout=180,
                              env=self.faults.env())

    def _follow(self) -> None:
        try:
            launched = self.launch()
            assert launched.returncode == 0, launched.stderr
            self.during(self)
            wait_until(self.settled, self.timeout, f"run {self.name} to settle")
        except BaseException as err:  # noqa: BLE001 - re-raised in the test that owns the case
            self.error = err
        finally:
            for name in slurm_wrappers.COMMANDS:
                self.faults.clear(name)

    def settled(self) -> bool:
        if self.settle == "done" and not self.run.done_file.exists():
            return False
        return not ACTIVE & set(queue_states(jobs(self.run)).values())

    def result(self) -> RunDir:
        self.thread.join(self.timeout + 240)
        if self.error is not None:
            raise AssertionError(f"{self.name}: {self.error}\n{diagnostics(self.run)}") from self.error
        return self.run


def jobs(run: RunDir) -> list[str]:
    return list(dict.fromkeys(str(r["job_id"]) for r in ledger_lines(run) if r.get("job_id")))


def events(run: RunDir, name: str) -> list[dict]:
    return [r for r in ledger_lines(run) if r["event"] == name]


def steps_trained_twice(run: RunDir) -> list[int]:
    return sorted(step for step, n in Counter(s.step for s in read_steps(run)).items() if n > 1)


def overlapping_jobs(run: RunDir) -> list[tuple[str, str]]:
    """Pairs of jobs whose trained steps interleave in time (two trainers at once)."""
    spans: dict[str, list[float]] = {}
    for s in read_steps(run):
        span = spans.setdefault(s.job, [s.start, s.end])
        span[0], span[1] = min(span[0], s.start), max(span[1], s.end)
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    return [(a, b) for (a, sa), (b, sb) in zip(ordered, ordered[1:]) if sb[0] < sa[1]]


def first_job(c: Case) -> str:
    wait_until(lambda: events(c.run, "job_start"), 120, "the first job to start")
    return events(c.run, "job_start")[0]["job_id"]


# -- the faults ------------------------------------------------------------------------------------------


def two_jobs_at_once(c: Case) -> None:
    """Every query answers empty from the start; the run's own script is submitted a second time at
    once, so two jobs of the run start together; and a relaunch is tried while one trains with squeue failing."""
    script = next(c.run.scripts_dir.glob("*.sbatch"))
    second = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60,
                            env=c.faults.env(), check=True).stdout.strip().split(";")[0]
    c.notes["jobs"] = {events(c.run, "submit")[0]["job_id"], second}
    wait_until(lambda: read_steps(c.run), 150, "a job to train")
    c.faults.set("squeue", "fail")
    c.notes["relaunch"] = c.launch()
    c.faults.set("squeue", "empty")


def squeue_empty_around_the_end(c: Case) -> None:
    """squeue answers empty (exit 0) from before the first job's end hook until 20 s after it."""
    wait_until(lambda: events(c.run, "successor"), 90, "the first job to queue its successor")
    c.faults.set("squeue", "empty")
    wait_until(lambda: events(c.run, "job_end"), 120, "the first job's end hook")
    time.sleep(20)
    c.faults.clear("squeue")


def queries_fail_for_the_end_hook(c: Case) -> None:
    """squeue and sacct exit 1 from before the first job's end hook until its end hook has run."""
    wait_until(lambda: events(c.run, "successor") and len(read_steps(c.run)) >= 3, 90, "three steps trained")
    c.faults.set("squeue", "fail")
    c.faults.set("sacct", "fail")
    wait_until(lambda: events(c.run, "job_end"), 120, "the first job's end hook")
    wait_until(lambda: queue_states([first_job(c)]) == {}, 90, "the first job to leave the queue")
    c.faults.clear("squeue")
    c.faults.clear("sacct")


def sbatch_and_requeue_fail(c: Case) -> None:
    """From the start, sbatch fails twice and scontrol requeue always (requeue mode)."""
    wait_until(lambda: events(c.run, "job_end"), 150, "the first job's end hook")


def scancel_while_sacct_fails(c: Case) -> None:
    wait_until(lambda: len(read_steps(c.run)) >= 3 and events(c.run, "successor"), 120, "three steps trained")
    c.faults.set("sacct", "fail")
    job = first_job(c)
    c.notes["cancelled_at_step"] = len(read_steps(c.run))
    subprocess.run(["scancel", job], check=True, timeout=30)
    wait_until(lambda: events(c.run, "job_end"), 90, "the cancelled job's end hook")
    wait_until(lambda: not ACTIVE & set(queue_states(jobs(c.run)).values()), 120, "the run's jobs to leave the queue")


def sacct_lags_behind_an_ended_job(c: Case) -> None:
    """sacct hides the first job (accounting lagging behind) from its end hook until 30 s after the next job
    started; hpc.accounting is asked meanwhile, as a user would."""
    job = first_job(c)
    wait_until(lambda: events(c.run, "job_end"), 150, "the first job's end hook")
    c.faults.set("sacct", f"hide:{job}")
    wait_until(lambda: len(events(c.run, "job_start")) >= 2, 120, "the next job to start")
    c.notes["hidden"] = job
    c.notes["accounting"] = subprocess.run([sys.executable, "-m", "hpc.accounting", str(c.run.path)], cwd=REPO,
                                           capture_output=True, text=True, timeout=120, env=c.faults.env())
    time.sleep(30)
    c.faults.clear("sacct")


def faulted(mode: dict[str, str], during: Callable[[Case], None]) -> Callable[[Case], None]:
    """``during``, with faults set before the launch's jobs start (set at once: the job takes seconds)."""
    def act(c: Case) -> None:
        for command, how in mode.items():
            c.faults.set(command, how)
        during(c)
    return act


CASES = {
    "lease": Case("sa_lease", ("--continuation", "afterany", "--time_limit", "2", "--train_arg", "steps=10",
                               "--train_arg", "step_seconds=3"),
                  faulted({q: "empty" for q in QUERIES}, two_jobs_at_once), settle="queue", timeout=240),
    "squeue_empty": Case("sa_squeue_empty", ("--continuation", "afterany", "--train_arg", "steps=25"),
                         squeue_empty_around_the_end),
    "queries_fail": Case("sa_queries_fail", ("--continuation", "afterany", "--train_arg", "steps=25"),
                         queries_fail_for_the_end_hook),
    "sbatch_fails": Case("sa_sbatch_fails", ("--continuation", "requeue", "--train_arg", "steps=25"),
                         faulted({"sbatch": "fail:2", "scontrol": "fail-requeue"}, sbatch_and_requeue_fail)),
    "scancel": Case("sa_scancel", ("--continuation", "afterany", "--time_limit", "3", "--train_arg", "steps=60"),
                    scancel_while_sacct_fails, settle="queue", timeout=180),
    "sacct_lags": Case("sa_sacct_lags", ("--continuation", "afterany", "--train_arg", "steps=25"),
                       sacct_lags_behind_an_ended_job),
}


@pytest.fixture(scope="module")
def cases(slurm, tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm_answers")
    lease = CASES["lease"]
    lease.error = None
    lease.start(root)  # first, alone: its two jobs must start together, before the others take the CPUs
    wait_until(lambda: len(lease.notes.get("jobs", ())) == 2
               and set(queue_states(sorted(lease.notes["jobs"])).values()) == {"RUNNING"}, 90, "both jobs to run")
    for case in CASES.values():
        if case is not lease:
            case.error = None
            case.start(root)
    yield CASES
    for case in CASES.values():
        if case.run is not None and case.run.path.exists() and jobs(case.run):
            subprocess.run(["scancel", *jobs(case.run)], capture_output=True, timeout=30)


def assert_one_trainer(run: RunDir, total: int | None = None) -> None:
    steps = [s.step for s in read_steps(run)]
    assert not steps_trained_twice(run) and not overlapping_jobs(run), (steps, overlapping_jobs(run))
    if total is not None:
        assert steps == list(range(1, total + 1)) and run.read_done()["final_step"] == total


def test_two_jobs_of_one_run_started_at_once_with_every_query_answering_empty_train_it_once(cases):
    run = cases["lease"].result()
    assert_one_trainer(run, 10)
    (held,) = events(run, "lease_held")
    refused = held["job_id"]
    assert refused in cases["lease"].notes["jobs"] and held["holder"] != refused
    assert refused not in {s.job for s in read_steps(run)} and refused not in {e["job_id"] for e in
                                                                                events(run, "job_start")}


def test_a_relaunch_while_the_run_trains_and_squeue_fails_submits_nothing(cases):
    case = cases["lease"]
    run = case.result()
    relaunch = case.notes["relaunch"]
    assert relaunch.returncode != 0 and "nothing submitted" in relaunch.stderr, relaunch.stderr
    assert len(events(run, "submit")) == 1


def test_squeue_answering_empty_at_a_jobs_end_does_not_start_a_second_job_beside_the_successor(cases):
    run = cases["squeue_empty"].result()
    assert_one_trainer(run, 25)
    assert [r.get("by") for r in events(run, "resubmit")] == ["successor"] * len(events(run, "resubmit"))


def test_squeue_and_sacct_failing_for_an_end_hook_submit_no_duplicate_and_the_successor_goes_on(cases):
    run = cases["queries_fail"].result()
    assert_one_trainer(run, 25)
    assert not [r for r in events(run, "resubmit") if r.get("script")]  # no follow-up beside the successor
    assert not run.failed_file.exists()


def test_sbatch_and_requeue_failing_for_a_moment_are_retried_and_the_run_is_not_given_up(cases):
    run = cases["sbatch_fails"].result()
    assert_one_trainer(run, 25)
    assert not events(run, "failed") and events(run, "successor")


def test_a_scancel_while_sacct_fails_stops_the_run(cases):
    case = cases["scancel"]
    run = case.result()
    (end,) = events(run, "job_end")
    assert end["signal"] == "TERM" and events(run, "cancelled")
    assert len(events(run, "job_start")) == 1 and not run.done_file.exists()  # nothing went on against the user
    assert not steps_trained_twice(run)


def test_a_job_sacct_has_not_yet_recorded_is_named_by_accounting_not_left_out(cases):
    case = cases["sacct_lags"]
    run = case.result()
    assert_one_trainer(run, 25)
    said = case.notes["accounting"]
    assert said.returncode == 0, said.stderr
    assert f"sacct has not yet recorded job(s) {case.notes['hidden']}" in said.stdout, said.stdout
