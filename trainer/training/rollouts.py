"""One step's rollouts: ART-E's gather with bounded concurrency, abandoned on a stop request.

Each rollout runs as a task this module owns (``RolloutTasks``), so a stop can cancel them all and
count the rollout-seconds thrown away; the judge (or RULER) scores what they return.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.agent.email_db import EmailDB
from trainer.agent.judge import DEFAULT_JUDGE_MODEL, Judge, score_group_with_ruler
from trainer.agent.proof_reward import PROOF_REWARD, score_group
from trainer.agent.rollout import AgentConfig, rollout
from trainer.agent.scenarios import Scenario
from trainer.training.config import TrainerConfig
from trainer.training.environment import Paths
from trainer.training.exits import StepFailed
from trainer.training.stop_request import StopRequest

if TYPE_CHECKING:
    import art
    from art.utils.iterate_dataset import DatasetBatch

log = logging.getLogger("trainer")


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

    def start(self, rollout: Coroutine[Any, Any, art.Trajectory]) -> asyncio.Task:
        task = asyncio.ensure_future(self._bounded(rollout))
        self._tasks.add(task)
        return task

    async def _bounded(self, rollout: Coroutine[Any, Any, art.Trajectory]) -> art.Trajectory:
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

    db: EmailDB
    judge: Judge | None  # None when reward=ruler: RULER scores whole groups instead
    agent: AgentConfig
    trajectories_per_group: int
    concurrency: int  # rollouts in flight at once
    max_rollout_exceptions: float  # fraction of a step's rollouts that may raise before the step fails
    ruler_judge_model: str | None  # set when reward=ruler: score each group with RULER
    proof_reward: bool = False  # reward=proof_only_text_hash: the GPU proof's scoring (trainer/agent/proof_reward.py)


async def gather_step(
    model: art.TrainableModel, batch: DatasetBatch[Scenario], rollouts: Rollouts, stop: StopRequest
) -> list[art.TrajectoryGroup] | Abandoned:
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
    model: art.TrainableModel, batch: DatasetBatch[Scenario], rollouts: Rollouts, tasks: RolloutTasks
) -> list[art.TrajectoryGroup]:
    """ART-E's gather: ``trajectories_per_group`` rollouts of each scenario of the batch,
    at most ``max_rollout_exceptions`` of them failing, RULER scoring when reward=ruler."""
    import art  # art only once the preflight passed and the environment is set (trainer.training.train)

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
        after_each=proof_scorer() if rollouts.proof_reward else ruler_scorer(rollouts.ruler_judge_model),
    )
    check_rollout_failures(groups, len(batch.items) * rollouts.trajectories_per_group,
                           rollouts.max_rollout_exceptions, batch.step + 1)
    return [group for group in groups if group.trajectories]


def check_rollout_failures(groups: list[art.TrajectoryGroup], count: int, allowed: float, number: int) -> None:
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
) -> Callable[[art.TrajectoryGroup], Coroutine[Any, Any, art.TrajectoryGroup | None]] | None:
    """``after_each`` for reward=ruler: RULER re-scores each group as it completes
    (a group RULER fails on is dropped from the step)."""
    if judge_model is None:
        return None

    async def score(group: art.TrajectoryGroup) -> art.TrajectoryGroup | None:
        return await score_group_with_ruler(group, judge_model)

    return score


def proof_scorer() -> Callable[[art.TrajectoryGroup], Coroutine[Any, Any, art.TrajectoryGroup]]:
    """``after_each`` for reward=proof_only_text_hash: each rollout scored by a hash of its text
    (the GPU proof of a random-weight made model; no real run can choose it)."""
    return score_group


def make_rollouts(config: TrainerConfig, paths: Paths, db: EmailDB) -> Rollouts:
    return Rollouts(
        db=db,
        judge=answer_judge(config, paths),
        agent=AgentConfig(max_turns=config.max_turns, max_tokens=config.max_tokens,
                          tool_calling=config.tool_calling, temperature=config.temperature),
        trajectories_per_group=config.trajectories_per_group,
        concurrency=config.rollout_concurrency,
        max_rollout_exceptions=config.max_rollout_exceptions,
        ruler_judge_model=ruler_judge(config),
        proof_reward=proof_reward(config),
    )


def proof_reward(config: TrainerConfig) -> bool:
    """reward=proof_only_text_hash, said loudly: its rewards are a hash of the text, for the GPU proof."""
    if config.reward != PROOF_REWARD:
        return False
    log.warning("reward %s: PROOF ONLY, every rollout is scored by a hash of its text so that a random-weight "
                "model's groups differ and the LoRA changes; nothing real is learned", PROOF_REWARD)
    return True


def answer_judge(config: TrainerConfig, paths: Paths) -> Judge | None:
    """The judge that checks each answer (reward=judge), caching its verdicts in the
    run directory so a resumed job does not pay twice; None for the other rewards."""
    if config.reward != "judge":
        return None
    return Judge.from_env(paths.judge_cache, config.judge_concurrency, config.judge_retries)


def ruler_judge(config: TrainerConfig) -> str | None:
    """The RULER judge model when reward=ruler (the config's, else JUDGE_MODEL), else None."""
    if config.reward != "ruler":
        return None
    return config.ruler_judge_model or os.environ.get("JUDGE_MODEL") or DEFAULT_JUDGE_MODEL
