"""trainer.agent.scenarios: the Scenario record and load_scenarios' filtering, shuffling and errors."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.trainer.conftest import FIXTURE_QUESTIONS, fixture_rows
from trainer.agent.email_db import EmailDB
from trainer.agent.scenarios import KNOWN_BAD_IDS, Scenario, load_scenarios, scenario_file

QUESTIONS = fixture_rows(FIXTURE_QUESTIONS)


def test_known_bad_ids_are_arte_s_list() -> None:
    assert KNOWN_BAD_IDS == frozenset({49, 101, 129, 171, 208, 266, 327})


@pytest.mark.parametrize("split", ["train", "test"])
def test_known_bad_questions_are_left_out(art_e_data_dir: Path, split: str) -> None:
    in_file = {q["id"] for q in QUESTIONS if q["split"] == split}
    loaded = {s.id for s in load_scenarios(art_e_data_dir, split, max_messages=None)}
    assert in_file & KNOWN_BAD_IDS  # the fixture has some in each split
    assert loaded == in_file - KNOWN_BAD_IDS


def test_max_messages_keeps_questions_answered_by_that_many_emails_or_fewer(art_e_data_dir: Path) -> None:
    every = load_scenarios(art_e_data_dir, "train", max_messages=None)
    single = load_scenarios(art_e_data_dir, "train", max_messages=1)
    assert {len(s.message_ids) for s in every} == {1, 2}
    assert {s.id for s in single} == {s.id for s in every if len(s.message_ids) == 1}
    assert {s.id for s in load_scenarios(art_e_data_dir, "train", max_messages=2)} == {s.id for s in every}


def test_the_default_is_single_email_questions(art_e_data_dir: Path) -> None:
    assert all(len(s.message_ids) == 1 for s in load_scenarios(art_e_data_dir, "train"))


def test_shuffling_is_random_random_of_the_seed_over_file_order(art_e_data_dir: Path) -> None:
    in_order = load_scenarios(art_e_data_dir, "train", shuffle=False)
    expected = list(in_order)
    random.Random(7).shuffle(expected)
    assert load_scenarios(art_e_data_dir, "train", seed=7) == expected
    assert load_scenarios(art_e_data_dir, "train", seed=7) == load_scenarios(art_e_data_dir, "train", seed=7)
    assert load_scenarios(art_e_data_dir, "train", seed=7) != load_scenarios(art_e_data_dir, "train", seed=8)


def test_without_shuffle_the_file_order_is_kept(art_e_data_dir: Path) -> None:
    in_file = [q["id"] for q in QUESTIONS if q["split"] == "train" and q["id"] not in KNOWN_BAD_IDS
               and len(q["message_ids"]) == 1]
    assert [s.id for s in load_scenarios(art_e_data_dir, "train", shuffle=False)] == in_file


def test_limit_cuts_the_shuffled_list(art_e_data_dir: Path) -> None:
    full = load_scenarios(art_e_data_dir, "train")
    assert load_scenarios(art_e_data_dir, "train", limit=3) == full[:3]
    assert load_scenarios(art_e_data_dir, "train", limit=0) == []
    assert load_scenarios(art_e_data_dir, "train", limit=1000) == full


def test_scenarios_carry_their_split_and_typed_fields(art_e_data_dir: Path) -> None:
    for split in ("train", "test"):
        for s in load_scenarios(art_e_data_dir, split, max_messages=None):
            assert s.split == split
            assert isinstance(s.message_ids, tuple) and isinstance(s.how_realistic, float)
            assert len(s.query_date) == 10 and s.inbox_address.endswith("@enron.com")


def test_every_fixture_answer_is_an_email_in_the_scenarios_inbox(art_e_data_dir: Path, email_db: EmailDB) -> None:
    for split in ("train", "test"):
        for s in load_scenarios(art_e_data_dir, split, max_messages=None):
            for message_id in s.message_ids:
                email = email_db.read(message_id)
                assert email is not None, (s.id, message_id)
                assert s.inbox_address in [email.from_address] + email.to_addresses + email.cc_addresses + \
                    email.bcc_addresses
                assert email.date[:10] < s.query_date


def test_the_scenarios_fixture_is_the_default_train_list(art_e_data_dir: Path, scenarios: list[Scenario]) -> None:
    assert scenarios == load_scenarios(art_e_data_dir, "train") and scenarios


def test_a_bad_split_lists_the_accepted_ones(art_e_data_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"'train', 'test'.*'validation'"):
        load_scenarios(art_e_data_dir, "validation")


@pytest.mark.parametrize("kwargs, message", [({"limit": -1}, "limit"), ({"limit": True}, "limit"),
                                             ({"max_messages": 0}, "max_messages")])
def test_bad_limits_are_errors_naming_the_argument(art_e_data_dir: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_scenarios(art_e_data_dir, "train", **kwargs)


def test_a_missing_scenario_file_names_it_and_the_prepare_command(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"train\.jsonl.*python -m trainer\.data prepare"):
        load_scenarios(tmp_path, "train")


def test_a_malformed_line_names_the_file_and_line(art_e_data_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(art_e_data_dir / "scenarios", tmp_path / "scenarios")
    path = scenario_file(tmp_path, "test")
    lines = path.read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "message_ids": "<just one>"})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:3: message_ids must be a list"):
        load_scenarios(tmp_path, "test")
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"test\.jsonl:1"):
        load_scenarios(tmp_path, "test")


def test_a_scenario_round_trips_through_its_row() -> None:
    row = QUESTIONS[0]
    scenario = Scenario.from_row(row, row["split"])
    assert Scenario.from_row(scenario.to_row(), scenario.split) == scenario
    assert json.loads(json.dumps(scenario.to_row())) == {**row}


@pytest.mark.parametrize("change, message", [
    ({"id": "3"}, "id must be an integer"), ({"how_realistic": "high"}, "how_realistic must be a number"),
    ({"question": None}, "missing field.*question"), ({"message_ids": [1, 2]}, "message_ids must be a list of strings"),
])
def test_a_malformed_question_row_names_the_field(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Scenario.from_row({**QUESTIONS[0], **change}, "train")


def test_a_date_typed_query_date_becomes_iso_text() -> None:
    from datetime import date

    assert Scenario.from_row({**QUESTIONS[0], "query_date": date(2001, 5, 23)}, "train").query_date == "2001-05-23"
