"""Scripted moves through the real tools: how the warm-up's policies (trainer/staging/warmup.py,
trainer/staging/inbox_policy.py) write a conversation as the rollout would have it, turn by turn."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trainer.agent.rollout import AgentConfig, system_prompt
from trainer.agent.tools import EmailTools

if TYPE_CHECKING:
    from trainer.agent.scenarios import Scenario
    from trainer.agent.tools import ToolOutcome


def tool_call(number: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{number}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def opening(scenario: "Scenario", agent: AgentConfig) -> list[dict[str, Any]]:
    """A conversation's first two turns, as the rollout starts it (the real system prompt)."""
    return [{"role": "system", "content": system_prompt(scenario, agent)}, {"role": "user", "content": scenario.question}]


def play(messages: list[dict[str, Any]], tools: EmailTools, name: str, arguments: dict[str, Any]) -> "ToolOutcome":
    """One scripted move through the real tools: the assistant's tool call, then its result (none
    after the final answer), appended to ``messages``; the tool's outcome."""
    call = tool_call(sum(m["role"] == "assistant" for m in messages) + 1, name, arguments)
    outcome = tools.call(name, arguments)
    if not outcome.format_error:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        if outcome.final_answer is None:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": outcome.content})
    return outcome
