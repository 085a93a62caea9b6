"""hpc.run.decline: the rule on the learning curve's recorded validations (docs/results), which rose
and then fell: the defaults act on both falls and on no plateau or control point."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hpc.run import ledger
from hpc.run.decline import Decisions, DeclineSettings, judge, to_act_on
from hpc.run.ledger import Decline
from hpc.run.rundir import RunDir
from hpc.run.steps import Step

RECORDS = Path(__file__).resolve().parents[3] / "docs/results/learning_curve_runs/2026-11-27-2xH100-copy-lesson"


def validations(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RECORDS / name / "validation.jsonl").read_text().splitlines()]


def first_decline(name: str, settings: DeclineSettings) -> int | None:
    """The step of the first validation at which the rule judges the recorded run declining."""
    records = validations(name)
    for count in range(1, len(records) + 1):
        verdict = judge(records[:count], [], settings)
        if verdict is not None:
            return verdict.latest.step
    return None


@pytest.mark.parametrize("name, step", [("seed1", 52), ("seed2", 60), ("control", None)])
def test_the_defaults_act_at_each_recorded_falls_second_validation_below_and_never_on_noise(
        name: str, step: int | None) -> None:
    assert first_decline(name, DeclineSettings()) == step


def test_one_validation_below_is_not_enough_seed_1s_plateau_dipped_7_7_points_and_came_back() -> None:
    assert first_decline("seed1", DeclineSettings(validations=1)) == 28, "a single dip would have acted"


def test_the_verdict_names_the_best_step_and_how_far_below() -> None:
    verdict = judge(validations("seed1")[:14], [], DeclineSettings())
    assert verdict is not None
    assert (verdict.best.step, verdict.latest.step, verdict.streak) == (20, 52, 2)
    assert verdict.reason() == ("held-out accuracy 70.3% at step 52 is 27.7 points below the best, step 20 (98.0%), "
                                "for 2 validation(s) in a row")


def steps_with_spread(last: int, spread: float, count: int) -> list[Step]:
    end = datetime(2026, 11, 27, tzinfo=timezone.utc)
    return [Step(s, "1", end + timedelta(minutes=s), end + timedelta(minutes=s, seconds=30), 30.0, spread, -1.7)
            for s in range(last - count + 1, last + 1)]


def test_collapsed_and_below_the_best_acts_at_the_first_validation_below() -> None:
    records = validations("seed2")[:15]  # through step 56: 10 points below the best (99.0% at step 52)
    assert judge(records, [], DeclineSettings()) is None
    verdict = judge(records, steps_with_spread(56, 0.0, 10), DeclineSettings())
    assert verdict is not None and verdict.collapsed and verdict.latest.step == 56
    assert judge(records, steps_with_spread(56, 0.0, 10), DeclineSettings(on_collapse=False)) is None


def test_a_collapse_at_the_best_is_no_decline() -> None:
    assert judge(validations("seed2")[:14], steps_with_spread(52, 0.0, 10), DeclineSettings()) is None


def test_after_a_rollback_only_later_validations_count_towards_the_streak() -> None:
    records = validations("seed1")[:14]
    assert judge(records, [], DeclineSettings(), since_step=48) is None, "one validation since the rollback"


def test_continue_acts_once_per_declining_episode_stop_and_rollback_at_each_verdict() -> None:
    records = validations("seed1")[:15]  # steps 52 and 56 are both declining
    assert to_act_on(records[:14], [], DeclineSettings()) is not None
    assert to_act_on(records, [], DeclineSettings()) is None, "continue: recorded at step 52 already"
    assert to_act_on(records, [], DeclineSettings(action="stop")) is not None


def test_the_decisions_read_back_give_the_scale_the_last_rollback_left_and_its_step(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    assert (Decisions.read(run).lr_scale, Decisions.read(run).since_step) == (1.0, -1)
    for number, (step, scale) in enumerate([(52, 0.5), (72, 0.25)], 1):
        ledger.append(run, Decline(action="rollback", step=step, accuracy=0.7, best_step=20, best_accuracy=0.98,
                                   reason="r", rollback=number, to_step=step + 1, lr_scale=scale))
    decisions = Decisions.read(run)
    assert (decisions.lr_scale, decisions.since_step, len(decisions.rollbacks)) == (0.25, 72, 2)
    assert decisions.summary().startswith("ROLLED BACK at step 72 to step 20 as step 73, lr x0.25 (rollback 2)")
    line = json.loads(run.ledger.read_text().splitlines()[-1])
    assert (line["event"], line["best_accuracy"], "steps_left" in line) == ("decline", 0.98, False)
