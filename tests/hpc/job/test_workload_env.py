"""The environment a job gives its workload is defined once (hpc/job/workload_env.py) and is what the
job scripts, the dotenv interpolation, the queue preflight and the GPU proof all use."""

import re
import shlex
from pathlib import Path

import pytest

from hpc.job import workload_env
from hpc.launcher import jobspec, launch, queue_preflight, single_run
from hpc.launcher.clusters import load_registry
from hpc.run.checkpoints import model_dir
from tests.hpc.launcher import golden_scripts
from trainer.proof.workspace import Work

REPO = Path(__file__).resolve().parents[3]
NAMES = {variable.name for variable in workload_env.VARIABLES}
FROM_DOTENV = ("dotenv", "dotenv, --judge_serve", "secrets.env")


def golden_texts() -> list[str]:
    return [path.read_text() for path in sorted(golden_scripts.GOLDEN_DIR.glob("*.sbatch"))]


def dotenv_names() -> set[str]:
    return {line.split("=", 1)[0] for path in (REPO / "dotenv").glob("*.env")
            for line in path.read_text().splitlines() if re.match(r"[A-Z_][A-Z0-9_]*=", line)}


def given_names(script: str) -> set[str]:
    """Every name a script exports, adds to the workload's own environment, or sets on a run's command line."""
    names = set()
    for line in script.splitlines():
        words = shlex.split(line, comments=True) if line.strip().startswith("export ") else []
        names |= {word.split("=", 1)[0] for word in words[1:]}
    for block in re.findall(r"HPC_WORKLOAD_ENV\+=\((.*?)\n\)", script, re.DOTALL):
        names |= set(re.findall(r'"([A-Z_]+)=', block))
    for command in re.findall(r'env "\$\{HPC_WORKLOAD_ENV\[@\]\}" (.*?)python', script, re.DOTALL):
        names |= set(re.findall(r"([A-Z_]+)=", command))
    return names


def spec_for(*flags: str):
    with golden_scripts.fixed_machine():
        args = launch.build_parser().parse_args(["--cluster", "jureca", *golden_scripts.BASE_FLAGS, *flags])
        return single_run.spec_from_args(args, load_registry())


def test_the_design_page_holds_the_table_the_module_prints():
    assert workload_env.table() in (REPO / "docs" / "design.md").read_text()


def test_every_name_a_job_script_gives_its_workload_is_defined_once_or_comes_from_the_dotenv():
    given = set().union(*(given_names(text) for text in golden_texts()))
    assert {"HPC_RUN_DIR", "HF_HUB_OFFLINE", "RAY_ADDRESS", "CUDA_VISIBLE_DEVICES", "HPC_VLLM_PORT"} <= given
    assert given - NAMES - dotenv_names() == set()


def test_every_name_the_module_says_a_script_makes_is_in_some_script():
    scripts = "".join(golden_texts())
    made_by_scripts = {v.name for v in workload_env.VARIABLES if v.source not in FROM_DOTENV}
    assert {name for name in made_by_scripts if name not in scripts} == set()
    assert len(NAMES) == len(workload_env.VARIABLES)


def test_a_job_script_exports_job_env_in_its_order():
    spec = spec_for()
    exported = [line.split("=", 1)[0].removeprefix("export ")
                for line in single_run.render_script(spec).splitlines() if line.startswith("export HPC_")]
    assert exported[:7] == list(workload_env.job_env(spec.workload_job())) == [
        "HPC_REPO", "HPC_CLUSTER", "HPC_JOB_NAME", "HPC_RUN_DIR", "HPC_MODEL_DIR", "HPC_JOB_SCRIPT", "HPC_NO_INTERNET"]


def test_the_dotenv_files_are_interpolated_with_the_names_the_job_exports():
    spec = spec_for()
    job = workload_env.job_env(spec.workload_job())
    outer = jobspec.outer_env(spec.cluster, spec.job_name)
    assert {name: outer[name] for name in ("HPC_REPO", "HPC_CLUSTER", "HPC_JOB_NAME")} == \
        {name: job[name] for name in ("HPC_REPO", "HPC_CLUSTER", "HPC_JOB_NAME")}


def test_the_queue_preflight_runs_with_what_the_job_exports():
    spec = spec_for("--judge_serve", golden_scripts.JUDGE)
    env = queue_preflight.job_env(spec)
    job = workload_env.job_env(spec.workload_job())
    assert {name: env[name] for name in job} == job
    assert env["HPC_MODEL_DIR"] == str(spec.model_dir) and env["HPC_NO_INTERNET"] == "1"
    assert env["HPC_JUDGE_SERVED"] == golden_scripts.JUDGE


def test_the_gpu_proofs_commands_get_what_a_workload_gets_with_arts_model_folder(tmp_path):
    work = Work(tmp_path, judge_url="http://127.0.0.1:1/v1", devices="1")
    env = work.env()
    cluster = load_registry().detect().cluster
    job = workload_env.job_env(workload_env.Job(work.run.path, work.model_dir, cluster.name, cluster.internet))
    assert {name: env[name] for name in job} == job
    assert Path(env["HPC_MODEL_DIR"]) == model_dir(tmp_path / "art", "email_agent", "proof") == work.model_dir
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # the run's GPUs, as a pack gives them (run_slot_env)


def test_a_workload_run_outside_a_job_script_gets_the_jobs_variables_in_the_scripts_order(tmp_path):
    job = workload_env.Job(tmp_path / "run", tmp_path / "model", "local", internet=True)
    settings = {"ART_PATH": str(tmp_path / "art"), "DATA_DIR": str(tmp_path / "data"), "JUDGE_API_BASE": "http://j/v1"}
    env = workload_env.workload_env(job, settings, offline=True, devices="1")
    assert env == {**workload_env.job_env(job), **workload_env.offline_env(), **settings, "CUDA_VISIBLE_DEVICES": "1"}
    assert "HF_HUB_OFFLINE" not in workload_env.workload_env(job, settings, offline=False)
    assert set(workload_env.DOTENV_SETTINGS) <= NAMES


def test_a_setting_that_is_no_dotenv_variable_of_the_table_is_refused_by_name(tmp_path):
    job = workload_env.Job(tmp_path / "run", None, "local", internet=False)
    with pytest.raises(ValueError, match="not a dotenv setting of the workload's variables: PYTHONPATH"):
        workload_env.workload_env(job, {"PYTHONPATH": "/x", "DATA_DIR": "/d"}, offline=True)
