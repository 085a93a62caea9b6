"""Train the ART-E email agent: ``python -m trainer.train --config agent_008 [key=value ...]``.

The loop is ART-E's (dev/art-e/art_e/train.py in ART): register a LoRA
``TrainableModel`` with a backend, walk the training scenarios with
``iterate_dataset``, gather ``trajectories_per_group`` rollouts per scenario,
train on the groups, repeat. What this module adds is what a Slurm job needs
(docs/design.md):

- **Resume.** ART's current step is the largest checkpoint folder; a folder
  half-written by a killed job is moved aside first
  (``hpc.run.checkpoints.quarantine_incomplete``), and ``iterate_dataset`` starts
  at that step, so a new job continues exactly where the last one stopped.
- **Stop on request.** SIGUSR1 (the job's warning before its time limit) or
  SIGTERM means "stop at the next safe point": a step being trained is
  finished and its checkpoint saved; rollouts in flight are abandoned (never
  trained on). Then exit 75 (``EXIT_STOPPED_FOR_TIME``) and the job continues
  the run. A second signal changes nothing: the save is never cut short.
- **Stop at a step boundary.** Work that would not end before the job's stop
  signal may come is not started (hpc/job/deadline.py): the backend's start-up
  with the step after it (``startups.jsonl`` times each start-up), each step, a
  validation due; the job then exits 75 at once and the next one continues.
- **Progress.** After every step ``progress.json`` in the run directory;
  after the last one ``done.json`` and exit 0.

The backend is a config choice (key ``backend``): ``local`` is ART's
LocalBackend; ``package.module:ClassName`` plugs in any class implementing
``art.Backend``, for sites that train elsewhere (and for the tests, which use
``tests.doubles.art_backend:FakeBackend``).

Before anything expensive (ART's import, the data, the backend) it runs the
preflight checks (trainer/training/preflight.py): a failure is one line on stderr naming
the check and the fix, within seconds.

Exit codes: 0 finished, 75 stopped on request, 78 (``EXIT_CONFIG_ERROR``) a
configuration error it cannot outgrow: bad config, missing data or backend, a
permanent preflight failure (one line on stderr; job control gives the run up
at once), 69 a transient preflight failure (retried), anything else a failure.

Environment (set by the job; when run by hand the defaults apply):
``HPC_RUN_DIR`` (default ``<repo>/runs/<config>``), ``ART_PATH`` (default
``<run dir>/art``), ``DATA_DIR`` (default ``<repo>/data``), ``JUDGE_MODEL``,
``JUDGE_API_BASE``, ``WANDB_API_KEY`` (W&B logging when set), and
``HPC_NO_INTERNET=1`` (W&B offline, Hugging Face offline). Note that
``import art`` itself loads the repository's ``.env`` (without overriding).

art, litellm and datasets are imported inside the functions that need them:
``--help`` and config errors answer at once, and no launcher code pulls them in.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import importlib.util
import logging
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Iterable, Mapping

from hpc.run.checkpoints import list_checkpoints, quarantine_incomplete
from hpc.run.checkpoints import model_dir as art_model_dir
from hpc.job.deadline import (
    BoundaryRule,
    BoundarySettings,
    Decision,
    EndTimeError,
    StopRecord,
    record_stop,
    startup_durations,
    step_durations,
    validation_durations,
)
from hpc.run.rundir import EXIT_CONFIG_ERROR, EXIT_STOPPED_FOR_TIME, RunDir, utc_now
from hpc.job.vllm_runtime import art_runtime_env
from trainer.training.config import (
    ConfigError,
    TrainerConfig,
    known_configs,
    load_config,
    one_line,
    shuffle_seed,
    vllm_engine_args,
)
from trainer.training.training_step import Objective, TrainedNothing, reward_spread, train_and_log

if TYPE_CHECKING:
    import art
    from art.utils.iterate_dataset import DatasetBatch

    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.rollout import AgentConfig
    from trainer.agent.scenarios import Scenario
    from trainer.training.validation import Validator

REPO_DIR = Path(__file__).resolve().parents[2]
EXIT_SETUP_ERROR = EXIT_CONFIG_ERROR  # 78: bad config, missing data or backend: retrying will not help
EXIT_STEP_FAILED = 1  # a step produced nothing to train on, or trained nothing: the crash guard decides
STOP_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)

log = logging.getLogger("trainer")


class SetupError(RuntimeError):
    """Something the user must fix before training can start (exit 78, one line; the run is given up)."""


class BackendDidNotStart(RuntimeError):
    """The backend's model service failed to start (no GPU, out of memory...): exit 1, one line."""


class StepFailed(RuntimeError):
    """A step could not produce anything to train on (exit 1; the job's crash guard decides)."""


# -- stop requests ----------------------------------------------------------------------


class StopRequest:
    """Remembers that SIGUSR1/SIGTERM asked us to stop, and wakes the event loop.

    Installed with ``signal.signal`` as the very first thing in ``main``, so a
    signal during imports or setup is recorded instead of killing the process
    (SIGUSR1's default action). We do not use ``loop.add_signal_handler``:
    closing the loop resets the signals to their defaults, and a late second
    signal would then kill us. The handler records the request, says so on
    stdout at once (a raw write: a handler may interrupt a logging call, and
    the loop may be busy in a blocking save), and wakes the loop through
    ``call_soon_threadsafe`` (its self-pipe), as asyncio's own signal handling does.
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._installed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def install(self) -> "StopRequest":
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        self._installed = True
        return self

    def reclaim(self) -> None:
        """Install the handlers again if something took them, and unblock the signals in this
        thread. Seen on an H200 in gpu_mode dedicated, where ART runs Unsloth in the trainer's
        own process: a SIGUSR1 after step 2 was never seen and the run trained to its end,
        while Python still listed the trainer's handler (likely a library's C-level sigaction
        over CPython's, which Python cannot see and ``signal.signal`` puts back; with this
        called before each step, the next run's SIGUSR1 was seen). And ART's ServiceLifecycle
        wraps SIGTERM in a handler that shuts ART's services down before calling ours, which
        would kill the step being trained that a stop promises to finish (ART's atexit
        cleanup stays)."""
        if not self._installed:
            return
        for sig in STOP_SIGNALS:
            current = signal.getsignal(sig)
            if current != self._on_signal:
                log.warning("%s's handler was %r, not the trainer's: installed again", sig.name, current)
            signal.signal(sig, self._on_signal)
        blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS) & set(STOP_SIGNALS)
        if blocked:
            log.warning("%s blocked in the trainer's thread: unblocked", ", ".join(s.name for s in blocked))

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def request(self, name: str) -> None:
        """Ask for a stop (what the signal handler does; tests may call it from any thread)."""
        if self.signal_name is None:
            self.signal_name = name
            _say(f"got {name}: stopping at the next safe point (a step being trained is finished and saved)")
        else:
            _say(f"got {name}: already stopping ({self.signal_name}); a checkpoint being saved is not cut short")
        loop, event = self._loop, self._event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # loop closing: the flag alone is enough then
                loop.call_soon_threadsafe(event.set)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to the running loop, so a signal can interrupt the rollouts of a step."""
        self._event = asyncio.Event()
        self._loop = loop
        if self.requested:
            self._event.set()

    def detach(self) -> None:
        self._loop = None
        self._event = None

    async def wait(self) -> None:
        await self.event.wait()

    @property
    def event(self) -> asyncio.Event:
        """Set when a stop is requested (valid between attach() and detach())."""
        assert self._event is not None, "attach() first"
        return self._event

    def ignore_from_now_on(self) -> None:
        """Once the exit code is decided, ignore further stop signals. Python resets
        signals that have a Python handler to their default at interpreter exit, so
        a signal during teardown would otherwise kill us and turn 75 into "killed
        by signal"; ignored signals stay ignored."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _say(message: str) -> None:
    """One log line written straight to stdout's file descriptor (safe in a signal handler)."""
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [trainer] {message}\n"
    with contextlib.suppress(OSError):
        os.write(sys.stdout.fileno(), line.encode())


# -- where things are -----------------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    """The run's files: everything the loop reads or writes, resolved once."""

    run_dir: RunDir
    art_path: Path
    run_name: str  # ART's run_name: the job name, i.e. the run directory's name
    model_dir: Path  # <art_path>/<project>/models/<run_name>, where checkpoints/ lives
    data_dir: Path
    judge_cache: Path


def resolve_paths(config_name: str, config: TrainerConfig, env: dict[str, str] | os._Environ) -> Paths:
    from trainer.staging.data import SourceError, default_data_dir  # honours $DATA_DIR, else the dotenv files

    run_dir = Path(env.get("HPC_RUN_DIR") or REPO_DIR / "runs" / config_name).absolute()
    try:
        data_dir = default_data_dir().absolute()
    except SourceError as error:
        raise SetupError(str(error)) from None
    art_path = Path(env.get("ART_PATH") or run_dir / "art").absolute()
    return Paths(
        run_dir=RunDir(run_dir),
        art_path=art_path,
        run_name=run_dir.name,
        model_dir=art_model_dir(art_path, config.project, run_dir.name),
        data_dir=data_dir,
        judge_cache=run_dir / "judge_cache",
    )


def configure_environment(env: dict[str, str] | os._Environ, *, interactive: bool, run_dir: Path) -> None:
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
      ART's patch fails on the V2 runner); a value the user set wins."""
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env.update(art_runtime_env(env))  # vLLM's runner; the PyPI-built runtime, where ART's managed one is not
    env.setdefault("WANDB_DIR", str(run_dir))
    if env.get("HPC_NO_INTERNET") == "1":
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


# -- ART objects ------------------------------------------------------------------------------


def build_model(config: TrainerConfig, run_name: str, report_metrics: list[str]) -> "art.TrainableModel":
    """The LoRA model, with the config's GPU memory settings in ART's InternalModelConfig.

    ``run_name`` (the job name) names the checkpoint folder and the W&B run;
    ``config.model_name`` is only the alias vLLM serves the adapter under."""
    import art

    gpu_mode = "shared" if config.gpu_mode == "auto" else config.gpu_mode  # auto outside a launched job
    internal = art.dev.InternalModelConfig(
        init_args=art.dev.InitArgs(max_seq_length=config.max_seq_length),
        engine_args=art.dev.EngineArgs(**vllm_engine_args(config, gpu_mode)),
        **gpu_placement(gpu_mode),
    )
    return art.TrainableModel(
        name=config.model_name,
        run_name=run_name,
        project=config.project,
        base_model=config.base_model,
        report_metrics=report_metrics,
        _internal_config=internal,
    )


def gpu_placement(gpu_mode: str, env: Mapping[str, str] = os.environ) -> dict[str, list[int]]:
    """ART's dedicated mode for ``gpu_mode: dedicated``: Unsloth trains on the run's first
    GPU, vLLM serves from its second, so neither waits for the other to sleep. Shared: ART's
    default. ART writes these ids into CUDA_VISIBLE_DEVICES as they are (its trainer's and
    vLLM's), so they are the run's own device ids, not positions in its list: a pack's
    second run sees CUDA_VISIBLE_DEVICES=2,3, where [0] and [1] are the first run's GPUs."""
    if gpu_mode != "dedicated":
        return {}
    devices = dedicated_devices(env.get("CUDA_VISIBLE_DEVICES", ""))
    return {"trainer_gpu_ids": [devices[0]], "inference_gpu_ids": [devices[1]]}


def dedicated_devices(visible: str) -> list[int]:
    """The run's GPUs as device ids, from CUDA_VISIBLE_DEVICES (unset: the node's first two)."""
    ids = [item.strip() for item in visible.split(",") if item.strip()]
    if not ids:
        return [0, 1]
    if len(ids) < 2 or not all(item.isdigit() for item in ids):
        raise SetupError(f"gpu_mode dedicated needs two GPUs named by index in CUDA_VISIBLE_DEVICES, got {visible!r}: "
                         "run it with 2 GPUs (hpc.launch asks for them), or set gpu_mode=shared")
    return [int(item) for item in ids]


def backend_class(spec: str) -> type:
    """The backend the config names (key ``backend``).

    ``local`` is ART's LocalBackend (vLLM + Unsloth on this node's GPUs; needs the
    GPU extras). Any other value is an import path ``package.module:ClassName`` of
    a class implementing ``art.Backend`` and taking ``path=``: a site can plug in
    its own backend without touching this loop (the tests use one that trains
    nothing, ``tests.doubles.art_backend:FakeBackend``)."""
    if spec == "local":
        try:
            from art.local import LocalBackend
        except ImportError as error:
            raise SetupError(
                f"backend 'local' (ART's LocalBackend) cannot be imported ({error}); it needs the GPU "
                "packages: run `bash setup.sh` on a GPU node (pip install '.[backend]')"
            ) from None
        return LocalBackend
    module_name, _, class_name = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as error:
        raise SetupError(f"config key 'backend': cannot load {spec!r} ({error}); "
                         "accepted: 'local' or an import path 'package.module:ClassName'") from None


# -- one step -----------------------------------------------------------------------------------


class RolloutTasks:
    """The rollouts of one step as tasks we own.

    ``gather_trajectory_groups`` runs each rollout in a task of its own and
    does not cancel those when it is cancelled (its groups even count a
    cancellation as one more rollout exception and carry on). To abandon a step
    cleanly we therefore cancel the rollouts ourselves."""

    def __init__(self, concurrency: int) -> None:
        self._tasks: set[asyncio.Task] = set()
        self._slots = asyncio.Semaphore(concurrency)  # rollouts in flight at once (config rollout_concurrency)
        self._spans: list[RolloutSpan] = []  # every rollout that started (got a slot)

    def start(self, rollout: Coroutine[Any, Any, "art.Trajectory"]) -> asyncio.Task:
        task = asyncio.ensure_future(self._bounded(rollout))
        self._tasks.add(task)
        return task

    async def _bounded(self, rollout: Coroutine[Any, Any, "art.Trajectory"]) -> "art.Trajectory":
        async with self._slots:
            span = RolloutSpan(time.monotonic())
            self._spans.append(span)
            try:
                return await rollout
            finally:
                span.ended = time.monotonic()

    def rollout_seconds(self) -> float:
        """Seconds the started rollouts have run, summed (one still running counts until now)."""
        now = time.monotonic()
        return sum((now if span.ended is None else span.ended) - span.started for span in self._spans)

    async def cancel_all(self) -> None:
        pending = [task for task in self._tasks if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)  # also retrieves their exceptions


@dataclass
class RolloutSpan:
    """When one rollout started and ended (monotonic seconds; None while it runs)."""

    started: float
    ended: float | None = None


@dataclass(frozen=True)
class Abandoned:
    """A step whose rollouts a stop request abandoned: the rollout-seconds thrown away
    (every started rollout of the step, finished or not, since none is trained on)."""

    lost_rollout_seconds: float


@dataclass(frozen=True)
class Rollouts:
    """What every rollout of the run shares."""

    db: "EmailDB"
    judge: "Judge | None"  # None when reward=ruler: RULER scores whole groups instead
    agent: "AgentConfig"
    trajectories_per_group: int
    concurrency: int  # rollouts in flight at once
    max_rollout_exceptions: float  # fraction of a step's rollouts that may raise before the step fails
    ruler_judge_model: str | None  # set when reward=ruler: score each group with RULER


async def gather_step(
    model: "art.TrainableModel", batch: "DatasetBatch[Scenario]", rollouts: Rollouts, stop: StopRequest
) -> list["art.TrajectoryGroup"] | Abandoned:
    """The step's trajectory groups, or ``Abandoned`` if a stop request came first.

    A stop during rollouts abandons them: they are cancelled and nothing of
    this step is trained on (the next job redoes the step from scratch)."""
    tasks = RolloutTasks(rollouts.concurrency)
    gather = asyncio.ensure_future(gather_groups(model, batch, rollouts, tasks))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({gather, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if gather.done():
            return gather.result()
        log.info("step %d: abandoning its rollouts (%s); they are not trained on", batch.step + 1, stop.signal_name)
    finally:
        stopped.cancel()
        gather.cancel()  # no-op when done
        await tasks.cancel_all()
        await asyncio.wait({gather})
        if not gather.cancelled():
            gather.exception()  # retrieved: an abandoned step's errors are not reported
    return Abandoned(tasks.rollout_seconds())


async def gather_groups(
    model: "art.TrainableModel", batch: "DatasetBatch[Scenario]", rollouts: Rollouts, tasks: RolloutTasks
) -> list["art.TrajectoryGroup"]:
    """ART-E's gather: ``trajectories_per_group`` rollouts of each scenario of the batch,
    at most ``max_rollout_exceptions`` of them failing, RULER scoring when reward=ruler."""
    import art

    from trainer.agent.rollout import rollout

    groups = await art.gather_trajectory_groups(
        (
            # A list, not a generator: the rollouts must bind this scenario now (the group's
            # coroutine runs later). A failed rollout becomes one of its group's exceptions.
            art.trajectory_group([
                tasks.start(rollout(model, scenario, db=rollouts.db, judge=rollouts.judge, config=rollouts.agent))
                for _ in range(rollouts.trajectories_per_group)
            ], return_exceptions=True)
            for scenario in batch.items
        ),
        pbar_desc=f"step {batch.step + 1}",
        after_each=ruler_scorer(rollouts.ruler_judge_model),
    )
    check_rollout_failures(groups, len(batch.items) * rollouts.trajectories_per_group,
                           rollouts.max_rollout_exceptions, batch.step + 1)
    return [group for group in groups if group.trajectories]


def check_rollout_failures(groups: list["art.TrajectoryGroup"], count: int, allowed: float, number: int) -> None:
    """ART-E's rule, counted per rollout: more than ``floor(allowed * count)`` failed
    rollouts fail the step (ART's own gather counts a whole group per failure with
    ``art.trajectory_group``, so the count is ours)."""
    errors = [error for group in groups for error in group.exceptions]
    if len(errors) > math.floor(allowed * count):
        first = errors[0]
        raise StepFailed(f"step {number}: {len(errors)} of {count} rollouts failed (max_rollout_exceptions "
                         f"{allowed}); first: {first.type}: {first.message}")


def ruler_scorer(
    judge_model: str | None,
) -> Callable[["art.TrajectoryGroup"], Coroutine[Any, Any, "art.TrajectoryGroup | None"]] | None:
    """``after_each`` for reward=ruler: RULER re-scores each group as it completes
    (a group RULER fails on is dropped from the step)."""
    if judge_model is None:
        return None
    from trainer.agent.judge import score_group_with_ruler

    async def score(group: "art.TrajectoryGroup") -> "art.TrajectoryGroup | None":
        return await score_group_with_ruler(group, judge_model)

    return score


@dataclass(frozen=True)
class StepStats:
    """What progress.json reports about a step's trajectories."""

    trajectories: int
    exceptions: int
    reward_mean: float | None
    answer_accuracy: float | None
    judge_failures: int
    reward_spread: float | None = None  # mean within-group reward std: 0 means GRPO has nothing to learn


def step_stats(groups: Iterable["art.TrajectoryGroup"]) -> StepStats:
    groups = list(groups)
    trajectories = [t for group in groups for t in group.trajectories]
    rewards = [t.reward for t in trajectories]
    answers = [float(t.metrics["answer_correct"]) for t in trajectories if "answer_correct" in t.metrics]
    return StepStats(
        trajectories=len(trajectories),
        exceptions=sum(len(group.exceptions) for group in groups),
        reward_mean=mean(rewards),
        answer_accuracy=mean(answers),
        judge_failures=int(sum(float(t.metrics.get("judge_failed", 0)) for t in trajectories)),
        reward_spread=mean([reward_spread(group) for group in groups]),
    )


def mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


# -- the run ------------------------------------------------------------------------------------


def total_steps(num_scenarios: int, config: TrainerConfig) -> int:
    """How many steps ``iterate_dataset`` yields over the whole run (its own formula)."""
    return math.ceil(num_scenarios / config.groups_per_step) * config.num_epochs


def load_training_scenarios(config: TrainerConfig, data_dir: Path) -> list["Scenario"]:
    from trainer.agent.scenarios import load_scenarios

    scenarios = load_scenarios(
        data_dir,
        "train",
        limit=config.training_dataset_size,
        max_messages=config.max_messages,
        shuffle=shuffle_seed(config) is not None,  # None: the dataset's own order, as ART-E
        seed=shuffle_seed(config) or 0,
    )
    if not scenarios:
        raise SetupError(f"no training scenarios in {data_dir} (max_messages={config.max_messages}); "
                         "stage the data with `python -m trainer.data prepare`")
    return scenarios


def check_data(data_dir: Path) -> Path:
    """The email database path; a missing data directory is one clear line, not a traceback."""
    from trainer.staging.data import data_paths

    paths = data_paths(data_dir)
    missing = [str(p) for p in (data_dir, paths.db, paths.scenarios("train")) if not Path(p).exists()]
    if missing:
        raise SetupError(f"training data not found ({', '.join(missing)} missing); stage it on a login node "
                         "with internet: `python -m trainer.data prepare` (DATA_DIR chooses where)")
    return Path(paths.db)


class StepClock:
    """Seconds per step over this job's steps, for the ETA in progress.json."""

    def __init__(self) -> None:
        self.durations: list[float] = []

    def add(self, seconds: float) -> None:
        self.durations.append(seconds)

    @property
    def seconds_per_step(self) -> float:
        return sum(self.durations) / len(self.durations)


def write_progress(run_dir: RunDir, *, step: int, total: int, epoch: int, stats: StepStats, clock: StepClock) -> None:
    run_dir.write_progress({
        "step": step,
        "total_steps": total,
        "epoch": epoch,  # 0-based, as ART's iterate_dataset counts
        "reward_mean": stats.reward_mean,
        "answer_accuracy": stats.answer_accuracy,
        "judge_failures": stats.judge_failures,
        "seconds_per_step": round(clock.seconds_per_step, 1),
        "eta_seconds": round(max(total - step, 0) * clock.seconds_per_step),
    })


async def train_steps(
    model: "art.TrainableModel",
    backend: Any,
    scenarios: list["Scenario"],
    rollouts: Rollouts,
    config: TrainerConfig,
    paths: Paths,
    stop: StopRequest,
    boundary: BoundaryRule,
    validator: "Validator | None" = None,
) -> int:
    """The training loop proper, from the model's current step to the end (or a stop).

    Numbering: ``iterate_dataset`` calls its batches 0, 1, ...; training batch
    K turns checkpoint K into checkpoint K+1. Logs and progress.json count
    steps *done*, so training batch K is "step K+1" and progress then says
    ``step: K+1``, matching the checkpoint folder a new job resumes from.
    A validation due at checkpoint K (``trainer.training.validation``) runs before batch K is
    gathered, and the last one after the last step, before ``done.json``.
    Neither a validation nor a step starts unless the stop-at-boundary rule ``boundary``
    (hpc/job/deadline.py; ``train`` asked it once before the backend started) predicts
    it ends before the job's stop signal may come; every stop, and the finish, is a
    line of ``stops.jsonl``."""
    from art.utils import iterate_dataset

    done = await model.get_step()
    total = total_steps(len(scenarios), config)
    log.info("%d of %d steps done; continuing (%d scenarios, %d groups x %d rollouts per step, %d epoch(s))",
             done, total, len(scenarios), config.groups_per_step, config.trajectories_per_group, config.num_epochs)
    clock = StepClock()
    batches = iterate_dataset(scenarios, config.groups_per_step, config.num_epochs, initial_step=done, use_tqdm=False)
    for batch in batches:
        stopped = await stop_before_step(validator, model, done, total, stop, boundary, paths.run_dir)
        if stopped is not None:
            record_stop(paths.run_dir, stopped)
            return EXIT_STOPPED_FOR_TIME
        number = batch.step + 1
        began, started_at = time.monotonic(), utc_now()
        log.info("step %d/%d (epoch %d): rollouts on %d scenarios", number, total, batch.epoch, len(batch.items))
        groups = await gather_step(model, batch, rollouts, stop)
        gathered = time.monotonic()
        if isinstance(groups, Abandoned):
            log.info("stopped (%s) with %d of %d steps done; step %d will be redone (%.1f rollout-seconds abandoned)",
                     stop.signal_name, done, total, number, groups.lost_rollout_seconds)
            record_stop(paths.run_dir, StopRecord(done, "signal", groups.lost_rollout_seconds))
            return EXIT_STOPPED_FOR_TIME
        if not groups:
            raise StepFailed(f"step {number}: every group failed (rollouts or RULER); nothing to train on")
        stats = step_stats(groups)
        log.info("step %d/%d: training on %d groups (%d trajectories, %d rollout exceptions)",
                 number, total, len(groups), stats.trajectories, stats.exceptions)
        done = await train_and_log(model, backend, groups, objective=Objective.from_config(config),
                                   batch_step=batch.step)
        if done != number:
            raise StepFailed(f"step {number}: the backend reports step {done} after training; "
                             "checkpoints and data order no longer match")
        clock.add(time.monotonic() - began)
        write_progress(paths.run_dir, step=done, total=total, epoch=batch.epoch, stats=stats, clock=clock)
        paths.run_dir.append_step({"step": done, "started": started_at, "seconds": round(clock.durations[-1], 3),
                                   "rollout_seconds": round(gathered - began, 3), **asdict(stats)})
        log.info("step %d/%d done in %.0fs: reward %s, accuracy %s, judge failures %d",
                 done, total, clock.durations[-1], stats.reward_mean, stats.answer_accuracy, stats.judge_failures)
        if len(clock.durations) == 1:
            settle_heap()
    stopped = await stop_before_validation(validator, model, done, total, stop, boundary, paths.run_dir)
    if stopped is not None:
        record_stop(paths.run_dir, stopped)
        return EXIT_STOPPED_FOR_TIME
    paths.run_dir.mark_done(done, total)
    record_stop(paths.run_dir, StopRecord(done, "finished"))
    log.info("training finished: %d of %d steps done", done, total)
    return 0


def settle_heap() -> None:
    """Once, after this job's first step: collect the garbage, then freeze what is left (``gc.freeze``).

    By then the process holds what it keeps to its end: ART, litellm, the OpenAI client, and what
    the first step imported late (``model.log``'s trajectory files pull in pandas and pyarrow).
    Frozen, they are no longer walked by the cyclic garbage collector's full collections, each of
    which paused every rollout in flight for ~0.2 s in the steps after the first: on CPU with the
    same work as a minimal ART loop (bench/trainer_cost.py), 0.45-0.5 s of garbage collection in 7 s
    of gathering against the loop's 0.07 s, and 0.07-0.09 s once frozen.
    What of the first step is still alive is frozen with it: at most one step's trajectories,
    whose reference cycles (if any) are then never freed."""
    gc.collect()
    gc.freeze()
    log.info("start-up settled: %d objects frozen, no longer scanned by the garbage collector", gc.get_freeze_count())


def boundary_rule(config: TrainerConfig) -> BoundaryRule:
    """The stop-at-boundary rule of this job (config keys ``stop_at_boundary``, ``boundary_*``)."""
    settings = BoundarySettings(config.boundary_recent_steps, config.boundary_safety_factor,
                                config.boundary_margin_seconds)
    try:
        return BoundaryRule.from_env(os.environ, settings, enabled=config.stop_at_boundary, say=log.info)
    except EndTimeError as error:
        raise SetupError(str(error)) from None


async def stop_before_step(validator: "Validator | None", model: "art.TrainableModel", done: int, total: int,
                           stop: StopRequest, boundary: BoundaryRule, run: RunDir) -> StopRecord | None:
    """Why the loop stops before training step ``done + 1``, if it does: the validation due
    first does not fit or is cut short, a stop was requested, or the step would not end
    before the job's stop signal may come."""
    stop.reclaim()
    stopped = await stop_before_validation(validator, model, done, total, stop, boundary, run)
    if stopped is not None:
        return stopped
    if stop.requested:
        log.info("stopped (%s) with %d of %d steps done", stop.signal_name, done, total)
        return StopRecord(done, "signal")
    return boundary_stop(boundary.check(step_durations(run)), f"step {done + 1}", done)


async def stop_before_validation(validator: "Validator | None", model: "art.TrainableModel", done: int, total: int,
                                 stop: StopRequest, boundary: BoundaryRule, run: RunDir) -> StopRecord | None:
    """Run the validation owed at ``done``, if any; why not, when it did not fit or a stop
    request cut it short (nothing is recorded then, and the next job runs it)."""
    if validator is None or not validator.due(done, total):
        return None
    if stop.requested:
        log.info("stopped (%s) before the validation at step %d", stop.signal_name, done)
        return StopRecord(done, "signal")
    stopped = boundary_stop(boundary.check(validation_durations(run)), f"the validation at step {done}", done)
    if stopped is not None:
        return stopped
    if await validator.validate(model, done, stop.event) is None:
        return StopRecord(done, "signal")
    return None


def boundary_stop(decision: Decision, what: str, done: int, not_started: str = "it") -> StopRecord | None:
    """None when the work fits; else the one line that says why the job stops here."""
    if decision.fits:
        return None
    log.info("%s: not starting %s; stopping with %d steps done (exit 75, the next job continues at once)",
             decision.describe(what), not_started, done)
    return StopRecord.boundary(done, decision)


def stop_before_backend(boundary: BoundaryRule, paths: Paths) -> StopRecord | None:
    """Why the job stops before starting the backend, if it does: its start-up (minutes on a GPU)
    and the step after it would not end before the job's stop signal may come. Asked before the
    start-up, a job begun too late costs no GPU time on it; no step history, no prediction."""
    run = paths.run_dir
    decision = boundary.check_start(startup_durations(run), step_durations(run))
    done = resume_step(paths)
    return boundary_stop(decision, f"step {done + 1}", done, "the backend")


def resume_step(paths: Paths) -> int:
    """The step the next job resumes from, known without the backend: the largest checkpoint
    folder, as ART counts (after ``quarantine_incomplete`` it is complete); where there is none
    (a plugged-in backend that keeps its checkpoints elsewhere) the last step of steps.jsonl,
    the run's own record of steps done; else 0, a new run."""
    checkpoints = list_checkpoints(paths.model_dir)
    if checkpoints:
        return checkpoints[-1].step
    steps = [s["step"] for s in paths.run_dir.read_steps() if isinstance(s.get("step"), int)]
    return steps[-1] if steps else 0


async def train(config: TrainerConfig, paths: Paths, stop: StopRequest) -> int:
    """Check the data, set aside a torn checkpoint, start the backend with the model,
    then run the loop; the backend and the database are closed however it ends.

    The stop-at-boundary rule first asks whether the backend's start-up and a step fit: after
    the data checks (a bad setup is still reported, exit 78) and the torn checkpoint set aside
    (so the step a stop records is the one ART would resume from), before the backend exists
    (nothing on the GPU yet: stopping here wastes nothing)."""
    from trainer.agent.email_db import EmailDB

    stop.attach(asyncio.get_running_loop())
    try:
        db_path = check_data(paths.data_dir)
        scenarios = load_training_scenarios(config, paths.data_dir)
        log.info("data: %s, %d training scenarios", paths.data_dir, len(scenarios))
        check_models_cached(config, os.environ)
        if stop.requested:
            log.info("stopped (%s) before starting the backend", stop.signal_name)
            return EXIT_STOPPED_FOR_TIME
        for path in quarantine_incomplete(paths.model_dir):  # before ART picks its step: the largest folder
            log.warning("moved an incomplete checkpoint aside: %s", path)
        log.info("checkpoints checked: %s", paths.model_dir / "checkpoints")
        boundary = boundary_rule(config)
        log.info("%s", boundary.describe())
        stopped = stop_before_backend(boundary, paths)
        if stopped is not None:
            record_stop(paths.run_dir, stopped)
            return EXIT_STOPPED_FOR_TIME
        async with contextlib.AsyncExitStack() as resources:
            db = EmailDB(db_path)
            resources.callback(db.close)
            backend, model = await start_backend(config, paths, resources)
            rollouts = make_rollouts(config, paths, db)
            validator = make_validator(config, paths, db, rollouts)
            return await train_steps(model, backend, scenarios, rollouts, config, paths, stop, boundary, validator)
    finally:
        stop.detach()


async def start_backend(config: TrainerConfig, paths: Paths,
                        resources: contextlib.AsyncExitStack) -> tuple[Any, "art.TrainableModel"]:
    """Construct the backend (closed with ``resources``) and register the model with it, where
    LocalBackend loads the model and starts vLLM; the seconds from construction to registered
    go to startups.jsonl, from which the next jobs predict their start-up."""
    began = time.monotonic()
    backend = backend_class(config.backend)(path=str(paths.art_path))
    resources.push_async_callback(backend.close)
    log.info("backend: %s.%s at %s", type(backend).__module__, type(backend).__name__, paths.art_path)
    model = build_model(config, paths.run_name, metrics_reporters(os.environ))
    log.info("model built: %s (run %s, base %s, gpu_mode %s); registering with the backend",
             model.name, model.run_name, model.base_model, config.gpu_mode)
    await register(model, backend)
    seconds = time.monotonic() - began
    paths.run_dir.append_startup(seconds)
    log.info("registered: inference at %s as %s (start-up %.1fs)", model.inference_base_url,
             model.inference_model_name, seconds)
    return backend, model


async def register(model: "art.TrainableModel", backend: Any) -> None:
    """``model.register``, where ART's LocalBackend starts its model service (Unsloth, then
    vLLM) in a child process that prints its own error; a failure there is one line here."""
    try:
        await model.register(backend, _openai_client_config=server_config(os.environ))
    except RuntimeError as error:
        raise BackendDidNotStart(f"the training backend did not start: {one_line(error)} "
                                 "(its own error is above)") from error


def server_config(env: dict[str, str] | os._Environ) -> dict[str, Any] | None:
    """The vLLM port a pack job gave this run (HPC_VLLM_PORT: each run of a pack has its own,
    hpc/job/pack.py); None lets ART pick a free one."""
    port = env.get("HPC_VLLM_PORT", "")
    return {"server_args": {"port": int(port)}} if port.isdigit() else None


def check_models_cached(config: TrainerConfig, env: dict[str, str] | os._Environ) -> None:
    """Offline (HF_HUB_OFFLINE=1), ART's LocalBackend can load only what the HF cache holds:
    fail now, naming the missing repositories, not after minutes of start-up."""
    from trainer.staging.model_cache import offline_cache_problem

    if config.backend != "local" or env.get("HF_HUB_OFFLINE") != "1":
        return
    problem = offline_cache_problem(config.base_model, env)
    if problem:
        raise SetupError(problem)


def make_rollouts(config: TrainerConfig, paths: Paths, db: "EmailDB") -> Rollouts:
    from trainer.agent.rollout import AgentConfig

    return Rollouts(
        db=db,
        judge=answer_judge(config, paths),
        agent=AgentConfig(max_turns=config.max_turns, max_tokens=config.max_tokens,
                          tool_calling=config.tool_calling, temperature=config.temperature),
        trajectories_per_group=config.trajectories_per_group,
        concurrency=config.rollout_concurrency,
        max_rollout_exceptions=config.max_rollout_exceptions,
        ruler_judge_model=ruler_judge(config),
    )


def make_validator(config: TrainerConfig, paths: Paths, db: "EmailDB", rollouts: Rollouts) -> "Validator | None":
    """Validation with the training loop's own agent; its judge even when training uses RULER
    (validation reports answer accuracy). None when val_set_size is 0."""
    from trainer.agent.judge import Judge
    from trainer.training.validation import Validator, validation_scenarios

    scenarios = validation_scenarios(config, paths.data_dir)
    if not scenarios:
        return None
    judge = rollouts.judge or Judge.from_env(paths.judge_cache, config.judge_concurrency, config.judge_retries)
    return Validator(paths.run_dir, paths.model_dir, scenarios, db, judge, rollouts.agent, config.eval_steps,
                     config.eval_concurrency, config.keep_every_steps, config.prune_checkpoints)


def answer_judge(config: TrainerConfig, paths: Paths) -> "Judge | None":
    """The judge that checks each answer (reward=judge), caching its verdicts in the
    run directory so a resumed job does not pay twice; None when reward=ruler."""
    from trainer.agent.judge import Judge

    if config.reward == "ruler":
        return None
    return Judge.from_env(paths.judge_cache, config.judge_concurrency, config.judge_retries)


def ruler_judge(config: TrainerConfig) -> str | None:
    """The RULER judge model when reward=ruler (the config's, else JUDGE_MODEL), else None."""
    if config.reward != "ruler":
        return None
    from trainer.agent.judge import DEFAULT_JUDGE_MODEL

    return config.ruler_judge_model or os.environ.get("JUDGE_MODEL") or DEFAULT_JUDGE_MODEL


def check_job_model_dir(model_dir: Path, env: dict[str, str] | os._Environ) -> None:
    """The job's continuation hooks count steps in HPC_MODEL_DIR (the launcher's idea of
    where checkpoints go); if ours differs they would see no progress and end the run."""
    job_dir = env.get("HPC_MODEL_DIR")
    if job_dir and Path(job_dir).absolute() != model_dir.absolute():
        log.warning("checkpoints go to %s but the job watches HPC_MODEL_DIR=%s: its resume and progress "
                    "checks will not see them (ART_PATH, project or run name differ between the two)",
                    model_dir, job_dir)


# -- command line -------------------------------------------------------------------------------


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the job log's last line says it all)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_SETUP_ERROR, f"{self.prog}: error: {message} (see --help)\n")


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
    from trainer.training.preflight import Targets, run_job

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
        return EXIT_SETUP_ERROR
    configure_environment(os.environ, interactive=sys.stderr.isatty(), run_dir=paths.run_dir.path)
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
        return EXIT_SETUP_ERROR
    except (StepFailed, TrainedNothing, BackendDidNotStart) as error:
        print(f"trainer.train: error: {error}", file=sys.stderr)
        return EXIT_STEP_FAILED
    finally:
        stop.ignore_from_now_on()


if __name__ == "__main__":
    sys.exit(main())
