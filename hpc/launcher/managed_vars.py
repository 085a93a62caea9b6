"""The job environment's variables that the launcher, the job script or Slurm set, which no
user layer (the repo's .env, --env) may set.

The job script exports the dotenv layers and then its own values; a user's HPC_RUN_DIR would
be exported twice, the trainer writing checkpoints under one run directory while job control
uses another, and a user's HPC_CLEANUP or HPC_WORKLOAD_ENV would run as commands. So each name
here is refused with one line saying who sets it. The names are those the templates in sbatch/
assign or export and those hpc/launcher computes (tests/hpc/launcher/test_managed_vars.py
reads the templates to keep this list whole); HPC_* is the launcher's namespace, open to users
only for the settings in USER_SETTINGS. The project's own dotenv/ files set none of these. The job
script's own names (JOB_STATE) and the users' (USER_SETTINGS) are defined in hpc/job/workload_env.py.
"""

from __future__ import annotations

from hpc.errors import UsageError
from hpc.job.workload_env import JOB_STATE, USER_SETTINGS, VARIABLES, Variable
from hpc.launcher.envfiles import EnvLayer

# Where a workload variable's value comes from when a user's layer gives it (hpc/job/workload_env.py's
# sources): those stay the users'. NO_PROXY is the users' too: the job adds its hosts to theirs.
USER_SOURCES = ("dotenv", "secrets.env")
USER_EXTENDED = ("NO_PROXY",)

# bash's own variables, which the job script's `export NAME=value` would hit: `bash -n` passes them, the job
# then dies on a read-only one (UID, SHELLOPTS), or runs differently (IFS, BASH_ENV, POSIXLY_CORRECT), or
# quietly loses what bash keeps in it (RANDOM, PIPESTATUS). bash 5's manual, "Shell Variables".
_READONLY = "bash's own, read-only: the job script would stop at it"
_CHANGES = "bash's own: it changes how bash runs the job script"
_KEPT = "bash's own: assigning it loses what bash keeps in it"
BASH_OWN = {
    **dict.fromkeys(("UID", "EUID", "PPID", "SHELLOPTS", "BASHOPTS", "BASH_VERSINFO"), _READONLY),
    **dict.fromkeys(("IFS", "BASH_ENV", "ENV", "POSIXLY_CORRECT", "BASH_COMPAT", "BASH_XTRACEFD", "PS4",
                     "GLOBIGNORE", "CDPATH", "EXECIGNORE", "FUNCNEST", "TMOUT", "BASH_LOADABLES_PATH"), _CHANGES),
    **dict.fromkeys(("BASH", "BASHPID", "BASH_ALIASES", "BASH_ARGC", "BASH_ARGV", "BASH_ARGV0", "BASH_CMDS",
                     "BASH_COMMAND", "BASH_EXECUTION_STRING", "BASH_LINENO", "BASH_REMATCH", "BASH_SOURCE",
                     "BASH_SUBSHELL", "BASH_VERSION", "COPROC", "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS",
                     "FUNCNAME", "GROUPS", "HISTCMD", "LINENO", "OLDPWD", "OPTARG", "OPTIND", "PIPESTATUS", "PWD",
                     "RANDOM", "SECONDS", "SHLVL", "SRANDOM"), _KEPT),
}


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
    if name in BASH_OWN:
        return f"{BASH_OWN[name]} (the job script exports every variable it is given)"
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
