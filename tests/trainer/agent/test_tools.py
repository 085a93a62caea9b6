"""The agent's tools against the fixture email DB: scoping, rubric ticks, argument errors."""

from __future__ import annotations

import json

import pytest

from trainer.agent.reward import Rubric
from trainer.agent.tools import TOOL_NAMES, TOOL_SCHEMAS, EmailTools, is_i_dont_know

OFFSITE_QUESTION_ID = 3  # "Where is the research group offsite?" in vince.kaminski's inbox


@pytest.fixture
def scenario(scenarios):
    return next(s for s in scenarios if s.id == OFFSITE_QUESTION_ID)


@pytest.fixture
def rubric() -> Rubric:
    return Rubric()


@pytest.fixture
def tools(scenario, email_db, rubric) -> EmailTools:
    return EmailTools(scenario, email_db, rubric)


def search(tools: EmailTools, **args) -> list[dict]:
    outcome = tools.call("search_emails", json.dumps(args))
    assert not outcome.format_error, outcome.content
    return json.loads(outcome.content)


class RecordingDB:
    """An EmailDB stand-in that records what the search tool asked for."""

    def __init__(self) -> None:
        self.searches: list[dict] = []

    def search(self, **kwargs):
        self.searches.append(kwargs)
        return []

    def read(self, message_id):
        return None


def test_schemas_offer_the_three_tools_with_their_required_arguments():
    assert TOOL_NAMES == ("search_emails", "read_email", "return_final_answer")
    required = {s["function"]["name"]: s["function"]["parameters"]["required"] for s in TOOL_SCHEMAS}
    assert required == {"search_emails": ["keywords"], "read_email": ["message_id"],
                        "return_final_answer": ["answer", "sources"]}
    assert all(s["type"] == "function" for s in TOOL_SCHEMAS)


def test_search_returns_ids_and_snippets_and_notes_finding_the_right_email(tools, scenario, rubric):
    results = search(tools, keywords=["offsite"])
    assert scenario.message_ids[0] in [r["message_id"] for r in results]
    assert all(set(r) == {"message_id", "snippet"} for r in results)
    assert any("offsite" in r["snippet"].lower() for r in results)
    assert rubric.ever_found_right_email


def test_search_that_misses_the_right_email_does_not_tick_found(tools, rubric):
    search(tools, keywords=["spreadsheet"])
    assert not rubric.ever_found_right_email


def test_search_sees_only_the_scenario_inbox(tools, scenario, email_db):
    other_inbox = "jeff.dasovich@enron.com"
    assert email_db.search(inbox=other_inbox, keywords=["review"], sent_before=scenario.query_date), "fixture check"
    results = search(tools, keywords=["review"])
    assert results
    for result in results:
        email = email_db.read(result["message_id"])
        people = [email.from_address, *email.to_addresses, *email.cc_addresses, *email.bcc_addresses]
        assert scenario.inbox_address in people


def test_search_never_sees_mail_from_the_query_date_on_even_when_asked_to(tools, scenario, email_db):
    later = email_db.search(inbox=scenario.inbox_address, keywords=["research"])
    assert any(email_db.read(r.message_id).date >= scenario.query_date for r in later), "fixture check"
    results = search(tools, keywords=["research"], sent_before="2002-01-01")
    assert all(email_db.read(r["message_id"]).date < scenario.query_date for r in results)


@pytest.mark.parametrize(
    ("asked", "sent"),
    [(None, "2000-03-28"), ("2001-12-31", "2000-03-28"), ("2000-03-28", "2000-03-28"), ("2000-02-01", "2000-02-01")],
)
def test_sent_before_is_clamped_to_the_query_date_never_widened(scenario, asked, sent):
    assert scenario.query_date == "2000-03-28"  # fixture: two weeks after the offsite email
    db = RecordingDB()
    args = {"keywords": ["x"]} | ({"sent_before": asked} if asked else {})
    EmailTools(scenario, db, Rubric()).call("search_emails", args)
    (request,) = db.searches
    assert request["sent_before"] == sent
    assert request["inbox"] == scenario.inbox_address


def test_search_passes_filters_and_treats_empty_strings_as_no_filter(scenario):
    db = RecordingDB()
    tools = EmailTools(scenario, db, Rubric())
    tools.call("search_emails", {"keywords": ["x"], "from_addr": "a@enron.com", "to_addr": "", "sent_after": "",
                                 "max_results": 3})
    (request,) = db.searches
    assert request["keywords"] == ["x"] and request["max_results"] == 3
    assert request["from_addr"] == "a@enron.com"
    assert request["to_addr"] is None and request["sent_after"] is None


def test_read_email_returns_the_email_and_notes_reading_the_right_one(tools, scenario, rubric):
    outcome = tools.call("read_email", {"message_id": scenario.message_ids[0]})
    email = json.loads(outcome.content)
    assert email["message_id"] == scenario.message_ids[0]
    assert "Woodlands Resort" in email["body"]
    assert rubric.ever_read_right_email and not rubric.ever_tried_to_read_invalid_email


def test_reading_a_missing_email_is_a_recoverable_tool_error(tools, rubric):
    outcome = tools.call("read_email", {"message_id": "<no.such@thyme>"})
    assert "not found" in json.loads(outcome.content)["error"]
    assert not outcome.format_error and not rubric.bad_tool_call_args
    assert rubric.ever_tried_to_read_invalid_email


@pytest.mark.parametrize(
    ("name", "arguments", "complaint"),
    [
        ("search_emails", '{"keywords": ["offsite"', "not valid JSON"),
        ("search_emails", '["offsite"]', "must be a JSON object"),
        ("search_emails", {"keywords": "offsite"}, "list of strings"),
        ("search_emails", {"keywords": []}, "at least one"),
        ("search_emails", {"keywords": [3]}, "list of strings"),
        ("search_emails", {}, "missing required argument(s): keywords"),
        ("search_emails", {"keywords": ["a"], "max_results": 11}, "between 1 and 10"),
        ("search_emails", {"keywords": ["a"], "max_results": 0}, "between 1 and 10"),
        ("search_emails", {"keywords": ["a"], "max_results": "5"}, "must be an integer"),
        ("search_emails", {"keywords": ["a"], "max_results": True}, "must be an integer"),
        ("search_emails", {"keywords": ["a"], "sent_after": "March 3, 2000"}, "YYYY-MM-DD"),
        ("search_emails", {"keywords": ["a"], "sent_before": "2001-02-30"}, "not a real date"),
        ("search_emails", {"keywords": ["a"], "folder": "inbox"}, "unexpected argument(s): folder"),
        ("read_email", {"message_id": 12}, "non-empty string"),
        ("return_final_answer", {"answer": "Woodlands"}, "missing required argument(s): sources"),
        ("return_final_answer", {"answer": "Woodlands", "sources": "<1.2@thyme>"}, "list of strings"),
    ],
)
def test_malformed_arguments_are_a_format_error_with_a_clear_message(tools, rubric, name, arguments, complaint):
    outcome = tools.call(name, arguments)
    message = json.loads(outcome.content)["error"]
    assert outcome.format_error and rubric.bad_tool_call_args and not rubric.bad_tool_call_name
    assert message.startswith(f"Invalid arguments for {name}: ")
    assert complaint in message


def test_unknown_tool_is_a_bad_tool_name(tools, rubric):
    outcome = tools.call("send_email", {"to": "x"})
    assert outcome.format_error and rubric.bad_tool_call_name and not rubric.bad_tool_call_args
    assert "Unknown tool 'send_email'" in json.loads(outcome.content)["error"]


def test_final_answer_records_the_answer_and_checks_its_sources(tools, scenario, rubric):
    outcome = tools.call("return_final_answer", {"answer": "At the Woodlands Resort",
                                                 "sources": [scenario.message_ids[0], "<other@thyme>"]})
    assert outcome.final_answer.answer == "At the Woodlands Resort"
    assert outcome.final_answer.sources == (scenario.message_ids[0], "<other@thyme>")
    assert rubric.attempted_answer and rubric.sources_correct and rubric.num_sources == 2
    assert not rubric.returned_i_dont_know
    json.loads(outcome.content)  # still a JSON tool result


def test_final_answer_without_the_right_source_has_incorrect_sources(tools, rubric):
    tools.call("return_final_answer", {"answer": "Somewhere", "sources": ["<other@thyme>"]})
    assert rubric.attempted_answer and not rubric.sources_correct


def test_i_dont_know_is_recorded_as_no_answer(tools, scenario, rubric):
    outcome = tools.call("return_final_answer", {"answer": "I don't know", "sources": []})
    assert outcome.final_answer.is_i_dont_know
    assert rubric.attempted_answer and rubric.returned_i_dont_know and not rubric.sources_correct


@pytest.mark.parametrize("answer", ["I don't know", "i don\u2019t know.", " I do not know ", "I DON'T KNOW!"])
def test_i_dont_know_is_recognised_in_its_usual_spellings(answer):
    assert is_i_dont_know(answer)


@pytest.mark.parametrize("answer", ["I don't know the exact room, but it is in Houston", "Unknown", ""])
def test_answers_that_merely_contain_doubt_are_real_answers(answer):
    assert not is_i_dont_know(answer)
