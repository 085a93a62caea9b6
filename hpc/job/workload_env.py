"""The environment a job gives its workload, defined once.

``VARIABLES`` names every variable the job script gives the workload (and the blocks that run
beside it), with which jobs get it and where its value is made; docs/design.md lists the same
names (a test keeps them equal, and every name a template exports in this table). The values known
when a script is rendered are made here:

- ``job_env``: what every job exports (the run, its model folder, the cluster, internet or not),
  rendered by sbatch/base.sbatch.j2; the launcher interpolates the dotenv files' ``${HPC_*}`` with
  the same values (``launch_names``, hpc/launcher/jobspec.py), the queue preflight runs the
  trainer's checks on the login node with them (hpc/launcher/queue_preflight.py), and the GPU proof
  gives them to the commands it runs as a job would (trainer/proof/workspace.py);
- ``offline_env``: what a job on a node without internet exports (sbatch/_offline_network.sh.j2);
- ``run_slot_env``: what a pack job gives each of its runs, its GPUs and vLLM port
  (sbatch/_pack_control.sh.j2 renders it with the shell's values; the GPU proof gives its runs
  their GPUs the same way).
- ``workload_env``: all of them for one run outside a job script (the GPU proof), in the script's
  order, with the dotenv's settings named in the table

The rest is made while the job runs (the tunnel's proxy, Ray's address and token) and stays the
blocks' own. Stdlib only: the launcher, the job and the benchmarks import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

REPO_DIR = Path(__file__).resolve().parents[2]

# -- every HPC_* name, defined once ------------------------------------------------------------------------
# Python reads and writes each through its constant here (the templates and scripts spell them in bash);
# tests/test_defined_once.py fails when Python code elsewhere spells one as a string literal.
# The workload's, made when the script is rendered or by the job's blocks (VARIABLES below):
HPC_REPO = "HPC_REPO"
HPC_CLUSTER = "HPC_CLUSTER"
HPC_JOB_NAME = "HPC_JOB_NAME"
HPC_RUN_DIR = "HPC_RUN_DIR"
HPC_MODEL_DIR = "HPC_MODEL_DIR"
HPC_JOB_SCRIPT = "HPC_JOB_SCRIPT"
HPC_NO_INTERNET = "HPC_NO_INTERNET"
HPC_SIGNAL_GRACE = "HPC_SIGNAL_GRACE"
HPC_NOTIFY_PROXY = "HPC_NOTIFY_PROXY"
HPC_VLLM_PORT = "HPC_VLLM_PORT"
HPC_PACK_STOP_SIGNAL = "HPC_PACK_STOP_SIGNAL"
HPC_PACK_RUNS = "HPC_PACK_RUNS"
HPC_SETUP_ERROR = "HPC_SETUP_ERROR"
# The users' settings (dotenv, .env, --env; USER_SETTINGS), each read with a default where it is used:
HPC_RAY_JOIN_TIMEOUT = "HPC_RAY_JOIN_TIMEOUT"
HPC_RAY_HOST_SUFFIX = "HPC_RAY_HOST_SUFFIX"
HPC_STOP_TIMEOUT = "HPC_STOP_TIMEOUT"
HPC_SIGNAL_RELAY = "HPC_SIGNAL_RELAY"
HPC_WEBHOOK_URL = "HPC_WEBHOOK_URL"
HPC_WEBHOOK_TIMEOUT = "HPC_WEBHOOK_TIMEOUT"
HPC_WATCH_INTERVAL = "HPC_WATCH_INTERVAL"
HPC_STALL_STARTUP = "HPC_STALL_STARTUP"
HPC_STALL_MIN = "HPC_STALL_MIN"
HPC_STALL_FACTOR = "HPC_STALL_FACTOR"
HPC_COLLAPSE_STEPS = "HPC_COLLAPSE_STEPS"
HPC_COLLAPSE_SPREAD = "HPC_COLLAPSE_SPREAD"
HPC_PUBLIC_VARS = "HPC_PUBLIC_VARS"
# The job script's own state (JOB_STATE), beside the workload's:
HPC_JUDGE_SERVED = "HPC_JUDGE_SERVED"
HPC_WORKLOAD_ENV = "HPC_WORKLOAD_ENV"
HPC_CLEANUP = "HPC_CLEANUP"
HPC_STOP_SIGNAL = "HPC_STOP_SIGNAL"
HPC_WORKLOAD_PID = "HPC_WORKLOAD_PID"
HPC_WATCHDOG_PID = "HPC_WATCHDOG_PID"
HPC_CONT_ARGS = "HPC_CONT_ARGS"
HPC_LOG_ERR = "HPC_LOG_ERR"
HPC_RELAY_PID = "HPC_RELAY_PID"
HPC_WATCH_PID = "HPC_WATCH_PID"
HPC_KEEPER_PID = "HPC_KEEPER_PID"
HPC_PACK_MEMBERS = "HPC_PACK_MEMBERS"
HPC_PACK_PIDS = "HPC_PACK_PIDS"
HPC_JUDGE_DIR = "HPC_JUDGE_DIR"
HPC_JUDGE_PID = "HPC_JUDGE_PID"
HPC_JUDGE_DEVICES = "HPC_JUDGE_DEVICES"
HPC_TUNNEL_HOST = "HPC_TUNNEL_HOST"
HPC_TUNNEL_PORT = "HPC_TUNNEL_PORT"
HPC_TUNNEL_TIMEOUT = "HPC_TUNNEL_TIMEOUT"
HPC_TUNNEL_SSH_OPTS = "HPC_TUNNEL_SSH_OPTS"
HPC_TUNNEL_PID = "HPC_TUNNEL_PID"
HPC_RAY_NODES = "HPC_RAY_NODES"
HPC_RAY_PORT = "HPC_RAY_PORT"
HPC_RAY_TEMP_ROOT = "HPC_RAY_TEMP_ROOT"
HPC_RAY_TEMP_DIR = "HPC_RAY_TEMP_DIR"
HPC_RAY_STEPS = "HPC_RAY_STEPS"
HPC_RAY_HOSTS = "HPC_RAY_HOSTS"
HPC_RAY_HEAD = "HPC_RAY_HEAD"
HPC_RAY_HEAD_IP = "HPC_RAY_HEAD_IP"
HPC_RAY_ADDRESS = "HPC_RAY_ADDRESS"
# Outside a job script: the launcher's own environment, the remote commands, the deadline's override, the GPU proof,
# the helper scripts:
HPC_HOSTNAME = "HPC_HOSTNAME"  # the host name the launcher detects the cluster from
HPC_REMOTE_DIR = "HPC_REMOTE_DIR"  # --remote: the checkout on the login node (hpc/remote/options.py)
HPC_REMOTE_SSH_OPTS = "HPC_REMOTE_SSH_OPTS"  # --remote: ssh options before ours
HPC_PROG = "HPC_PROG"  # the monitor's name in its help, as the calling script named it
HPC_CALLER_DIR = "HPC_CALLER_DIR"  # the monitor's caller's directory: relative paths are read from it
HPC_JOB_END_TIME = "HPC_JOB_END_TIME"  # epoch seconds; wins over Slurm's end time (hpc/job/deadline.py)
HPC_PROOF_GPU_FRACTION = "HPC_PROOF_GPU_FRACTION"  # the GPU proof's card emulation
HPC_PROOF_TORCH_PEAKS = "HPC_PROOF_TORCH_PEAKS"  # the GPU proof's card emulation
HPC_SCRIPTS_DIR = "HPC_SCRIPTS_DIR"  # scripts/common.sh: the helper scripts' folder (bash only)
HPC_REPO_DIR = "HPC_REPO_DIR"  # scripts/common.sh: the checkout the helper scripts run from (bash only)

HPC_NAMES: frozenset[str] = frozenset(value for name, value in dict(globals()).items() if name.startswith("HPC_"))

_LOOP = "job control's own state in the job script"
_PACK = "set by a pack job, for each run it runs"
_TUNNEL = "set by the job's SSH tunnel block"
_RAY = "set by the job's Ray cluster block (multi-node jobs)"
_JUDGE = "set by the served judge's block (--judge_serve)"
# name -> who sets it: the job script's own state, beside the workload's variables; no user layer may set one
# (hpc/launcher/managed_vars.py)
JOB_STATE = {
    HPC_JOB_SCRIPT: "set by the launcher (the job script's own path)",
    HPC_JUDGE_SERVED: "set by the launcher's preflight (--judge_serve): the model the job will serve as the judge",
    HPC_WORKLOAD_ENV: _LOOP, HPC_CLEANUP: _LOOP, HPC_STOP_SIGNAL: _LOOP, HPC_WORKLOAD_PID: _LOOP,
    HPC_WATCHDOG_PID: _LOOP, HPC_CONT_ARGS: _LOOP, HPC_LOG_ERR: _LOOP, HPC_RELAY_PID: _LOOP, HPC_WATCH_PID: _LOOP,
    HPC_KEEPER_PID: _LOOP,
    HPC_PACK_MEMBERS: _PACK, HPC_PACK_PIDS: _PACK,
    HPC_JUDGE_DIR: _JUDGE, HPC_JUDGE_PID: _JUDGE, HPC_JUDGE_DEVICES: _JUDGE,
    HPC_TUNNEL_HOST: _TUNNEL, HPC_TUNNEL_PORT: _TUNNEL, HPC_TUNNEL_TIMEOUT: _TUNNEL,
    HPC_TUNNEL_SSH_OPTS: _TUNNEL, HPC_TUNNEL_PID: _TUNNEL,
    HPC_RAY_NODES: _RAY, HPC_RAY_PORT: _RAY, HPC_RAY_TEMP_ROOT: _RAY, HPC_RAY_TEMP_DIR: _RAY,
    HPC_RAY_STEPS: _RAY, HPC_RAY_HOSTS: _RAY, HPC_RAY_HEAD: _RAY, HPC_RAY_HEAD_IP: _RAY, HPC_RAY_ADDRESS: _RAY,
    HPC_HOSTNAME: "read from the launcher's own environment, not the job's "
                  "(HPC_HOSTNAME=NAME python -m hpc.launch ... picks the cluster)",
}
# The HPC_* names users set (dotenv, .env, --env): each is read with a default where it is used.
USER_SETTINGS = (HPC_RAY_JOIN_TIMEOUT, HPC_RAY_HOST_SUFFIX, HPC_STOP_TIMEOUT, HPC_SIGNAL_RELAY, HPC_WEBHOOK_URL,
                 HPC_WEBHOOK_TIMEOUT, HPC_WATCH_INTERVAL, HPC_STALL_STARTUP, HPC_STALL_MIN, HPC_STALL_FACTOR,
                 HPC_COLLAPSE_STEPS, HPC_COLLAPSE_SPREAD, HPC_PUBLIC_VARS)



@dataclass(frozen=True)
class Variable:
    """One variable the workload gets: which jobs give it, where its value comes from, what it says."""

    name: str
    when: str
    source: str
    what: str


VARIABLES: tuple[Variable, ...] = (
    Variable(HPC_REPO, "every job", "job_env", "the repository the job runs from"),
    Variable(HPC_CLUSTER, "every job", "job_env", "the cluster's name in hpc/launcher/clusters.yaml"),
    Variable(HPC_JOB_NAME, "every job", "job_env", "the run's name (a pack job's own name in its script)"),
    Variable(HPC_RUN_DIR, "every job", "job_env", "the run directory (hpc/run/rundir.py)"),
    Variable(HPC_MODEL_DIR, "every job but a pack's own script", "job_env",
             "the run's model folder, where ART writes checkpoints/ (hpc.run.checkpoints.model_dir)"),
    Variable(HPC_JOB_SCRIPT, "every job", "job_env", "the job script itself"),
    Variable(HPC_NO_INTERNET, "every job", "job_env",
             "1 where compute nodes have no internet, else 0 (the trainer then logs W&B offline)"),
    Variable(HPC_SIGNAL_GRACE, "every job but a pack's own script", "_job_control.sh.j2",
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
    Variable(HPC_NOTIFY_PROXY, "every job but a pack's own script", "_watch.sh.j2",
             "the workload's ALL_PROXY (empty without one), for hpc/job/notify.py only"),
    Variable("RAY_ADDRESS", "multi-node", "_ray_cluster.sh.j2", "the job's Ray head, <ip>:<port>"),
    Variable("RAY_AUTH_MODE", "multi-node", "_ray_cluster.sh.j2", "token: only holders of the token use the cluster"),
    Variable("RAY_AUTH_TOKEN", "multi-node", "_ray_cluster.sh.j2", "the job's random token, made at run time"),
    Variable("RAY_USAGE_STATS_ENABLED", "multi-node", "_ray_cluster.sh.j2", "0: Ray reports nothing home"),
    Variable("CUDA_VISIBLE_DEVICES", "a pack's run; a job that serves a judge", "run_slot_env, _judge_server.sh.j2",
             "the run's own GPUs (the judge's are left out)"),
    Variable(HPC_VLLM_PORT, "a pack's run", "run_slot_env", "the run's own vLLM port (ART's register)"),
    Variable(HPC_SIGNAL_RELAY, "a pack's run", "_pack_control.sh.j2", "0: the pack's script relays signals"),
    Variable(HPC_PACK_STOP_SIGNAL, "a pack's run", "_pack_control.sh.j2", "a stop signal that came before it started"),
    Variable(HPC_PACK_RUNS, "a pack's run", "_pack_control.sh.j2", "how many runs share the job (accounting)"),
    Variable(HPC_SETUP_ERROR, "a job whose setup failed", "_judge_server.sh.j2",
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
    Variable(HPC_WEBHOOK_URL, "runs with a webhook", "secrets.env", "told when the run is done, failed or stalls"),
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
    names = {HPC_REPO: str(repo), HPC_CLUSTER: cluster}
    if job_name is not None:
        names[HPC_JOB_NAME] = job_name
    return names


def job_env(job: Job) -> dict[str, str]:
    """What every job script exports for its workload, known when it is rendered, in the script's order."""
    env = {**launch_names(job.cluster, job.job_name or job.run_dir.name, job.repo), HPC_RUN_DIR: str(job.run_dir)}
    if job.model_dir is not None:
        env[HPC_MODEL_DIR] = str(job.model_dir)
    if job.script is not None:
        env[HPC_JOB_SCRIPT] = str(job.script)
    env[HPC_NO_INTERNET] = "0" if job.internet else "1"
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
        env[HPC_VLLM_PORT] = vllm_port
    return env


DOTENV_SETTINGS = tuple(v.name for v in VARIABLES if v.source.startswith("dotenv"))


def workload_env(job: Job, settings: Mapping[str, str], *, offline: bool, devices: str = "") -> dict[str, str]:
    """What a job gives its workload, in its script's order, for one run outside a job script (the
    GPU proof): ``job_env``, the no-internet settings, the dotenv's ``settings`` (names of
    DOTENV_SETTINGS only) and, with ``devices``, the run's GPUs as a pack gives them."""
    unknown = sorted(set(settings) - set(DOTENV_SETTINGS))
    if unknown:
        raise ValueError(f"not a dotenv setting of the workload's variables: {', '.join(unknown)}")
    return {**job_env(job), **(offline_env() if offline else {}), **settings,
            **(run_slot_env(devices) if devices else {})}


def table() -> str:
    """``VARIABLES`` as the markdown table of docs/design.md ("Environment the job gives the workload")."""
    rows = ["| variable | which jobs | made by | what it tells the workload |", "| --- | --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.when} | {v.source} | {v.what} |" for v in VARIABLES]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
