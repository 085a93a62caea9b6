"""Preflight: checks that fail a job in seconds, before the expensive start.

A training job spends its first minutes importing ART, loading the model into
vLLM and Unsloth; without these checks a job on an offline node with a missing
model, a dead tunnel or a rejected key would find out only then, and be retried.
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
judge request), ``preflight_min_free_gb``, ``preflight_timeout``. httpx (W&B; a judge
through the tunnel's proxy) and litellm (a provider's judge) are imported by their checks only:
litellm's import alone took ~3.5 s of every launch's preflight.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Mapping

from hpc.job.exit_codes import EXIT_CONFIG_ERROR, EXIT_UNAVAILABLE
from hpc.job.workload_env import HPC_JUDGE_SERVED, HPC_MODEL_DIR, HPC_NO_INTERNET
from hpc.run.checkpoints import model_dir as art_model_dir
from trainer.staging.data import default_data_dir
from trainer.training.config import ConfigError, TrainerConfig, load_config
from trainer.training.environment import run_folders
from trainer.training.preflight_checks import (
    Check,
    Context,
    Targets,
    check_backend,
    check_data,
    check_filesystems,
    check_model_cache,
    check_scenarios,
    transient,
)
from trainer.training.preflight_services import check_judge, check_wandb

log = logging.getLogger("trainer.preflight")

WHERE = ("job", "login")


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
        except Exception as error:  # noqa: BLE001 - a check's own bug must not hide the others' answers
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
    run_dir, art_path = run_folders(config_name, env)
    model = env.get(HPC_MODEL_DIR) or art_model_dir(art_path, config.project, run_dir.name)
    data_dir = Path(env["DATA_DIR"]) if env.get("DATA_DIR") else default_data_dir()
    return Targets(run_dir=run_dir, model_dir=Path(model).absolute(), data_dir=data_dir.absolute(),
                   wandb_dir=Path(env.get("WANDB_DIR") or run_dir).absolute())


def job_only(env: Mapping[str, str]) -> list[str]:
    """What the login side cannot check for a job of this environment: its node's own view."""
    lines = ["the node's view of DATA_DIR, HF_HOME and the output folders (mounts, quotas), "
             "with a test write"]
    if env.get(HPC_JUDGE_SERVED):
        lines.append(f"the judge served inside the job ({env[HPC_JUDGE_SERVED]}), once it is up")
    if env.get(HPC_NO_INTERNET) == "1":
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
