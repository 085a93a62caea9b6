"""One rollout: the agent answers one scenario's question by searching its inbox.

Read ``rollout`` top to bottom: build the prompt, then up to ``max_turns``
times ask the model for its next move and run the tool it picked, stopping on
a final answer or a malformed move; then judge the answer and score the
trajectory (``trainer.agent.reward``).

The model is called through ART's managed OpenAI client. For a TrainableModel
registered with LocalBackend that is vLLM serving the latest LoRA, and ART's
vLLM returns token logprobs with every completion: the ``Choice`` objects go
into ``messages_and_choices`` as they are, because those are what ART trains on.

Two ways for the model to call tools (``AgentConfig.tool_calling``):

- native (True): OpenAI tool calls, parsed by vLLM's tool parser. A turn
  without any tool call is scored as a bad tool name, as in ART-E.
- text (False): the tool specs are in the system prompt and the model replies
  with one JSON object ``{"tool_name": ..., "tool_args": {...}}``; anything
  else is a tool call we cannot parse. Results come back as user messages.

In ``reward=ruler`` mode the trainer passes ``judge=None``: the answer is not
checked here, the trajectory gets ``reward_before_ruler`` and RULER replaces
it per group (``trainer.agent.judge.score_group_with_ruler``).

Errors talking to the policy model propagate, so that
``art.gather_trajectory_groups(max_exceptions=...)`` counts them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from trainer.agent.reward import Rubric, compute_reward, reward_before_ruler
from trainer.agent.tools import TOOL_SCHEMAS, EmailTools, FinalAnswer, ToolOutcome

if TYPE_CHECKING:
    import art  # art only where a rollout runs (not at a command's --help)
    from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
    from openai.types.chat.chat_completion import Choice  # openai's types: only with a transcript

    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.scenarios import Scenario


@dataclass(frozen=True)
class AgentConfig:
    max_turns: int = 10
    max_tokens: int = 2048  # per model turn
    tool_calling: bool = True
    temperature: float = 1.0


@dataclass(frozen=True)
class RequestedCall:
    """A tool call as the model wrote it; ``id`` is None in text mode (no tool_call_id there)."""

    name: str
    arguments: Any
    id: str | None = None


async def rollout(
    model: "art.Model", scenario: "Scenario", *, db: "EmailDB", judge: "Judge | None", config: AgentConfig
) -> "art.Trajectory":
    """Play one episode of the email agent and return its scored trajectory."""
    import art  # art only where a rollout runs (not at a command's --help)

    rubric = Rubric()
    tools = EmailTools(scenario, db, rubric)
    trajectory = art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": system_prompt(scenario, config)},
            {"role": "user", "content": scenario.question},
        ],
        tools=cast("list[ChatCompletionFunctionToolParam]", TOOL_SCHEMAS) if config.tool_calling else None,
        reward=0.0,
        metadata={"scenario_id": scenario.id, "inbox": scenario.inbox_address, "split": scenario.split},
    )

    final_answer: FinalAnswer | None = None
    for turn in range(1, config.max_turns + 1):
        rubric.num_turns = turn
        async with trajectory.track_duration("llm_completion"):
            choice = await next_move(model, trajectory, config, rubric)
        trajectory.messages_and_choices.append(choice)
        final_answer = run_tool_calls(choice, tools, trajectory, config.tool_calling)
        if final_answer is not None or rubric.failed_format_validation:
            break
    else:
        rubric.ran_out_of_turns = True

    if final_answer is not None and judge is not None and not final_answer.is_i_dont_know:
        async with trajectory.track_duration("judge"):
            await judge_answer(judge, scenario, final_answer, rubric, trajectory)

    trajectory.metrics.update(rubric.metrics())
    if judge is not None:
        trajectory.reward = compute_reward(rubric, config.max_turns)
    else:  # reward=ruler: nobody checked the answer, so its correctness is unknown, not 0
        trajectory.reward = reward_before_ruler(rubric)
        del trajectory.metrics["answer_correct"]
    trajectory.metadata["judge_failed"] = rubric.judge_failed
    trajectory.metadata["final_answer"] = None if final_answer is None else final_answer.answer
    # ART's metadata holds scalars: the cited message ids as one JSON list (evaluation, serving)
    trajectory.metadata["final_sources"] = json.dumps([] if final_answer is None else list(final_answer.sources))
    return trajectory.finish()


def system_prompt(scenario: "Scenario", config: AgentConfig) -> str:
    """ART-E's task framing; in text mode it also carries the tool specs and the reply format."""
    prompt = (
        "You are an email search agent. Use the tools to search the user's email and find the answer "
        f"to the user's question. You may take up to {config.max_turns} turns, so if a search finds "
        "nothing useful, try again with other keywords.\n\n"
        f"The user's email address is {scenario.inbox_address}\n"
        f"Today's date is {scenario.query_date}"
    )
    if config.tool_calling:
        return prompt
    specs = json.dumps([schema["function"] for schema in TOOL_SCHEMAS], indent=2)
    return (
        f"{prompt}\n\nYou can use these tools:\n{specs}\n\n"
        'To use a tool, reply with exactly one JSON object and nothing else: '
        '{"tool_name": "<tool name>", "tool_args": {<arguments>}}. '
        "The tool's result will come back in the next message."
    )


async def next_move(model: "art.Model", trajectory: "art.Trajectory", config: AgentConfig, rubric: Rubric) -> "Choice":
    """Ask the policy for its next turn; count the tokens it cost."""
    request: dict[str, Any] = {
        "model": model.get_inference_name(),
        "messages": request_messages(trajectory),
        "max_completion_tokens": config.max_tokens,
        "temperature": config.temperature,
    }
    if config.tool_calling:
        request["tools"] = TOOL_SCHEMAS
    response = await model.openai_client().chat.completions.create(**request)
    if response.usage is not None:
        rubric.prompt_tokens += response.usage.prompt_tokens
        rubric.completion_tokens += response.usage.completion_tokens
    if not response.choices:
        raise ValueError(f"the policy model returned no choices (response id {response.id})")
    return response.choices[0]


def request_messages(trajectory: "art.Trajectory") -> list[dict[str, Any]]:
    """The conversation so far as chat messages: what ``trajectory.messages()`` gives, built
    directly. ART 0.5.23 builds a pydantic TypeAdapter for every assistant message on every
    call, which made the loop's own CPU time grow with the square of the turns (half of an
    evaluation's time at 32 questions in flight: bench/eval_throughput.py)."""
    from openai.types.chat.chat_completion import Choice  # openai's types: only with a transcript

    messages = []
    for item in trajectory.messages_and_choices:
        if isinstance(item, Choice):
            message: dict[str, Any] = {"role": "assistant", "content": item.message.content or ""}
            if item.message.tool_calls:
                message["tool_calls"] = [call.model_dump(mode="json") for call in item.message.tool_calls]
            messages.append(message)
        else:
            messages.append({**item, "content": item.get("content") or ""})
    return messages


def requested_calls(choice: "Choice", tool_calling: bool) -> list[RequestedCall] | None:
    """The tool calls in a reply, or None when the reply holds no call we can read."""
    if tool_calling:
        tool_calls = choice.message.tool_calls or []
        calls = [RequestedCall(c.function.name, c.function.arguments, c.id) for c in tool_calls if c.type == "function"]
        return calls or None
    return parse_text_tool_call(choice.message.content or "")


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_text_tool_call(content: str) -> list[RequestedCall] | None:
    """Text mode: the whole reply must be one {"tool_name", "tool_args"} object (a ``` fence is forgiven)."""
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("tool_name"), str) or "tool_args" not in data:
        return None
    return [RequestedCall(data["tool_name"], data["tool_args"])]


def run_tool_calls(
    choice: "Choice", tools: EmailTools, trajectory: "art.Trajectory", tool_calling: bool
) -> FinalAnswer | None:
    """Run the calls of one reply in order, appending their results; the final answer if one was given.

    Stops at the first final answer or malformed call (the rubric then says
    which formatting error it was): the rollout ends there either way.
    """
    calls = requested_calls(choice, tool_calling)
    if calls is None:
        mark_unparseable_turn(tools.rubric, tool_calling)
        trajectory.log(f"turn {tools.rubric.num_turns}: no tool call in the reply; rollout stopped")
        return None
    for call in calls:
        outcome = tools.call(call.name, call.arguments)
        trajectory.messages_and_choices.append(tool_result_message(call, outcome))
        if outcome.final_answer is not None or outcome.format_error:
            return outcome.final_answer
    return None


def mark_unparseable_turn(rubric: Rubric, tool_calling: bool) -> None:
    """Native mode: no tool call at all counts as a bad tool name (ART-E); text mode: can't parse."""
    if tool_calling:
        rubric.bad_tool_call_name = True
    else:
        rubric.cant_parse_tool_call = True


def tool_result_message(call: RequestedCall, outcome: ToolOutcome) -> ChatCompletionMessageParam:
    """A tool message answering a native call, or a user message carrying a text-mode result."""
    if call.id is not None:
        return {"role": "tool", "tool_call_id": call.id, "content": outcome.content}
    return {"role": "user", "content": f"Result of {call.name}:\n{outcome.content}"}


async def judge_answer(
    judge: "Judge", scenario: "Scenario", answer: FinalAnswer, rubric: Rubric, trajectory: "art.Trajectory"
) -> None:
    """Ask the judge; a judge failure leaves the answer not correct and flags the rubric."""
    verdict = await judge.judge(question=scenario.question, reference=scenario.answer, answer=answer.answer)
    rubric.answer_correct = verdict.accept and not verdict.failed
    rubric.judge_failed = verdict.failed
    if verdict.failed:
        trajectory.log(f"judge failed: {verdict.error}")
    else:
        trajectory.log(f"judge {'accepted' if verdict.accept else 'rejected'}: {verdict.thinking}")
