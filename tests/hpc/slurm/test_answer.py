"""Slurm's answers as known, known empty or unknown (hpc/slurm/answer.py), and the launcher's question
whether a run's jobs are still active (hpc/launcher/submit.py), with squeue and sacct stood in for."""

from __future__ import annotations

import subprocess

import pytest

from hpc.launcher import submit
from hpc.slurm import answer
from hpc.slurm.answer import Knowledge
from hpc.slurm.calls import SlurmFailed
from hpc.slurm.states import JobState
from tests.doubles.slurm_output import queue_text, runs_text


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def stand_in(monkeypatch, squeue, sacct=lambda job: (0, "")):
    """``squeue`` and ``sacct`` answered by functions: (exit code, stdout)."""
    def run(cmd, **kwargs):
        code, out = (squeue() if cmd[0] == "squeue" else sacct(cmd[cmd.index("-j") + 1]))
        return subprocess.CompletedProcess(cmd, code, out, "" if code == 0 else "slurm_load_jobs error: Socket timed out")
    monkeypatch.setattr(subprocess, "run", run)


def test_a_failing_squeue_is_unknown_and_an_empty_one_known_empty(monkeypatch):
    stand_in(monkeypatch, lambda: (1, ""))
    failed = answer.queue_states(["5"])
    assert failed.knowledge == Knowledge.UNKNOWN and "Socket timed out" in failed.why and failed.value is None
    stand_in(monkeypatch, lambda: (0, ""))
    assert answer.queue_states(["5"]).knowledge == Knowledge.EMPTY
    stand_in(monkeypatch, lambda: (0, queue_text({"5": "RUNNING"})))
    assert answer.queue_states(["5"]).value == {"5": JobState.RUNNING}


def test_asking_again_stops_at_the_first_known_answer_or_when_the_time_is_up():
    clock, said = Clock(), []
    replies = iter([answer.unknown("timeout"), answer.unknown("timeout"), answer.known(3, False)])
    got = answer.ask_until(lambda: next(replies), 60, said.append, clock.sleep, clock)
    assert got.value == 3 and len(said) == 2 and clock.now == answer.FIRST_WAIT * 3
    clock = Clock()
    stuck = answer.ask_until(lambda: answer.unknown("down"), 20, said.append, clock.sleep, clock)
    assert stuck.unknown and clock.now <= 20


def test_a_command_is_retried_with_backoff_until_it_works_within_the_time():
    clock, tries = Clock(), []

    def sbatch() -> str:
        tries.append(clock.now)
        if len(tries) < 3:
            raise SlurmFailed("sbatch: error: Resource temporarily unavailable", 1, "")
        return "42"

    done = answer.retry(sbatch, 60, lambda line: None, clock.sleep, clock)
    assert (done.value, done.tries, tries) == ("42", 3, [0.0, 2.0, 6.0])
    clock = Clock()
    failed = answer.retry(lambda: (_ for _ in ()).throw(SlurmFailed("no", 1, "")), 10, lambda line: None,
                          clock.sleep, clock)
    assert failed.value is None and failed.tries == 3 and str(failed.error) == "no"


def test_the_launch_refuses_when_squeue_fails_instead_of_finding_no_active_job(monkeypatch):
    stand_in(monkeypatch, lambda: (1, ""))
    with pytest.raises(answer.Unanswered, match="Socket timed out.*nothing submitted"):
        submit.active_jobs(["5"], seconds=0)


def test_a_job_the_ledger_shows_running_that_squeue_omits_is_asked_of_accounting(monkeypatch):
    stand_in(monkeypatch, lambda: (0, ""), lambda job: (0, runs_text(job, ["RUNNING"])))
    assert submit.active_jobs(["5"], ["5"], seconds=0) == {"5": "RUNNING"}
    stand_in(monkeypatch, lambda: (0, ""), lambda job: (0, runs_text(job, ["TIMEOUT"])))
    assert submit.active_jobs(["5"], ["5"], seconds=0) == {}
    stand_in(monkeypatch, lambda: (0, ""), lambda job: (0, ""))
    with pytest.raises(answer.Unanswered, match="sacct has not yet recorded job.s. 5"):
        submit.active_jobs(["5"], ["5"], seconds=0)
