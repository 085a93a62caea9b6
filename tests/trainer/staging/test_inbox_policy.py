"""The synthetic inboxes' scripted warm-up policy: a good and a weak search, mixed in a stated share,
played through the real tools, and its measured accuracy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.agent.email_db import EmailDB
from trainer.agent.rollout import AgentConfig, system_prompt
from trainer.agent.scenarios import load_scenarios
from trainer.agent.tools import READ_EMAIL, RETURN_FINAL_ANSWER, SEARCH_EMAILS
from trainer.staging.inbox_policy import GOOD_SHARE, MIX_COPIES, conversation, measure
from trainer.staging.synthetic_inbox import search_plan
from trainer.staging.warmup import POLICIES, distinct

REPO = Path(__file__).resolve().parents[3]


def calls(messages: list[dict]) -> list[tuple[str, dict]]:
    return [(m["tool_calls"][0]["function"]["name"], json.loads(m["tool_calls"][0]["function"]["arguments"]))
            for m in messages if m["role"] == "assistant"]


def test_the_good_search_answers_right_and_the_weak_one_answers_a_newer_emails_number(inbox_data_dir: Path) -> None:
    scenario = load_scenarios(inbox_data_dir, "test", limit=1, shuffle=False)[0]
    plan = search_plan(scenario.question)
    with EmailDB(inbox_data_dir / "enron_emails.db") as db:
        good = conversation(scenario, db, AgentConfig(max_turns=4), good=True)
        weak = conversation(scenario, db, AgentConfig(max_turns=4), good=False)
    assert good.answer == scenario.answer and weak.answer != scenario.answer and weak.answer.isdigit()
    assert good.messages[0]["content"] == system_prompt(scenario, AgentConfig(max_turns=4))
    for played, keywords in ((good, plan.good), (weak, plan.weak)):
        (search, found), (read, opened), (answer, final) = calls(played.messages)
        assert (search, read, answer) == (SEARCH_EMAILS, READ_EMAIL, RETURN_FINAL_ANSWER)
        assert found == {"keywords": keywords} and final == {"answer": played.answer,
                                                             "sources": [opened["message_id"]]}
        first_result = json.loads(played.messages[3]["content"])[0]["message_id"]
        assert opened["message_id"] == first_result  # it reads what its search found first


def test_measured_on_held_out_questions_good_is_always_right_weak_never_and_the_mix_its_share(
        inbox_data_dir: Path) -> None:
    scenarios = load_scenarios(inbox_data_dir, "test", limit=None, shuffle=False)
    with EmailDB(inbox_data_dir / "enron_emails.db") as db:
        score = measure(scenarios, db, AgentConfig(max_turns=4), good_share=GOOD_SHARE)
    assert (score.questions, score.good, score.weak) == (60, 1.0, 0.0)
    assert score.mix == 0.25
    assert "the warm-up's mix (25% good) 25.0% right on average" in score.line()


def test_the_warm_ups_mix_plays_every_question_both_ways_in_the_stated_share(inbox_data_dir: Path) -> None:
    scenarios = load_scenarios(inbox_data_dir, "train", limit=None)
    with EmailDB(inbox_data_dir / "enron_emails.db") as db:
        conversations = POLICIES["inbox-mix"](scenarios, db, AgentConfig(max_turns=4), good_share=0.25)
    assert len(conversations) == len(scenarios) * MIX_COPIES == 240 * 20
    for index, scenario in enumerate(scenarios):
        copies = conversations[index * MIX_COPIES:(index + 1) * MIX_COPIES]
        assert {c[1]["content"] for c in copies} == {scenario.question}
        assert sum(len(calls(c)[0][1]["keywords"]) == 2 for c in copies) == 5  # a quarter search well
    assert len(distinct(conversations)) == 2 * len(scenarios)  # each tokenised once


def test_the_command_prints_the_policies_accuracy(inbox_data_dir: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "trainer.staging.inbox_policy", "--data_dir", str(inbox_data_dir),
                             "--limit", "20"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("scripted policy on 20 questions with the real tools: good search 100.0% right")


@pytest.mark.parametrize("args", [["--good_share", "1.5", "--policy", "inbox-mix"], ["--good_share", "0.5"]])
def test_a_bad_good_share_is_a_one_line_error(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")
    result = subprocess.run([sys.executable, "-m", "trainer.warmup", str(tmp_path / "base"), str(tmp_path / "out"),
                             *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "accepted: a number from 0 to 1, with --policy inbox-mix" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
