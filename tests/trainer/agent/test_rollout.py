"""Whole rollouts through the scripted OpenAI-compatible double: policy via ART's client, judge via litellm.

One double serves both models: "policy" (what ``art.Model`` asks for) and
"judge" (litellm's ``openai/judge`` reaches it as model "judge").
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import openai
import pytest
from openai.types.chat.chat_completion import Choice

from tests.doubles.openai_server import OpenAIServer, failure, text, tool_call, tool_calls
from trainer.agent.judge import Judge
from trainer.agent.rollout import AgentConfig, rollout, system_prompt

pytestmark = pytest.mark.filterwarnings(
    "ignore:coroutine 'Logging.async_success_handler' was never awaited:RuntimeWarning",
    "ignore:Pydantic serializer warnings:UserWarning",
)

OFFSITE_QUESTION_ID = 3  # "Where is the research group offsite?", answered by one email
MAX_TURNS = 10
ACCEPT = text(json.dumps({"thinking": "same place", "accept": True}))
REJECT = text(json.dumps({"thinking": "different place", "accept": False}))


@pytest.fixture
def scenario(scenarios):
    return next(s for s in scenarios if s.id == OFFSITE_QUESTION_ID)


@pytest.fixture
def right_email(scenario) -> str:
    return scenario.message_ids[0]


def play(server: OpenAIServer, scenario, db, *, judge: Judge | None | str = "default", **config):
    """Run one rollout against the double; the judge defaults to the double's "judge" model."""
    import art

    model = art.Model(name="policy", project="email-agent-tests", inference_base_url=server.base_url,
                      inference_api_key="test")
    if judge == "default":
        judge = Judge(model="openai/judge", api_base=server.base_url, api_key="test", retries=1, base_delay=0.001)
    agent = AgentConfig(**{"max_turns": MAX_TURNS, **config})
    return asyncio.run(rollout(model, scenario, db=db, judge=judge, config=agent))


def search_read_answer(right_email: str, answer: str = "At the Woodlands Resort", sources=None) -> list:
    return [
        tool_call("search_emails", {"keywords": ["offsite"]}),
        tool_call("read_email", {"message_id": right_email}),
        tool_call("return_final_answer", {"answer": answer, "sources": [right_email] if sources is None else sources}),
    ]


def test_correct_answer_earns_the_top_band_with_exact_bonuses(scenario, email_db, right_email):
    with OpenAIServer({"policy": search_read_answer(right_email), "judge": [ACCEPT]}) as server:
        trajectory = play(server, scenario, email_db)
    # 1 + 0.3 (right source) + 0.1/1 (one source) + 0.1 * (1 - 3/10) (three turns)
    assert trajectory.reward == pytest.approx(1.47)
    metrics = trajectory.metrics
    assert metrics["answer_correct"] == 1 and metrics["sources_correct"] == 1
    assert metrics["ever_found_right_email"] == 1 and metrics["ever_read_right_email"] == 1
    assert metrics["num_turns"] == 3 and metrics["failed_format_validation"] == 0 and metrics["judge_failed"] == 0
    assert metrics["prompt_tokens"] == 3 * 11 and metrics["completion_tokens"] == 3 * 7
    assert trajectory.metadata["scenario_id"] == OFFSITE_QUESTION_ID
    assert trajectory.metadata["inbox"] == scenario.inbox_address
    judge_prompt = server.requests_for("judge")[0].messages[-1]["content"]
    assert "At the Woodlands Resort" in judge_prompt and scenario.answer in judge_prompt


def test_trajectory_keeps_choices_with_logprobs_between_tool_messages(scenario, email_db, right_email):
    with OpenAIServer({"policy": search_read_answer(right_email), "judge": [ACCEPT]}) as server:
        trajectory = play(server, scenario, email_db)
    kinds = [type(m).__name__ if isinstance(m, Choice) else m["role"] for m in trajectory.messages_and_choices]
    assert kinds == ["system", "user", "Choice", "tool", "Choice", "tool", "Choice", "tool"]
    choices = [m for m in trajectory.messages_and_choices if isinstance(m, Choice)]
    assert all(c.logprobs and c.logprobs.content for c in choices)
    first_call_id = choices[0].message.tool_calls[0].id
    assert trajectory.messages_and_choices[3]["tool_call_id"] == first_call_id
    assert right_email in trajectory.messages_and_choices[3]["content"]  # the search result
    assert trajectory.tools and [t["function"]["name"] for t in trajectory.tools][0] == "search_emails"


def test_policy_requests_carry_model_tools_limits_and_the_growing_conversation(scenario, email_db, right_email):
    with OpenAIServer({"policy": search_read_answer(right_email), "judge": [ACCEPT]}) as server:
        play(server, scenario, email_db, max_tokens=321, temperature=0.7)
    first, second, _ = server.requests_for("policy")
    assert first.body["max_completion_tokens"] == 321 and first.body["temperature"] == 0.7
    assert [t["function"]["name"] for t in first.body["tools"]] == ["search_emails", "read_email",
                                                                     "return_final_answer"]
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert scenario.inbox_address in first.messages[0]["content"]
    assert scenario.query_date in first.messages[0]["content"]
    assert first.messages[1]["content"] == scenario.question
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[2]["tool_calls"][0]["function"]["name"] == "search_emails"


def test_wrong_answer_lands_in_the_minus_one_band(scenario, email_db, right_email):
    script = search_read_answer(right_email, answer="In the Enron building")
    with OpenAIServer({"policy": script, "judge": [REJECT]}) as server:
        trajectory = play(server, scenario, email_db)
    # -1 + found + read + never read a missing email + right source
    assert trajectory.reward == pytest.approx(-0.6)
    assert trajectory.metrics["answer_correct"] == 0 and trajectory.metrics["attempted_answer"] == 1


def test_bad_json_arguments_stop_the_rollout_at_minus_one_point_eight_plus_partial(scenario, email_db):
    with OpenAIServer({"policy": [tool_call("search_emails", '{"keywords": ["offsite"')], "judge": []}) as server:
        trajectory = play(server, scenario, email_db)
    assert trajectory.reward == pytest.approx(-1.8 + 0.1)  # partial: never read a missing email
    assert trajectory.metrics["bad_tool_call_args"] == 1 and trajectory.metrics["failed_format_validation"] == 1
    assert len(server.requests_for("policy")) == 1 and server.requests_for("judge") == []
    assert "not valid JSON" in trajectory.messages_and_choices[-1]["content"]


def test_unknown_tool_name_stops_the_rollout_at_minus_one_point_nine_plus_partial(scenario, email_db):
    script = [tool_call("search_emails", {"keywords": ["offsite"]}), tool_call("delete_email", {"message_id": "x"})]
    with OpenAIServer({"policy": script, "judge": []}) as server:
        trajectory = play(server, scenario, email_db)
    assert trajectory.reward == pytest.approx(-1.9 + 0.2)  # found the right email, never read a missing one
    assert trajectory.metrics["bad_tool_call_name"] == 1 and trajectory.metrics["num_turns"] == 2


def test_reply_without_a_tool_call_counts_as_a_bad_tool_name_in_native_mode(scenario, email_db):
    with OpenAIServer({"policy": [text("The offsite is at the Woodlands.")], "judge": []}) as server:
        trajectory = play(server, scenario, email_db)
    assert trajectory.reward == pytest.approx(-1.9 + 0.1)
    assert trajectory.metrics["bad_tool_call_name"] == 1


def test_text_mode_unparseable_reply_scores_minus_two_plus_partial(scenario, email_db):
    with OpenAIServer({"policy": [text("Let me search the inbox for the offsite.")], "judge": []}) as server:
        trajectory = play(server, scenario, email_db, tool_calling=False)
    assert trajectory.reward == pytest.approx(-2.0 + 0.1)
    assert trajectory.metrics["cant_parse_tool_call"] == 1
    (request,) = server.requests_for("policy")
    assert "tools" not in request.body
    assert '"tool_name"' in request.messages[0]["content"] and "search_emails" in request.messages[0]["content"]


def test_text_mode_plays_a_whole_episode_with_json_replies(scenario, email_db, right_email):
    def move(tool_name: str, **tool_args) -> object:
        return text(json.dumps({"tool_name": tool_name, "tool_args": tool_args}))

    script = [
        move("search_emails", keywords=["offsite"]),
        text("```json\n" + json.dumps({"tool_name": "read_email", "tool_args": {"message_id": right_email}}) + "\n```"),
        move("return_final_answer", answer="At the Woodlands Resort", sources=[right_email]),
    ]
    with OpenAIServer({"policy": script, "judge": [ACCEPT]}) as server:
        trajectory = play(server, scenario, email_db, tool_calling=False)
    assert trajectory.reward == pytest.approx(1.47)
    assert trajectory.tools is None
    second = server.requests_for("policy")[1]
    assert second.messages[-1]["role"] == "user" and right_email in second.messages[-1]["content"]


def test_running_out_of_turns_scores_zero_plus_partial(scenario, email_db, right_email):
    script = search_read_answer(right_email)[:2]
    with OpenAIServer({"policy": script, "judge": []}) as server:
        trajectory = play(server, scenario, email_db, max_turns=2)
    assert trajectory.reward == pytest.approx(0.3)  # found, read, never read a missing email
    assert trajectory.metrics["ran_out_of_turns"] == 1 and trajectory.metrics["num_turns"] == 2
    assert len(server.requests_for("policy")) == 2


def test_i_dont_know_scores_zero_plus_partial_without_asking_the_judge(scenario, email_db):
    script = [tool_call("search_emails", {"keywords": ["offsite"]}),
              tool_call("return_final_answer", {"answer": "I don't know", "sources": []})]
    with OpenAIServer({"policy": script, "judge": []}) as server:
        trajectory = play(server, scenario, email_db)
    assert trajectory.reward == pytest.approx(0.2)  # found the right email, never read a missing one
    assert trajectory.metrics["returned_i_dont_know"] == 1
    assert server.requests_for("judge") == []


def test_reading_a_missing_email_is_survivable_but_costs_the_partial_credit(scenario, email_db, right_email):
    script = [tool_call("read_email", {"message_id": "<made.up@thyme>"}), *search_read_answer(right_email)]
    with OpenAIServer({"policy": script, "judge": [REJECT]}) as server:
        trajectory = play(server, scenario, email_db)
    assert trajectory.metrics["ever_tried_to_read_invalid_email"] == 1 and trajectory.metrics["num_turns"] == 4
    assert trajectory.reward == pytest.approx(-1 + 0.3)  # found, read, right source; not "never invalid"


def test_several_tool_calls_in_one_turn_each_get_their_tool_message(scenario, email_db, right_email):
    script = [
        tool_calls(("search_emails", {"keywords": ["offsite"]}), ("read_email", {"message_id": right_email})),
        tool_call("return_final_answer", {"answer": "At the Woodlands Resort", "sources": [right_email]}),
    ]
    with OpenAIServer({"policy": script, "judge": [ACCEPT]}) as server:
        trajectory = play(server, scenario, email_db)
    choice = trajectory.messages_and_choices[2]
    answered = [m["tool_call_id"] for m in trajectory.messages_and_choices[3:5]]
    assert answered == [call.id for call in choice.message.tool_calls]
    assert trajectory.reward == pytest.approx(1 + 0.3 + 0.1 + 0.1 * (1 - 2 / 10))


def test_failed_judge_flags_the_trajectory_and_counts_the_answer_as_not_correct(scenario, email_db, right_email):
    with OpenAIServer({"policy": search_read_answer(right_email), "judge": [failure(500)] * 2}) as server:
        trajectory = play(server, scenario, email_db)
    assert trajectory.metrics["judge_failed"] == 1 and trajectory.metadata["judge_failed"] is True
    assert trajectory.metrics["answer_correct"] == 0
    assert trajectory.reward == pytest.approx(-1 + 0.4)
    assert len(server.requests_for("judge")) == 2  # first attempt + one retry


def test_ruler_mode_skips_the_judge_and_leaves_correctness_unknown(scenario, email_db, right_email):
    with OpenAIServer({"policy": search_read_answer(right_email), "judge": []}) as server:
        trajectory = play(server, scenario, email_db, judge=None)
    assert server.requests_for("judge") == []
    assert "answer_correct" not in trajectory.metrics
    assert trajectory.reward == pytest.approx(0.4)  # neutral band + partial until RULER scores the group


def test_policy_http_error_propagates_out_of_the_rollout(scenario, email_db):
    with OpenAIServer({"policy": [failure(400, "context length exceeded")], "judge": []}) as server:
        with pytest.raises(openai.BadRequestError, match="context length exceeded"):
            play(server, scenario, email_db)


def test_gather_counts_a_failed_rollout_as_an_exception_of_its_group(scenario, email_db, right_email):
    import art

    def policy(body: dict):
        if len(body["messages"]) == 2 and "first" not in seen:
            seen.add("first")
            return failure(400, "bad request")
        return tool_call("return_final_answer", {"answer": "I don't know", "sources": []})

    seen: set[str] = set()
    with OpenAIServer({"policy": policy, "judge": []}) as server:
        model = art.Model(name="policy", project="email-agent-tests", inference_base_url=server.base_url,
                          inference_api_key="test")
        agent = AgentConfig(max_turns=MAX_TURNS)

        async def gather():
            return await art.gather_trajectory_groups(
                [art.trajectory_group((rollout(model, scenario, db=email_db, judge=None, config=agent)
                                      for _ in range(2)), return_exceptions=True)],
                pbar_desc=None, max_exceptions=1)

        (group,) = asyncio.run(gather())
    assert len(group.trajectories) == 1 and len(group.exceptions) == 1
    assert "bad request" in group.exceptions[0].message


def test_importing_the_rollout_module_loads_no_heavy_dependency():
    code = ("import sys, trainer.agent.rollout, trainer.agent.judge, trainer.agent.tools, trainer.agent.reward; "
            "print(sorted(m for m in ('art', 'litellm', 'torch', 'datasets', 'openai') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_system_prompt_reads_as_sentences_with_no_runs_of_spaces(scenario):
    """Lines joined with their source indentation would put nine spaces in the middle of a
    sentence: tokens every rollout and warm-up pays for, and text no model has seen."""
    prompt = system_prompt(scenario, AgentConfig(max_turns=7))
    assert "  " not in prompt
    assert prompt.startswith("You are an email search agent. Use the tools to search the user's email and find the "
                             "answer to the user's question. You may take up to 7 turns, so if a search finds "
                             "nothing useful, try again with other keywords.\n\n")
    assert prompt.endswith(f"The user's email address is {scenario.inbox_address}\nToday's date is {scenario.query_date}")
