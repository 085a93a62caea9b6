"""hpc/job/watch.py: the in-job watcher tells the webhook once per stall (and collapse), and
again only after the run recovered and stalled anew."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hpc.job.watch import Watcher, job_start_of
from hpc.run.health import HealthSettings
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import write_record
from tests.doubles.webhook_receiver import WebhookReceiver

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=timezone.utc)
QUICK = HealthSettings(stall_factor=3, min_stall_seconds=0, startup_seconds=100, collapse_steps=3)


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def add_step(run: RunDir, step: int, ended: float, spread: float = 0.5) -> None:
    run.steps_file.parent.mkdir(parents=True, exist_ok=True)
    with run.steps_file.open("a") as handle:
        handle.write(f'{{"step": {step}, "seconds": 10, "ended": "{t(ended).isoformat()}", "job_id": "7", '
                     f'"reward_spread": {spread}}}\n')


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path / "r")


def test_a_stall_is_told_once_and_again_only_after_a_new_step(run, monkeypatch):
    with WebhookReceiver() as hook:
        monkeypatch.setenv("HPC_WEBHOOK_URL", hook.url())
        watcher = Watcher(run, "7", t(0), QUICK)
        add_step(run, 1, 20)
        assert watcher.once(t(45)) == []  # 25 s since the step: limit 30 s
        assert [f.kind for f in watcher.once(t(51))] == ["stalled"]
        assert watcher.once(t(80)) == [] and watcher.once(t(300)) == []  # still the same stall: told once
        add_step(run, 2, 310)
        assert watcher.once(t(320)) == []
        assert [f.kind for f in watcher.once(t(400))] == ["stalled"]
    assert hook.events() == ["stalled", "stalled"]
    assert hook.received[0].body["detail"].startswith("STALLED: no step for 31s")


def test_a_collapse_is_told_once(run, monkeypatch):
    with WebhookReceiver() as hook:
        monkeypatch.setenv("HPC_WEBHOOK_URL", hook.url())
        watcher = Watcher(run, "7", t(0), QUICK)
        for step in range(1, 5):
            add_step(run, step, 10 * step, spread=0.0)
            watcher.once(t(10 * step + 1))
    assert hook.events() == ["collapsed"]


def test_the_watcher_counts_from_its_jobs_latest_start_in_the_ledger(run):
    write_record(run, "job_start", job_id="7", step=0)
    write_record(run, "job_start", job_id="8", step=0)
    assert job_start_of(run, "7") is not None and job_start_of(run, "9") is None


def test_the_watcher_command_tells_a_stall_of_its_job_and_keeps_running(run, tmp_path):
    write_record(run, "job_start", job_id="7", step=0)
    with WebhookReceiver() as hook:
        env = {"PATH": "/usr/bin:/bin", "HPC_WEBHOOK_URL": hook.url("/T0KEN"), "HPC_WATCH_INTERVAL": "1",
               "HPC_STALL_STARTUP": "1", "SLURM_JOB_ID": "7"}
        watcher = subprocess.Popen([sys.executable, "-m", "hpc.job.watch", "--run_dir", str(run.path)], cwd=REPO,
                                   env=env, stderr=subprocess.PIPE, text=True)
        try:
            (got,) = hook.wait_for(1, timeout=20)
            assert watcher.poll() is None
        finally:
            watcher.terminate()
            err = watcher.communicate(timeout=10)[1]
    assert got.body["event"] == "stalled" and got.body["job_id"] == "7"
    assert "T0KEN" not in err and "told the webhook that r stalled (HTTP 200)" in err


def test_a_bad_threshold_stops_the_watcher_with_one_line(run):
    result = subprocess.run([sys.executable, "-m", "hpc.job.watch", "--run_dir", str(run.path)], cwd=REPO,
                            env={"PATH": "/usr/bin:/bin", "HPC_STALL_FACTOR": "fast"}, capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr == "[watch] invalid HPC_STALL_FACTOR 'fast': accepted a number >= 1 (default 3); " \
                            "the run is not watched\n"
