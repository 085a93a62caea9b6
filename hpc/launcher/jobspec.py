"""The job specification: every launcher input, validated, in one record.

All checks happen here, before anything is rendered, written or submitted, so
a bad value costs the user one clear line and exit code 2, never a half-made
run directory. The record then gives the template its context.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpc.errors import UsageError
from hpc.job.continuation_modes import ContinuationMode
from hpc.job.workload_env import HPC_RAY_JOIN_TIMEOUT, REPO_DIR, Job, job_env, launch_names
from hpc.launcher.clusters import Cluster, Detection
from hpc.launcher.envfiles import EnvLayer, MergedEnv, parse_env_flags, read_dotenv, resolve_one
from hpc.launcher.managed_vars import refuse_managed
from hpc.launcher.network import Tunnel
from hpc.launcher.timelimit import ACCEPTED as TIME_FORMATS
from hpc.launcher.timelimit import format_minutes, parse_time_limit
from hpc.run.rundir import RUN_NAME_RE, RunDir

if TYPE_CHECKING:
    from hpc.launcher.judge_serve import JudgeServe
    from hpc.launcher.trainer_config import TrainerConfig
    from hpc.run.init_from import Source

DOTENV_DIR = REPO_DIR / "dotenv"
DEFAULT_ENTRYPOINT = "trainer.train"
DEFAULT_CONFIG = "agent_008"
DEFAULT_RAY_JOIN_TIMEOUT = 300  # seconds; HPC_RAY_JOIN_TIMEOUT in the dotenv or --env overrides
DEFAULT_SIGNAL_GRACE = 300  # seconds: time to finish the step in flight and save its checkpoint
# Variables whose values the launcher writes into paths, #SBATCH and job-script lines or the dry run,
# or the job prints (with the cluster's account variable): none may be built from a secret.
PRINTED_SETTINGS = ("RUNS_DIR", "ART_PATH", "DATA_DIR", "HF_HOME", "HF_HUB_CACHE", "WANDB_DIR",
                    "ART_VLLM_RUNTIME_CACHE_DIR", "ART_VLLM_RUNTIME_BIN", "TUNNEL_HOST", "TUNNEL_PORT",
                    "TUNNEL_SSH_OPTS", "TUNNEL_TIMEOUT", "JUDGE_SERVE_MODEL", "JUDGE_SERVE_GPUS", "JUDGE_SERVE_PORT",
                    "JUDGE_SERVE_MAX_MODEL_LEN", "JUDGE_SERVE_MAX_OUTPUT_TOKENS", "JUDGE_SERVE_TIMEOUT",
                    HPC_RAY_JOIN_TIMEOUT)

# '=' and '+' appear in sweep runs' names (lr_sweep.learning_rate=2e-5.seed=1; hpc/launcher/sweeps.py).
JOB_NAME_RE = RUN_NAME_RE  # a job's name is its run's (hpc/run/rundir.py)
MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
TRAIN_ARG_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
MEM_RE = re.compile(r"[0-9]+[KMGT]?")
# Partition, account, QOS, constraint: Slurm names and constraint expressions
# (gpu&h100, [a|b]*2); no whitespace, quotes, backslashes or '#'.
SLURM_WORD_RE = re.compile(r"[A-Za-z0-9._:,@&|+=*!\[\]()/-]+")


@dataclass(frozen=True)
class Continuation:
    """How the run continues after a job ends (see hpc/job/end_decision.py)."""

    mode: ContinuationMode
    max_resubmits: int
    max_failures: int
    chain: int  # jobs pre-submitted at launch (1 unless --chain)


@dataclass(frozen=True)
class PackMember:
    run_dir: str
    script: str


@dataclass(frozen=True)
class Pack:
    """The runs a pack job runs (sbatch/_pack_control.sh.j2)."""

    sweep: str
    members: tuple[PackMember, ...]
    gpus_per_run: int


@dataclass
class JobSpec:
    job_name: str
    detection: Detection
    time_limit: str
    partition: str | None
    account: str | None
    qos: str | None
    num_nodes: int
    gpus_per_node: int
    cpus_per_task: int
    mem: str | None
    constraint: str | None
    sbatch_args: list[str]
    signal_grace: int
    ray_port: int
    continuation: Continuation
    entrypoint: str
    config: str
    train_args: list[str]
    env: MergedEnv
    env_layers: list[str]
    run_dir: RunDir
    model_dir: Path
    launch_id: str = field(default_factory=lambda: new_launch_id())
    init_from: "Source | None" = None  # --init_from: the checkpoint a new run starts from (hpc/run/init_from.py)
    gpu_use: str = ""  # how the run uses its GPUs (hpc/launcher/gpus.py), for the dry run
    vllm_runtime: str = ""  # which vLLM runtime the job will use (hpc/job/vllm_runtime.py), for the dry run
    tunnel: Tunnel | None = None  # outbound SSH tunnel (clusters whose compute nodes have no internet)
    ray_join_timeout: int = DEFAULT_RAY_JOIN_TIMEOUT  # seconds a multi-node job waits for all Ray nodes
    judge: "JudgeServe | None" = None  # a judge served in the job (hpc/launcher/judge_serve.py)
    gpu_line: str = ""  # GPUs charged and used, and which does what (hpc/launcher/packing.py), for the dry run
    gpu_mode: str | None = None  # shared | dedicated for the trainer (hpc/launcher/gpus.py), None for other workloads
    packed: bool = False  # this run's script is run by a pack job's script (hpc/job/pack.py)
    pack: "Pack | None" = None  # this job is a pack: several runs, each with its own script

    @property
    def cluster(self) -> Cluster:
        return self.detection.cluster

    @property
    def script_path(self) -> Path:
        return self.run_dir.scripts_dir / f"{self.launch_id}.sbatch"

    @property
    def workload(self) -> list[str]:
        """The command the job runs: the trainer, or a test workload."""
        return ["python", "-m", self.entrypoint, "--config", self.config, *self.train_args]

    def workload_job(self) -> Job:
        """What the job script gives its workload, as hpc/job/workload_env.py defines it."""
        return Job(run_dir=self.run_dir.path, model_dir=None if self.pack else self.model_dir,
                   cluster=self.cluster.name, internet=self.cluster.internet, job_name=self.job_name,
                   script=self.script_path, repo=REPO_DIR)

    def template_context(self) -> dict[str, Any]:
        logs = self.run_dir.logs_dir
        return {
            "job_name": self.job_name,
            "cluster": self.cluster,
            "time_limit": self.time_limit,
            "partition": self.partition,
            "account": self.account,
            "qos": self.qos,
            "num_nodes": self.num_nodes,
            "gpus_per_node": self.gpus_per_node,
            "cpus_per_task": self.cpus_per_task,
            "mem": self.mem,
            "constraint": self.constraint,
            "sbatch_args": self.sbatch_args,
            "signal_grace": self.signal_grace,
            "ray_port": self.ray_port,
            "tunnel": self.tunnel,
            "ray_join_timeout": self.ray_join_timeout,
            "continuation": self.continuation,
            "workload": self.workload,
            "job_env": job_env(self.workload_job()),
            "env": self.env.public(),
            "repo_dir": str(REPO_DIR),
            "venv_activate": str(Path(sys.prefix) / "bin" / "activate"),
            "run_dir": str(self.run_dir.path),
            "model_dir": "" if self.pack else str(self.model_dir),
            "judge": self.judge,
            "judge_dir": str(self.run_dir.judge_dir),
            "packed": self.packed,
            "pack": self.pack,
            "script_path": str(self.script_path),
            "secrets_file": str(self.run_dir.secrets_file),
            "log_pattern_out": str(logs / "%x-%j.out"),
            "log_pattern_err": str(logs / "%x-%j.err"),
        }


def new_launch_id() -> str:
    """Unique per launch (time + pid), so concurrent launches never share a script file."""
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}"


# -- validation ---------------------------------------------------------------


def check_job_name(name: str) -> str:
    if not JOB_NAME_RE.fullmatch(name) or set(name) == {"."}:
        raise UsageError(
            f"invalid --job_name {name!r}: use 1-64 characters from A-Z a-z 0-9 . _ = + - (not only dots)"
        )
    return name


def check_time_limit(text: str, cluster: Cluster) -> str:
    minutes = parse_time_limit(text)
    if minutes > cluster.max_minutes:
        raise UsageError(
            f"--time_limit {text!r} ({format_minutes(minutes)}) exceeds {cluster.name}'s maximum "
            f"wall time {cluster.max_time}; accepted formats: {TIME_FORMATS}"
        )
    return text.strip()


def default_signal_grace(limit_seconds: int) -> int:
    """USR1 comes DEFAULT_SIGNAL_GRACE seconds before the limit, or a quarter of
    the limit for short jobs (a 5-minute smoke test must not be told to stop
    as soon as it starts)."""
    return max(10, min(DEFAULT_SIGNAL_GRACE, limit_seconds // 4))


def check_range(flag: str, value: int, low: int, high: int, where: str = "") -> int:
    if not low <= value <= high:
        raise UsageError(f"invalid {flag} {value}: accepted {low}..{high}{where}")
    return value


def check_ray_port(port: int, num_nodes: int) -> int:
    """The Ray head port. A multi-node job also uses fixed ports above it, one
    block per node (hpc/job/ray_cluster.py), which must be valid ports too."""
    if num_nodes < 2:
        return check_range("--ray_port", port, 1024, 65535)
    from hpc.job.ray_cluster import highest_port  # a multi-node job's only: the job side's module is not light

    span = highest_port(0, num_nodes)
    return check_range("--ray_port", port, 1024, 65535 - span,
                       f" (a {num_nodes}-node Ray cluster also uses the ports up to --ray_port + {span})")


def check_ray_join_timeout(env: MergedEnv) -> int:
    """HPC_RAY_JOIN_TIMEOUT: how long a multi-node job waits for all its Ray nodes (seconds)."""
    return env.int_setting(HPC_RAY_JOIN_TIMEOUT, DEFAULT_RAY_JOIN_TIMEOUT, 10, 86400)


def check_slurm_word(flag: str, value: str | None) -> str | None:
    if value in (None, ""):
        return None
    if not SLURM_WORD_RE.fullmatch(value):
        raise UsageError(
            f"invalid {flag} {value!r}: no spaces, quotes, backslashes or '#' "
            "(letters, digits and . _ : , @ & | + = * ! [ ] ( ) / - are accepted)"
        )
    return value


def check_mem(value: str | None) -> str | None:
    if value in (None, ""):
        return None
    if not MEM_RE.fullmatch(value):
        raise UsageError(f"invalid --mem {value!r}: expected a number with optional unit K, M, G or T (e.g. 64G)")
    return value


def check_entrypoint(module: str) -> str:
    if not MODULE_RE.fullmatch(module):
        raise UsageError(f"invalid --entrypoint {module!r}: expected a Python module name such as trainer.train")
    return module


def check_config(name: str) -> str:
    from hpc.launcher.trainer_config import known_configs  # stdlib + PyYAML: the launcher stays light

    if name not in known_configs():
        raise UsageError(f"unknown --config {name!r}; known configs: {', '.join(known_configs()) or '(none)'}")
    return name


def check_train_args(pairs: list[str]) -> list[str]:
    for pair in pairs:
        key, sep, _ = pair.partition("=")
        if not sep or not TRAIN_ARG_KEY_RE.fullmatch(key):
            raise UsageError(f"invalid --train_arg {pair!r}: expected key=value with key like learning_rate")
    return pairs


def check_log_path(runs_dir: Path) -> Path:
    """Slurm log paths go on #SBATCH lines and through Slurm's %-patterns."""
    text = str(runs_dir)
    bad = [ch for ch in text if ch.isspace() or ch in "%'\"\\#"]
    if bad:
        raise UsageError(
            f"invalid runs directory {text!r}: it holds Slurm log paths, which cannot contain "
            f"{''.join(sorted(set(bad)))!r} (spaces, quotes, backslashes, '%' or '#')"
        )
    return runs_dir


# -- environment and paths ------------------------------------------------------


def env_layers(cluster: Cluster, env_flags: list[str], repo_dir: Path = REPO_DIR) -> list[EnvLayer]:
    """The dotenv layers in merge order (later wins). The user's (.env, --env) may not set what
    the launcher, the job script or Slurm set (hpc/launcher/managed_vars.py)."""
    users = [read_dotenv(repo_dir / ".env"), parse_env_flags(env_flags)]
    for layer in users:
        refuse_managed(layer, cluster.name, cluster.internet)
    return [read_dotenv(repo_dir / "dotenv" / "common.env"), read_dotenv(repo_dir / "dotenv" / cluster.dotenv), *users]


def refuse_printed_secrets(env: MergedEnv, cluster: Cluster) -> None:
    """The variables whose values the launcher prints may not be built from a secret (UsageError)."""
    env.refuse_secret([*PRINTED_SETTINGS, cluster.account_var])


def outer_env(cluster: Cluster, job_name: str | None = None) -> dict[str, str]:
    """What a ${VAR} in a dotenv file may refer to besides the files' own variables:
    the caller's environment (SCRATCH on a login node) and the HPC_* names the
    launcher defines (HPC_RUN_DIR is added once the runs directory is known)."""
    return {**os.environ, **launch_names(cluster.name, job_name, REPO_DIR)}


def dotenv_setting(name: str, cluster: Cluster) -> str | None:
    """One variable as a job on ``cluster`` would get it from the dotenv files
    (``--env`` aside), for tools run outside a job on the same machine: the status
    helpers find RUNS_DIR, ``trainer.data prepare`` finds DATA_DIR."""
    return resolve_one(env_layers(cluster, []), outer_env(cluster), name)


def resolve_runs_dir(flag: str | None, layers: list[EnvLayer], outer: dict[str, str]) -> Path:
    """--runs_dir, else RUNS_DIR from the dotenv layers, else <repo>/runs."""
    value = flag or resolve_one(layers, outer, "RUNS_DIR") or str(REPO_DIR / "runs")
    return check_log_path(Path(value).expanduser().absolute())


def runs_dir_here() -> Path:
    """The runs directory hpc.launch uses on this machine's cluster with no --runs_dir or --env: where the
    monitor, the report and the trainer's tools look for runs outside a job. UsageError when the dotenv
    files cannot be resolved here."""
    from hpc.launcher.clusters import load_registry

    cluster = load_registry().detect().cluster
    return resolve_runs_dir(None, env_layers(cluster, []), outer_env(cluster))


def trainer_config(config: str, train_args: list[str], entrypoint: str) -> "TrainerConfig":
    """The trainer config a run uses: its checkpoints' ART project, its GPU settings.

    For the trainer, its own config loader reads the config with every
    --train_arg, so a mistyped key or a bad value fails here, in one line,
    rather than a day later in the job. trainer.serve's are checked by its own
    settings reader. Another entrypoint's arguments are its own: only its project= counts."""
    from hpc.launcher.trainer_config import SERVE_ENTRYPOINTS, ConfigError, ServeError, check_settings, load_config

    overrides = train_args if entrypoint == DEFAULT_ENTRYPOINT else [
        pair for pair in train_args if pair.partition("=")[0] == "project"]
    try:
        loaded = load_config(config, overrides)
    except ConfigError as error:
        raise UsageError(f"invalid --train_arg for --config {config}: {error}") from None
    if entrypoint in SERVE_ENTRYPOINTS:  # the service reads its pairs as settings: checked as it reads them
        try:
            check_settings(train_args, loaded.base_model)
        except ServeError as error:
            raise UsageError(f"invalid --train_arg for --entrypoint {entrypoint}: {error}") from None
    return loaded
