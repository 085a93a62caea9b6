"""What happened in one rollout (the Rubric) and the reward it earns.

The shaping is ART-E's: GRPO only compares rewards inside a group, so the bands
are ordered by how much we prefer each outcome, and small partial credits break
ties inside a band without ever crossing into the next one:

    formatting error        -2 .. -1   (can't parse -2, bad tool name -1.9, bad args -1.8, + partial)
    wrong answer            -1 .. 0    (-1 + partial)
    no answer               0 .. 1     ("I don't know" or out of turns: 0 + partial)
    correct answer          1 .. 2     (1 + 0.3 sources + 0.1/num_sources + 0.1 * speed)

Partial credit (at most 0.4, so a band is never left) is 0.1 each for: found
the right email in a search, read it, never tried to read a missing email,
cited it as a source.

A judge that failed leaves ``answer_correct`` False: the answer lands in the
wrong-answer band, and ``judge_failed`` flags the trajectory in its metrics.

Everything here is pure: no I/O, no model calls.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

PARTIAL_CREDIT = 0.1
CANT_PARSE_TOOL_CALL = -2.0
BAD_TOOL_CALL_NAME = -1.9
BAD_TOOL_CALL_ARGS = -1.8
WRONG_ANSWER = -1.0
NO_ANSWER = 0.0
CORRECT_ANSWER = 1.0
CORRECT_SOURCES_BONUS = 0.3
FEW_SOURCES_BONUS = 0.1
SPEED_BONUS = 0.1


@dataclass
class Rubric:
    """Facts about one rollout, filled in by the tools and the rollout loop.

    Mutable on purpose: the tool executor and the loop tick boxes as the
    conversation goes; the reward is computed once at the end.
    """

    answer_correct: bool = False
    sources_correct: bool = False
    num_turns: int = 0
    attempted_answer: bool = False
    ever_found_right_email: bool = False
    ever_read_right_email: bool = False
    cant_parse_tool_call: bool = False
    bad_tool_call_name: bool = False
    bad_tool_call_args: bool = False
    ran_out_of_turns: bool = False
    returned_i_dont_know: bool = False
    num_sources: int = 0
    ever_tried_to_read_invalid_email: bool = False
    judge_failed: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def failed_format_validation(self) -> bool:
        """Any of the three formatting errors: the rollout stopped on a malformed turn."""
        return self.cant_parse_tool_call or self.bad_tool_call_name or self.bad_tool_call_args

    def metrics(self) -> dict[str, float]:
        """Every field as a number (bools as 0/1), plus failed_format_validation.

        ART averages trajectory metrics per step, so booleans become rates.
        """
        values: dict[str, float] = {key: _number(value) for key, value in asdict(self).items()}
        values["failed_format_validation"] = _number(self.failed_format_validation)
        return values


def _number(value: bool | int | float) -> float:
    return float(value) if isinstance(value, float) else int(value)


def partial_credit(rubric: Rubric) -> float:
    """Progress signals worth up to 0.4: enough to rank, never enough to change band."""
    earned = [
        rubric.ever_found_right_email,
        rubric.ever_read_right_email,
        not rubric.ever_tried_to_read_invalid_email,
        rubric.sources_correct,
    ]
    return PARTIAL_CREDIT * sum(earned)


def formatting_penalty(rubric: Rubric) -> float | None:
    """The band floor of a formatting error, worst first; None when the format was fine."""
    if rubric.cant_parse_tool_call:
        return CANT_PARSE_TOOL_CALL
    if rubric.bad_tool_call_name:
        return BAD_TOOL_CALL_NAME
    if rubric.bad_tool_call_args:
        return BAD_TOOL_CALL_ARGS
    return None


def compute_reward(rubric: Rubric, max_turns: int) -> float:
    """ART-E's shaped reward for a rollout whose answer (if any) the judge has checked."""
    partial = partial_credit(rubric)
    penalty = formatting_penalty(rubric)
    if penalty is not None:
        return penalty + partial
    if rubric.attempted_answer and not rubric.returned_i_dont_know and not rubric.answer_correct:
        return WRONG_ANSWER + partial
    if rubric.answer_correct:
        return correct_answer_reward(rubric, max_turns)
    # "I don't know", out of turns, or (defensively) no outcome recorded at all.
    return NO_ANSWER + partial


def correct_answer_reward(rubric: Rubric, max_turns: int) -> float:
    """1..2: a correct answer is rewarded for citing the right email, citing few, and speed."""
    reward = CORRECT_ANSWER
    if rubric.sources_correct:
        reward += CORRECT_SOURCES_BONUS
    if rubric.num_sources > 0:
        reward += FEW_SOURCES_BONUS / rubric.num_sources
    turns_used = min(max(rubric.num_turns, 0), max_turns)
    reward += SPEED_BONUS * (1 - turns_used / max_turns)
    return reward


def reward_before_ruler(rubric: Rubric) -> float:
    """The provisional reward of a rollout whose answer nobody has checked (reward=ruler).

    RULER replaces it with its relative score and ART keeps it as
    metrics["independent_reward"]. Without a verdict on the answer we cannot
    say right or wrong, so an answered rollout sits in the neutral band
    (0 + partial), like "I don't know"; formatting errors keep their
    penalties. If RULER fails for a group, the group is dropped from the step
    (ruler_score_group returns None), so this value never trains alone.
    """
    partial = partial_credit(rubric)
    penalty = formatting_penalty(rubric)
    return (penalty if penalty is not None else NO_ANSWER) + partial
