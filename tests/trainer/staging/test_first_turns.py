"""trainer.staging.first_turns: which kind of first turn a warmed model makes on held-out inbox questions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.data import main as data_main
from trainer.staging.first_turns import FirstTurns, held_out, kind_of
from trainer.staging.synthetic_inbox import SearchPlan, search_plan

REPO = Path(__file__).resolve().parents[3]
PLAN = SearchPlan(good=["Misty Condor", "ticket"], weak=["ticket"])


def search(*words: str) -> dict:
    return {"name": "search_emails", "arguments": {"keywords": list(words)}}


def test_a_first_turn_is_good_only_with_the_entity_and_the_familys_word_in_any_order_or_case() -> None:
    assert kind_of(search("ticket", "misty condor"), PLAN) == "good"
    assert kind_of(search("Ticket"), PLAN) == "weak"
    assert kind_of(search("Misty Condor"), PLAN) == "other search"
    assert kind_of(search("Misty Condor", "ticket", "order"), PLAN) == "other search"
    assert kind_of({"name": "read_email", "arguments": {"message_id": "<x>"}}, PLAN) == "other call"
    assert kind_of({"name": "search_emails", "arguments": "ticket"}, PLAN) == "other call"
    assert kind_of(None, PLAN) == "no tool call"


def test_the_line_gives_each_kinds_share_of_the_questions() -> None:
    found = FirstTurns("model", 100, 1.0, {"weak": 77, "other search": 19, "no tool call": 4})
    assert found.share("good") == 0.0 and found.share("weak") == 0.77
    assert found.line() == ("first turns of model on 100 held-out questions at temperature 1: weak 77.0%, "
                            "other search 19.0%, no tool call 4.0%")


def test_the_held_out_questions_are_the_test_splits_first_in_file_order(inbox_data_dir: Path) -> None:
    first, again = held_out(inbox_data_dir, 5), held_out(inbox_data_dir, 5)
    assert [s.id for s in first] == [s.id for s in again] and len(first) == 5
    assert all(s.split == "test" and search_plan(s.question) is not None for s in first)


def test_the_training_questions_can_be_asked_instead_and_the_line_says_which(inbox_data_dir: Path) -> None:
    train = held_out(inbox_data_dir, 5, "train")
    assert len(train) == 5 and all(s.split == "train" for s in train)
    assert not {s.id for s in train} & {s.id for s in held_out(inbox_data_dir, 5)}
    assert FirstTurns("m", 5, 1.0, {"good": 5}, "train").line() == (
        "first turns of m on 5 training questions at temperature 1: good 100.0%")


@pytest.fixture(scope="module")
def inbox_model(tmp_path_factory: pytest.TempPathFactory, inbox_data_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("inbox-model") / "model"
    assert data_main(["make-model", str(out), "--size", "tiny", "--data_dir", str(inbox_data_dir)]) == 0
    return out


@pytest.mark.parametrize("args, expected", [(["--questions", "0"], "invalid --questions 0"),
                                            (["--temperature", "-1"], "--temperature -1"),
                                            (["--model_is_missing"], "")])
def test_bad_input_is_a_one_line_error_with_exit_2(tmp_path: Path, inbox_data_dir: Path, args: list[str],
                                                   expected: str) -> None:
    model = tmp_path / "no-model"
    argv = [str(model), "--data_dir", str(inbox_data_dir)] + ([] if args == ["--model_is_missing"] else args)
    if args != ["--model_is_missing"]:
        model.mkdir()
        (model / "config.json").write_text("{}")
    result = subprocess.run([sys.executable, "-m", "trainer.staging.first_turns", *argv], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and (expected or f"invalid model {str(model)!r}") in last



COMMAND_AND_BATCHES = """
import sys
from pathlib import Path
from trainer.agent.rollout import AgentConfig
from trainer.staging import first_turns
from trainer.staging.scripted_moves import opening
model, data, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
assert first_turns.main([str(model), "--data_dir", str(data), "--questions", "3", "--out", out]) == 0
prompts = [opening(s, AgentConfig(max_turns=4)) for s in first_turns.held_out(data, 5)]
together = first_turns.generated(model, prompts, 0.0, 0)
first_turns.BATCH = 1
print(sum(a == b for a, b in zip(together, first_turns.generated(model, prompts, 0.0, 0))), len(prompts))
"""


def test_the_command_counts_each_questions_first_turn_generated_together_as_each_alone(
        inbox_model: Path, inbox_data_dir: Path, tmp_path: Path, backend_python: Path) -> None:
    """The counts add up to the questions and go to --out as JSON; left padding: a batch's turns are
    read from where each prompt ends, so greedy turns generated together equal those made one by one."""
    out = tmp_path / "first_turns.json"
    result = subprocess.run([str(backend_python), "-c", COMMAND_AND_BATCHES, str(inbox_model), str(inbox_data_dir),
                             str(out)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(out.read_text())
    assert found["questions"] == 3 and sum(found["counts"].values()) == 3 and found["temperature"] == 1.0
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("first turns of model on 3 held-out questions at temperature 1: ")
    assert lines[-1] == "5 5"
