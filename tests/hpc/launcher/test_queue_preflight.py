"""The trainer's preflight before a job is queued (hpc/launcher/queue_preflight.py): a launch that would
queue a job that cannot work refuses it (exit 1, the checks' own fixes, nothing submitted or
written); a judge the login node cannot reach is said and the job queued; --no_preflight skips it.
sbatch is a recording fake here; the checks are trainer/training/preflight.py's, run for real in a child."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hpc.launcher import launch, queue_preflight
from tests.doubles.openai_server import OpenAIServer, text
from tests.hpc.launcher.test_launch import PREFLIGHT_ARGS, PREFLIGHT_KEY, staged_data  # a fixture

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def sbatch(monkeypatch) -> list[Path]:
    """A Slurm that accepts everything and records each submitted script."""
    submitted: list[Path] = []
    monkeypatch.setattr(launch.slurm, "sbatch_path", lambda: None)
    monkeypatch.setattr(launch.slurm, "require_sbatch", lambda: "/usr/bin/sbatch")
    monkeypatch.setattr(launch.slurm, "submit", lambda script, dependency=None: submitted.append(script) or "1001")
    monkeypatch.setattr(launch.slurm, "active_jobs", lambda ids, expected=(): {})
    return submitted


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = launch.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def base(runs: Path) -> list[str]:
    return ["--cluster", "local", "--job_name", "pf", "--time_limit", "30", "--runs_dir", str(runs),
            "--gpus_per_node", "1", *PREFLIGHT_ARGS]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_job_that_cannot_work_is_refused_before_the_queue_with_the_checks_fixes(capsys, tmp_path, sbatch):
    code, out, err = run_main(capsys, *base(tmp_path / "runs"), "--env", f"DATA_DIR={tmp_path / 'no-data'}")
    assert code == 1 and sbatch == []
    assert "preflight on the login node failed for run pf; nothing submitted (--no_preflight skips it)" in err
    assert "FAILED  data (permanent): the data directory" in err and "fix: stage it on a login node" in err
    assert not (tmp_path / "runs").exists()  # nothing written


def test_a_job_whose_checks_pass_is_queued(capsys, tmp_path, sbatch, staged_data):
    with OpenAIServer(lambda body: text("OK"), api_key=PREFLIGHT_KEY) as judge:
        code, out, err = run_main(capsys, *base(tmp_path / "runs"), "--env", f"DATA_DIR={staged_data}",
                                  "--env", f"JUDGE_API_BASE={judge.base_url}", "--env", f"JUDGE_API_KEY={PREFLIGHT_KEY}")
    assert code == 0, err
    assert "preflight on the login node: 7 of 7 checks passed" in out and len(sbatch) == 1
    assert PREFLIGHT_KEY not in out + err


def test_a_judge_the_login_node_cannot_reach_is_said_and_the_job_queued(capsys, tmp_path, sbatch,
                                                                       staged_data):
    code, out, err = run_main(capsys, *base(tmp_path / "runs"), "--env", f"DATA_DIR={staged_data}",
                              "--env", f"JUDGE_API_BASE=http://127.0.0.1:{closed_port()}/v1",
                              "--env", f"JUDGE_API_KEY={PREFLIGHT_KEY}", "--train_arg", "preflight_timeout=5")
    assert code == 0, err
    assert "preflight on the login node: 6 of 7 checks passed" in out
    assert "FAILED  judge (transient)" in out and "the job checks it again on its node" in out
    assert len(sbatch) == 1


def test_no_preflight_skips_the_checks(capsys, tmp_path, sbatch, monkeypatch):
    monkeypatch.setattr(queue_preflight, "run", lambda spec: pytest.fail("the preflight ran"))
    code, out, err = run_main(capsys, *base(tmp_path / "runs"), "--env", f"DATA_DIR={tmp_path / 'no-data'}",
                              "--no_preflight")
    assert code == 0, err
    assert len(sbatch) == 1


def test_another_entrypoint_is_not_checked_as_the_trainer(capsys, tmp_path, sbatch, monkeypatch):
    monkeypatch.setattr(queue_preflight, "run", lambda spec: pytest.fail("the preflight ran"))
    code, _, err = run_main(capsys, "--cluster", "local", "--job_name", "e", "--time_limit", "30", "--runs_dir",
                            str(tmp_path / "runs"), "--gpus_per_node", "0", "--entrypoint", "tests.doubles.echo_workload")
    assert code == 0, err
    assert len(sbatch) == 1


def test_the_preflight_before_the_queue_keeps_litellm_out_of_the_launcher(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "sbatch").write_text("#!/bin/sh\necho 1001\n")
    (fake_bin / "sbatch").chmod(0o755)
    code = (
        "import os, sys\n"
        f"os.environ['PATH'] = {str(fake_bin)!r} + ':' + os.environ['PATH']\n"
        "from hpc import launch\n"
        f"rc = launch.main(['--cluster', 'local', '--job_name', 'x', '--time_limit', '10', '--runs_dir', "
        f"{str(tmp_path / 'runs')!r}, '--config', 'smoke', '--env', 'DATA_DIR={tmp_path / 'none'}'])\n"
        "heavy = sorted(m for m in ('art', 'litellm', 'datasets', 'torch') if m in sys.modules)\n"
        "print('HEAVY', heavy, rc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "HEAVY [] 1" in result.stdout, result.stdout + result.stderr  # refused by checks run in a child
    assert "FAILED  data" in result.stderr
