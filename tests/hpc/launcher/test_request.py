"""hpc/launcher/request.py: the launch read at the door, its command line redacted there once, and what
each run's ledger records of it (single runs, runs alone in a sweep, runs of a pack job). Slurm is
stood in for (tests/hpc/launcher/test_launch_resume.py's ``sbatch``)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from hpc.launcher.envfiles import merge_layers, parse_env_flags
from hpc.launcher.request import LaunchRequest
from hpc.run import ledger
from hpc.run.rundir import RunDir
from tests.hpc.launcher.test_launch_resume import main, sbatch  # sbatch: a fixture

SECRET = "sk-live-0123456789"


def test_the_request_holds_the_command_line_with_any_runs_secret_starred_and_cannot_change():
    first = merge_layers([parse_env_flags([f"GEMINI_API_KEY={SECRET}"])], {})
    second = merge_layers([parse_env_flags(["DATA_DIR=/d", "DB=postgres://u:pw0rd@h/db"])], {})
    argv = ["--env", f"GEMINI_API_KEY={SECRET}", "--train_arg", "note=postgres://u:pw0rd@h/db", "--env=DATA_DIR=/d"]
    request = LaunchRequest.read(argparse.Namespace(restart=False), argv, [first, second])
    assert request.command == ("--env", "GEMINI_API_KEY=***", "--train_arg", "note=***", "--env=DATA_DIR=/d")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.command = tuple(argv)  # type: ignore[misc]


def launch_args(runs: Path, *extra: str) -> list[str]:
    return ["--cluster", "local", "--job_name", "lr", "--time_limit", "30", "--runs_dir", str(runs),
            "--env", f"ART_PATH={runs.parent / 'art'}", "--env", f"GEMINI_API_KEY={SECRET}",
            f"--env=JUDGE_URL=https://u:{SECRET}@judge", "--no_preflight", *extra]


def submitted(run: RunDir) -> list[str]:
    (submit,) = ledger.of_kind(ledger.read(run), ledger.Submit)
    return submit.argv


@pytest.mark.parametrize("extra,runs", [
    ((), ["lr"]),
    (("--sweep", "seed=1,2"), ["lr.seed=1", "lr.seed=2"]),
    (("--sweep", "seed=1,2", "--pack", "2"), ["lr.seed=1", "lr.seed=2"])])
def test_every_run_of_a_launch_records_the_one_starred_command_line(capsys, tmp_path, sbatch, extra, runs):
    argv = launch_args(tmp_path / "runs", *extra)
    code, _, err = main(capsys, *argv)
    assert code == 0, err
    starred = [word.replace(SECRET, "***") if "GEMINI" in word else word for word in argv]
    starred[starred.index(f"--env=JUDGE_URL=https://u:{SECRET}@judge")] = "--env=JUDGE_URL=***"
    for name in runs:
        run = RunDir(tmp_path / "runs" / name)
        assert submitted(run) == starred
        assert SECRET not in run.ledger.read_text()
