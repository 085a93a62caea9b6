"""The training loop: the data checked, a torn checkpoint set aside, the backend started, then
step after step (rollouts, training, progress) until the run is done or the job must stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpc.job.deadline import BoundaryRule, StopReason, StopRecord, record_stop
from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME
from hpc.job.on_decline import after_validation, settle
from hpc.run.best import best_and_last, best_of
from hpc.run.checkpoints import quarantine_incomplete
from hpc.run.decline import Decisions
from hpc.run.ledger import DeclineAction
from hpc.run.rundir import utc_now
from trainer.agent.email_db import EmailDB
from trainer.agent.judge import Judge
from trainer.agent.scenarios import Scenario, load_scenarios
from trainer.training.backend import check_models_cached, start_backend
from trainer.training.boundary import boundary_rule, stop_before_backend, stop_before_step, stop_before_validation
from trainer.training.config import TrainerConfig, decline_settings, shuffle_seed
from trainer.training.environment import Paths
from trainer.training.exits import SetupError, StepFailed
from trainer.training.preflight_checks import data_ready
from trainer.training.progress import StepClock, StepRecord, record_step, step_stats, total_steps
from trainer.training.rollouts import Abandoned, Rollouts, gather_step, make_rollouts
from trainer.training.schedule import learning_rate_at
from trainer.training.stop_request import StopRequest
from trainer.training.training_step import Objective, train_and_log
from trainer.training.validation import Validator, validation_scenarios

if TYPE_CHECKING:
    import art
    from art.utils.iterate_dataset import DatasetBatch

log = logging.getLogger("trainer")


async def train(config: TrainerConfig, paths: Paths, stop: StopRequest) -> int:
    """Check the data, set aside a torn checkpoint, start the backend with the model,
    then run the loop; the backend and the database are closed however it ends.

    The stop-at-boundary rule first asks whether the backend's start-up and a step fit: after
    the data checks (a bad setup is still reported, exit 78) and the torn checkpoint set aside
    (so the step a stop records is the one ART would resume from), before the backend exists
    (nothing on the GPU yet: stopping here wastes nothing)."""
    stop.attach(asyncio.get_running_loop())
    try:
        db_path = data_ready(config, paths.data_dir, os.environ)  # the preflight's data checks
        scenarios = load_training_scenarios(config, paths.data_dir)
        log.info("data: %s, %d training scenarios", paths.data_dir, len(scenarios))
        check_models_cached(config, os.environ)
        if stop.requested:
            log.info("stopped (%s) before starting the backend", stop.signal_name)
            return EXIT_STOPPED_FOR_TIME
        for path in quarantine_incomplete(paths.model_dir):  # before ART picks its step: the largest folder
            log.warning("moved an incomplete checkpoint aside: %s", path)
        log.info("checkpoints checked: %s", paths.model_dir / "checkpoints")
        if settle(paths.run_dir, paths.model_dir, log.info) is not None:  # the decline rule stopped the run
            return 0
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
            training = Training(model, backend, rollouts, config, paths, stop, boundary,
                                make_validator(config, paths, db, rollouts),
                                Decisions.read(paths.run_dir).lr_scale)
            return await train_steps(training, scenarios)
    finally:
        stop.detach()


def load_training_scenarios(config: TrainerConfig, data_dir: Path) -> list[Scenario]:
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


def make_validator(config: TrainerConfig, paths: Paths, db: EmailDB, rollouts: Rollouts) -> Validator | None:
    """Validation with the training loop's own agent; its judge even when training uses RULER
    (validation reports answer accuracy). None when val_set_size is 0."""
    scenarios = validation_scenarios(config, paths.data_dir)
    if not scenarios:
        return None
    judge = rollouts.judge or Judge.from_env(paths.judge_cache, config.judge_concurrency, config.judge_retries)
    return Validator(paths.run_dir, paths.model_dir, scenarios, db, judge, rollouts.agent, config.eval_steps,
                     config.eval_concurrency, config.keep_every_steps, config.prune_checkpoints,
                     keep_initial=config.kl_penalty_reference == "initial")


@dataclass(frozen=True)
class Training:
    """What every step of this job uses: the model and its backend, the rollouts, the run's files,
    the stop request, the stop-at-boundary rule, the validation (None when val_set_size is 0) and the
    learning-rate scale the decline rule's rollbacks left (hpc/run/decline.py)."""

    model: art.TrainableModel
    backend: Any
    rollouts: Rollouts
    config: TrainerConfig
    paths: Paths
    stop: StopRequest
    boundary: BoundaryRule
    validator: Validator | None = None
    lr_scale: float = 1.0

    async def stop_before_step(self, done: int, total: int) -> StopRecord | None:
        """The validation due first, the decline rule on it, then the stop-at-boundary rule."""
        stopped = await stop_before_step(self.validator, self.model, done, total, self.stop, self.boundary,
                                         self.paths.run_dir)
        return self.declined(done, total) or stopped

    def declined(self, done: int, total: int) -> StopRecord | None:
        """The decline rule on the validation of checkpoint ``done``, once (a job that stopped before
        judging it judges it at its start): a stop or a rollback ends this job."""
        validations = self.paths.run_dir.read_validations()
        last = Decisions.read(self.paths.run_dir).last
        if not validations or validations[-1]["step"] != done or (last is not None and last.step >= done):
            return None
        acted = after_validation(self.paths.run_dir, self.paths.model_dir, decline_settings(self.config), total,
                                 log.info)
        if acted is None or acted.action is DeclineAction.CONTINUE:
            return None
        if acted.action is DeclineAction.ROLLBACK:
            return StopRecord(acted.record.to_step or done, StopReason.ROLLBACK)
        return StopRecord(done, StopReason.DECLINED)

    def objective(self, number: int, total: int) -> Objective:
        """Step ``number``'s objective: the schedule's rate x the rollbacks' scale, the KL reference."""
        reference = {"base": None, "initial": 0}.get(self.config.kl_penalty_reference)
        if self.config.kl_penalty_reference == "best":
            best = best_of(self.paths.run_dir.read_validations())
            reference = best.step if best is not None else 0
        rate = learning_rate_at(self.config, number, total, self.lr_scale)
        return Objective.from_config(self.config, rate, reference)

    async def stop_before_validation(self, done: int, total: int) -> StopRecord | None:
        return await stop_before_validation(self.validator, self.model, done, total, self.stop, self.boundary,
                                            self.paths.run_dir)


async def train_steps(training: Training, scenarios: list[Scenario]) -> int:
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
    from art.utils import iterate_dataset  # art only once the preflight passed and the environment is set

    config, run = training.config, training.paths.run_dir
    done = await training.model.get_step()
    total = total_steps(len(scenarios), config)
    log.info("%d of %d steps done; continuing (%d scenarios, %d groups x %d rollouts per step, %d epoch(s))",
             done, total, len(scenarios), config.groups_per_step, config.trajectories_per_group, config.num_epochs)
    clock = StepClock()
    batches = iterate_dataset(scenarios, config.groups_per_step, config.num_epochs, initial_step=done, use_tqdm=False)
    for batch in batches:
        stopped = await training.stop_before_step(done, total)
        trained = await train_batch(training, batch, done, total, clock) if stopped is None else stopped
        if isinstance(trained, StopRecord):
            record_stop(run, trained)
            return 0 if trained.reason is StopReason.DECLINED else EXIT_STOPPED_FOR_TIME
        done = trained
        if len(clock.durations) == 1:
            settle_heap()
    stopped = await training.stop_before_validation(done, total)
    if stopped is not None:
        record_stop(run, stopped)
        return EXIT_STOPPED_FOR_TIME
    run.mark_done(done, total, **best_and_last(run))
    record_stop(run, StopRecord(done, StopReason.FINISHED))
    log.info("training finished: %d of %d steps done", done, total)
    return 0


async def train_batch(training: Training, batch: DatasetBatch[Scenario], done: int, total: int,
                      clock: StepClock) -> int | StopRecord:
    """Step ``batch.step + 1``: its rollouts gathered, trained on and recorded (progress.json,
    steps.jsonl); the steps done after it, or the stop when a stop request abandoned its rollouts."""
    number = batch.step + 1
    began, started_at = time.monotonic(), utc_now()
    log.info("step %d/%d (epoch %d): rollouts on %d scenarios", number, total, batch.epoch, len(batch.items))
    groups = await gather_step(training.model, batch, training.rollouts, training.stop)
    gathered = time.monotonic()
    if isinstance(groups, Abandoned):
        log.info("stopped (%s) with %d of %d steps done; step %d will be redone (%.1f rollout-seconds abandoned)",
                 training.stop.signal_name, done, total, number, groups.lost_rollout_seconds)
        return StopRecord(done, StopReason.SIGNAL, groups.lost_rollout_seconds)
    if not groups:
        raise StepFailed(f"step {number}: every group failed (rollouts or RULER); nothing to train on")
    stats = step_stats(groups)
    log.info("step %d/%d: training on %d groups (%d trajectories, %d rollout exceptions)",
             number, total, len(groups), stats.trajectories, stats.exceptions)
    objective = training.objective(number, total)
    done = await train_and_log(training.model, training.backend, groups, objective=objective, batch_step=batch.step)
    if done != number:
        raise StepFailed(f"step {number}: the backend reports step {done} after training; "
                         "checkpoints and data order no longer match")
    clock.add(time.monotonic() - began)
    record_step(training.paths.run_dir, StepRecord(done, total, batch.epoch, started_at, gathered - began, stats,
                                                    objective.record()), clock)
    return done


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
