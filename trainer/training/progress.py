"""What each step reports: its statistics (reward, accuracy, judge failures, spread), the run's
step count, ``progress.json`` with the ETA, and the step's line of ``steps.jsonl``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from hpc.run.rundir import RunDir
from trainer.training.config import TrainerConfig
from trainer.training.training_step import reward_spread

if TYPE_CHECKING:
    import art

log = logging.getLogger("trainer")

@dataclass(frozen=True)
class StepStats:
    """What progress.json reports about a step's trajectories."""

    trajectories: int
    exceptions: int
    reward_mean: float | None
    answer_accuracy: float | None
    judge_failures: int
    reward_spread: float | None = None  # mean within-group reward std: 0 means GRPO has nothing to learn


def step_stats(groups: Iterable[art.TrajectoryGroup]) -> StepStats:
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


def total_steps(num_scenarios: int, config: TrainerConfig) -> int:
    """How many steps ``iterate_dataset`` yields over the whole run (its own formula)."""
    return math.ceil(num_scenarios / config.groups_per_step) * config.num_epochs


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


@dataclass(frozen=True)
class StepRecord:
    """One trained step, as the run directory records it."""

    done: int  # steps done after it: its checkpoint's number
    total: int
    epoch: int
    started: str  # ISO time (hpc.run.rundir.utc_now)
    rollout_seconds: float  # from its start to its rollouts gathered
    stats: StepStats
    objective: dict[str, Any] = field(default_factory=dict)  # the rate passed, the stabilisers set (Objective.record)


def record_step(run_dir: RunDir, step: StepRecord, clock: StepClock) -> None:
    """progress.json, the step's line of steps.jsonl, and its line in the log (``clock`` has timed it)."""
    write_progress(run_dir, step=step.done, total=step.total, epoch=step.epoch, stats=step.stats, clock=clock)
    run_dir.append_step({"step": step.done, "started": step.started, "seconds": round(clock.durations[-1], 3),
                         "rollout_seconds": round(step.rollout_seconds, 3), **asdict(step.stats), **step.objective})
    log.info("step %d/%d done in %.0fs: reward %s, accuracy %s, judge failures %d", step.done, step.total,
             clock.durations[-1], step.stats.reward_mean, step.stats.answer_accuracy, step.stats.judge_failures)
