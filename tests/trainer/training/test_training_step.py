"""trainer.training.training_step: the objective reaches the backend, and a step that trained
nothing fails instead of counting as progress."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import art
import pytest
from openai.types.chat.chat_completion import ChatCompletion

from trainer.training.config import load_config
from trainer.training.training_step import Objective, TrainedNothing, check_logprobs, check_trained, train_and_log


def choice(with_logprobs: bool) -> Any:
    logprobs = {"content": [{"token": "hi", "logprob": -0.1, "bytes": [104, 105], "top_logprobs": []}]}
    completion = ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"},
                     "logprobs": logprobs if with_logprobs else None}],
    })
    return completion.choices[0]


def group(rewards: list[float], with_logprobs: bool = True) -> art.TrajectoryGroup:
    return art.TrajectoryGroup([
        art.Trajectory(messages_and_choices=[{"role": "user", "content": "q"}, choice(with_logprobs)], reward=r)
        for r in rewards
    ])


def test_agent_008s_objective_is_art_es_not_art_05s_default() -> None:
    objective = Objective.from_config(load_config("agent_008"))
    assert objective.train_kwargs() == {"learning_rate": 1.2e-5, "loss_fn": "ppo", "scale_rewards": True,
                                        "importance_sampling_level": "token"}


def test_train_and_log_passes_the_objective_then_logs_trajectories_and_metrics() -> None:
    calls: list[tuple[str, Any]] = []

    class Model:
        async def log(self, groups: Any = None, *, split: str, step: int, metrics: Any = None) -> None:
            calls.append(("model.log", step, metrics))

    class Backend:
        async def train(self, model: Any, groups: Any, **kwargs: Any) -> Any:
            calls.append(("backend.train", kwargs))
            return type("Result", (), {"step": 8, "metrics": {"loss/train": 0.1}})()

    objective = Objective(1e-5, "cispo", False, "sequence")
    step = asyncio.run(train_and_log(Model(), Backend(), [group([0.0, 1.0])], objective=objective, batch_step=7))  # type: ignore[arg-type]

    assert step == 8
    assert calls == [("backend.train", objective.train_kwargs()), ("model.log", 7, None),
                     ("model.log", 8, {"loss/train": 0.1})]


def test_trajectories_without_any_logprobs_fail_before_training() -> None:
    with pytest.raises(TrainedNothing, match="step 3: none of the 2 model turns carries logprobs"):
        check_logprobs([group([0.0, 1.0], with_logprobs=False)], 3)
    check_logprobs([group([0.0, 1.0], with_logprobs=True)], 3)  # passes


def test_zero_trainable_groups_despite_a_reward_spread_fails_the_step() -> None:
    with pytest.raises(TrainedNothing, match="step 5: the backend trained on 0 groups"):
        check_trained({"data/step_num_groups_trainable": 0.0}, [group([0.0, 1.0])], 5)


def test_zero_trainable_groups_with_equal_rewards_is_arts_legitimate_skip(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trainer"):
        check_trained({"data/step_num_groups_trainable": 0.0}, [group([1.0, 1.0]), group([0.5, 0.5])], 5)
    assert "every group's rewards were equal" in caplog.text
    check_trained({"data/step_num_groups_trainable": 2.0}, [group([0.0, 1.0])], 5)  # trained: nothing to say
