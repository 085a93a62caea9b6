"""The agent's three tools: their OpenAI schemas and an executor for one scenario.

The executor is where the agent meets the email database, so it is also where
the rubric learns most of what happened: whether a search surfaced the right
email, whether the agent read it, whether it tried to read one that does not
exist, and whether its tool calls were well formed.

Two rules keep the task honest (ART-E's): a search only sees the scenario's
inbox, and only mail sent before the scenario's query date (the agent may
narrow that window, never widen it).

Tool results are JSON text, ready for a ``tool`` message. Calls that are
malformed (unknown tool, arguments that are not a JSON object, wrong types,
``max_results`` above 10...) get a clear error text and mark the outcome as a
formatting error; the rollout then stops (reward band -2..-1).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, Callable

from trainer.agent.email_db import MAX_SEARCH_RESULTS
from trainer.agent.reward import Rubric

if TYPE_CHECKING:
    from trainer.agent.email_db import EmailDB
    from trainer.agent.scenarios import Scenario

I_DONT_KNOW = "I don't know"
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")

SEARCH_EMAILS = "search_emails"
READ_EMAIL = "read_email"
RETURN_FINAL_ANSWER = "return_final_answer"

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": SEARCH_EMAILS,
            "description": (
                "Search the user's inbox for emails containing all of the given keywords. "
                "Returns up to max_results matches, each with its message_id and a snippet."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "keywords": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Words that must all appear in the email (subject or body).",
                    },
                    "from_addr": {"type": "string", "description": "Only emails sent by this address."},
                    "to_addr": {"type": "string", "description": "Only emails sent to this address."},
                    "sent_after": {"type": "string", "description": "Only emails sent on or after this date, YYYY-MM-DD."},
                    "sent_before": {"type": "string", "description": "Only emails sent before this date, YYYY-MM-DD."},
                    "max_results": {
                        "type": "integer",
                        "description": f"How many results to return, 1 to {MAX_SEARCH_RESULTS} (default {MAX_SEARCH_RESULTS}).",
                    },
                },
                "required": ["keywords"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": READ_EMAIL,
            "description": "Read one email in full (headers and body) by its message_id.",
            "parameters": {
                "type": "object",
                "properties": {"message_id": {"type": "string", "description": "A message_id from a search result."}},
                "required": ["message_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": RETURN_FINAL_ANSWER,
            "description": (
                "Give the final answer to the user's question, with the message_ids of the emails it comes from. "
                f'If you cannot find the answer, answer "{I_DONT_KNOW}" with an empty list of sources.'
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string", "description": "The answer to the user's question."},
                    "sources": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "message_ids of the emails that support the answer (usually one).",
                    },
                },
                "required": ["answer", "sources"],
            },
        },
    },
]
TOOL_NAMES = tuple(schema["function"]["name"] for schema in TOOL_SCHEMAS)


class ToolArgumentError(ValueError):
    """A tool was called with arguments it cannot take; the message is shown to the model."""


@dataclass(frozen=True)
class FinalAnswer:
    answer: str
    sources: tuple[str, ...]

    @property
    def is_i_dont_know(self) -> bool:
        return is_i_dont_know(self.answer)


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call produced.

    ``content`` is the JSON text for the tool message; ``format_error`` means
    the call itself was malformed and the rollout must stop; ``final_answer``
    is set when the agent answered.
    """

    content: str
    format_error: bool = False
    final_answer: FinalAnswer | None = None


def is_i_dont_know(answer: str) -> bool:
    """ "I don't know", forgiving case, curly apostrophes and a final period."""
    words = answer.replace("\u2019", "'").strip().rstrip(".!").strip().lower()
    return words in ("i don't know", "i do not know")


class EmailTools:
    """The tools bound to one scenario and the email DB; ticks the rubric as they run."""

    def __init__(self, scenario: "Scenario", db: "EmailDB", rubric: Rubric) -> None:
        self.scenario = scenario
        self.db = db
        self.rubric = rubric
        self.query_date = _scenario_date(scenario.query_date)
        self.right_email = scenario.message_ids[0] if scenario.message_ids else None
        self._tools: dict[str, Callable[..., ToolOutcome]] = {
            SEARCH_EMAILS: self.search_emails,
            READ_EMAIL: self.read_email,
            RETURN_FINAL_ANSWER: self.return_final_answer,
        }

    def call(self, name: str, arguments: str | dict | Any) -> ToolOutcome:
        """Run one tool call as the model wrote it: a name and JSON-text (or parsed) arguments."""
        tool = self._tools.get(name)
        if tool is None:
            self.rubric.bad_tool_call_name = True
            return _error(f"Unknown tool {name!r}. Available tools: {', '.join(TOOL_NAMES)}.", format_error=True)
        try:
            args = _parse_arguments(arguments)
            return tool(**args)
        except ToolArgumentError as error:
            self.rubric.bad_tool_call_args = True
            return _error(f"Invalid arguments for {name}: {error}", format_error=True)

    def search_emails(self, **args: Any) -> ToolOutcome:
        """Keyword search in the scenario's inbox, before the query date."""
        _check_names(args, required=("keywords",), optional=("from_addr", "to_addr", "sent_after", "sent_before",
                                                              "max_results"))
        keywords = _string_list(args, "keywords", allow_empty=False)
        sent_after = _optional_date(args, "sent_after")
        sent_before = _optional_date(args, "sent_before")
        max_results = args.get("max_results", MAX_SEARCH_RESULTS)
        if isinstance(max_results, bool) or not isinstance(max_results, int):
            raise ToolArgumentError(f"'max_results' must be an integer, got {max_results!r}")
        if not 1 <= max_results <= MAX_SEARCH_RESULTS:
            raise ToolArgumentError(f"'max_results' must be between 1 and {MAX_SEARCH_RESULTS}, got {max_results}")
        try:
            results = self.db.search(
                inbox=self.scenario.inbox_address,
                keywords=keywords,
                from_addr=_optional_string(args, "from_addr"),
                to_addr=_optional_string(args, "to_addr"),
                sent_after=sent_after,
                sent_before=self._clamp_to_query_date(sent_before),
                max_results=max_results,
            )
        except ValueError as error:  # the DB's own argument checks
            raise ToolArgumentError(str(error)) from None
        if any(result.message_id == self.right_email for result in results):
            self.rubric.ever_found_right_email = True
        return _ok([{"message_id": r.message_id, "snippet": r.snippet} for r in results])

    def read_email(self, **args: Any) -> ToolOutcome:
        """One email in full; a missing one is an error the agent can recover from."""
        _check_names(args, required=("message_id",))
        message_id = _string(args, "message_id")
        email = self.db.read(message_id)
        if email is None:
            self.rubric.ever_tried_to_read_invalid_email = True
            return _error(f"Email not found: {message_id!r}")
        if message_id == self.right_email:
            self.rubric.ever_read_right_email = True
        return _ok(email.to_dict())

    def return_final_answer(self, **args: Any) -> ToolOutcome:
        """Record the answer; whether it is right is the judge's business, not the tools'."""
        _check_names(args, required=("answer", "sources"))
        answer = FinalAnswer(_string(args, "answer"), tuple(_string_list(args, "sources", allow_empty=True)))
        self.rubric.attempted_answer = True
        self.rubric.num_sources = len(answer.sources)
        if answer.is_i_dont_know:
            self.rubric.returned_i_dont_know = True
        else:
            self.rubric.sources_correct = self.right_email in answer.sources
        return ToolOutcome(content=json.dumps({"status": "final answer recorded"}), final_answer=answer)

    def _clamp_to_query_date(self, sent_before: str | None) -> str:
        """The agent may look further back than the query date, never past it."""
        if sent_before is None or sent_before > self.query_date:
            return self.query_date
        return sent_before


def _scenario_date(query_date: str) -> str:
    """The scenario's query date as YYYY-MM-DD (the dataset may carry a time after it)."""
    day = str(query_date)[:10]
    date.fromisoformat(day)  # a malformed scenario is a data bug: fail loudly
    return day


def _ok(payload: Any) -> ToolOutcome:
    return ToolOutcome(content=json.dumps(payload, ensure_ascii=False, default=str))


def _error(message: str, *, format_error: bool = False) -> ToolOutcome:
    return ToolOutcome(content=json.dumps({"error": message}), format_error=format_error)


def _parse_arguments(arguments: str | dict | Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise ToolArgumentError(f"arguments are not valid JSON ({error.msg} at position {error.pos})") from None
    if not isinstance(arguments, dict):
        raise ToolArgumentError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments


def _check_names(args: dict[str, Any], *, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    missing = [name for name in required if name not in args]
    if missing:
        raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
    unknown = sorted(set(args) - set(required) - set(optional))
    if unknown:
        raise ToolArgumentError(f"unexpected argument(s): {', '.join(unknown)}")


def _string(args: dict[str, Any], name: str) -> str:
    value = args[name]
    if not isinstance(value, str) or not value.strip():
        raise ToolArgumentError(f"{name!r} must be a non-empty string, got {value!r}")
    return value


def _optional_string(args: dict[str, Any], name: str) -> str | None:
    """An optional filter; an empty string means "no filter", as models often write it."""
    return None if args.get(name) in (None, "") else _string(args, name)


def _string_list(args: dict[str, Any], name: str, *, allow_empty: bool) -> list[str]:
    value = args[name]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ToolArgumentError(f"{name!r} must be a list of strings, got {value!r}")
    items = [item for item in value if item.strip()]
    if not allow_empty and not items:
        raise ToolArgumentError(f"{name!r} must contain at least one non-empty string")
    return items


def _optional_date(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not _DATE_RE.fullmatch(value):
        raise ToolArgumentError(f"{name!r} must be a date as YYYY-MM-DD, got {value!r}")
    try:
        date.fromisoformat(value)
    except ValueError:
        raise ToolArgumentError(f"{name!r} is not a real date: {value!r}") from None
    return value
