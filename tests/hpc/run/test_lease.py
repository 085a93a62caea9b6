"""The run's lease (hpc/run/lease.py): one job holds a run, whatever Slurm says."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hpc.run import lease
from hpc.run.rundir import RunDir


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    folder = RunDir(tmp_path / "r")
    folder.path.mkdir()
    return folder


class Clock:
    """A monotonic clock that sleeping moves on; ``on_sleep`` acts meanwhile (another job renewing)."""

    def __init__(self, on_sleep=lambda: None):
        self.now, self.on_sleep, self.slept = 0.0, on_sleep, 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        self.on_sleep()


def _take(path: str, job: str, start: float, out) -> None:
    while time.time() < start:
        pass
    out.put((job, type(lease.take(RunDir(Path(path)), job, 0, os.getpid(), wait=0)).__name__))


def test_jobs_taking_one_run_at_the_same_moment_give_it_to_exactly_one(run):
    """Eight processes (each its own live 'shell') race for the lease: one takes it, the others see it held."""
    context = multiprocessing.get_context("fork")
    out, start = context.Queue(), time.time() + 0.5
    procs = [context.Process(target=_take, args=(str(run.path), str(100 + k), start, out)) for k in range(8)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(30)
    taken = [job for job, kind in results.items() if kind == "Taken"]
    assert len(taken) == 1 and lease.read(run).job_id == taken[0], results


def test_a_lease_renewed_while_a_second_job_watches_sends_that_job_away(run):
    assert isinstance(lease.take(run, "1", 0, os.getpid()), lease.Taken)
    clock = Clock(on_sleep=lambda: lease.renew(run, "1", 0))
    held = lease.take(run, "2", 0, os.getpid(), clock=clock, sleep=clock.sleep)
    assert isinstance(held, lease.Held) and held.lease.job_id == "1"
    assert clock.slept <= lease.WATCH_EVERY  # it left at the first renewal it saw


def test_a_released_lease_is_taken_at_once(run):
    lease.take(run, "1", 0, os.getpid())
    assert lease.release(run, "1", 0)
    assert isinstance(lease.take(run, "2", 0, os.getpid(), wait=0), lease.Taken)
    assert lease.read(run).job_id == "2" and not lease.read(run).released


def test_an_expired_lease_is_taken_over(run):
    lease.take(run, "1", 0, os.getpid())
    lease.write(run, replace(lease.read(run), expires=time.time() - lease.SKEW - 1))
    taken = lease.take(run, "2", 0, os.getpid(), wait=0)
    assert isinstance(taken, lease.Taken) and taken.before.job_id == "1"


def test_a_lease_not_renewed_while_watched_is_taken_over_after_its_length(run):
    """A holder on another host whose clock says its lease runs for ever: not renewed for LEASE_SECONDS, it lapses."""
    lease.take(run, "1", 0, os.getpid())
    lease.write(run, replace(lease.read(run), host="elsewhere", expires=time.time() + 10**6))
    clock = Clock()
    taken = lease.take(run, "2", 0, os.getpid(), clock=clock, sleep=clock.sleep)
    assert isinstance(taken, lease.Taken) and lease.LEASE_SECONDS <= clock.slept <= lease.LEASE_SECONDS + lease.SKEW


def test_a_lease_whose_holders_shell_is_gone_from_this_host_is_taken_at_once(run):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    lease.take(run, "1", 0, int(gone))
    assert isinstance(lease.take(run, "2", 0, os.getpid(), wait=0), lease.Taken)


def test_a_job_requeued_under_its_id_waits_for_its_own_earlier_run(run):
    """Restart 0 of job 1 still holds it (alive): restart 1 is another holder, not this one."""
    lease.take(run, "1", 0, os.getpid())
    assert isinstance(lease.take(run, "1", 1, os.getpid(), wait=0), lease.Held)


def test_only_the_holder_renews_or_releases(run):
    lease.take(run, "1", 0, os.getpid())
    before = lease.read(run)
    assert lease.renew(run, "2", 0) is None and not lease.release(run, "2", 0)
    renewed = lease.renew(run, "1", 0)
    assert renewed.renewals == before.renewals + 1 and renewed.expires >= before.expires
    assert lease.held_by_other(run, "2", 0).job_id == "1" and lease.held_by_other(run, "1", 0) is None


def test_the_lease_file_is_written_whole_and_read_back_checked(run):
    lease.take(run, "1", 0, os.getpid())
    data = json.loads(lease.path_of(run).read_text())
    assert set(data) == set(lease.FIELDS) and data["job_id"] == "1"
    lease.path_of(run).write_text('{"job_id": 5}')
    assert lease.read(run) is None and run.unreadable


def test_the_keeper_kills_a_workload_whose_job_lost_the_lease(run):
    workload = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lease.take(run, "1", 0, os.getpid())
    lease.write(run, replace(lease.read(run), job_id="2"))  # another job took the run
    assert lease.keep(run, "1", 0, os.getpid(), workload.pid, sleep=lambda s: None) == 1
    assert workload.wait(10) == -9


def test_the_keeper_renews_while_the_workload_runs_and_stops_with_it(run):
    workload = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"])
    lease.take(run, "1", 0, os.getpid())
    assert lease.keep(run, "1", 0, os.getpid(), workload.pid, sleep=lambda s: workload.wait()) == 0
    assert lease.read(run).renewals >= 1
