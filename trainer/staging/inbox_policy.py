"""The warm-up's scripted policy for the synthetic inboxes, imperfect in a stated, measured way:
``python -m trainer.staging.inbox_policy --data_dir D [--split test] [--good_share 0.25]``.

The warm-up (``python -m trainer.warmup --policy inbox-mix``) teaches a made model the tool
format from conversations this policy plays through the real tools. Each conversation
searches, reads the first result and answers the 5-digit number that email holds, citing it.
Only the search differs (``trainer.staging.synthetic_inbox.search_plan``):

- **good** (a share ``good_share`` of the conversations, 0.25 by default): the question's entity and
  the family's attribute, ``["Amber Falcon", "code"]``: only the right email is found, the answer is right;
- **weak** (the rest): the attribute alone, ``["code"]``: a newer email of the same family comes
  first, and the answer is another entity's number: wrong.

Every training question is played both ways, in that proportion, so the share is all that ties a
question to its search.

So the warmed model knows the format and both searches, and picks the good one about as often
as it saw it; the room RL has to improve is the weak share. ``measure`` plays both policies
and the mix on a split with the real tools and says how often each answers right (the
answer is the reference number); the bench prints it for the held-out questions.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.agent.reward import Rubric
from trainer.agent.rollout import AgentConfig
from trainer.agent.tools import READ_EMAIL, RETURN_FINAL_ANSWER, SEARCH_EMAILS, EmailTools
from trainer.staging.scripted_moves import opening, play
from trainer.staging.synthetic_inbox import search_plan

if TYPE_CHECKING:
    from trainer.agent.email_db import EmailDB
    from trainer.agent.scenarios import Scenario

GOOD_SHARE = 0.25
_NUMBER = re.compile(r"\b\d{5}\b")


@dataclass(frozen=True)
class Scripted:
    """One scripted conversation and the answer it gave."""

    messages: list[dict[str, Any]]
    answer: str
    good: bool


def conversation(scenario: "Scenario", db: "EmailDB", agent: AgentConfig, good: bool) -> Scripted | None:
    """Search (good or weak), read the first result, answer its number citing it; None when the
    question is not the generator's or the search finds no email with a number."""
    plan = search_plan(scenario.question)
    if plan is None:
        return None
    tools, messages = EmailTools(scenario, db, Rubric()), opening(scenario, agent)
    found = play(messages, tools, SEARCH_EMAILS, {"keywords": plan.good if good else plan.weak})
    results = json.loads(found.content)
    if found.format_error or not isinstance(results, list) or not results:
        return None
    first = results[0]["message_id"]
    email = json.loads(play(messages, tools, READ_EMAIL, {"message_id": first}).content)
    number = _NUMBER.search(email.get("body") or "")
    if number is None:
        return None
    play(messages, tools, RETURN_FINAL_ANSWER, {"answer": number.group(), "sources": [first]})
    return Scripted(messages, number.group(), good)


MIX_COPIES = 20  # each scenario's two conversations, repeated to make the share (0.25: 5 good, 15 weak)


def mixed(scenarios: list["Scenario"], db: "EmailDB", agent: AgentConfig,
          good_share: float = GOOD_SHARE) -> list[Scripted]:
    """Every scenario both ways, the good conversation ``round(MIX_COPIES * good_share)`` times and
    the weak one the rest of ``MIX_COPIES``: a batch drawn from them searches well with probability
    ``good_share`` whatever the question, so however many epochs the warm-up runs, nothing but that
    share ties a question to its search (the same list object repeats: each is tokenised once)."""
    good_copies = round(MIX_COPIES * good_share)
    mix = []
    for scenario in scenarios:
        good, weak = (conversation(scenario, db, agent, flag) for flag in (True, False))
        if good is not None and weak is not None:
            mix += [good] * good_copies + [weak] * (MIX_COPIES - good_copies)
    return mix


@dataclass(frozen=True)
class Score:
    """How often each policy answers right on a split, played through the real tools."""

    questions: int
    good: float
    weak: float
    mix: float
    good_share: float

    def line(self) -> str:
        return (f"scripted policy on {self.questions} questions with the real tools: good search {self.good:.1%} right, "
                f"weak search {self.weak:.1%} right, the warm-up's mix ({self.good_share:.0%} good) {self.mix:.1%} right "
                "on average")


def measure(scenarios: list["Scenario"], db: "EmailDB", agent: AgentConfig, good_share: float = GOOD_SHARE) -> Score:
    """Each policy played on every scenario; the mix's accuracy is what a policy drawing the good
    search with probability ``good_share`` gets on average."""
    def right(good: bool) -> float:
        played = [conversation(s, db, agent, good) for s in scenarios]
        return sum(p is not None and p.answer == s.answer for p, s in zip(played, scenarios)) / max(1, len(scenarios))

    good, weak = right(True), right(False)
    return Score(len(scenarios), good, weak, good_share * good + (1 - good_share) * weak, good_share)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.staging.inbox_policy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", type=Path, required=True, help="data staged from trainer.data make-inboxes")
    parser.add_argument("--split", choices=("train", "test"), default="test")
    parser.add_argument("--limit", type=int, default=None, help="the split's first N questions (validation's)")
    parser.add_argument("--good_share", type=float, default=GOOD_SHARE)
    args = parser.parse_args(argv)
    from trainer.agent.email_db import EmailDB
    from trainer.agent.scenarios import load_scenarios
    from trainer.staging.data import data_paths

    if not 0 <= args.good_share <= 1:
        parser.error(f"--good_share {args.good_share}: accepted: a number from 0 to 1")
    scenarios = load_scenarios(args.data_dir, args.split, limit=args.limit, shuffle=False)
    with EmailDB(data_paths(args.data_dir).db) as db:
        print(measure(scenarios, db, AgentConfig(), args.good_share).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
