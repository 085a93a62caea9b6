"""Train the ART-E email agent: ``python -m trainer.train --config agent_008 [key=value ...]``.

The command line of the training loop: the config, the run's paths and environment, the
preflight, then the loop (``trainer.training.loop``), each failure one line with its exit code.
The loop is ART-E's (dev/art-e/art_e/train.py in ART): register a LoRA ``TrainableModel`` with a
backend, walk the training scenarios with ``iterate_dataset``, gather ``trajectories_per_group``
rollouts per scenario, train on the groups, repeat. What the project adds is what a Slurm job
needs (docs/design.md), one module each in trainer/training/:

- **Resume** (``loop``). ART's current step is the largest checkpoint folder; a folder
  half-written by a killed job is moved aside first (``hpc.run.checkpoints.quarantine_incomplete``),
  and ``iterate_dataset`` starts at that step, so a new job continues where the last one stopped.
- **Stop on request** (``stop_request``, ``rollouts``). SIGUSR1 (the job's warning before its
  time limit) or SIGTERM means "stop at the next safe point": a step being trained is finished
  and its checkpoint saved; rollouts in flight are abandoned (never trained on). Then exit 75
  (``EXIT_STOPPED_FOR_TIME``) and the job continues the run. A second signal changes nothing.
- **Stop at a step boundary** (``boundary``). Work that would not end before the job's stop
  signal may come is not started (hpc/job/deadline.py): the backend's start-up with the step
  after it (``startups.jsonl`` times each start-up), each step, a validation due; the job then
  exits 75 at once and the next one continues.
- **Progress** (``progress``). After every step ``progress.json`` and a line of ``steps.jsonl``
  in the run directory; after the last one ``done.json`` and exit 0.

The backend (``backend``) is a config choice (key ``backend``): ``local`` is ART's LocalBackend;
``package.module:ClassName`` plugs in any class implementing ``art.Backend``, for sites that
train elsewhere (and for the tests, which use ``tests.doubles.art_backend:FakeBackend``).

Before anything expensive (ART's import, the data, the backend) it runs the preflight checks
(trainer/training/preflight.py): a failure is one line on stderr naming the check and the fix.

Exit codes (hpc/job/exit_codes.py; the errors that choose them: ``exits``): 0 finished, 75
stopped on request, 78 (``EXIT_CONFIG_ERROR``) a configuration error it cannot outgrow: bad
config, missing data or backend, a permanent preflight failure (one line on stderr; job control
gives the run up at once), 69 a transient preflight failure (retried), anything else a failure.

Environment (set by the job, hpc/job/workload_env.py; when run by hand the defaults apply,
``environment``): ``HPC_RUN_DIR`` (default ``<repo>/runs/<config>``), ``ART_PATH`` (default
``<run dir>/art``), ``DATA_DIR`` (default ``<repo>/data``), ``JUDGE_MODEL``, ``JUDGE_API_BASE``,
``WANDB_API_KEY`` (W&B logging when set), and ``HPC_NO_INTERNET=1`` (W&B offline, Hugging Face
offline). Note that ``import art`` itself loads the repository's ``.env`` (without overriding).

art is imported inside the functions that need it (litellm and datasets by the modules that use
them, inside theirs): ``--help`` and config errors answer at once, the preflight runs before
``import art``, and no launcher code pulls them in.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from hpc.job.exit_codes import EXIT_CONFIG_ERROR, EXIT_FAILED
from trainer.training.config import ConfigError, TrainerConfig, known_configs, load_config
from trainer.training.environment import Paths, check_job_model_dir, configure_environment, resolve_paths
from trainer.training.exits import BackendDidNotStart, SetupError, StepFailed
from trainer.training.loop import train
from trainer.training.preflight import run_job
from trainer.training.preflight_checks import Targets
from trainer.training.stop_request import StopRequest
from trainer.training.training_step import TrainedNothing

log = logging.getLogger("trainer")


# -- command line -------------------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the job log's last line says it all)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_CONFIG_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(
        prog="python -m trainer.train",
        description="Train the ART-E email agent. Stops cleanly (exit 75) on SIGUSR1/SIGTERM.",
    )
    parser.add_argument("--config", default="agent_008", help=f"a config in trainer/configs/: {', '.join(known_configs())}")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="override a config key (repeatable)")
    return parser.parse_args(argv)


def setup_logging() -> None:
    """One line per event: progress to stdout, warnings and errors to stderr (the
    .err log the crash guard points at)."""
    fmt = logging.Formatter("%(asctime)s [%(name)s] %(message)s", "%Y-%m-%dT%H:%M:%S")
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err = logging.StreamHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [out, err]
    root.setLevel(logging.INFO)
    for noisy in ("httpx", "LiteLLM", "litellm", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def run_preflight(config: TrainerConfig, paths: Paths) -> int:
    """trainer/training/preflight.py's checks (config key ``preflight``), before ``import art``: 0 when
    they pass, else the exit code (78 permanent, 69 transient) after one line per failure."""
    wandb_dir = Path(os.environ.get("WANDB_DIR") or paths.run_dir.path)
    targets = Targets(run_dir=paths.run_dir.path, model_dir=paths.model_dir, data_dir=paths.data_dir,
                      wandb_dir=wandb_dir)
    return run_job(config, targets, os.environ)


def main(argv: list[str] | None = None) -> int:
    stop = StopRequest().install()  # first: a stop request must never kill us
    args = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging()
    try:
        config = load_config(args.config, args.overrides)
        paths = resolve_paths(args.config, config, os.environ)
    except (ConfigError, SetupError) as error:
        print(f"trainer.train: error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    configure_environment(os.environ, interactive=sys.stderr.isatty(), run_dir=paths.run_dir.path,
                          fast_start=config.vllm_fast_start)
    log.info("config %s: run %s/%s (served as %s) on %s, backend %s, reward %s; run dir %s; checkpoints %s",
             args.config, config.project, paths.run_name, config.model_name, config.base_model, config.backend, config.reward,
             paths.run_dir.path, paths.model_dir / "checkpoints")
    check_job_model_dir(paths.model_dir, os.environ)
    try:
        failed = run_preflight(config, paths)
        if failed:
            return failed
        return asyncio.run(train(config, paths, stop))
    except SetupError as error:
        print(f"trainer.train: error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except (StepFailed, TrainedNothing, BackendDidNotStart) as error:
        print(f"trainer.train: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        stop.ignore_from_now_on()


if __name__ == "__main__":
    sys.exit(main())
