"""The environment a job gives its workload, defined once.

``VARIABLES`` names every variable the job script gives the workload (and the blocks that run
beside it), with which jobs get it and where its value is made; docs/design.md lists the same
names (a test keeps them equal, and every name a template exports in this table). The values known
when a script is rendered are made here:

- ``job_env``: what every job exports (the run, its model folder, the cluster, internet or not),
  rendered by sbatch/base.sbatch.j2; the launcher interpolates the dotenv files' ``${HPC_*}`` with
  the same values (``launch_names``, hpc/launcher/jobspec.py), the queue preflight runs the
  trainer's checks on the login node with them (hpc/launcher/queue_preflight.py), and the GPU proof
  gives them to the commands it runs as a job would (bench/gpu_proof_kit.py);
- ``offline_env``: what a job on a node without internet exports (sbatch/_offline_network.sh.j2);
- ``run_slot_env``: what a pack job gives each of its runs, its GPUs and vLLM port
  (sbatch/_pack_control.sh.j2 renders it with the shell's values; the GPU proof gives its runs
  their GPUs the same way).

The rest is made while the job runs (the tunnel's proxy, Ray's address and token) and stays the
blocks' own. Stdlib only: the launcher, the job and the benchmarks import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Variable:
    """One variable the workload gets: which jobs give it, where its value comes from, what it says."""

    name: str
    when: str
    source: str
    what: str


VARIABLES: tuple[Variable, ...] = (
    Variable("HPC_REPO", "every job", "job_env", "the repository the job runs from"),
    Variable("HPC_CLUSTER", "every job", "job_env", "the cluster's name in hpc/launcher/clusters.yaml"),
    Variable("HPC_JOB_NAME", "every job", "job_env", "the run's name (a pack job's own name in its script)"),
    Variable("HPC_RUN_DIR", "every job", "job_env", "the run directory (hpc/run/rundir.py)"),
    Variable("HPC_MODEL_DIR", "every job but a pack's own script", "job_env",
             "the run's model folder, where ART writes checkpoints/ (hpc.run.checkpoints.model_dir)"),
    Variable("HPC_JOB_SCRIPT", "every job", "job_env", "the job script itself"),
    Variable("HPC_NO_INTERNET", "every job", "job_env",
             "1 where compute nodes have no internet, else 0 (the trainer then logs W&B offline)"),
    Variable("HPC_SIGNAL_GRACE", "every job but a pack's own script", "_job_control.sh.j2",
             "the job's --signal_grace: the stop-at-boundary rule's deadline (hpc/job/deadline.py)"),
    Variable("HF_HUB_OFFLINE", "no internet", "offline_env", "1: Hugging Face loads from its cache only"),
    Variable("WANDB_MODE", "no internet", "offline_env", "offline: W&B writes offline runs (wandb sync later)"),
    Variable("WANDB_ERROR_REPORTING", "no internet", "offline_env",
             "false: W&B sends no crash reports (each try at exit waited on retries that cannot reach Sentry)"),
    Variable("HTTPS_PROXY", "no internet, through the tunnel", "_offline_network.sh.j2",
             "the SOCKS tunnel, to the workload only"),
    Variable("ALL_PROXY", "no internet, through the tunnel", "_offline_network.sh.j2",
             "the SOCKS tunnel, to the workload only"),
    Variable("NO_PROXY", "no internet, through the tunnel", "_offline_network.sh.j2",
             "this node and the job's nodes stay direct (vLLM, Ray)"),
    Variable("DISABLE_AIOHTTP_TRANSPORT", "no internet, through the tunnel", "_offline_network.sh.j2",
             "True: litellm uses httpx, which can use a SOCKS proxy"),
    Variable("HPC_NOTIFY_PROXY", "every job but a pack's own script", "_watch.sh.j2",
             "the workload's ALL_PROXY (empty without one), for hpc/job/notify.py only"),
    Variable("RAY_ADDRESS", "multi-node", "_ray_cluster.sh.j2", "the job's Ray head, <ip>:<port>"),
    Variable("RAY_AUTH_MODE", "multi-node", "_ray_cluster.sh.j2", "token: only holders of the token use the cluster"),
    Variable("RAY_AUTH_TOKEN", "multi-node", "_ray_cluster.sh.j2", "the job's random token, made at run time"),
    Variable("RAY_USAGE_STATS_ENABLED", "multi-node", "_ray_cluster.sh.j2", "0: Ray reports nothing home"),
    Variable("CUDA_VISIBLE_DEVICES", "a pack's run; a job that serves a judge", "run_slot_env, _judge_server.sh.j2",
             "the run's own GPUs (the judge's are left out)"),
    Variable("HPC_VLLM_PORT", "a pack's run", "run_slot_env", "the run's own vLLM port (ART's register)"),
    Variable("HPC_SIGNAL_RELAY", "a pack's run", "_pack_control.sh.j2", "0: the pack's script relays signals"),
    Variable("HPC_PACK_STOP_SIGNAL", "a pack's run", "_pack_control.sh.j2", "a stop signal that came before it started"),
    Variable("HPC_PACK_RUNS", "a pack's run", "_pack_control.sh.j2", "how many runs share the job (accounting)"),
    Variable("HPC_SETUP_ERROR", "a job whose setup failed", "_judge_server.sh.j2",
             "why: job control records a failed job without starting the workload"),
    Variable("SRUN_CPUS_PER_TASK", "JSC clusters", "jsc.sbatch.j2", "the whole allocation's CPUs for srun's steps"),
    # From the merged dotenv (dotenv/common.env, dotenv/<cluster>.env, .env, --env), exported after job_env:
    Variable("ART_PATH", "every job", "dotenv", "ART's folder: the model folders live in it"),
    Variable("DATA_DIR", "every job", "dotenv", "the email database and scenarios (python -m trainer.data prepare)"),
    Variable("HF_HOME", "clusters that set it", "dotenv", "the Hugging Face cache"),
    Variable("ART_VLLM_RUNTIME_CACHE_DIR", "every job", "dotenv", "where ART's vLLM runtime was built (setup.sh)"),
    Variable("JUDGE_MODEL", "every job", "dotenv, --judge_serve", "the judge's litellm model name"),
    Variable("JUDGE_API_BASE", "a judge in the cluster", "dotenv, --judge_serve",
             "an OpenAI-compatible judge (one served in the job: hpc/launcher/judge_serve.py)"),
    # Secrets: only in the run's 0600 secrets.env, sourced at run time (never in the script).
    Variable("JUDGE_API_KEY", "a judge that needs a key", "secrets.env",
             "the judge's key (or the provider's own *_API_KEY)"),
    Variable("WANDB_API_KEY", "runs that log to W&B", "secrets.env", "W&B's key: the trainer logs there when set"),
    Variable("HPC_WEBHOOK_URL", "runs with a webhook", "secrets.env", "told when the run is done, failed or stalls"),
)


@dataclass(frozen=True)
class Job:
    """What a job script knows of its workload when it is rendered."""

    run_dir: Path
    model_dir: Path | None  # None: a pack job's own script (each run's script names its own)
    cluster: str
    internet: bool
    job_name: str | None = None  # None: the run directory's name
    script: Path | None = None  # None outside a job script (the queue preflight, the GPU proof)
    repo: Path = REPO_DIR


def launch_names(cluster: str, job_name: str | None = None, repo: Path = REPO_DIR) -> dict[str, str]:
    """The names of the job a dotenv file's ``${...}`` may use before the run directory is known."""
    names = {"HPC_REPO": str(repo), "HPC_CLUSTER": cluster}
    if job_name is not None:
        names["HPC_JOB_NAME"] = job_name
    return names


def job_env(job: Job) -> dict[str, str]:
    """What every job script exports for its workload, known when it is rendered, in the script's order."""
    env = {**launch_names(job.cluster, job.job_name or job.run_dir.name, job.repo), "HPC_RUN_DIR": str(job.run_dir)}
    if job.model_dir is not None:
        env["HPC_MODEL_DIR"] = str(job.model_dir)
    if job.script is not None:
        env["HPC_JOB_SCRIPT"] = str(job.script)
    env["HPC_NO_INTERNET"] = "0" if job.internet else "1"
    return env


def offline_env() -> dict[str, str]:
    """What a job on a node without internet exports for everything it runs: Hugging Face and W&B offline,
    and W&B's crash reports off (ART imports wandb, which tried Sentry three times as a run ended on an
    offline GPU node, even with WANDB_MODE set)."""
    return {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}


def run_slot_env(devices: str, vllm_port: str | None = None) -> dict[str, str]:
    """What a pack job gives one of its runs: its GPUs and, when it has one, its own vLLM port."""
    env = {"CUDA_VISIBLE_DEVICES": devices}
    if vllm_port is not None:
        env["HPC_VLLM_PORT"] = vllm_port
    return env


def table() -> str:
    """``VARIABLES`` as the markdown table of docs/design.md ("Environment the job gives the workload")."""
    rows = ["| variable | which jobs | made by | what it tells the workload |", "| --- | --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.when} | {v.source} | {v.what} |" for v in VARIABLES]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
