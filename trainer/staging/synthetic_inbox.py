"""Synthetic inboxes: a task a made model can learn, whose answers stand in specific emails.

    python -m trainer.data make-inboxes OUT [--seed 0] [--train_inboxes 600] [--heldout_inboxes 60] [--warmup_inboxes 0]
    python -m trainer.data prepare --emails OUT/emails.jsonl --questions OUT/questions.jsonl

A model the project makes cannot answer ART-E's questions, and none can be downloaded, so
a run that shows the training loop makes an agent better (bench/learning_curve.py) needs
questions a small model can learn to answer. Here each inbox holds facts of a few
*families* (an access code, a purchase order number, an invoice total, a ticket number, a
tracking number), each about an *entity* (a project, a shipment... named by one word such
as ``Falcon``), each answer a 5-digit number drawn at random: an answer can only be found by
searching the inbox and reading the right email, never remembered.

A question quotes its entity (``What is the access code for the "Amber Falcon" project?``): the
quote makes the entity's first word the same token in the question as in a search's JSON
(``["Amber Falcon", ...]``), where no space comes before it. Unquoted, a made model must learn a
second token for each of the 60 first words before it can copy one. Quoting is not enough by
itself: warmed up to 8,000 steps, the made model still copied no entity (docs/training.md).

Every question is about an older fact of its family, and a newer fact of the same family
(another entity) is the first email a weak search finds:

- the good search, ``[entity, attribute]`` (``["Falcon", "code"]``), finds only the right email;
- the weak search, ``[attribute]`` (``["code"]``), lists the family's emails newest first, so
  a policy that reads the first result answers another entity's number: wrong;
- fillers share words with the facts (the entity in an email without the attribute, newer
  than the fact; the attribute in an email without a number, older than the family's facts),
  so a search with the entity alone also finds the wrong email first.

The split is by inbox, and every number is drawn once for the whole corpus: no held-out
inbox, question or answer string appears in the training split (``leaks`` checks it).
``warmup_inboxes`` gives the warm-up inboxes of its own, before the training split's: RL then
trains on entities the warm-up never saw, as the held-out questions are, so its training reward
measures the skill they need. (Warmed up on every training question, the made model had learned
them by heart: on two H100s one seed's training accuracy averaged 94% over steps 52-64 while its
held-out accuracy fell from 96% to 51-70%, docs/training.md.) An inbox is made alike whatever its
split, so moving training inboxes to the warm-up (the same seed, the same total) changes no email
and no held-out question.
Entity words come from one shared list (each is one word a tokenizer trained on the emails
knows from both splits); the questions they make differ between splits because their
inboxes and answers do.

``search_plan`` gives the scripted policy of the warm-up (trainer.warmup --policy
inbox-mix) its two searches for a question. Deterministic from ``seed``: the same arguments
write the same bytes.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

FIRST_ID = 1000  # scenario ids start here, clear of ART-E's known-bad ids (trainer.agent.scenarios)
NUMBER_LOW, NUMBER_HIGH = 10000, 99999  # 5 digits: never part of a message id's or a date's digit runs
FACTS_PER_FAMILY = 3  # the newest is the distractor, the others are asked
FAMILIES_PER_INBOX = 3
QUERY_DATE = datetime(2001, 9, 1)
FIRST_DATE = datetime(2001, 1, 1)
DOMAIN = "mail.synth"
WARMUP = "warmup"  # the split of the warm-up's inboxes (write_warmup)

ADJECTIVES = (
    "Amber", "Azure", "Bright", "Bronze", "Cobalt", "Copper", "Coral", "Crimson", "Crystal", "Dawn",
    "Dusk", "Eastern", "Emerald", "Frosty", "Golden", "Granite", "Hidden", "Indigo", "Iron", "Ivory",
    "Jade", "Lunar", "Misty", "Northern", "Ochre", "Olive", "Pearl", "Quiet", "Rapid", "Royal",
    "Ruby", "Rustic", "Sable", "Scarlet", "Silent", "Silver", "Solar", "Southern", "Steel", "Stormy",
    "Sunny", "Teal", "Tidal", "Twin", "Velvet", "Violet", "Western", "Wild", "Winter", "Zinc",
    "Alpine", "Arctic", "Blue", "Brave", "Calm", "Clear", "Deep", "Early", "Grand", "Green",
)
NOUNS = (
    "Falcon", "Heron", "Osprey", "Condor", "Kestrel", "Raven", "Pelican", "Puffin", "Sparrow", "Finch",
    "Harrier", "Merlin", "Plover", "Egret", "Ibis", "Magpie", "Starling", "Swift", "Wren", "Lark",
    "Cedar", "Maple", "Willow", "Aspen", "Birch", "Spruce", "Juniper", "Hemlock", "Alder", "Linden",
    "Cypress", "Sequoia", "Redwood", "Hazel", "Rowan", "Laurel", "Acacia", "Magnolia", "Sycamore", "Poplar",
    "Basalt", "Granite", "Quartz", "Onyx", "Garnet", "Topaz", "Jasper", "Cobalt", "Marble", "Slate",
    "Obsidian", "Amber", "Opal", "Beryl", "Agate", "Flint", "Pumice", "Shale", "Galena", "Pyrite",
    "Orion", "Vega", "Sirius", "Rigel", "Altair", "Deneb", "Polaris", "Antares", "Castor", "Pollux",
    "Lyra", "Draco", "Cygnus", "Perseus", "Andromeda", "Cassini", "Hubble", "Kepler", "Galileo", "Halley",
    "Tundra", "Prairie", "Canyon", "Glacier", "Delta", "Summit", "Harbor", "Meadow", "Lagoon", "Mesa",
    "Bison", "Badger", "Otter", "Lynx", "Coyote", "Marten", "Walrus", "Jaguar", "Panther", "Cougar",
    "Mustang", "Stallion", "Gazelle", "Impala", "Antelope", "Caribou", "Moose", "Beaver", "Ferret", "Mongoose",
    "Trident", "Anchor", "Compass", "Beacon", "Lantern", "Sextant", "Keystone", "Pinnacle", "Zenith", "Horizon",
)
# an entity is an adjective and a noun, each drawn once in the whole corpus: no question repeats anywhere
ENTITIES = tuple(f"{adjective} {noun}" for adjective in ADJECTIVES for noun in NOUNS
                 if adjective != noun and noun not in ADJECTIVES)
FIRST_NAMES = ("ana", "ben", "carla", "david", "elena", "frank", "grace", "hugo", "irene", "jonas", "karen", "leo",
               "maria", "nina", "oscar", "paula", "quinn", "rosa", "sam", "tara", "ulrich", "vera", "walter", "yara")
LAST_NAMES = ("adams", "baker", "clark", "diaz", "evans", "fischer", "garcia", "hughes", "ito", "jensen", "kim",
              "lopez", "moreau", "novak", "olsen", "patel", "quist", "rossi", "silva", "tanaka", "urban", "voss",
              "weber", "young")
CHATTER = (
    "Let me know if anything is unclear.",
    "Thanks for the quick turnaround.",
    "I will be out of the office on Friday.",
    "Please keep this email for your records.",
    "Call me if you have questions.",
    "We can discuss it at the team meeting.",
)


@dataclass(frozen=True)
class Family:
    """One kind of fact: the word a weak search uses, how a question asks for it, how an email states it."""

    name: str
    attribute: str  # the family's keyword: in every fact and in its fillers
    question: str  # with "{entity}" quoted (the module docstring says why)
    subject: str  # with {entity}
    fact: str  # with {entity} and {number}
    filler_subject: str
    filler: str  # the attribute word, no number


FAMILIES = (
    Family("access code", "code", "What is the access code for the \"{entity}\" project?", "{entity} access",
           "The access code for the {entity} project is {number}.", "Door codes",
           "The door code policy changes next month, so please read the new rules."),
    Family("purchase order", "order", "What is the purchase order number for the \"{entity}\" shipment?",
           "{entity} shipment", "The purchase order number for the {entity} shipment is {number}.", "Ordering",
           "The order form moved to the shared drive, please use the new one."),
    Family("invoice", "invoice", "How much is the invoice for the \"{entity}\" contract?", "{entity} invoice",
           "The invoice for the {entity} contract comes to {number} dollars.", "Invoices",
           "Every invoice now needs two signatures before it is paid."),
    Family("ticket", "ticket", "What is the ticket number for the \"{entity}\" request?", "{entity} request",
           "I opened ticket {number} for the {entity} request.", "Support tickets",
           "Please close your ticket once the issue is solved."),
    Family("tracking", "tracking", "What is the tracking number of the \"{entity}\" parcel?", "{entity} parcel",
           "The {entity} parcel has tracking number {number}.", "Parcel tracking",
           "The courier changed its tracking website this week."),
)
ENTITY_FILLERS = (  # the entity without any family's attribute word
    ("{entity} lunch", "The {entity} team lunch moved to noon on Thursday."),
    ("{entity} update", "Quick update: the {entity} kickoff went well and everyone is on board."),
    ("{entity} notes", "Notes from the {entity} review are in the usual folder."),
)
_QUESTION_PATTERNS = tuple((family, re.compile(re.escape(family.question).replace(r"\{entity\}", r"(\w+ \w+)")))
                           for family in FAMILIES)


class SyntheticInboxError(ValueError):
    """Bad input to make-inboxes: one line naming the value and what is accepted."""


@dataclass(frozen=True)
class SearchPlan:
    """A question's two searches: the good one finds only its email, the weak one a newer distractor first."""

    good: list[str]
    weak: list[str]


def search_plan(question: str) -> SearchPlan | None:
    """The good and weak keyword lists of one of this generator's questions; None for any other question."""
    for family, pattern in _QUESTION_PATTERNS:
        found = pattern.fullmatch(question)
        if found:
            return SearchPlan(good=[found.group(1), family.attribute], weak=[family.attribute])
    return None


@dataclass
class Corpus:
    """The emails (corbt/enron-emails' columns) and questions (plus ``split``) written out."""

    emails: list[dict[str, Any]]
    questions: list[dict[str, Any]]

    def split_questions(self, split: str) -> list[dict[str, Any]]:
        return [q for q in self.questions if q["split"] == split]


class _Pool:
    """Values handed out at random, each once in the whole corpus (``generate`` checks there are enough)."""

    def __init__(self, rng: random.Random, values: list[str]) -> None:
        self._values = rng.sample(values, len(values))

    def take(self, count: int = 1) -> list[str]:
        taken, self._values = self._values[:count], self._values[count:]
        return taken


def _address(rng: random.Random, taken: set[str]) -> str:
    while True:
        address = f"{rng.choice(FIRST_NAMES)}.{rng.choice(LAST_NAMES)}{rng.randint(1, 99)}@{DOMAIN}"
        if address not in taken:
            taken.add(address)
            return address


def _dates(rng: random.Random, count: int) -> list[datetime]:
    """``count`` distinct times between FIRST_DATE and the query date, ascending."""
    span = int((QUERY_DATE - FIRST_DATE).total_seconds()) - 86400
    return [FIRST_DATE + timedelta(seconds=s) for s in sorted(rng.sample(range(0, span, 60), count))]


def _email(key: str, number: int, when: datetime, sender: str, subject: str, body: str) -> dict[str, Any]:
    inbox, _, serial = key.partition("#")
    return {"message_id": f"<{serial}.{number}@{DOMAIN}>", "subject": subject, "from": sender, "to": [inbox],
            "cc": [], "bcc": [], "date": when.strftime("%Y-%m-%dT%H:%M:%S"), "body": body,
            "file_name": f"{inbox.split('@')[0]}/inbox/{number}"}


@dataclass(frozen=True)
class _Planned:
    """An email before it is dated: a family's filler (no entity) or fact (entity and number)."""

    subject: str
    body: str
    entity: str | None = None
    number: str | None = None


def _family_emails(rng: random.Random, numbers: _Pool, family: Family, entities: list[str]) -> list[_Planned]:
    """A family's filler, then one fact per entity: the order they are dated in (oldest first)."""
    rows = [_Planned(family.filler_subject, f"{family.filler} {rng.choice(CHATTER)}")]
    for entity in entities:
        (number,) = numbers.take()
        rows.append(_Planned(family.subject.format(entity=entity),
                             f"{family.fact.format(entity=entity, number=number)} {rng.choice(CHATTER)}", entity, number))
    return rows


def make_inbox(rng: random.Random, pools: tuple[_Pool, _Pool], inbox: str, serial: int, split: str,
               first_id: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One inbox's emails and questions (ids from ``first_id``): each family's filler and facts in
    date order, the families one after the other, then the entity fillers, newest of all."""
    numbers, names = pools
    families = rng.sample(FAMILIES, FAMILIES_PER_INBOX)
    entities = names.take(FAMILIES_PER_INBOX * FACTS_PER_FAMILY)
    groups = [_family_emails(rng, numbers, family, entities[i * FACTS_PER_FAMILY:(i + 1) * FACTS_PER_FAMILY])
              for i, family in enumerate(families)]
    fillers = [_Planned(subject.format(entity=group[1].entity), body.format(entity=group[1].entity))
               for group, (subject, body) in zip(groups, rng.sample(ENTITY_FILLERS, 2))]
    planned = [row for group in groups for row in group] + fillers
    # colleagues of this inbox alone: no email of one inbox equals another's (prepare drops duplicates)
    senders = [f"{rng.choice(FIRST_NAMES)}.{rng.choice(LAST_NAMES)}.{serial:04d}@{DOMAIN}" for _ in range(3)]
    key = f"{inbox}#{serial:04d}"
    emails = [_email(key, n, when, rng.choice(senders), row.subject, row.body)
              for n, (row, when) in enumerate(zip(planned, _dates(rng, len(planned))))]
    questions: list[dict[str, Any]] = []
    row = 0
    for family, group in zip(families, groups):
        for fact in group[1:-1]:  # the facts older than the family's newest
            index = row + group.index(fact)
            questions.append({"id": first_id + len(questions), "question": family.question.format(entity=fact.entity),
                              "answer": fact.number, "message_ids": [emails[index]["message_id"]],
                              "how_realistic": 1.0, "inbox_address": inbox,
                              "query_date": QUERY_DATE.strftime("%Y-%m-%d"), "split": split})
        row += len(group)
    return emails, questions


MAX_INBOXES = len(ENTITIES) // (FAMILIES_PER_INBOX * FACTS_PER_FAMILY)  # each entity named once


def generate(seed: int = 0, train_inboxes: int = 600, heldout_inboxes: int = 60, warmup_inboxes: int = 0) -> Corpus:
    """The whole corpus: ``warmup_inboxes`` inboxes for the warm-up (split WARMUP), then
    ``train_inboxes`` for the train split, then ``heldout_inboxes`` for test."""
    if (train_inboxes < 1 or heldout_inboxes < 1 or warmup_inboxes < 0
            or warmup_inboxes + train_inboxes + heldout_inboxes > MAX_INBOXES):
        raise SyntheticInboxError(f"--train_inboxes {train_inboxes} / --heldout_inboxes {heldout_inboxes} / "
                                  f"--warmup_inboxes {warmup_inboxes}: accepted: train and held-out at least 1, "
                                  f"warm-up at least 0, together at most {MAX_INBOXES}")
    rng = random.Random(seed)
    pools = _Pool(rng, [str(n) for n in range(NUMBER_LOW, NUMBER_HIGH + 1)]), _Pool(rng, list(ENTITIES))
    taken: set[str] = set()
    emails: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    splits = [WARMUP] * warmup_inboxes + ["train"] * train_inboxes + ["test"] * heldout_inboxes
    for serial, split in enumerate(splits):
        mails, asked = make_inbox(rng, pools, _address(rng, taken), serial, split, FIRST_ID + len(questions))
        emails += mails
        questions += asked
    return Corpus(emails, questions)


def inboxes(questions: list[dict[str, Any]]) -> set[str]:
    return {q["inbox_address"] for q in questions}


def leaks(corpus: Corpus) -> list[str]:
    """What of the held-out split shows in the training split (the warm-up's inboxes included): its
    inboxes, questions or answers in any training email or question; and any inbox both the
    warm-up's and the train split's. [] when the splits are clean."""
    heldout, train, warmup = (corpus.split_questions(split) for split in ("test", "train", WARMUP))
    trained = train + warmup
    test_inboxes = inboxes(heldout)
    train_text = "\n".join([json.dumps(e) for e in corpus.emails if not set(e["to"]) & test_inboxes and
                            e["from"] not in test_inboxes] + [json.dumps(q) for q in trained])
    trained_questions = {t["question"] for t in trained}
    found = [f"inbox {a} in both splits" for a in sorted(inboxes(trained) & test_inboxes)]
    found += [f"inbox {a} in both the warm-up's and the train split" for a in sorted(inboxes(warmup) & inboxes(train))]
    found += [f"question {q['id']} ({q['question']!r}) in the training split" for q in heldout
              if q["question"] in trained_questions]
    found += [f"answer {q['answer']} of question {q['id']} in the training split" for q in heldout
              if q["answer"] in train_text]
    found += [f"inbox {a} in the training split's text" for a in sorted(test_inboxes) if a in train_text]
    return found


def write(corpus: Corpus, out: Path) -> tuple[Path, Path]:
    """emails.jsonl and questions.jsonl (train and test) in ``out`` (the fixture's format: trainer.data
    prepare reads them), and the warm-up's questions if any (``write_warmup``)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "emails.jsonl", out / "questions.jsonl"
    rows = corpus.split_questions("train") + corpus.split_questions("test")
    for path, lines in zip(paths, (corpus.emails, rows)):
        write_rows(path, lines)
    if corpus.split_questions(WARMUP):
        write_warmup(corpus, out)
    return paths


def write_warmup(corpus: Corpus, out: Path) -> Path:
    """``out/warmup/questions.jsonl``: the warm-up's questions as the train split of a data dir of their
    own (prepare --data_dir ... --questions it), with the same held-out questions as test, since
    prepare needs both splits; trainer.warmup reads only the train split."""
    path = warmup_questions(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_rows(path, [{**q, "split": "train"} for q in corpus.split_questions(WARMUP)] + corpus.split_questions("test"))
    return path


def warmup_questions(out: Path) -> Path:
    """Where ``write`` puts the warm-up's questions among the files it writes in ``out``."""
    return out / WARMUP / "questions.jsonl"


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
