"""hpc/run/health.py: STALLED (a running job that makes no step) and COLLAPSED (no reward spread)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hpc.run.health import FlagKind, HealthSettings, SettingError, check, collapsed, stalled
from hpc.run.rundir import RunDir
from hpc.run.steps import Step, trained_steps
from hpc.slurm.states import JobState

REPO = Path(__file__).resolve().parents[3]

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=timezone.utc)
DEFAULT = HealthSettings()


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def steps(job: str, *spans: tuple[float, float], spread: float | None = 0.4, first: int = 1) -> list[Step]:
    return [Step(first + k, job, t(a), t(b), b - a, spread) for k, (a, b) in enumerate(spans)]


EVERY_100S = steps("9", *((100 * k, 100 * k + 90) for k in range(1, 6)))  # ends at 590; usual step 90 s


def test_a_running_job_is_stalled_after_3x_its_usual_step_without_a_step():
    assert stalled(EVERY_100S, [], "9", t(0), t(590 + 270), DEFAULT) is None
    flag = stalled(EVERY_100S, [], "9", t(0), t(590 + 271), DEFAULT)
    assert flag is not None and flag.kind == "stalled"
    assert flag.message == "STALLED: no step for 4m31s (limit 4m30s: 3x the usual step of 1m30s)"


def test_the_usual_step_is_the_median_of_recent_steps_so_one_slow_step_does_not_hide_a_stall():
    history = steps("9", (0, 10), (10, 20), (20, 3000), (3000, 3010))
    assert stalled(history, [], "9", t(0), t(3010 + 61), DEFAULT).kind == "stalled"  # floor: HPC_STALL_MIN 60 s


def test_a_job_without_a_step_yet_gets_the_start_up_allowance_on_top():
    earlier = steps("8", (0, 90), (100, 190))  # the job before this one; this job (9) started at 1000
    assert stalled(earlier, [], "9", t(1000), t(1000 + 1800 + 270), DEFAULT) is None
    flag = stalled(earlier, [], "9", t(1000), t(1000 + 1800 + 271), DEFAULT)
    assert flag.message.startswith("STALLED: no step since the job started for 34m31s (limit 34m30s: ")
    assert stalled([], [], "9", t(0), t(1801), DEFAULT).kind == "stalled"  # no step in the run: the allowance alone


def test_a_validation_is_a_sign_of_life_and_after_a_step_the_limit_allows_for_one():
    history = steps("9", (100, 190), (200, 290), (300, 390), (800, 890), (900, 990))
    validated_3 = {"step": 3, "time": t(390 + 400).isoformat()}  # validating checkpoint 3 took 400 s
    assert stalled(history, [validated_3], "9", t(0), t(990 + 270 + 400), DEFAULT) is None
    flag = stalled(history, [validated_3], "9", t(0), t(990 + 271 + 400), DEFAULT)
    assert flag.message.endswith("(limit 11m10s: 3x the usual step of 1m30s + the longest recent validation)")
    validated_5 = {"step": 5, "time": t(990 + 400).isoformat()}  # the latest sign: a step comes next
    assert stalled(history, [validated_3, validated_5], "9", t(0), t(1390 + 270), DEFAULT) is None
    assert stalled(history, [validated_3, validated_5], "9", t(0), t(1390 + 271), DEFAULT) is not None


def test_steps_of_an_earlier_run_of_the_same_job_id_do_not_count_for_a_requeued_run():
    requeued_at = t(1000)
    assert stalled(EVERY_100S, [], "9", requeued_at, t(1000 + 1800 + 200), DEFAULT) is None
    assert stalled(EVERY_100S, [], "9", requeued_at, t(1000 + 1800 + 271), DEFAULT) is not None


def test_a_run_whose_reward_spread_is_zero_for_many_steps_has_collapsed():
    learning = steps("9", *((k, k + 1) for k in range(5)), spread=0.3)
    flat = steps("9", *((k, k + 1) for k in range(5, 15)), spread=0.0, first=6)
    assert collapsed(learning + flat[:9], DEFAULT) is None
    flag = collapsed(learning + flat, DEFAULT)
    assert flag.kind == "collapsed" and "for the last 10 steps" in flag.message
    assert collapsed(flat + learning, DEFAULT) is None  # spread came back
    unknown = steps("9", (20, 21), spread=None, first=16)
    assert collapsed(learning + flat + unknown, DEFAULT) is not None  # steps without a spread say nothing


def test_a_run_whose_every_rollout_fails_alike_but_for_a_partial_credit_now_and_then_has_collapsed():
    """The learning-curve bench's committed records on two H100s: seed 2 fails every rollout from
    step 60 to its last, 68, with spreads 0-0.008, which a rule of "exactly 0" would not flag;
    seed 1, still learning, has spreads of 0 (all right) or 0.09 and more and must not be flagged."""
    records = REPO / "docs" / "results" / "learning_curve_runs" / "2026-11-27-2xH100-copy-lesson"
    seed1, seed2 = (trained_steps(RunDir(records / name)) for name in ("seed1", "seed2"))
    nine = HealthSettings(collapse_steps=9)
    flag = collapsed(seed2, nine)
    assert flag is not None and "for the last 9 steps, mean reward -1.70" in flag.message
    assert collapsed(seed2[:-1], nine) is None  # steps 59-67: step 59 still had a group of right and wrong
    assert collapsed(seed1, nine) is None and collapsed(seed1, HealthSettings(collapse_steps=3)) is None
    assert collapsed(seed2, HealthSettings(collapse_steps=9, collapse_spread=0.0)) is None  # the old rule


def test_only_a_running_job_can_stall_and_every_flag_is_reported():
    flat = steps("9", *((k, k + 1) for k in range(12)), spread=0.0)
    both = check(flat, [], "9", "RUNNING", t(0), t(5000), DEFAULT)
    assert [f.kind for f in both] == ["stalled", "collapsed"]
    assert [f.kind for f in check(flat, [], "9", "PENDING", None, t(5000), DEFAULT)] == ["collapsed"]
    assert check(EVERY_100S, [], "9", "COMPLETED", t(0), t(99999), DEFAULT) == []


def test_a_flags_kind_is_a_flag_kind_member_the_watcher_and_the_webhook_go_by():
    flat = steps("9", *((k, k + 1) for k in range(12)), spread=0.0)
    kinds = [f.kind for f in check(flat, [], "9", JobState.RUNNING, t(0), t(5000), DEFAULT)]
    assert kinds == [FlagKind.STALLED, FlagKind.COLLAPSED] and all(type(kind) is FlagKind for kind in kinds)


def test_thresholds_come_from_the_environment():
    env = {"HPC_STALL_FACTOR": "2", "HPC_STALL_MIN": "5", "HPC_STALL_STARTUP": "30", "HPC_COLLAPSE_STEPS": "3",
           "HPC_COLLAPSE_SPREAD": "0"}
    assert HealthSettings.from_env(env) == HealthSettings(2.0, 5.0, 30.0, 3, 0.0)
    assert HealthSettings.from_env({"HPC_STALL_FACTOR": " "}) == DEFAULT


@pytest.mark.parametrize("name, value, accepted", [
    ("HPC_STALL_FACTOR", "three", "accepted a number >= 1 (default 3)"),
    ("HPC_STALL_FACTOR", "0.5", "accepted a number >= 1 (default 3)"),
    ("HPC_STALL_MIN", "nan", "accepted a number >= 0 (default 60)"),
    ("HPC_STALL_STARTUP", "inf", "accepted a number >= 0 (default 1800)"),
    ("HPC_COLLAPSE_STEPS", "2.5", "accepted a whole number >= 1 (default 10)"),
    ("HPC_COLLAPSE_SPREAD", "-0.1", "accepted a number >= 0 (default 0.01)"),
])
def test_a_bad_threshold_is_one_line_naming_it(name, value, accepted):
    with pytest.raises(SettingError) as error:
        HealthSettings.from_env({name: value})
    assert str(error.value) == f"invalid {name} {value!r}: {accepted}"
