"""bench/trainer_cost.py's parts: the scripted rollout, both sides run short, and the work check.

The figures themselves are the bench's to measure (no timing is asserted here): these tests check
that each side yields one, and that both trained on the same scenarios, rollout for rollout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import trainer_cost
from bench.trainer_cost import Bench, Side, check_same_work, policy_and_judge
from tests.doubles.art_backend import read_train_log
from trainer.proof.workspace import ProofFailed


def test_every_rollout_of_the_script_searches_reads_then_answers_something_new() -> None:
    respond = policy_and_judge(0.0, 0.0)
    conversation = [{"role": "system", "content": "You are an email search agent."},
                    {"role": "user", "content": "Where is the research group offsite?"}]
    search = respond({"model": "agent@0", "messages": conversation})
    found = [{"message_id": "<42@enron>", "snippet": "offsite"}]
    read = respond({"model": "agent@0", "messages": [*conversation, {"role": "assistant", "content": ""},
                                                     {"role": "tool", "content": json.dumps(found)}]})
    answer = respond({"model": "agent@0", "messages": [*conversation, {"role": "assistant", "content": ""},
                                                       {"role": "tool", "content": json.dumps(found)},
                                                       {"role": "assistant", "content": ""},
                                                       {"role": "tool", "content": "{}"}]})

    calls = [(reply.tool_calls[0].name, json.loads(reply.tool_calls[0].arguments)) for reply in (search, read, answer)]
    assert calls[0] == ("search_emails", {"keywords": ["research"]})
    assert calls[1] == ("read_email", {"message_id": "<42@enron>"})
    assert calls[2][0] == "return_final_answer" and calls[2][1]["sources"] == ["<42@enron>"]
    again = respond({"model": "agent@0", "messages": [*conversation, {"role": "assistant", "content": ""},
                                                      {"role": "tool", "content": "[]"},
                                                      {"role": "assistant", "content": ""},
                                                      {"role": "tool", "content": "{}"}]})
    assert json.loads(again.tool_calls[0].arguments)["answer"] != calls[2][1]["answer"], "the judge cache never answers"
    verdict = respond({"model": trainer_cost.JUDGE, "messages": []})
    assert json.loads(verdict.content)["accept"] is True


def test_both_sides_give_a_figure_for_the_same_rollouts_of_the_same_scenarios(tmp_path: Path) -> None:
    [(ours, theirs)] = trainer_cost.measure(tmp_path, Bench(steps=2, turn_seconds=0.001, judge_seconds=0.0))

    assert ours.rollouts == theirs.rollouts == [12, 12], "3 groups of 4 a step"
    assert ours.scenarios == theirs.scenarios and len(set(ours.scenarios[0])) == 3
    assert ours.objectives == theirs.objectives and '"loss_fn": "ppo"' in ours.objectives[0], "the config's loss, not ART's cispo"
    assert trainer_cost.rollouts_per_second([ours]) > 0 and trainer_cost.rollouts_per_second([theirs]) > 0
    for side in ("trainer_side-1", "loop_side-1"):
        trained = [t for record in read_train_log(tmp_path / side / "art") for group in record["metadata"] for t in group]
        assert len(trained) == 24
        assert all(t["final_answer"].startswith("answer ") and not t["judge_failed"] for t in trained), side


def side(rollouts: list[int], scenarios: list[list[int]]) -> Side:
    return Side("a side", rollouts, scenarios, [1.0] * len(rollouts))


def test_sides_that_did_different_work_are_not_compared_and_the_error_shows_both() -> None:
    check_same_work(side([12, 12], [[1, 2, 3]] * 2), side([12, 12], [[1, 2, 3]] * 2), 2)

    with pytest.raises(ProofFailed, match=r"unequal work: trainer.train trained \[12, 12\].*minimal loop \[12, 8\]"):
        check_same_work(side([12, 12], [[1, 2, 3]] * 2), side([12, 8], [[1, 2, 3], [1, 2]]), 2)
    with pytest.raises(ProofFailed, match="on scenarios"):
        check_same_work(side([12, 12], [[1, 2, 3]] * 2), side([12, 12], [[1, 2, 3], [3, 2, 1]]), 2)
    with pytest.raises(ProofFailed, match="wanted 3 steps each"):
        check_same_work(side([12, 12], [[1, 2, 3]] * 2), side([12, 12], [[1, 2, 3]] * 2), 3)
    ppo, cispo = '{"loss_fn": "ppo"}', '{"loss_fn": "cispo"}'
    with pytest.raises(ProofFailed, match="unequal objectives"):
        check_same_work(Side("a", [12], [[1]], [1.0], (ppo,)), Side("b", [12], [[1]], [1.0], (cispo,)), 1)


def test_the_figures_leave_each_runs_first_step_out() -> None:
    runs = [Side("a", [12, 12, 12], [], [9.0, 1.0, 2.0]), Side("b", [12, 12], [], [9.0, 3.0])]

    assert trainer_cost.rollouts_per_second(runs) == 36 / 6
    assert trainer_cost.median_step(runs) == 2.0


@pytest.mark.parametrize("argv, named", [(["--steps", "1"], "--steps: 1"), (["--rounds", "0"], "--rounds: 0")])
def test_too_few_steps_or_rounds_are_refused_naming_the_value(argv: list[str], named: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        trainer_cost.parse_args(argv)
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_a_work_folder_with_something_in_it_is_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "old-run").mkdir()
    with pytest.raises(SystemExit) as exit_:
        trainer_cost.parse_args(["--work", str(tmp_path)])
    assert exit_.value.code == 2 and f"{tmp_path} is not empty" in capsys.readouterr().err
