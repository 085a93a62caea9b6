"""trainer.data make-inboxes: synthetic inboxes whose answers need a search and a read, split by inbox."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from trainer.agent.email_db import EmailDB
from trainer.agent.scenarios import load_scenarios
from trainer.staging.synthetic_inbox import (
    FAMILIES,
    FIRST_ID,
    WARMUP,
    Corpus,
    SyntheticInboxError,
    generate,
    leaks,
    search_plan,
    write,
)

REPO = Path(__file__).resolve().parents[3]


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_inboxes(tmp_path: Path) -> None:
    first = write(generate(seed=5, train_inboxes=6, heldout_inboxes=2), tmp_path / "a")
    again = write(generate(seed=5, train_inboxes=6, heldout_inboxes=2), tmp_path / "b")
    other = write(generate(seed=6, train_inboxes=6, heldout_inboxes=2), tmp_path / "c")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]
    assert first[1].read_bytes() != other[1].read_bytes()


def test_each_answer_is_a_five_digit_number_drawn_once_and_stated_in_its_email_alone() -> None:
    corpus = generate(seed=1, train_inboxes=30, heldout_inboxes=10)
    by_id = {e["message_id"]: e for e in corpus.emails}
    answers = [q["answer"] for q in corpus.questions]
    assert len(set(answers)) == len(answers) and all(len(a) == 5 and a.isdigit() for a in answers)
    for question in corpus.questions:
        (message_id,) = question["message_ids"]
        assert question["answer"] in by_id[message_id]["body"]
        assert sum(question["answer"] in e["body"] for e in corpus.emails) == 1
    assert min(q["id"] for q in corpus.questions) == FIRST_ID  # clear of ART-E's known-bad ids


def test_no_held_out_inbox_question_or_answer_appears_in_the_training_split() -> None:
    corpus = generate(seed=2, train_inboxes=100, heldout_inboxes=20)
    train, test = corpus.split_questions("train"), corpus.split_questions("test")
    assert len(test) == 20 * 6 and len(train) == 100 * 6
    assert not {q["inbox_address"] for q in train} & {q["inbox_address"] for q in test}
    assert leaks(corpus) == []


def test_the_leak_check_finds_a_held_out_answer_planted_in_a_training_email() -> None:
    corpus = generate(seed=2, train_inboxes=5, heldout_inboxes=2)
    heldout = corpus.split_questions("test")[0]
    planted = [dict(e) for e in corpus.emails]
    training_email = next(e for e in planted if heldout["inbox_address"] not in e["to"])
    training_email["body"] += f" By the way, {heldout['answer']}."
    assert leaks(Corpus(planted, corpus.questions)) == [
        f"answer {heldout['answer']} of question {heldout['id']} in the training split"]


def test_the_good_search_finds_only_the_right_email_and_the_weak_one_a_newer_distractor_first(
        inbox_data_dir: Path) -> None:
    with EmailDB(inbox_data_dir / "enron_emails.db") as db:
        for scenario in load_scenarios(inbox_data_dir, "test", limit=None):
            plan = search_plan(scenario.question)
            def search(words: list[str], scenario=scenario) -> list:
                return db.search(inbox=scenario.inbox_address, keywords=words, sent_before=scenario.query_date)
            assert [r.message_id for r in search(plan.good)] == list(scenario.message_ids)
            weak = search(plan.weak)
            assert weak[0].message_id != scenario.message_ids[0] and scenario.message_ids[0] in {
                r.message_id for r in weak}
            distractor = db.read(weak[0].message_id)
            assert plan.weak[0] in distractor.body and distractor.date > db.read(scenario.message_ids[0]).date


def test_a_question_not_of_the_generator_has_no_search_plan() -> None:
    assert search_plan("When is Ana Ortiz's second interview?") is None
    family = FAMILIES[0]
    assert search_plan(family.question.format(entity="Amber Falcon")).good == ["Amber Falcon", family.attribute]


def test_a_questions_quoted_entity_is_the_same_tokens_as_in_the_good_searchs_json() -> None:
    """Copying the entity into the search is then copying tokens, not translating them: unquoted,
    its first word follows a space in the question and a quote in the JSON, two different tokens."""
    from trainer.staging.model_maker import train_tokenizer

    corpus = generate(seed=3, train_inboxes=40, heldout_inboxes=10)
    tokenizer = train_tokenizer([f"{e['subject']}\n{e['body']}" for e in corpus.emails], 4096)
    for question in corpus.split_questions("test"):
        entity = search_plan(question["question"]).good[0]
        in_question = tokenizer.encode(question["question"]).tokens
        in_search = tokenizer.encode(json.dumps({"keywords": search_plan(question["question"]).good})).tokens
        opens = next(i for i, t in enumerate(in_question) if t.endswith('"')) + 1
        closes = next(i for i, t in enumerate(in_question) if i >= opens and t.startswith('"'))
        entity_tokens = in_question[opens:closes]
        assert "".join(entity_tokens).replace("Ġ", " ") == entity
        assert any(in_search[i:i + len(entity_tokens)] == entity_tokens for i in range(len(in_search)))


def test_inboxes_given_to_the_warm_up_leave_every_email_and_held_out_question_as_they_were() -> None:
    """So a run with a warm-up share validates on the very questions a run without one did."""
    whole = generate(seed=7, train_inboxes=8, heldout_inboxes=2)
    shared = generate(seed=7, train_inboxes=5, heldout_inboxes=2, warmup_inboxes=3)
    assert shared.emails == whole.emails and shared.split_questions("test") == whole.split_questions("test")
    assert [q["id"] for q in shared.split_questions(WARMUP) + shared.split_questions("train")] == [
        q["id"] for q in whole.split_questions("train")]
    warmup, train = ({q["inbox_address"] for q in shared.split_questions(split)} for split in (WARMUP, "train"))
    assert len(warmup) == 3 and len(train) == 5 and not warmup & train and leaks(shared) == []


def test_the_leak_check_finds_an_inbox_of_both_the_warm_up_and_the_train_split() -> None:
    corpus = generate(seed=2, train_inboxes=3, heldout_inboxes=1, warmup_inboxes=2)
    warm_inbox = corpus.split_questions(WARMUP)[0]["inbox_address"]
    moved = [{**q, "inbox_address": warm_inbox} if q["split"] == "train" and i % 6 == 0 else q
             for i, q in enumerate(corpus.questions)]
    assert leaks(Corpus(corpus.emails, moved)) == [f"inbox {warm_inbox} in both the warm-up's and the train split"]


def test_the_warm_ups_questions_stage_as_a_data_dir_whose_train_split_no_run_trains_on(tmp_path: Path) -> None:
    from trainer.data import main as data_main

    inboxes = tmp_path / "inboxes"
    assert data_main(["make-inboxes", str(inboxes), "--seed", "4", "--train_inboxes", "3", "--heldout_inboxes", "1",
                      "--warmup_inboxes", "2"]) == 0
    for data, questions in ((tmp_path / "data", inboxes / "questions.jsonl"),
                            (tmp_path / "warmup-data", inboxes / WARMUP / "questions.jsonl")):
        assert data_main(["prepare", "--data_dir", str(data), "--emails", str(inboxes / "emails.jsonl"),
                          "--questions", str(questions), "--quiet"]) == 0
    def split(data: str, name: str) -> list:
        return load_scenarios(tmp_path / data, name, limit=None, shuffle=False)
    assert (len(split("data", "train")), len(split("warmup-data", "train"))) == (18, 12)
    assert not {s.inbox_address for s in split("data", "train")} & {s.inbox_address for s in split("warmup-data", "train")}
    assert split("warmup-data", "test") == split("data", "test")  # prepare needs a test split: the same held-out one


@pytest.mark.parametrize("args", [["--train_inboxes", "0"], ["--heldout_inboxes", "780"], ["--warmup_inboxes", "-1"],
                                  ["--warmup_inboxes", "720"]])
def test_bad_sizes_are_one_line_errors_with_exit_2_and_nothing_written(tmp_path: Path, args: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "trainer.data", "make-inboxes", str(tmp_path / "out"), *args],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "accepted: train and held-out at least 1, warm-up at least 0, together at most 780" in result.stderr
    assert not (tmp_path / "out").exists()


def test_make_inboxes_writes_files_prepare_stages(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "trainer.data", "make-inboxes", str(tmp_path), "--seed", "4",
                             "--train_inboxes", "3", "--heldout_inboxes", "1"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "18 train, 6 test questions" in result.stdout and "0 held-out inboxes, questions or answers" in result.stdout
    rows = [json.loads(line) for line in (tmp_path / "questions.jsonl").read_text().splitlines()]
    assert {row["split"] for row in rows} == {"train", "test"}
