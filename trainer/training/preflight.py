"""Preflight: checks that fail a job in seconds, before the expensive start.

A training job spends its first minutes importing ART, loading the model into
vLLM and Unsloth; a job on an offline node with a missing model, a dead
tunnel or a rejected key used to find out only then, and then be retried.
These checks run first (``trainer.train`` before ``import art``; the step
double with ``preflight=<config>``) and take seconds:

========== =================================================================
check      what must hold
========== =================================================================
data       DATA_DIR exists; the email database opens read-only, has the
           expected tables and at least one email
scenarios  the training scenarios parse and some pass the config's filter;
           the test split parses when ``val_set_size`` > 0
model_cache  on an offline node (HF_HUB_OFFLINE=1 / HPC_NO_INTERNET=1), the
           HF cache holds every repository the LocalBackend loads
backend    the configured backend is importable (found, not imported: ART's
           LocalBackend takes ~15 s to import); offline, its vLLM runtime is built
filesystems the run directory, the model folder and WANDB_DIR are writable,
           with ``preflight_min_free_gb`` free
wandb      with WANDB_API_KEY: offline nodes log offline; online mode reaches
           W&B and the key is accepted
judge      every judge the config uses (answer judge, RULER's) answers one
           tiny request, as the job reaches it (through the tunnel's proxy
           variables where there is one): Gemini, OpenAI, Anthropic and an
           OpenAI-compatible JUDGE_API_BASE with one HTTP POST each (the
           table in judge_ping.py), any other provider through litellm
========== =================================================================

Each check gives a :class:`Check`: ok, a one-line message, the fix, and
whether the problem is **permanent** (a configuration error the job cannot
outgrow: missing data, a bad key, a missing package; the job exits 78 and the
run is given up at once) or **transient** (a judge that does not answer, a
full filesystem; exit 69, retried until ``--max_failures``). A failure is one
line on stderr naming the check and the fix; the first permanent failure is
printed last, so the line job control quotes in failed.json is the one that ended the run.

Two rooms use this module. In the job it runs every check with the job's
environment (``run_job``). On the login node ``python -m hpc.launch ...
--dry_run --preflight`` runs ``python -m trainer.preflight --where login``
with the run's merged dotenv: the same checks without writing anything, the
judge reached from the login node, and a list of what only the job can check.

Config keys: ``preflight`` (off: no checks), ``preflight_judge`` (off: no
judge request), ``preflight_min_free_gb``, ``preflight_timeout``. Stdlib at
import; httpx (W&B; a judge through the tunnel's proxy) and litellm (a judge of a provider
judge_ping.py's table lacks) are imported by their checks only: litellm's import alone took
~3.5 s of every launch's preflight.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import logging
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from hpc.run.checkpoints import model_dir as art_model_dir
from hpc.secret_names import is_secret_name
from hpc.run.rundir import EXIT_CONFIG_ERROR
from trainer.training.config import ConfigError, TrainerConfig, load_config, shuffle_seed
from trainer.training import judge_ping
from trainer.training.judge_ping import JUDGE_PING

log = logging.getLogger("trainer.preflight")

REPO_DIR = Path(__file__).resolve().parents[2]
EXIT_UNAVAILABLE = 69  # EX_UNAVAILABLE: a transient preflight failure; job control retries (--max_failures)
WHERE = ("job", "login")
# What ART's LocalBackend imports that only the backend extra installs (found, not imported).
BACKEND_PACKAGES = ("art", "torch", "transformers", "peft", "unsloth")
# errno values that mean "this path can never be written by this user": a configuration error.
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.ENOTDIR)
WANDB_OFF_MODES = ("offline", "disabled", "dryrun")
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
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
        return self.env.get("HPC_NO_INTERNET") == "1"

    @property
    def hf_offline(self) -> bool:
        """Hugging Face loads only from its cache (the job sets HF_HUB_OFFLINE=1 on offline nodes)."""
        return self.no_internet or self.env.get("HF_HUB_OFFLINE") == "1"

    @property
    def timeout(self) -> float:
        return self.config.preflight_timeout

    def redact(self, text: str) -> str:
        """``text`` in one line, secrets of the environment as ***, at most MESSAGE_CHARS long."""
        text = " ".join(text.split())
        for name, value in self.env.items():
            if is_secret_name(name) and value and len(value) >= 8:
                text = text.replace(value, "***")
        return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


# -- data -------------------------------------------------------------------------------------


def check_data(ctx: Context) -> Check:
    """The data directory and the email database: opens read-only, expected tables, not empty."""
    from trainer.staging.data import data_paths
    from trainer.agent.email_db import EmailDB

    data_dir = ctx.targets.data_dir
    try:
        if not data_dir.is_dir():
            return permanent("data", f"the data directory {data_dir} does not exist", STAGE_HINT)
        with EmailDB(data_paths(data_dir).db) as db:
            emails = db.count()
    except FileNotFoundError as error:
        return permanent("data", ctx.redact(str(error).split(";")[0]), STAGE_HINT)
    except ValueError as error:  # not SQLite, or not this version's schema
        return permanent("data", ctx.redact(str(error).split(";")[0]),
                         "rebuild it: `python -m trainer.data prepare --force`")
    except (sqlite3.Error, OSError) as error:  # a shared filesystem's hiccup (EIO, ESTALE...)
        return transient("data", ctx.redact(f"cannot read the email database in {data_dir}: {error}"),
                         "check the filesystem DATA_DIR is on; the run retries")
    if emails == 0:
        return permanent("data", f"the email database in {data_dir} holds no emails",
                         "rebuild it: `python -m trainer.data prepare --force`")
    return passed("data", f"{data_paths(data_dir).db}: {emails} emails")


def check_scenarios(ctx: Context) -> Check:
    """The scenario files the config reads: train always, test when it validates."""
    from trainer.agent.scenarios import load_scenarios

    config, data_dir = ctx.config, ctx.targets.data_dir
    try:
        train = load_scenarios(data_dir, "train", limit=config.training_dataset_size,
                               max_messages=config.max_messages, shuffle=False, seed=shuffle_seed(config) or 0)
        test = (load_scenarios(data_dir, "test", limit=config.val_set_size, max_messages=config.max_messages,
                               shuffle=False) if config.val_set_size > 0 else [])
    except FileNotFoundError as error:
        return permanent("scenarios", ctx.redact(str(error).split(";")[0]), STAGE_HINT)
    except ValueError as error:  # a line that does not parse
        return permanent("scenarios", ctx.redact(str(error).split("; stage")[0]),
                         "stage it again: `python -m trainer.data prepare --force`")
    except OSError as error:
        return transient("scenarios", ctx.redact(f"cannot read the scenarios in {data_dir}: {error}"),
                         "check the filesystem DATA_DIR is on; the run retries")
    if not train:
        return permanent("scenarios", f"no training scenario in {data_dir} passes max_messages="
                         f"{config.max_messages}", "raise max_messages, or stage the full data: " + STAGE_HINT)
    validation = f", {len(test)} validation questions" if config.val_set_size > 0 else ", no validation"
    return passed("scenarios", f"{len(train)} training scenarios{validation}")


# -- models and backend -----------------------------------------------------------------------


def check_model_cache(ctx: Context) -> Check:
    """Offline, ART's LocalBackend loads only what the HF cache holds (trainer/staging/model_cache.py)."""
    from trainer.staging.model_cache import hub_cache, missing_repos, required_repos

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
    from hpc.job.vllm_runtime import cache_dir, choose

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


# -- W&B --------------------------------------------------------------------------------------


def wandb_used(env: Mapping[str, str]) -> bool:
    """ART logs to W&B when WANDB_API_KEY is set and wandb is installed (trainer.training.train.metrics_reporters)."""
    return bool(env.get("WANDB_API_KEY")) and module_found("wandb")


def wandb_mode(ctx: Context) -> str:
    """The mode W&B will run in: WANDB_MODE, else offline on a node without internet (the job sets it)."""
    return ctx.env.get("WANDB_MODE") or ("offline" if ctx.no_internet else "online")


def check_wandb(ctx: Context) -> Check:
    """W&B in the mode the network allows."""
    if not ctx.env.get("WANDB_API_KEY"):
        return passed("wandb", "WANDB_API_KEY not set: no W&B logging (ART's history.jsonl only)")
    if not module_found("wandb"):
        return passed("wandb", "wandb is not installed: no W&B logging (ART's history.jsonl only)")
    mode = wandb_mode(ctx)
    if mode in WANDB_OFF_MODES:
        return passed("wandb", f"W&B mode {mode}")
    if ctx.no_internet:
        return permanent("wandb", f"WANDB_MODE={mode} on a node without internet: W&B cannot reach its server",
                         "unset WANDB_MODE (the job then logs offline; `wandb sync` later) or set WANDB_MODE=offline")
    return reach_wandb(ctx)


def reach_wandb(ctx: Context) -> Check:
    """One authenticated request to W&B's API (WANDB_BASE_URL, else api.wandb.ai): 401/403 is a
    key it rejects; no answer within the timeout is transient."""
    import httpx

    base = (ctx.env.get("WANDB_BASE_URL") or "https://api.wandb.ai").rstrip("/")
    try:
        answer = httpx.post(f"{base}/graphql", json={"query": "query { viewer { id } }"},
                            auth=("api", ctx.env["WANDB_API_KEY"]), timeout=ctx.timeout)
    except httpx.HTTPError as error:
        return transient("wandb", ctx.redact(f"W&B at {base} did not answer within {ctx.timeout:g}s "
                                             f"({type(error).__name__}: {error})"),
                         "check the network, or log offline: WANDB_MODE=offline; the run retries")
    if answer.status_code in (401, 403):
        return permanent("wandb", f"W&B at {base} rejects WANDB_API_KEY (HTTP {answer.status_code})",
                         "set a valid WANDB_API_KEY in .env (wandb.ai/authorize)")
    return passed("wandb", f"W&B online at {base}")


# -- the judge --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeTarget:
    """A judge model the run calls, and how (trainer/agent/judge.py's settings)."""

    purpose: str
    model: str
    api_base: str | None
    api_key: str | None


def judge_targets(config: TrainerConfig, env: Mapping[str, str]) -> list[JudgeTarget]:
    """The answer judge (reward=judge, and validation's), RULER's judge (reward=ruler); once each."""
    from trainer.agent.judge import DEFAULT_JUDGE_MODEL

    base = env.get("JUDGE_API_BASE") or None
    key = (env.get("JUDGE_API_KEY") or env.get("OPENAI_API_KEY") or None) if base else None
    answer = env.get("JUDGE_MODEL") or DEFAULT_JUDGE_MODEL
    targets = []
    if config.reward == "judge" or config.val_set_size > 0:
        targets.append(JudgeTarget("answer judge", answer, base, key))
    ruler = config.ruler_judge_model or answer
    if config.reward == "ruler" and not any(t.model == ruler for t in targets):
        targets.append(JudgeTarget("RULER judge", ruler, base, key))
    return targets


def check_judge(ctx: Context) -> Check:
    """Every judge answers one tiny request."""
    if not ctx.config.preflight_judge:
        return passed("judge", "not asked (preflight_judge=false)")
    served = ctx.env.get("HPC_JUDGE_SERVED")
    if ctx.where == "login" and served:
        return passed("judge", f"not asked here: {served} is served inside the job (--judge_serve)")
    targets = judge_targets(ctx.config, ctx.env)
    if not targets:
        return passed("judge", "the config calls no judge")
    results = [ask_judge(ctx, target) for target in targets]
    failed = [result for result in results if not result.ok]
    if failed:
        return max(failed, key=lambda result: result.permanent)
    return passed("judge", "; ".join(result.message for result in results))


def judge_label(ctx: Context, target: JudgeTarget, at: str | None = None) -> str:
    """``the answer judge MODEL at BASE through the tunnel (ALL_PROXY)``: what the failure is about."""
    at = at or target.api_base
    proxy = next((name for name in PROXY_VARIABLES if ctx.env.get(name)), None)
    via = f" through the tunnel ({proxy})" if proxy else ""
    return f"the {target.purpose} {target.model}{f' at {at}' if at else ''}{via}"


def ask_judge(ctx: Context, target: JudgeTarget) -> Check:
    """One request of a few tokens, as trainer.agent.judge makes it; no retries. A provider of
    judge_ping's table (Gemini, OpenAI, Anthropic, an OpenAI-compatible JUDGE_API_BASE) is asked
    with one plain HTTP POST; litellm only for another provider, or where it must route."""
    ping = judge_ping.plan(target.model, target.api_base, target.api_key, ctx.env)
    checked = ask_over_http(ctx, target, ping) if ping is not None else None
    return checked if checked is not None else ask_through_litellm(ctx, target)


def ask_over_http(ctx: Context, target: JudgeTarget, ping: judge_ping.Ping) -> Check | None:
    """The ping's one POST, its answer judged as litellm reports it. None when JUDGE_API_BASE
    refuses a ``prefix/`` name that litellm might route to another protocol: litellm then decides."""
    label = judge_label(ctx, target, ping.base if ping.moved else None)
    if ping.key is None:
        return no_key(label, ping.provider.keys)
    began = time.monotonic()
    try:
        status, text = judge_ping.post_json(ping.url, ping.body(), ping.headers(), ctx.timeout,
                                            proxied=any(ctx.env.get(name) for name in PROXY_VARIABLES))
    except OSError as error:
        return judge_failure(ctx, label, None, str(error))
    body = judge_ping.json_object(text)
    if ping.litellm_may_route(status):
        return None
    if ping.answered(status, body):
        return passed("judge", f"{label} answered in {time.monotonic() - began:.1f}s")
    return judge_failure(ctx, label, ping.status(status, text), judge_ping.http_detail(body, text))


def no_key(label: str, names: list[str] | tuple[str, ...]) -> Check:
    return permanent("judge", f"no key for {label}: {' or '.join(names or ['?'])} is not set",
                     "put the key in .env (see .env.example), or set JUDGE_API_BASE")


def ask_through_litellm(ctx: Context, target: JudgeTarget) -> Check:
    """Another provider's model (not in judge_ping.PROVIDERS) or a name litellm routes: through litellm itself."""
    import litellm

    from trainer.agent.judge import litellm_route

    litellm.suppress_debug_info = True  # its "Give Feedback" banner is no error line
    # litellm's logging thread serializes the response after the call returns: its pydantic
    # warnings would land in the .err log as the job's last lines, outside the block below.
    warnings.filterwarnings("ignore", message="Pydantic serializer warnings", category=UserWarning)
    label = judge_label(ctx, target)
    if target.api_base is None:
        keys = litellm.validate_environment(model=target.model)
        if not keys.get("keys_in_environment"):
            return no_key(label, keys.get("missing_keys") or [])
    model, connection = litellm_route(target.model, target.api_base, target.api_key)
    began = time.monotonic()
    try:
        with warnings.catch_warnings():  # litellm's pydantic chatter is no error line either
            warnings.simplefilter("ignore")
            litellm.completion(model=model, messages=[{"role": "user", "content": JUDGE_PING}],
                               max_tokens=8, temperature=0, drop_params=True, timeout=ctx.timeout,
                               max_retries=0, **connection)
    except Exception as error:  # litellm maps every provider's and the network's errors to its own
        return judge_failure(ctx, label, getattr(error, "status_code", None), error_detail(error))
    return passed("judge", f"{label} answered in {time.monotonic() - began:.1f}s")


def error_detail(error: Exception) -> str:
    """``NotFoundError: model 'x' is not served``: litellm's message without its repeated prefixes
    (``litellm.NotFoundError: NotFoundError: OpenAIException - ...``)."""
    message = str(error)
    return f"{type(error).__name__}: {message.split(' - ', 1)[1] if ' - ' in message else message}"


def judge_failure(ctx: Context, label: str, status: int | None, detail: str) -> Check:
    """401/403: the key is rejected; 400/404: the model or request is wrong (configuration);
    429: reachable and accepted, only busy (passes); anything else did not answer (transient)."""
    detail = ctx.redact(detail)
    if status in (401, 403):
        return permanent("judge", f"{label} rejects the key (HTTP {status}: {detail})",
                         "set the right key in .env: JUDGE_API_KEY with JUDGE_API_BASE, else the provider's "
                         "(GEMINI_API_KEY...)")
    if status in (400, 404):
        return permanent("judge", f"{label} refuses the model or request (HTTP {status}: {detail})",
                         "check JUDGE_MODEL (and ruler_judge_model) against what the judge serves")
    if status == 429:
        return passed("judge", f"{label} is reachable and accepts the key, but is rate-limited now (HTTP 429)")
    return transient("judge", f"{label} did not answer ({detail}; timeout {ctx.timeout:g}s)",
                     "check the judge server, JUDGE_API_BASE and the tunnel (TUNNEL_HOST); the run retries")


# -- running them -----------------------------------------------------------------------------


CHECKS: tuple[Callable[[Context], Check], ...] = (
    check_data, check_scenarios, check_model_cache, check_backend, check_filesystems, check_wandb, check_judge,
)


def run_checks(ctx: Context) -> list[Check]:
    """Every check, cheap local ones first; a check that raises is reported, never raised."""
    results = []
    for check in CHECKS:
        name = check.__name__.removeprefix("check_")
        try:
            results.append(check(ctx))
        except Exception as error:  # a check's own bug must not hide the others' answers
            results.append(transient(name, ctx.redact(f"the check itself failed: {type(error).__name__}: {error}"),
                                     "report it; preflight=false skips the checks"))
    return results


def exit_code(results: list[Check]) -> int:
    """0 when all passed; 78 when a failure is permanent; else 69 (retried)."""
    failed = [result for result in results if not result.ok]
    if not failed:
        return 0
    return EXIT_CONFIG_ERROR if any(result.permanent for result in failed) else EXIT_UNAVAILABLE


def failure_lines(results: list[Check]) -> list[str]:
    """The error lines in check order, the headline last (job control quotes the last line):
    the first permanent failure (the most basic: data before the judge), else the first."""
    failed = [result for result in results if not result.ok]
    if not failed:
        return []
    headline = next((result for result in failed if result.permanent), failed[0])
    return [result.error_line() for result in failed if result is not headline] + [headline.error_line()]


def run_job(config: TrainerConfig, targets: Targets, env: Mapping[str, str]) -> int:
    """The job's preflight: log every result, print each failure on stderr, return the exit code."""
    if not config.preflight:
        log.info("preflight: off (preflight=false)")
        return 0
    began = time.monotonic()
    results = run_checks(Context(config, targets, env, "job"))
    for result in results:
        if result.ok:
            log.info("preflight ok: %s: %s", result.name, result.message)
    code = exit_code(results)
    log.info("preflight: %d of %d checks passed in %.1fs", sum(r.ok for r in results), len(results),
             time.monotonic() - began)
    for line in failure_lines(results):
        print(line, file=sys.stderr, flush=True)
    return code


def targets_from_env(config_name: str, config: TrainerConfig, env: Mapping[str, str]) -> Targets:
    """The places as trainer.train resolves them (HPC_RUN_DIR, ART_PATH, DATA_DIR, WANDB_DIR)."""
    from trainer.staging.data import default_data_dir

    run_dir = Path(env.get("HPC_RUN_DIR") or REPO_DIR / "runs" / config_name).absolute()
    art_path = Path(env.get("ART_PATH") or run_dir / "art").absolute()
    model = env.get("HPC_MODEL_DIR") or art_model_dir(art_path, config.project, run_dir.name)
    data_dir = Path(env["DATA_DIR"]) if env.get("DATA_DIR") else default_data_dir()
    return Targets(run_dir=run_dir, model_dir=Path(model).absolute(), data_dir=data_dir.absolute(),
                   wandb_dir=Path(env.get("WANDB_DIR") or run_dir).absolute())


def job_only(env: Mapping[str, str]) -> list[str]:
    """What the login side cannot check for a job of this environment: its node's own view."""
    lines = ["the node's view of DATA_DIR, HF_HOME and the output folders (mounts, quotas), "
             "with a test write"]
    if env.get("HPC_JUDGE_SERVED"):
        lines.append(f"the judge served inside the job ({env['HPC_JUDGE_SERVED']}), once it is up")
    if env.get("HPC_NO_INTERNET") == "1":
        lines.append("the node's offline mode (HF_HUB_OFFLINE=1; W&B offline unless WANDB_MODE says otherwise)")
        if not env.get("JUDGE_API_BASE"):
            lines.append("the judge through the job's SSH tunnel (TUNNEL_HOST); checked here from the login node")
    lines.append("the backend packages as the node imports them, and its GPUs (the trainer's start, "
                 "after the preflight)")
    return lines


# -- command line -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.preflight", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="agent_008")
    parser.add_argument("--where", choices=WHERE, default="job",
                        help="job: every check as the job runs it; login: write nothing, and list the job-only checks")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as error:
        print(f"trainer.preflight: error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    env = os.environ
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    results = run_checks(Context(config, targets_from_env(args.config, config, env), env, args.where))
    for result in results:
        print(result.report_line())
    if args.where == "login":
        for line in job_only(env):
            print(f"job only: {line}")
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
