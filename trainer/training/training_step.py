"""One training step through ART's backend: the objective, and proof it trained.

``backend.train(model, groups, ...)`` is where GRPO happens (ART 0.5: the
backend trains, logging is ours). Two things here are this project's:

- **The objective is the config's.** ART 0.5 defaults to the "cispo" loss;
  ART-E trained with the PPO-style clipped objective. Every knob that changes
  the result (loss function, reward scaling, importance-sampling level) is a
  config key and is passed explicitly, so a run says what it optimised; so are
  the stabilisers where the config sets them (a KL penalty and its reference
  adapter, the ratio's clip epsilons: left out at ART's defaults, so a backend
  a site plugs in is asked nothing new), and the step's learning rate
  (trainer/training/schedule.py: the schedule, times the rollbacks' scale).
- **A step that trained nothing fails.** ART skips the update and copies the
  checkpoint forward when no trajectory is trainable. That is right when every
  group's rewards are equal (no advantage: GRPO has nothing to learn), and
  wrong when the policy server returned no logprobs (a custom vLLM runtime
  without them): then every step would "advance" while the LoRA never
  changes. The trajectories are checked before training (no logprobs at all)
  and ART's metrics after (no trainable group although rewards differed).
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import art

    from trainer.training.config import TrainerConfig

log = logging.getLogger("trainer")

# ART's training summary metrics (art.metrics_taxonomy), as LocalBackend reports a skipped step.
TRAINABLE_GROUPS = "data/step_num_groups_trainable"
GRADIENT_STEPS = "data/step_num_gradient_steps"


class TrainedNothing(RuntimeError):
    """The backend advanced the step without updating the LoRA, and it should have."""


@dataclass(frozen=True)
class Objective:
    """What ``backend.train`` is told besides the groups."""

    learning_rate: float
    loss_fn: str
    scale_rewards: bool
    importance_sampling_level: str
    kl_penalty_coef: float = 0.0
    kl_penalty_reference_step: int | None = None  # None: the base model (LoRA off), ART's default
    kl_penalty_source: str = "current_learner"
    epsilon: float | None = None
    epsilon_high: float | None = None

    @classmethod
    def from_config(cls, config: "TrainerConfig", learning_rate: float | None = None,
                    kl_reference_step: int | None = None) -> "Objective":
        """The config's objective; ``learning_rate``: this step's (the schedule's), else the config's."""
        return cls(config.learning_rate if learning_rate is None else learning_rate, config.loss_fn,
                   config.scale_rewards, config.importance_sampling_level, config.kl_penalty_coef,
                   kl_reference_step, config.kl_penalty_source, config.epsilon, config.epsilon_high)

    def train_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"learning_rate": self.learning_rate, "loss_fn": self.loss_fn,
                                  "scale_rewards": self.scale_rewards,
                                  "importance_sampling_level": self.importance_sampling_level}
        if self.kl_penalty_coef > 0:
            kwargs.update(kl_penalty_coef=self.kl_penalty_coef, kl_penalty_reference_step=self.kl_penalty_reference_step,
                          kl_penalty_source=self.kl_penalty_source)
        kwargs.update({name: value for name, value in (("epsilon", self.epsilon), ("epsilon_high", self.epsilon_high))
                       if value is not None})
        return kwargs

    def record(self) -> dict[str, Any]:
        """What steps.jsonl records of it: the rate passed, and the stabilisers set."""
        return {"learning_rate": self.learning_rate,
                **{k: v for k, v in self.train_kwargs().items() if k.startswith(("kl_", "epsilon"))}}


async def train_and_log(
    model: "art.TrainableModel",
    backend: Any,
    groups: list["art.TrajectoryGroup"],
    *,
    objective: Objective,
    batch_step: int,
) -> int:
    """Train on one step's groups, log them, and return the new step.

    Logging comes after training so a stop or crash mid-step never leaves a
    logged but untrained step behind (the step is redone and would be logged
    twice). As ``backend.train``'s docstring shows, trajectories are logged at
    the step whose checkpoint produced them, training metrics at the step they
    produced."""
    check_logprobs(groups, batch_step + 1)
    result = await backend.train(model, groups, **objective.train_kwargs())
    check_trained(result.metrics or {}, groups, batch_step + 1)
    await model.log(groups, split="train", step=batch_step)
    if result.metrics:
        await model.log(metrics=result.metrics, split="train", step=result.step)
    return result.step


def check_logprobs(groups: list["art.TrajectoryGroup"], number: int) -> None:
    """Before training: at least one model turn must carry token logprobs, which ART
    needs to train on it (its own vLLM always returns them)."""
    from openai.types.chat.chat_completion import Choice  # openai's types: only once a step is trained

    choices = [item for group in groups for t in group.trajectories
               for item in t.messages_and_choices if isinstance(item, Choice)]
    if choices and all(choice.logprobs is None for choice in choices):
        raise TrainedNothing(
            f"step {number}: none of the {len(choices)} model turns carries logprobs, so ART would train "
            "nothing and copy the checkpoint forward; the policy server must return logprobs "
            "(ART's own vLLM runtime does; check ART_VLLM_RUNTIME_BIN)")


def check_trained(metrics: dict[str, float], groups: list["art.TrajectoryGroup"], number: int) -> None:
    """After training: zero trainable groups is fine only when no group had a reward spread."""
    trainable = metrics.get(TRAINABLE_GROUPS)
    if trainable is None or trainable > 0:
        return
    if any(reward_spread(group) > 0 for group in groups):
        raise TrainedNothing(
            f"step {number}: the backend trained on 0 groups (gradient steps: {metrics.get(GRADIENT_STEPS)}) "
            "although rewards differed within groups; it copied the checkpoint forward instead of "
            "learning (trajectories without usable logprobs or token ids?)")
    log.warning("step %d: every group's rewards were equal, so there was nothing to learn; ART kept "
                "the adapter as it was (the step still counts, as in ART-E)", number)


def reward_spread(group: "art.TrajectoryGroup") -> float:
    """The population standard deviation of a group's rewards (0 for fewer than two)."""
    rewards = [t.reward for t in group.trajectories]
    return statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
