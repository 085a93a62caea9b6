"""Scenarios: the questions the agent is trained and evaluated on, and how they are loaded.

A scenario is one row of `corbt/enron_emails_sample_questions` plus its split.
``python -m trainer.data prepare`` writes every row of each split to
``<data_dir>/scenarios/<split>.jsonl`` (one JSON object per line, the
``Scenario`` fields); filtering and sampling happen here, at load time, so a
config change never needs the data staged again.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

SPLITS = ("train", "test")
SCENARIOS_DIRNAME = "scenarios"
FIELDS = ("id", "question", "answer", "message_ids", "how_realistic", "inbox_address", "query_date")
PREPARE_HINT = "stage the data with `python -m trainer.data prepare`"
DATE_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # a question's date (query_date)

# Questions ART-E's authors spot-checked and found ambiguous or contradicted by
# other emails; ART-E leaves them out of every split.
KNOWN_BAD_IDS = frozenset({49, 101, 129, 171, 208, 266, 327})


@dataclass(frozen=True)
class Scenario:
    id: int
    question: str
    answer: str
    message_ids: tuple[str, ...]
    how_realistic: float
    inbox_address: str
    query_date: str
    split: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any], split: str) -> Scenario:
        """A scenario from a dataset row; ValueError naming the field if the row is malformed."""
        if not isinstance(row, Mapping):
            raise ValueError(f"a question must be an object with {', '.join(FIELDS)}, got {row!r:.80}")
        missing = [name for name in FIELDS if name not in row or row[name] is None]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)} (a question needs {', '.join(FIELDS)})")
        message_ids = row["message_ids"]
        if isinstance(message_ids, str) or not all(isinstance(m, str) for m in message_ids):
            raise ValueError(f"message_ids must be a list of strings, got {message_ids!r}")
        return cls(
            id=_integer(row["id"], "id"),
            question=_text(row["question"], "question"),
            answer=_text(row["answer"], "answer"),
            message_ids=tuple(message_ids),
            how_realistic=_number(row["how_realistic"], "how_realistic"),
            inbox_address=_text(row["inbox_address"], "inbox_address"),
            query_date=_date_text(row["query_date"]),
            split=split,
        )

    def to_row(self) -> dict[str, Any]:
        """The JSON object written to the scenario file (the inverse of ``from_row``)."""
        row = asdict(self)
        row["message_ids"] = list(self.message_ids)
        return row


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _date_text(value: Any) -> str:
    """query_date as the dataset writes it; a date or datetime becomes its ISO text."""
    if hasattr(value, "isoformat") and not isinstance(value, str):
        return value.isoformat()
    return _text(value, "query_date")


def date_problem(text: str) -> str | None:
    """Why ``text`` is not a question's date as the data writes it, exactly YYYY-MM-DD in ASCII digits
    (no other ISO form: no week or ordinal date, no time, no basic form), or None when it is one."""
    if DATE_FORM.fullmatch(text):
        with contextlib.suppress(ValueError):
            date.fromisoformat(text)
            return None
    return f"query_date {text!r} is not a date YYYY-MM-DD"


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
    return split


def scenario_file(data_dir: Path, split: str) -> Path:
    """Where ``prepare`` writes a split: ``<data_dir>/scenarios/<split>.jsonl``."""
    return Path(data_dir) / SCENARIOS_DIRNAME / f"{check_split(split)}.jsonl"


def read_scenario_file(path: Path, split: str) -> list[Scenario]:
    """Every scenario in a file written by ``prepare``, in file order."""
    if not path.is_file():
        raise FileNotFoundError(f"scenario file not found: {path}; {PREPARE_HINT}")
    scenarios = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                scenarios.append(Scenario.from_row(json.loads(line), split))
            except ValueError as error:  # json.JSONDecodeError is a ValueError
                raise ValueError(f"{path}:{number}: {error}; {PREPARE_HINT} --force") from None
    return scenarios


def load_scenarios(
    data_dir: Path,
    split: str,
    *,
    limit: int | None = None,
    max_messages: int | None = 1,
    shuffle: bool = True,
    seed: int = 42,
) -> list[Scenario]:
    """The scenarios of a split to train or evaluate on.

    Known-bad questions are dropped; with ``max_messages``, so are questions
    whose answer spans more emails; the rest is shuffled with
    ``random.Random(seed)`` (the same list on every node and every resume)
    and cut to ``limit``."""
    check_split(split)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")
    if max_messages is not None and (isinstance(max_messages, bool) or not isinstance(max_messages, int)
                                     or max_messages < 1):
        raise ValueError(f"max_messages must be None or an integer >= 1, got {max_messages!r}")
    scenarios = [s for s in read_scenario_file(scenario_file(data_dir, split), split)
                 if s.id not in KNOWN_BAD_IDS and (max_messages is None or len(s.message_ids) <= max_messages)]
    if shuffle:
        random.Random(seed).shuffle(scenarios)
    return scenarios if limit is None else scenarios[:limit]
