"""hpc/job/trusted_run.py and the job script's use of it: a job whose run folder a
neighbour could change by the time it starts reads, sources and runs nothing of it. The rendered
job script itself is run with bash here (no Slurm needed: it stops, or sources, before job control)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from hpc.job import pack, trusted_run
from hpc.run.rundir import RunDir
from tests.hpc.dry_run_helpers import dry_run, job_script, no_sbatch

REPO = Path(__file__).resolve().parents[3]
NEIGHBOUR = 12345


def launched(capsys, runs: Path) -> tuple[Path, Path]:
    """The run folder and job script a launch of ``mn`` writes (the dry run's script, written as the
    launch writes it: folders 0755, the script 0755, secrets.env 0600)."""
    code, out, err = dry_run(capsys, runs)
    assert code == 0, err
    path = Path(out.split("# job script (", 1)[1].split(")", 1)[0])
    path.parent.mkdir(mode=0o755, parents=True)
    path.write_text(job_script(out))
    path.chmod(0o755)
    return runs / "mn", path


def planted_secrets(run: Path, code: str) -> Path:
    secrets = run / "secrets.env"
    secrets.write_text(code)
    secrets.chmod(0o600)
    return secrets


def run_script(script: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "HPC_"))}
    return subprocess.run(["bash", str(script)], cwd=tmp_path, env=environment, capture_output=True, text=True,
                          timeout=120)


def to_777(run: Path) -> None:
    run.chmod(0o777)


def neighbours_secrets(run: Path) -> None:
    os.chown(run / "secrets.env", NEIGHBOUR, NEIGHBOUR)


def secrets_readable(run: Path) -> None:
    (run / "secrets.env").chmod(0o644)


def scripts_open(run: Path) -> None:
    (run / "scripts").chmod(0o777)


def neighbours_folder(run: Path) -> None:
    os.chown(run, NEIGHBOUR, NEIGHBOUR)


SPOILS: dict[str, Callable[[Path], None]] = {
    "the run folder mode 0777": to_777, "the run folder owned by someone else": neighbours_folder,
    "secrets.env owned by someone else": neighbours_secrets, "secrets.env readable by others": secrets_readable,
    "scripts/ mode 0777": scripts_open,
}


@pytest.mark.parametrize("spoil", SPOILS)
def test_the_job_sources_no_secrets_file_from_a_folder_someone_else_could_change(capsys, tmp_path, spoil):
    run, script = launched(capsys, tmp_path / "runs")
    planted_secrets(run, f"touch {tmp_path / 'PWNED'}\n")
    SPOILS[spoil](run)
    result = run_script(script, tmp_path)
    assert result.returncode == 1, result.stderr
    assert not (tmp_path / "PWNED").exists()
    [line] = [line for line in result.stderr.splitlines() if "[job] error" in line]
    assert "the run's folder is not yours alone" in line and "the job stops" in line
    assert sorted(p.name for p in run.iterdir()) == ["scripts", "secrets.env"]  # nothing written


def test_the_job_starts_nothing_when_its_model_folder_became_writable_by_others(capsys, tmp_path):
    run, script = launched(capsys, tmp_path / "runs")
    planted_secrets(run, f"touch {tmp_path / 'PWNED'}\n")
    model = run / "art" / "email_agent" / "models" / "mn"
    (model / "checkpoints").mkdir(parents=True)
    (model / "checkpoints").chmod(0o777)
    result = run_script(script, tmp_path)
    assert result.returncode == 1 and f"{model / 'checkpoints'} is writable by group and others" in result.stderr
    assert not (tmp_path / "PWNED").exists()


def test_the_job_refuses_a_run_folder_that_became_a_link(capsys, tmp_path):
    run, script = launched(capsys, tmp_path / "runs")
    elsewhere = tmp_path / "elsewhere"
    run.rename(elsewhere)
    run.symlink_to(elsewhere)
    planted_secrets(elsewhere, f"touch {tmp_path / 'PWNED'}\n")
    result = run_script(elsewhere / "scripts" / script.name, tmp_path)
    assert result.returncode == 1 and "is a link" in result.stderr and not (tmp_path / "PWNED").exists()


def test_the_job_sources_the_secrets_of_a_folder_that_is_the_users_alone(capsys, tmp_path):
    run, script = launched(capsys, tmp_path / "runs")
    planted_secrets(run, "echo SOURCED >&2; exit 7\n")
    result = run_script(script, tmp_path)
    assert result.returncode == 7 and "SOURCED" in result.stderr, result.stderr


def test_the_check_is_one_line_and_exit_1_and_names_the_file(tmp_path):
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    (run / "secrets.env").write_text("A=1\n")
    (run / "secrets.env").chmod(0o640)
    result = subprocess.run([sys.executable, "-S", "-m", "hpc.job.trusted_run", str(run)], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    [line] = result.stderr.splitlines()
    assert result.returncode == 1 and f"{run / 'secrets.env'} is readable by others (mode 0640)" in line
    (run / "secrets.env").chmod(0o600)
    assert trusted_run.main([str(run), str(run / "scripts" / "missing.sbatch")]) == 0
    assert trusted_run.main([]) == 2


def test_a_packs_run_whose_folder_someone_else_could_change_sits_the_job_out(tmp_path, capsys):
    good, bad = RunDir(tmp_path / "runs" / "a"), RunDir(tmp_path / "runs" / "b")
    for run in (good, bad):
        run.make_dirs(run.scripts_dir)
        (run.scripts_dir / "x.sbatch").write_text("#!/bin/bash\n")
    (bad.scripts_dir / "x.sbatch").chmod(0o666)
    members = [pack.Member(good, good.scripts_dir / "x.sbatch"), pack.Member(bad, bad.scripts_dir / "x.sbatch")]
    chosen = pack.slots(members, 1, {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert [slot.member.run.name for slot in chosen] == ["a"]
    assert "b is not started" in capsys.readouterr().err
