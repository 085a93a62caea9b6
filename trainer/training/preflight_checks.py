"""The preflight's record of a check (``Check``, ``Context``, ``Targets``) and its checks of what is on
this node's disks: the data, the scenarios, the models in the HF cache, the backend's packages, the
output filesystems. trainer/training/preflight.py runs them, with the W&B and judge checks of
trainer/training/preflight_services.py.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import sqlite3
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from hpc.job.vllm_runtime import cache_dir, choose
from hpc.job.workload_env import HPC_NO_INTERNET, HPC_PUBLIC_VARS
from hpc.secret_names import is_secret, public_names
from trainer.agent.email_db import EmailDB
from trainer.agent.scenarios import load_scenarios
from trainer.staging.data import data_paths
from trainer.staging.model_cache import hub_cache, missing_repos, required_repos
from trainer.training.config import TrainerConfig, shuffle_seed
from trainer.training.exits import SetupError

# What ART's LocalBackend imports that only the backend extra installs (found, not imported).
BACKEND_PACKAGES = ("art", "torch", "transformers", "peft", "unsloth")
# errno values that mean "this path can never be written by this user": a configuration error.
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.ENOTDIR)
MESSAGE_CHARS = 300
STAGE_HINT = "stage it on a login node with internet: `python -m trainer.data prepare` (DATA_DIR chooses where)"


@dataclass(frozen=True)
class Check:
    """One check's result. ``permanent`` only means something when the check failed."""

    name: str
    ok: bool
    message: str
    fix: str = ""
    permanent: bool = False

    @property
    def kind(self) -> str:
        return "permanent" if self.permanent else "transient"

    def error_line(self) -> str:
        """The one line a failure is reported in (job log, failed.json, status.sh)."""
        return f"preflight check '{self.name}' failed ({self.kind}): {self.message}; fix: {self.fix}"

    def report_line(self) -> str:
        """One line of the login-side listing."""
        if self.ok:
            return f"ok      {self.name}: {self.message}"
        return f"FAILED  {self.name} ({self.kind}): {self.message}; fix: {self.fix}"


def passed(name: str, message: str) -> Check:
    return Check(name, True, message)


def permanent(name: str, message: str, fix: str) -> Check:
    return Check(name, False, message, fix, permanent=True)


def transient(name: str, message: str, fix: str) -> Check:
    return Check(name, False, message, fix, permanent=False)


@dataclass(frozen=True)
class Targets:
    """The places a run reads and writes, as the job resolves them."""

    run_dir: Path
    model_dir: Path  # <ART_PATH>/<project>/models/<run name>: checkpoints/ goes here
    data_dir: Path
    wandb_dir: Path


@dataclass(frozen=True)
class Context:
    """What every check sees: the run's config, its places, its environment, and the room.

    ``where="login"`` writes nothing (a dry run): writability is asked of the
    filesystem instead of proven with a test file."""

    config: TrainerConfig
    targets: Targets
    env: Mapping[str, str]
    where: str = "job"

    @property
    def no_internet(self) -> bool:
        """The job's node has no internet (the cluster's ``internet: false``)."""
        return self.env.get(HPC_NO_INTERNET) == "1"

    @property
    def hf_offline(self) -> bool:
        """Hugging Face loads only from its cache (the job sets HF_HUB_OFFLINE=1 on offline nodes)."""
        return self.no_internet or self.env.get("HF_HUB_OFFLINE") == "1"

    @property
    def timeout(self) -> float:
        return self.config.preflight_timeout

    def redact(self, text: str) -> str:
        return redact(text, self.env)


def redact(text: str, env: Mapping[str, str]) -> str:
    """``text`` in one line, secrets of ``env`` as ***, at most MESSAGE_CHARS long."""
    text = " ".join(text.split())
    public = public_names(env.get(HPC_PUBLIC_VARS))
    for name, value in env.items():
        if is_secret(name, value, public) and value and len(value) >= 8:
            text = text.replace(value, "***")
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


# -- data -------------------------------------------------------------------------------------


def check_data(ctx: Context) -> Check:
    return data_check(ctx.targets.data_dir, ctx.env)


def data_check(data_dir: Path, env: Mapping[str, str]) -> Check:
    """The data directory and the email database: opens read-only, expected tables, not empty."""
    try:
        if not data_dir.is_dir():
            return permanent("data", f"the data directory {data_dir} does not exist", STAGE_HINT)
        with EmailDB(data_paths(data_dir).db) as db:
            emails = db.count()
    except FileNotFoundError as error:
        return permanent("data", redact(str(error).split(";")[0], env), STAGE_HINT)
    except ValueError as error:  # not SQLite, or not this version's schema
        return permanent("data", redact(str(error).split(";")[0], env),
                         "rebuild it: `python -m trainer.data prepare --force`")
    except (sqlite3.Error, OSError) as error:  # a shared filesystem's hiccup (EIO, ESTALE...)
        return transient("data", redact(f"cannot read the email database in {data_dir}: {error}", env),
                         "check the filesystem DATA_DIR is on; the run retries")
    if emails == 0:
        return permanent("data", f"the email database in {data_dir} holds no emails",
                         "rebuild it: `python -m trainer.data prepare --force`")
    return passed("data", f"{data_paths(data_dir).db}: {emails} emails")


def check_scenarios(ctx: Context) -> Check:
    return scenarios_check(ctx.config, ctx.targets.data_dir, ctx.env)


def scenarios_check(config: TrainerConfig, data_dir: Path, env: Mapping[str, str]) -> Check:
    """The scenario files the config reads: train always, test when it validates."""
    try:
        train = load_scenarios(data_dir, "train", limit=config.training_dataset_size,
                               max_messages=config.max_messages, shuffle=False, seed=shuffle_seed(config) or 0)
        test = (load_scenarios(data_dir, "test", limit=config.val_set_size, max_messages=config.max_messages,
                               shuffle=False) if config.val_set_size > 0 else [])
    except FileNotFoundError as error:
        return permanent("scenarios", redact(str(error).split(";")[0], env), STAGE_HINT)
    except ValueError as error:  # a line that does not parse
        return permanent("scenarios", redact(str(error).split("; stage")[0], env),
                         "stage it again: `python -m trainer.data prepare --force`")
    except OSError as error:
        return transient("scenarios", redact(f"cannot read the scenarios in {data_dir}: {error}", env),
                         "check the filesystem DATA_DIR is on; the run retries")
    if not train:
        return permanent("scenarios", f"no training scenario in {data_dir} passes max_messages="
                         f"{config.max_messages}", "raise max_messages, or stage the full data: " + STAGE_HINT)
    validation = f", {len(test)} validation questions" if config.val_set_size > 0 else ", no validation"
    return passed("scenarios", f"{len(train)} training scenarios{validation}")


def data_ready(config: TrainerConfig, data_dir: Path, env: Mapping[str, str]) -> Path:
    """The email database, once the data and scenario checks pass: the training loop asks before
    its backend starts, whether or not the preflight ran (``preflight: false``). A permanent failure
    is a SetupError (exit 78) quoting the check's line; a transient one (a filesystem's hiccup) is
    left to the loop, which meets it again and fails like any failure (retried)."""
    for found in (data_check(data_dir, env), scenarios_check(config, data_dir, env)):
        if not found.ok and found.permanent:
            raise SetupError(found.error_line())
    return Path(data_paths(data_dir).db)


# -- models and backend -----------------------------------------------------------------------


def check_model_cache(ctx: Context) -> Check:
    """Offline, ART's LocalBackend loads only what the HF cache holds (trainer/staging/model_cache.py)."""
    config = ctx.config
    if config.backend != "local":
        return passed("model_cache", f"backend {config.backend} loads its own models: not checked")
    hub = hub_cache(ctx.env)
    missing = missing_repos(required_repos(config.base_model), hub)
    if not ctx.hf_offline:
        note = f"; not cached yet: {', '.join(r.repo_id for r in missing)}" if missing else ""
        return passed("model_cache", f"the node is online: models download on first use{note}")
    if missing:
        names = ", ".join(f"{repo.repo_id} ({repo.purpose})" for repo in missing)
        return permanent("model_cache", f"the node is offline and the HF cache {hub} lacks {names}",
                         f"on a login node with internet: `python -m trainer.data stage-model --base_model "
                         f"{config.base_model}` (HF_HOME chooses the cache)")
    return passed("model_cache", f"{config.base_model} and its 4-bit repository are in {hub}")


def module_found(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it (a parent package may be)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package is missing or broken
        return False


def wandb_used(env: Mapping[str, str]) -> bool:
    """ART logs to W&B when WANDB_API_KEY is set and wandb is installed
    (trainer.training.environment.metrics_reporters)."""
    return bool(env.get("WANDB_API_KEY")) and module_found("wandb")


def check_backend(ctx: Context) -> Check:
    """The configured backend can be imported: ART's LocalBackend's packages, or the class's module."""
    spec = ctx.config.backend
    if spec != "local":
        module = spec.partition(":")[0]
        if not module_found(module):
            return permanent("backend", f"config key 'backend': module {module!r} of {spec!r} is not installed",
                             "install it, or set backend=local (ART's LocalBackend)")
        return passed("backend", f"{spec} found")
    missing = [name for name in BACKEND_PACKAGES if not module_found(name)]
    if missing:
        return permanent("backend", f"backend 'local' (ART's LocalBackend) needs {', '.join(missing)}, not "
                         f"installed in {sys.prefix}", "install the GPU backend: `bash setup.sh --backend`")
    return runtime_check(ctx)


def runtime_check(ctx: Context) -> Check:
    """ART builds its vLLM runtime on first use: an offline node cannot (hpc/job/vllm_runtime.py)."""
    choice = choose(ctx.env)
    if choice.server is not None:
        return passed("backend", f"ART's LocalBackend packages found; vLLM runtime: {choice.how} at {choice.server}")
    if ctx.no_internet:
        return permanent("backend", f"no vLLM runtime built in {cache_dir(ctx.env)}, and an offline node "
                         "cannot build it", "build it on the login node: `bash setup.sh --backend`")
    return passed("backend", "ART's LocalBackend packages found; the first job builds the vLLM runtime (minutes)")


# -- filesystems ------------------------------------------------------------------------------


def output_places(ctx: Context) -> list[tuple[str, Path]]:
    """Where the run writes: the run directory, the model folder, W&B's files (when it logs)."""
    places = [("run dir", ctx.targets.run_dir), ("model folder", ctx.targets.model_dir)]
    if wandb_used(ctx.env):
        places.append(("WANDB_DIR", ctx.targets.wandb_dir))
    return places


def existing_ancestor(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest existing parent (what a mkdir -p starts from)."""
    path = path.absolute()
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def write_problem(folder: Path, probe: bool) -> OSError | None:
    """Why ``folder`` cannot take a file, or None. A job proves it with a test file; the login
    side (a dry run writes nothing) asks the filesystem."""
    if not folder.is_dir():
        return NotADirectoryError(errno.ENOTDIR, "not a directory", str(folder))
    if probe:
        try:
            fd, name = tempfile.mkstemp(prefix=".preflight-", dir=folder)
        except OSError as error:
            return error
        os.close(fd)
        os.unlink(name)
        return None
    if not os.access(folder, os.W_OK | os.X_OK):
        return PermissionError(errno.EACCES, "not writable by this user", str(folder))
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, "read-only file system", str(folder))
    return None


def check_filesystems(ctx: Context) -> Check:
    """Each output place is writable and its filesystem has ``preflight_min_free_gb`` free."""
    floor = ctx.config.preflight_min_free_gb
    free: dict[int, tuple[str, Path, float]] = {}
    for label, path in output_places(ctx):
        folder = existing_ancestor(path)
        try:
            problem = write_problem(folder, probe=ctx.where == "job")
            if problem is None:
                free.setdefault(os.stat(folder).st_dev, (label, folder, shutil.disk_usage(folder).free / 1e9))
        except OSError as error:
            problem = error
        if problem is not None:
            return filesystem_failure(ctx, label, path, problem)
    for label, folder, gigabytes in free.values():
        if gigabytes < floor:
            return transient("filesystems", f"the {label} {folder} has {gigabytes:.1f} GB free, below "
                             f"preflight_min_free_gb={floor:g}", "free some space there (or lower "
                             "preflight_min_free_gb); the run retries")
    room = ", ".join(f"{gb:.0f} GB free on {folder}" for _, folder, gb in free.values())
    return passed("filesystems", f"{', '.join(label for label, _ in output_places(ctx))} writable; {room} "
                  f"(floor {floor:g} GB)")


def filesystem_failure(ctx: Context, label: str, path: Path, error: OSError) -> Check:
    """Permission and not-a-directory are configuration errors; a full, read-only or stale
    filesystem may recover (transient)."""
    message = ctx.redact(f"cannot write the {label} {path}: {error.strerror or error}"
                         + (f" ({error.filename})" if error.filename and str(error.filename) != str(path) else ""))
    if error.errno in NOT_WRITABLE:
        return permanent("filesystems", message, "point it at a folder you can write (HPC_RUN_DIR/--runs_dir, "
                         "ART_PATH, WANDB_DIR in the dotenv)")
    return transient("filesystems", message, "check that filesystem (full, quota, read-only, stale); the run retries")
