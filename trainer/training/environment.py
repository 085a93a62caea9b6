"""Where the run's files are, and the environment the libraries read when they are imported.

``resolve_paths`` reads what the job gives the workload (``HPC_RUN_DIR``, ``ART_PATH``,
``DATA_DIR``: hpc/job/workload_env.py), with the defaults of a run by hand;
``configure_environment`` sets what must be set before ``import art``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from hpc.job.vllm_runtime import art_runtime_env
from hpc.job.workload_env import HPC_MODEL_DIR, HPC_NO_INTERNET, HPC_RUN_DIR, REPO_DIR
from hpc.run.checkpoints import model_dir as art_model_dir
from hpc.run.rundir import RunDir
from trainer.serving import fast_start as vllm_fast_start
from trainer.staging.data import default_data_dir
from trainer.staging.sources import SourceError
from trainer.training.config import TrainerConfig
from trainer.training.exits import SetupError

log = logging.getLogger("trainer")



@dataclass(frozen=True)
class Paths:
    """The run's files: everything the loop reads or writes, resolved once."""

    run_dir: RunDir
    art_path: Path
    run_name: str  # ART's run_name: the job name, i.e. the run directory's name
    model_dir: Path  # <art_path>/<project>/models/<run_name>, where checkpoints/ lives
    data_dir: Path
    judge_cache: Path


def run_folders(config_name: str, env: Mapping[str, str]) -> tuple[Path, Path]:
    """The run directory and ART's folder: the job's HPC_RUN_DIR and ART_PATH, else (a run by hand)
    runs/<config> in the repository and art/ inside it. The trainer and its preflight both ask here."""
    run_dir = Path(env.get(HPC_RUN_DIR) or REPO_DIR / "runs" / config_name).absolute()
    return run_dir, Path(env.get("ART_PATH") or run_dir / "art").absolute()


def resolve_paths(config_name: str, config: TrainerConfig, env: dict[str, str] | os._Environ) -> Paths:
    run_dir, art_path = run_folders(config_name, env)
    try:
        data_dir = default_data_dir().absolute()  # honours $DATA_DIR, else the dotenv files
    except SourceError as error:
        raise SetupError(str(error)) from None
    return Paths(
        run_dir=RunDir(run_dir),
        art_path=art_path,
        run_name=run_dir.name,
        model_dir=art_model_dir(art_path, config.project, run_dir.name),
        data_dir=data_dir,
        judge_cache=run_dir / "judge_cache",
    )


def configure_environment(env: dict[str, str] | os._Environ, *, interactive: bool, run_dir: Path,
                          fast_start: bool = False) -> None:
    """Settings that libraries read when they are imported, so this runs before art is.

    - Compute nodes without internet (HPC_NO_INTERNET=1): W&B writes offline runs
      (sync them later with `wandb sync <run dir>/wandb/offline-run-*`), Hugging
      Face uses only its cache.
    - W&B keeps its files in the run directory, not wherever the job started.
    - litellm would fetch its price table at import: use the bundled one.
    - In a job log (stderr not a terminal) tqdm's bars are off: ART's gather bar
      redraws every rollout with every metric, burying the one line per step
      this module logs. TQDM_DISABLE set by the user wins.
    - ART looks only for its own managed vLLM runtime: point it at the PyPI build
      setup.sh made where that is the one built (aarch64; hpc/job/vllm_runtime.py).
    - ART's runtime gets vLLM's V1 model runner (hpc.job.vllm_runtime.RUNNER_DEFAULTS:
      ART's patch fails on the V2 runner); a value the user set wins.
    - ``fast_start`` (config ``vllm_fast_start``): the environment half of it for ART's runtime,
      which inherits this process's (trainer/serving/fast_start.py); a value the user set wins."""
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.update(art_runtime_env(env))  # vLLM's runner; the PyPI-built runtime, where ART's managed one is not
    env.setdefault("WANDB_DIR", str(run_dir))
    if fast_start:
        vllm_fast_start.set_in(env)
    if env.get(HPC_NO_INTERNET) == "1":
        env.setdefault("WANDB_MODE", "offline")
        env["HF_HUB_OFFLINE"] = "1"
    if not interactive:
        env.setdefault("TQDM_DISABLE", "1")


def metrics_reporters(env: dict[str, str] | os._Environ) -> list[str]:
    """ART's ``report_metrics``: W&B when WANDB_API_KEY is set (ART's own default rule,
    stated here so the choice is visible), but only if wandb is installed; ART always
    writes history.jsonl next to the checkpoints as well."""
    if not env.get("WANDB_API_KEY"):
        return []
    if importlib.util.find_spec("wandb") is None:
        log.warning("WANDB_API_KEY is set but wandb is not installed: not logging to W&B")
        return []
    log.info("logging to W&B (mode: %s)", env.get("WANDB_MODE", "online"))
    return ["wandb"]


def check_job_model_dir(model_dir: Path, env: dict[str, str] | os._Environ) -> None:
    """The job's continuation hooks count steps in HPC_MODEL_DIR (the launcher's idea of
    where checkpoints go); if ours differs they would see no progress and end the run."""
    job_dir = env.get(HPC_MODEL_DIR)
    if job_dir and Path(job_dir).absolute() != model_dir.absolute():
        log.warning("checkpoints go to %s but the job watches HPC_MODEL_DIR=%s: its resume and progress "
                    "checks will not see them (ART_PATH, project or run name differ between the two)",
                    model_dir, job_dir)
