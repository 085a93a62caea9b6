"""The job environment's variables that the launcher, the job script or Slurm set, which no
user layer (the repo's .env, --env) may set.

The job script exports the dotenv layers and then its own values; a user's HPC_RUN_DIR would
be exported twice, the trainer writing checkpoints under one run directory while job control
uses another, and a user's HPC_CLEANUP or HPC_WORKLOAD_ENV would run as commands. So each name
here is refused with one line saying who sets it. The names are those the templates in sbatch/
assign or export and those hpc/launcher computes (tests/hpc/launcher/test_managed_vars.py
reads the templates to keep this list whole); HPC_* is the launcher's namespace, open to users
only for the settings in USER_SETTINGS. The project's own dotenv/ files set none of these.
"""

from __future__ import annotations

from hpc.errors import UsageError
from hpc.job.workload_env import VARIABLES, Variable
from hpc.launcher.envfiles import EnvLayer

_LOOP = "job control's own state in the job script"
_PACK = "set by a pack job, for each run it runs"
_TUNNEL = "set by the job's SSH tunnel block"
_RAY = "set by the job's Ray cluster block (multi-node jobs)"
_JUDGE = "set by the served judge's block (--judge_serve)"
# Where a workload variable's value comes from when a user's layer gives it (hpc/job/workload_env.py's
# sources): those stay the users'. NO_PROXY is the users' too: the job adds its hosts to theirs.
USER_SOURCES = ("dotenv", "secrets.env")
USER_EXTENDED = ("NO_PROXY",)
# name -> who sets it: the job script's own state, beside the workload's variables (below)
JOB_STATE = {
    "HPC_JOB_SCRIPT": "set by the launcher (the job script's own path)",
    "HPC_JUDGE_SERVED": "set by the launcher's preflight (--judge_serve)",
    "HPC_WORKLOAD_ENV": _LOOP, "HPC_CLEANUP": _LOOP, "HPC_STOP_SIGNAL": _LOOP, "HPC_WORKLOAD_PID": _LOOP,
    "HPC_WATCHDOG_PID": _LOOP, "HPC_CONT_ARGS": _LOOP, "HPC_LOG_ERR": _LOOP, "HPC_RELAY_PID": _LOOP,
    "HPC_WATCH_PID": _LOOP,
    "HPC_PACK_MEMBERS": _PACK, "HPC_PACK_PIDS": _PACK,
    "HPC_JUDGE_DIR": _JUDGE, "HPC_JUDGE_PID": _JUDGE, "HPC_JUDGE_DEVICES": _JUDGE,
    "HPC_TUNNEL_HOST": _TUNNEL, "HPC_TUNNEL_PORT": _TUNNEL, "HPC_TUNNEL_TIMEOUT": _TUNNEL,
    "HPC_TUNNEL_SSH_OPTS": _TUNNEL, "HPC_TUNNEL_PID": _TUNNEL,
    "HPC_RAY_NODES": _RAY, "HPC_RAY_PORT": _RAY, "HPC_RAY_TEMP_ROOT": _RAY, "HPC_RAY_TEMP_DIR": _RAY,
    "HPC_RAY_STEPS": _RAY, "HPC_RAY_HOSTS": _RAY, "HPC_RAY_HEAD": _RAY, "HPC_RAY_HEAD_IP": _RAY,
    "HPC_RAY_ADDRESS": _RAY,
    "HPC_HOSTNAME": "read from the launcher's own environment, not the job's "
                    "(HPC_HOSTNAME=NAME python -m hpc.launch ... picks the cluster)",
}
# The HPC_* names users set (dotenv, .env, --env): each is read with a default where it is used.
USER_SETTINGS = ("HPC_RAY_JOIN_TIMEOUT", "HPC_RAY_HOST_SUFFIX", "HPC_STOP_TIMEOUT", "HPC_SIGNAL_RELAY",
                 "HPC_WEBHOOK_URL", "HPC_WEBHOOK_TIMEOUT", "HPC_WATCH_INTERVAL", "HPC_STALL_STARTUP",
                 "HPC_STALL_MIN", "HPC_STALL_FACTOR", "HPC_COLLAPSE_STEPS", "HPC_COLLAPSE_SPREAD",
                 "HPC_PUBLIC_VARS")


def set_by_job(variable: Variable) -> bool:
    """Whether the job, not a user's layer, gives the workload this variable."""
    return (variable.source.split(",")[0] not in USER_SOURCES and variable.name not in USER_SETTINGS
            and variable.name not in USER_EXTENDED)


def workload_managed() -> tuple[dict[str, str], dict[str, str]]:
    """hpc/job/workload_env.py's variables the job sets: on every cluster, and on clusters whose
    compute nodes have no internet only (name -> who sets it)."""
    always: dict[str, str] = {}
    offline: dict[str, str] = {}
    for variable in filter(set_by_job, VARIABLES):
        where = offline if variable.when.startswith("no internet") else always
        where[variable.name] = f"set by the job for its workload ({variable.when}: {variable.what})"
    return always, offline


_WORKLOAD, OFFLINE = workload_managed()
MANAGED = {**_WORKLOAD, **JOB_STATE}


def who_sets(name: str, internet: bool) -> str | None:
    """Who sets ``name`` in a job on a cluster with (or without) internet, as "set by ..."; None when a user may."""
    if name in MANAGED:
        return MANAGED[name]
    if name in OFFLINE and not internet:
        return OFFLINE[name]
    if name.startswith(("SLURM_", "SLURMD_")):
        return "set by Slurm in the job"
    if name.startswith("HPC_") and name not in USER_SETTINGS:
        return f"reserved: HPC_* names are the launcher's, and users set only {', '.join(USER_SETTINGS)}"
    return None


def refuse_managed(layer: EnvLayer, cluster_name: str, internet: bool) -> None:
    """A user layer (.env, --env) that sets a managed variable is refused (UsageError), in one line."""
    for name in layer.values:
        setter = who_sets(name, internet)
        if setter:
            where = "" if internet or name not in OFFLINE else f" on {cluster_name}"
            raise UsageError(f"{layer.source} sets {name}, which is {setter}{where}: remove it")
