"""The reward bands of ART-E's shaping, their boundaries, and the rubric's metrics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.agent.reward import Rubric, compute_reward, partial_credit, reward_before_ruler

MAX_TURNS = 10


def all_partial_credit(**fields) -> Rubric:
    """A rubric that earned all four partial credits (0.4)."""
    return Rubric(ever_found_right_email=True, ever_read_right_email=True, sources_correct=True, **fields)


def no_partial_credit(**fields) -> Rubric:
    """A rubric that earned no partial credit (it even tried to read a missing email)."""
    return Rubric(ever_tried_to_read_invalid_email=True, **fields)


def test_partial_credit_is_a_tenth_per_signal_and_at_most_four_tenths():
    assert partial_credit(no_partial_credit()) == 0
    assert partial_credit(Rubric()) == pytest.approx(0.1)  # never tried an invalid email
    assert partial_credit(Rubric(ever_found_right_email=True)) == pytest.approx(0.2)
    assert partial_credit(all_partial_credit()) == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("flag", "floor"),
    [("cant_parse_tool_call", -2.0), ("bad_tool_call_name", -1.9), ("bad_tool_call_args", -1.8)],
)
def test_formatting_errors_score_their_floor_plus_partial_credit(flag, floor):
    assert compute_reward(no_partial_credit(**{flag: True}), MAX_TURNS) == pytest.approx(floor)
    assert compute_reward(all_partial_credit(**{flag: True}), MAX_TURNS) == pytest.approx(floor + 0.4)


def test_worst_formatting_error_wins_when_several_are_flagged():
    rubric = no_partial_credit(cant_parse_tool_call=True, bad_tool_call_name=True, bad_tool_call_args=True)
    assert compute_reward(rubric, MAX_TURNS) == pytest.approx(-2.0)
    rubric = no_partial_credit(bad_tool_call_name=True, bad_tool_call_args=True)
    assert compute_reward(rubric, MAX_TURNS) == pytest.approx(-1.9)


def test_formatting_error_outranks_a_correct_answer():
    rubric = all_partial_credit(attempted_answer=True, answer_correct=True, bad_tool_call_args=True, num_sources=1)
    assert compute_reward(rubric, MAX_TURNS) == pytest.approx(-1.4)


def test_wrong_answer_scores_minus_one_plus_partial_credit():
    assert compute_reward(no_partial_credit(attempted_answer=True), MAX_TURNS) == pytest.approx(-1.0)
    assert compute_reward(all_partial_credit(attempted_answer=True), MAX_TURNS) == pytest.approx(-0.6)


def test_failed_judge_counts_the_answer_as_wrong():
    rubric = Rubric(attempted_answer=True, judge_failed=True, ever_found_right_email=True)
    assert compute_reward(rubric, MAX_TURNS) == pytest.approx(-0.8)


@pytest.mark.parametrize("outcome", ["returned_i_dont_know", "ran_out_of_turns"])
def test_no_answer_scores_zero_plus_partial_credit(outcome):
    extra = {"attempted_answer": True} if outcome == "returned_i_dont_know" else {}
    assert compute_reward(no_partial_credit(**{outcome: True}, **extra), MAX_TURNS) == pytest.approx(0.0)
    assert compute_reward(all_partial_credit(**{outcome: True}, **extra), MAX_TURNS) == pytest.approx(0.4)


def test_correct_answer_adds_sources_few_sources_and_speed_bonuses():
    rubric = Rubric(attempted_answer=True, answer_correct=True, sources_correct=True, num_sources=2, num_turns=3)
    # 1 + 0.3 (right source) + 0.1/2 (two sources) + 0.1 * (1 - 3/10)
    assert compute_reward(rubric, MAX_TURNS) == pytest.approx(1.42)


def test_correct_answer_band_bottom_is_exactly_one():
    rubric = Rubric(attempted_answer=True, answer_correct=True, num_sources=0, num_turns=MAX_TURNS)
    assert compute_reward(rubric, MAX_TURNS) == pytest.approx(1.0)


def test_correct_answer_band_top_stays_below_two():
    rubric = Rubric(attempted_answer=True, answer_correct=True, sources_correct=True, num_sources=1, num_turns=1)
    assert compute_reward(rubric, MAX_TURNS) == pytest.approx(1.49)


def test_ruler_provisional_reward_is_neutral_for_answers_and_keeps_format_penalties():
    answered = all_partial_credit(attempted_answer=True)
    assert reward_before_ruler(answered) == pytest.approx(0.4)
    assert reward_before_ruler(no_partial_credit(bad_tool_call_name=True)) == pytest.approx(-1.9)


def test_metrics_are_numbers_with_bools_as_zero_or_one():
    metrics = Rubric(bad_tool_call_args=True, judge_failed=True, num_turns=4, prompt_tokens=120).metrics()
    assert metrics["bad_tool_call_args"] == 1 and metrics["answer_correct"] == 0
    assert metrics["failed_format_validation"] == 1
    assert metrics["judge_failed"] == 1
    assert metrics["num_turns"] == 4 and metrics["prompt_tokens"] == 120
    assert all(type(value) in (int, float) for value in metrics.values())


def test_metrics_report_no_format_failure_for_a_clean_rollout():
    assert Rubric(attempted_answer=True).metrics()["failed_format_validation"] == 0


rubrics = st.builds(
    Rubric,
    answer_correct=st.booleans(),
    sources_correct=st.booleans(),
    num_turns=st.integers(1, MAX_TURNS),
    attempted_answer=st.booleans(),
    ever_found_right_email=st.booleans(),
    ever_read_right_email=st.booleans(),
    cant_parse_tool_call=st.booleans(),
    bad_tool_call_name=st.booleans(),
    bad_tool_call_args=st.booleans(),
    ran_out_of_turns=st.booleans(),
    returned_i_dont_know=st.booleans(),
    num_sources=st.integers(0, 5),
    ever_tried_to_read_invalid_email=st.booleans(),
    judge_failed=st.booleans(),
)


@given(rubrics)
def test_reward_always_lands_in_the_band_of_its_outcome(rubric):
    reward = compute_reward(rubric, MAX_TURNS)
    if rubric.failed_format_validation:
        assert -2 <= reward < -1
    elif rubric.attempted_answer and not rubric.returned_i_dont_know and not rubric.answer_correct:
        assert -1 <= reward < 0
    elif rubric.answer_correct:
        assert 1 <= reward < 2
    else:
        assert 0 <= reward < 1
