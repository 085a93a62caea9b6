"""Helpers for tests that read the job script out of a dry run (no Slurm involved).

The fixtures are for modules that import them (autouse ones then apply to
that module only): render-only dry runs, on a JSC login node's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc.launcher import launch, single_run


@pytest.fixture(autouse=True)
def no_sbatch(monkeypatch):
    """Render-only: no `sbatch --test-only` even where Slurm is installed."""
    monkeypatch.setattr(single_run.slurm, "sbatch_path", lambda: None)


@pytest.fixture(autouse=True)
def jsc_environment(monkeypatch):
    """The JSC dotenv files build paths from $SCRATCH and $USER, as on a login node."""
    monkeypatch.setenv("SCRATCH", "/p/scratch/proj")
    monkeypatch.setenv("USER", "alice")


@pytest.fixture
def runs(tmp_path) -> Path:
    return tmp_path / "runs"


def dry_run(capsys, runs_dir: Path, *extra: str, cluster: str = "local", nodes: int = 1) -> tuple[int, str, str]:
    """`python -m hpc.launch ... --dry_run` in-process: (exit code, stdout, stderr)."""
    code = launch.main(["--cluster", cluster, "--job_name", "mn", "--time_limit", "60", "--runs_dir",
                        str(runs_dir), "--num_nodes", str(nodes), "--dry_run", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def job_script(out: str) -> str:
    """The script part of a dry run's output."""
    start = out.index("\n", out.index("# job script (")) + 1
    return out[start:out.index("\n# command\n")]


def ok_script(capsys, runs_dir: Path, *extra: str, **kwargs) -> str:
    """The job script of a dry run that must succeed."""
    code, out, err = dry_run(capsys, runs_dir, *extra, **kwargs)
    assert code == 0, err
    return job_script(out)
