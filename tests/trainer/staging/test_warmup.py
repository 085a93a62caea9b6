"""trainer.warmup's scripted trajectories: what a good agent does, played through the real tools."""

from __future__ import annotations

import json

from trainer.agent.rollout import AgentConfig, system_prompt
from trainer.agent.scenarios import load_scenarios
from trainer.agent.tools import READ_EMAIL, RETURN_FINAL_ANSWER, SEARCH_EMAILS
from trainer.staging.warmup import keywords, parsed_tool_call, scripted_conversation, scripted_conversations


def test_keywords_are_the_questions_longest_words_that_the_email_holds() -> None:
    assert keywords("When is the Houston pipeline meeting?", "The pipeline meeting moved to Houston.") == \
        ["pipeline", "houston"]  # longest first; ties in the question's order
    assert keywords("What about it?", "unrelated text") == []


def test_each_scripted_conversation_searches_reads_and_answers_through_the_real_tools(art_e_data_dir, email_db) -> None:
    scenarios = load_scenarios(art_e_data_dir, "train", limit=None)
    agent = AgentConfig(max_turns=4)
    conversations = scripted_conversations(scenarios, email_db, agent)
    assert 0 < len(conversations) <= len(scenarios)
    for messages in conversations:
        system, user, search, found, read, email, answer = messages
        scenario = next(s for s in scenarios if s.question == user["content"])
        assert system["content"] == system_prompt(scenario, agent)
        names = [m["tool_calls"][0]["function"]["name"] for m in (search, read, answer)]
        assert names == [SEARCH_EMAILS, READ_EMAIL, RETURN_FINAL_ANSWER]
        target = scenario.message_ids[0]
        assert target in found["content"] and found["tool_call_id"] == search["tool_calls"][0]["id"]
        assert json.loads(email["content"])["message_id"] == target
        final = json.loads(answer["tool_calls"][0]["function"]["arguments"])
        assert final == {"answer": scenario.answer, "sources": [target]}


def test_a_scenario_whose_email_is_missing_gives_no_conversation(art_e_data_dir, email_db) -> None:
    from dataclasses import replace

    scenario = load_scenarios(art_e_data_dir, "train", limit=None)[0]
    assert scripted_conversation(replace(scenario, message_ids=("<missing@x>",)), email_db, AgentConfig()) is None


def test_a_generated_turn_counts_as_a_tool_call_only_when_hermes_could_parse_it() -> None:
    good = '<tool_call>\n{"name": "search_emails", "arguments": {"keywords": ["x"]}}\n</tool_call><|im_end|>'
    assert parsed_tool_call(good) == {"name": "search_emails", "arguments": {"keywords": ["x"]}}
    assert parsed_tool_call('<tool_call>\n{"name": "search_emails", "arguments": \n</tool_call>') is None
    assert parsed_tool_call("I think the answer is Tuesday.") is None
