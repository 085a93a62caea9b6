"""Slurm calls from inside a job (hpc/job/slurm_calls.py)."""

from hpc.job import slurm_calls


def test_slurm_env_drops_the_jobs_own_slurm_variables(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("HPC_RUN_DIR", "/r")
    env = slurm_calls.slurm_env()
    assert "SLURM_JOB_ID" not in env and env["SLURM_CONF"] == "/etc/slurm/slurm.conf" and env["HPC_RUN_DIR"] == "/r"
