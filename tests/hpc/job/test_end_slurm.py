"""hpc.job.end_slurm: what an end hook learns from Slurm (scontrol and sacct answer as recorded text)."""

from __future__ import annotations

import subprocess

import pytest

from hpc.job import end_decision, end_slurm
from tests.doubles.slurm_output import runs_text


@pytest.mark.parametrize("show,sacct,restart_count,view", [
    ("JobId=7 JobState=RUNNING Restarts=0", "RUNNING\n", 0, end_decision.SlurmView()),
    # `scontrol requeue` (an admin, preemption): seen inside the job as COMPLETING, Restarts up by one
    ("JobId=7 JobState=COMPLETING Requeue=1 Restarts=2", "RUNNING\n", 1, end_decision.SlurmView(requeued=True)),
    ("JobId=7 JobState=COMPLETING Restarts=1", "REQUEUED\n", 1, end_decision.SlurmView()),
    # `scancel`: COMPLETING, and accounting already says why
    ("JobId=7 JobState=COMPLETING Restarts=0", "CANCELLED by 0\n", 0, end_decision.SlurmView(cancelled=True)),
    ("JobId=7 JobState=COMPLETING Restarts=0", "TIMEOUT\n", 0, end_decision.SlurmView()),
    # accounting has no record yet: not cancelled as far as anyone knows, and the view says so
    ("", "", 0, end_decision.SlurmView(cancel_unknown="sacct has not yet recorded job 7")),
])
def test_slurm_view_reads_requeue_and_cancel_from_scontrol_and_sacct(monkeypatch, show, sacct, restart_count, view):
    answers = {"scontrol": show, "sacct": runs_text("7", sacct.split("\n")[:-1])}
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, answers[cmd[0]], ""))
    assert end_slurm.slurm_view("7", restart_count) == view


def test_slurm_view_asks_nothing_outside_a_slurm_job(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: pytest.fail("Slurm was asked"))
    assert end_slurm.slurm_view("local", 0) == end_decision.SlurmView()
