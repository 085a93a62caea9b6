"""Run integrity on the real local Slurm: runs sharing one ART_PATH (as every cluster
preset's dotenv sets it) never share a model folder; the guard refuses another run's folder
at launch and in the job; --init_from starts a run from another's checkpoint in its own
folder; and a secret passed in any way is nowhere but the run's secrets.env."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpc.run import checkpoints as ck
from hpc.run import ownership
from hpc.run.rundir import RunDir
from tests.hpc.slurm_helpers import cancel, launch, wait_for_final_state
from tests.scripts.slurm_util import run_script, wait_running
from tests.test_readme import clean_copy

pytestmark = pytest.mark.slurm
STEP_TRAINER = "tests.doubles.step_trainer"


def job_id_of(result: subprocess.CompletedProcess) -> str:
    match = re.search(r"submitted job (\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    return match.group(1)


def launch_run(runs: Path, art: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return launch("--cluster", "local", "--job_name", name, "--time_limit", "5", "--runs_dir", str(runs),
                  "--env", f"ART_PATH={art}", "--entrypoint", STEP_TRAINER, "--gpus_per_node", "0", *extra)


def test_runs_sharing_an_art_path_train_apart_and_init_from_starts_from_anothers_step(slurm, tmp_path):
    runs, art = tmp_path / "runs", tmp_path / "scratch" / "art"  # one ART_PATH, as the cluster presets have
    jobs = {}
    for name in ("lr_a", "lr_b"):
        result = launch_run(runs, art, name, "--train_arg", "steps=3", "--train_arg", "step_seconds=0.2")
        assert result.returncode == 0, result.stderr
        jobs[name] = job_id_of(result)
    try:
        for job in jobs.values():
            assert wait_for_final_state(job)["State"] == "COMPLETED"
        folders = {name: ck.model_dir(art, "email_agent", name) for name in jobs}
        assert folders["lr_a"] != folders["lr_b"]
        for name, folder in folders.items():
            assert [c.step for c in ck.list_checkpoints(folder)] == [0, 1, 2, 3]
            assert ownership.owner_of(folder)["run_dir"] == str((runs / name).resolve())

        result = launch_run(runs, art, "tuned", "--init_from", "lr_a:2", "--train_arg", "steps=2",
                            "--train_arg", "step_seconds=0.2")
        assert result.returncode == 0, result.stderr
        jobs["tuned"] = job_id_of(result)
        assert wait_for_final_state(jobs["tuned"])["State"] == "COMPLETED"
        tuned = ck.model_dir(art, "email_agent", "tuned")
        weights = ck.ADAPTER_WEIGHTS
        assert (ck.step_dir(tuned, 0) / weights).read_bytes() == (ck.step_dir(folders["lr_a"], 2) / weights).read_bytes()
        assert [c.step for c in ck.list_checkpoints(tuned)] == [0, 1, 2]
        assert [c.step for c in ck.list_checkpoints(folders["lr_a"])] == [0, 1, 2, 3], "the source is untouched"
        assert RunDir(runs / "tuned").read_model_record()["init_from"]["step"] == 2
    finally:
        cancel(list(jobs.values()))


def test_the_guard_refuses_another_runs_folder_at_launch_and_in_the_job(slurm, tmp_path):
    art = tmp_path / "art"
    first = launch_run(tmp_path / "runs_a", art, "exp", "--sbatch_arg=--hold")
    assert first.returncode == 0, first.stderr
    job = job_id_of(first)
    try:
        refused = launch_run(tmp_path / "runs_b", art, "exp")  # same name, another runs directory
        assert refused.returncode == 2 and "belongs to run exp" in refused.stderr
        assert not (tmp_path / "runs_b").exists()

        # Another run takes the folder while the first job waits (held): its begin hook refuses.
        thief = RunDir(tmp_path / "runs_c" / "thief")
        thief.path.mkdir(parents=True)
        model = ck.model_dir(art, "email_agent", "exp")
        ownership.owner_file(model).write_text(json.dumps({"run_dir": str(thief.path), "job_name": "thief"}))
        subprocess.run(["scontrol", "release", job], check=True, timeout=30)
        info = wait_for_final_state(job)
        assert info["State"] == "FAILED" and info["ExitCode"].startswith("3:"), info
        run = RunDir(tmp_path / "runs_a" / "exp")
        assert "belongs to run thief" in run.read_failed()["reason"]
        assert ck.list_checkpoints(model) == [], "the job trained nothing into the other run's folder"
    finally:
        cancel([job])


# -- secrets ----------------------------------------------------------------------------------

# Values as a key, token or password can be: printable, no quotes, backslash or '$' (the
# dotenv syntax and ${...} references give those meaning), prefixed so a short draw cannot
# occur by chance in a binary checkpoint.
SECRET = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF, exclude_characters="'\"\\$`#"),
                 min_size=8, max_size=40).map(lambda s: f"sk-{s}")


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone-like copy of the repository whose .env this test may write."""
    return clean_copy(tmp_path_factory.mktemp("secrets") / "repo")


def leaks(secret: str, places: dict[str, bytes]) -> list[str]:
    needle = secret.encode()
    return [name for name, data in places.items() if needle in data]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != "secrets.env"}


def job_processes() -> bytes:
    return subprocess.run(["ps", "-eo", "args"], capture_output=True, timeout=30).stdout


@settings(max_examples=3, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(flag_secret=SECRET, dotenv_secret=SECRET)
def test_a_secret_is_only_ever_in_secrets_env(slurm, repo_copy, tmp_path, flag_secret, dotenv_secret):
    """Through --env, the repo's .env and a value built from a secret, into a real job."""
    (repo_copy / ".env").write_text(f'DOTENV_TOKEN="{dotenv_secret}"\nJUDGE_URL=https://u:${{DOTENV_TOKEN}}@judge\n')
    runs = tmp_path / "runs" / hashlib.sha1(flag_secret.encode()).hexdigest()[:8]
    name = "sec"
    command = [sys.executable, "-m", "hpc.launch", "--cluster", "local", "--job_name", name, "--time_limit", "5",
               "--runs_dir", str(runs), "--gpus_per_node", "0", "--entrypoint", "tests.doubles.echo_workload",
               "--env", f"GEMINI_API_KEY={flag_secret}", "--env", "ECHO_SLEEP=5",
               "--env", "ECHO_HASH_NAMES=GEMINI_API_KEY,DOTENV_TOKEN,JUDGE_URL"]
    env = {**os.environ, "HPC_HOSTNAME": "ci-workstation"}
    preview = subprocess.run([*command, "--dry_run"], cwd=repo_copy, env=env, capture_output=True, timeout=120)
    places = {"dry run": preview.stdout + preview.stderr}
    result = subprocess.run(command, cwd=repo_copy, env=env, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    places["launcher"] = result.stdout + result.stderr
    job = re.search(rb"submitted job (\d+)", result.stdout).group(1).decode()
    try:
        wait_running([job], timeout=120)
        places["ps while running"] = job_processes()
        places["scontrol show job"] = subprocess.run(["scontrol", "show", "job", "-dd", job], capture_output=True,
                                                     timeout=30).stdout
        places["status.sh"] = run_script("status.sh", "--runs_dir", str(runs)).stdout.encode()
        assert wait_for_final_state(job)["State"] == "COMPLETED"
        for helper in ("status.sh", "scompleted.sh", "sfail.sh"):
            shown = run_script(helper, "--runs_dir", str(runs))
            places[f"{helper} after"] = (shown.stdout + shown.stderr).encode()
        places.update(files_under(runs))
        secrets_file = runs / name / "secrets.env"
        assert oct(secrets_file.stat().st_mode & 0o777) == "0o600"
        for secret in (flag_secret, dotenv_secret):
            assert secret.encode() in secrets_file.read_bytes()
            assert leaks(secret, places) == [], f"{secret!r} leaked"
        digests = json.loads((runs / name / "echo.json").read_text())["sha256"]
        assert digests["GEMINI_API_KEY"] == hashlib.sha256(flag_secret.encode()).hexdigest(), "delivered"
        assert digests["JUDGE_URL"] == hashlib.sha256(f"https://u:{dotenv_secret}@judge".encode()).hexdigest()
    finally:
        cancel([job])
        shutil.rmtree(runs, ignore_errors=True)
