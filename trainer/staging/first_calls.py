"""First calls: a question and its good search alone, the warm-up's copy lesson.

The learning-curve bench's made model learns the tool format from whole scripted conversations,
but there it never learned to copy the question's entity into its search: at learning rate 5e-4,
with all searches good, 3,000 steps on H200 gave 0 good first searches of 200 (docs/training.md).
The same model on the first turn alone, the question then its good search's call, copies every
held-out entity after 300-400 steps, on CPU and GPU, but only when nothing comes before the
question: after the rollout's system prompt it copied at most 3% in 3,000 steps, and after the
system prompt and the tools' schemas (the warm-up's first turn) none in 1,000. Learned
without them first, the copy carries over: 50 more steps with the whole first turn copied all 200.
So ``trainer.warmup --copy_steps N`` trains N steps on these (``context`` ``none``) before the
conversations, and ``bench/warmup_copy.py`` measures them in each context.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from trainer.agent.rollout import AgentConfig
from trainer.agent.tools import SEARCH_EMAILS, TOOL_SCHEMAS
from trainer.staging.scripted_moves import opening, tool_call
from trainer.staging.synthetic_inbox import search_plan

if TYPE_CHECKING:
    from trainer.agent.scenarios import Scenario

CONTEXTS = ("none", "system", "tools")  # what the first turn holds before the question


@dataclass(frozen=True)
class FirstCall:
    """A question and its good search, tokenised (a trainer.warmup Example, and more): the targets
    are the call's tokens; ``copied`` is how many of them, from the first, reach the entity's end."""

    input_ids: list[int]
    labels: list[int]
    prompt: int
    copied: int


def first_turn(scenario: "Scenario", context: str) -> tuple[list[dict[str, Any]], Any]:
    """The messages before the call and the tools the template renders: the question alone
    (``none``), after the rollout's system prompt (``system``), or also with the tools' schemas in
    the template (``tools``: the shape of the first turn of the warm-up's conversations and of the
    rollouts). The system prompt is AgentConfig's default's, which says 10 turns where the
    learning-curve bench's says 4: the contexts were measured so (bench/warmup_copy.py)."""
    if context == "none":
        return [{"role": "user", "content": scenario.question}], None
    return opening(scenario, AgentConfig()), TOOL_SCHEMAS if context == "tools" else None


def first_call(tokenizer: Any, scenario: "Scenario", context: str = "none") -> FirstCall | None:
    """The scenario's first turn and good search (``synthetic_inbox.search_plan``), or None when its
    question is not the synthetic inboxes'."""
    plan = search_plan(scenario.question)
    if plan is None:
        return None
    before, tools = first_turn(scenario, context)
    call = {"role": "assistant", "content": "", "tool_calls": [tool_call(1, SEARCH_EMAILS, {"keywords": plan.good})]}
    prompt = tokenizer.apply_chat_template(before, tools=tools, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template(before + [call], tools=tools, tokenize=False)
    ids = tokenizer(whole, add_special_tokens=False)["input_ids"]
    start = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    end = whole.index(plan.good[0], len(prompt)) + len(plan.good[0])
    copied = next(n for n in range(1, len(ids) - start + 1) if len(tokenizer.decode(ids[:start + n])) >= end)
    return FirstCall(ids, [-100] * start + ids[start:], start, copied)


def first_calls(tokenizer: Any, scenarios: list["Scenario"], context: str = "none",
                limit: int | None = None) -> list[FirstCall]:
    """Each scenario's first call that the synthetic inboxes' plan gives, in order; the first
    ``limit`` of them (no scenario after those is tokenised)."""
    made = (first_call(tokenizer, scenario, context) for scenario in scenarios)
    return list(islice((call for call in made if call is not None), limit))
