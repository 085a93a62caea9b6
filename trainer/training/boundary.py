"""Stops at a step boundary: before the backend's start-up, each step and each validation due,
whether the work ends before the job's stop signal may come (hpc/job/deadline.py's rule); a stop
request is honoured at the same points.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from hpc.job.deadline import (
    BoundaryRule,
    BoundarySettings,
    Decision,
    EndTimeError,
    StopReason,
    StopRecord,
    startup_durations,
    step_durations,
    validation_durations,
)
from hpc.run.checkpoints import list_checkpoints
from hpc.run.rundir import RunDir
from trainer.training.config import TrainerConfig
from trainer.training.environment import Paths
from trainer.training.exits import SetupError
from trainer.training.stop_request import StopRequest
from trainer.training.validation import Validator

if TYPE_CHECKING:
    import art

log = logging.getLogger("trainer")


def boundary_rule(config: TrainerConfig) -> BoundaryRule:
    """The stop-at-boundary rule of this job (config keys ``stop_at_boundary``, ``boundary_*``)."""
    settings = BoundarySettings(config.boundary_recent_steps, config.boundary_safety_factor,
                                config.boundary_margin_seconds)
    try:
        return BoundaryRule.from_env(os.environ, settings, enabled=config.stop_at_boundary, say=log.info)
    except EndTimeError as error:
        raise SetupError(str(error)) from None


async def stop_before_step(validator: Validator | None, model: art.TrainableModel, done: int, total: int,
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
        return StopRecord(done, StopReason.SIGNAL)
    return boundary_stop(boundary.check(step_durations(run)), f"step {done + 1}", done)


async def stop_before_validation(validator: Validator | None, model: art.TrainableModel, done: int, total: int,
                                 stop: StopRequest, boundary: BoundaryRule, run: RunDir) -> StopRecord | None:
    """Run the validation owed at ``done``, if any; why not, when it did not fit or a stop
    request cut it short (nothing is recorded then, and the next job runs it)."""
    if validator is None or not validator.due(done, total):
        return None
    if stop.requested:
        log.info("stopped (%s) before the validation at step %d", stop.signal_name, done)
        return StopRecord(done, StopReason.SIGNAL)
    stopped = boundary_stop(boundary.check(validation_durations(run)), f"the validation at step {done}", done)
    if stopped is not None:
        return stopped
    if await validator.validate(model, done, stop.event) is None:
        return StopRecord(done, StopReason.SIGNAL)
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
