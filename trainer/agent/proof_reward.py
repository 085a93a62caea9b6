"""A reward for the GPU proof only: ``reward: proof_only_text_hash``.

A model with random weights (``python -m trainer.data make-model --size qwen2.5-14b``, agent_008's
architecture) never calls a tool: every rollout ends on its first turn with the same formatting
penalty, every group's rewards are equal, GRPO has nothing to learn and ART leaves the LoRA as it
was. The GPU proof must still see steps in which the LoRA changes at full size. This reward gives
each rollout a number in [0, 1) from a hash of what the model wrote (its text and the token ids
vLLM returned), so rollouts of a group differ and GRPO updates the LoRA. It teaches nothing:
the number is unrelated to the task, which is why it is refused for any base model that
``make-model`` did not make (``refusal``: its folder must hold ``made_by.json``), so no real
run reaches it by a typo. The trainer logs it as proof-only, and keeps ART-E's shaped reward of
each rollout in ``metrics["independent_reward"]``.

Stdlib only at import: the config check runs in the launcher.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import art
    from openai.types.chat.chat_completion import Choice

PROOF_REWARD = "proof_only_text_hash"
MADE_BY = "made_by.json"  # written by make-model into every model it makes (trainer/staging/model_maker.py)


def is_made_model(base_model: str) -> bool:
    """A folder that ``python -m trainer.data make-model`` wrote."""
    return (Path(base_model) / MADE_BY).is_file()


def refusal(reward: str, base_model: str) -> str | None:
    """Why a config may not use ``reward``, if it may not: the proof-only reward needs a made model."""
    if reward != PROOF_REWARD or is_made_model(base_model):
        return None
    return (f"reward {PROOF_REWARD!r} is for the GPU proof of a model made by `python -m trainer.data make-model` "
            f"(it scores rollouts by a hash of their text and teaches nothing); base_model {base_model!r} has no "
            f"{MADE_BY}: use reward=judge or reward=ruler")


def written_text(trajectory: "art.Trajectory") -> str:
    """What the model wrote in a rollout: each turn's text, tool calls, and sampled tokens as vLLM
    returned them (ids beyond the made tokenizer decode to nothing, so the text alone may tie)."""
    parts = []
    for choice in model_turns(trajectory):
        parts.append(choice.message.content or "")
        parts += [call.model_dump_json() for call in choice.message.tool_calls or []]
        if choice.logprobs is not None:
            parts += [token.token for token in choice.logprobs.content or []]
    return json.dumps(parts)


def model_turns(trajectory: "art.Trajectory") -> list["Choice"]:
    from openai.types.chat.chat_completion import Choice

    return [item for item in trajectory.messages_and_choices if isinstance(item, Choice)]


def text_hash(text: str) -> float:
    """A number in [0, 1) from ``text``: the same text, the same number."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


async def score_group(group: "art.TrajectoryGroup") -> "art.TrajectoryGroup":
    """``after_each`` of ``art.gather_trajectory_groups``: every rollout's reward becomes its text's
    hash; the shaped reward it had stays in its metrics."""
    for trajectory in group.trajectories:
        text = written_text(trajectory)
        trajectory.metrics["independent_reward"] = trajectory.reward
        trajectory.metrics["proof_only_reward"] = 1
        trajectory.metrics["proof_text_chars"] = sum(len(choice.message.content or "") for choice in model_turns(trajectory))
        trajectory.reward = text_hash(text)
    return group
