"""hpc.job.deadline: reading the job's end, predicting the next step, the decision, the stop records.

The rule's promise, checked with hypothesis: a step starts only if its predicted end is
before the deadline (end - signal grace - margin), and always starts when the time left
holds the prediction. Reading the end from a real Slurm job (local time, an extension)
is in tests/hpc/job/test_boundary_slurm.py."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.job.deadline import (
    BoundaryRule,
    BoundarySettings,
    EndTimeError,
    JobEnd,
    StopReason,
    StopRecord,
    decide,
    decide_start,
    predict,
    record_stop,
    signal_grace,
    startup_durations,
    step_durations,
    validation_durations,
)
from hpc.run.rundir import RunDir

END_UTC = datetime(2026, 11, 25, 8, 46, 36, tzinfo=timezone.utc).timestamp()
durations = st.lists(st.floats(0, 3600, allow_nan=False), max_size=20)
settings = st.builds(BoundarySettings, st.integers(1, 10), st.floats(1, 3), st.floats(0, 120))


# -- reading the end ---------------------------------------------------------------------------


class CountingSlurm:
    """Stands in for the scontrol call (its parsing: tests/hpc/slurm/test_output.py; the call: the Slurm test)."""

    def __init__(self, *answers: float | None) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def __call__(self, job_id: str) -> float | None:
        self.asked.append(job_id)
        return self.answers.pop(0)


def test_slurms_end_is_read_again_once_the_cached_value_is_old() -> None:
    now = [0.0]
    slurm = CountingSlurm(1000.0, 1600.0)  # an `scontrol update TimeLimit=` in between
    end = JobEnd({"SLURM_JOB_ID": "45"}, read_slurm=slurm, clock=lambda: now[0], max_age=30)

    assert end.get() == 1000.0
    now[0] = 29.0
    assert end.get() == 1000.0 and slurm.asked == ["45"]
    now[0] = 30.0
    assert end.get() == 1600.0 and slurm.asked == ["45", "45"]


def test_an_end_slurm_did_not_give_is_asked_for_again_at_once() -> None:
    slurm = CountingSlurm(None, 1000.0)
    end = JobEnd({"SLURM_JOB_ID": "45"}, read_slurm=slurm, clock=lambda: 0.0)

    assert end.get() is None
    assert end.get() == 1000.0


def test_the_override_wins_and_is_read_every_time() -> None:
    env = {"SLURM_JOB_ID": "45", "HPC_JOB_END_TIME": "1700000000"}
    slurm = CountingSlurm()
    end = JobEnd(env, read_slurm=slurm)

    assert end.get() == 1700000000.0 and end.source == "HPC_JOB_END_TIME"
    env["HPC_JOB_END_TIME"] = "1700000600.5"
    assert end.get() == 1700000600.5 and slurm.asked == []


def test_outside_slurm_without_an_override_the_end_is_unknown() -> None:
    assert JobEnd({}, read_slurm=CountingSlurm()).get() is None
    assert JobEnd({"SLURM_JOB_ID": "local"}, read_slurm=CountingSlurm()).get() is None


@pytest.mark.parametrize("value", ["tomorrow", "-5", "nan", "inf"])
def test_an_unusable_override_is_one_line_naming_it(value: str) -> None:
    with pytest.raises(EndTimeError, match=f"HPC_JOB_END_TIME='{value}' is not usable: expected"):
        JobEnd({"HPC_JOB_END_TIME": value}).get()


def test_the_signal_grace_comes_from_the_job_and_is_0_outside_one() -> None:
    assert signal_grace({"HPC_SIGNAL_GRACE": "300"}) == 300.0
    assert signal_grace({}) == 0.0
    with pytest.raises(EndTimeError, match="HPC_SIGNAL_GRACE='5m'"):
        signal_grace({"HPC_SIGNAL_GRACE": "5m"})


# -- the prediction ------------------------------------------------------------------------------


def test_the_prediction_is_the_longest_recent_step_times_the_factor() -> None:
    s = BoundarySettings(recent_steps=3, safety_factor=1.5, margin_seconds=0)
    assert predict([100.0, 10.0, 20.0, 30.0], s) == 45.0, "the 100 s step is older than the last 3"
    assert predict([], s) is None


@given(durations, settings)
def test_the_prediction_covers_every_recent_step(seconds: list[float], s: BoundarySettings) -> None:
    predicted = predict(seconds, s)
    recent = seconds[-s.recent_steps:]
    assert (predicted is None) == (not recent)
    assert all(predicted >= d for d in recent)


def test_durations_come_from_the_runs_steps_and_validations(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append_step({"step": 1, "seconds": 31.5})
    run.append_step({"step": 2})  # a record from before durations were kept
    run.append_step({"step": 3, "seconds": 28})
    run.record_validation({"step": 0, "accuracy": 0.5, "seconds": 120.0}, [])
    run.record_validation({"step": 30, "accuracy": 0.6}, [])

    assert step_durations(run) == [31.5, 28.0]
    assert validation_durations(run) == [120.0]


# -- the decision -------------------------------------------------------------------------------------


def rule_at(now: float, end: float | None, grace: float, s: BoundarySettings, said: list[str]) -> BoundaryRule:
    env = {} if end is None else {"HPC_JOB_END_TIME": repr(end)}
    return BoundaryRule(JobEnd(env), grace, s, clock=lambda: now, say=said.append)


@given(durations, settings, st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 600))
def test_a_step_starts_only_if_its_predicted_end_is_before_the_deadline(
    seconds: list[float], s: BoundarySettings, now: float, end: float, grace: float
) -> None:
    decision = rule_at(now, end, grace, s, []).check(seconds)
    predicted = predict(seconds, s)
    if decision.fits and predicted is not None:
        assert now + predicted <= end - grace - s.margin_seconds + 1e-6
    assert decision.predicted == predicted
    assert math.isclose(decision.seconds_left, end - grace - s.margin_seconds - now, abs_tol=1e-6)


@given(durations, settings, st.floats(0, 1e6), st.floats(0, 600), st.floats(1e-3, 1e5))  # spare: float rounding
def test_a_step_always_starts_when_the_time_left_holds_the_prediction(
    seconds: list[float], s: BoundarySettings, now: float, grace: float, spare: float
) -> None:
    end = now + grace + s.margin_seconds + (predict(seconds, s) or 0.0) + spare
    assert rule_at(now, end, grace, s, []).check(seconds).fits


@given(durations, settings)
def test_without_an_end_time_every_step_starts_and_the_log_says_so_once(seconds: list[float], s: BoundarySettings) -> None:
    said: list[str] = []
    rule = rule_at(0.0, None, 30, s, said)
    assert all(rule.check(seconds).fits for _ in range(3))
    assert said == ["stop at a step boundary: off for now (the job's end time is not known)"]


def test_without_history_the_first_step_starts() -> None:
    assert decide(None, 1.0).fits and decide(None, -100.0).fits


def test_the_rule_switched_off_starts_every_step_and_reads_no_end() -> None:
    slurm = CountingSlurm()
    rule = BoundaryRule(JobEnd({"SLURM_JOB_ID": "45"}, read_slurm=slurm), 30, enabled=False)

    decision = rule.check([1e9])
    assert decision.fits and decision.seconds_left is None and slurm.asked == []
    assert "off" in rule.describe()


def test_the_rules_line_in_the_job_log_names_the_end_and_the_figures() -> None:
    rule = rule_at(0.0, END_UTC, 30, BoundarySettings(5, 1.2, 30), [])
    assert rule.describe() == ("stop at a step boundary: the job ends 2026-11-25T08:46:36+00:00 (HPC_JOB_END_TIME); "
                               "a step starts only if the longest of the last 5 x 1.2 ends 30s (signal grace) "
                               "+ 30s (margin) before that")


def test_a_decision_not_to_start_says_the_figures() -> None:
    assert decide(44.0, 31.25).describe("step 13") == (
        "step 13 would not end before the job's stop signal may come: predicted 44.0s, 31.2s left")


# -- before the backend starts: its start-up and the step after it -----------------------------------


def test_before_the_backend_starts_the_prediction_is_the_start_up_plus_the_next_step() -> None:
    s = BoundarySettings(recent_steps=5, safety_factor=1.2, margin_seconds=30)
    decision = decide_start([90.0, 100.0], [30.0, 34.5], s, 150.0)

    assert not decision.fits, "120 s + 41.4 s do not fit in 150 s, though each would alone"
    assert math.isclose(decision.predicted, 161.4) and decision.startup == 120.0 and math.isclose(decision.step, 41.4)
    assert decision.describe("step 3") == ("the backend's start (predicted 120.0s) and step 3 (predicted 41.4s) would "
                                           "not end before the job's stop signal may come: 150.0s left")


@given(durations, durations, settings, st.floats(-1e4, 1e4))
def test_the_backend_starts_only_if_its_start_up_and_the_next_step_end_before_the_deadline(
    startups: list[float], steps: list[float], s: BoundarySettings, seconds_left: float
) -> None:
    decision = decide_start(startups, steps, s, seconds_left)
    if steps and decision.fits:
        assert (predict(startups, s) or 0.0) + predict(steps, s) <= seconds_left
    if steps and not decision.fits:
        assert predict(steps, s) + (predict(startups, s) or 0.0) > seconds_left


@given(durations, settings, st.floats(-1e4, 1e4))
def test_without_step_history_the_backend_starts_whatever_its_start_ups_took(
    startups: list[float], s: BoundarySettings, seconds_left: float
) -> None:
    decision = decide_start(startups, [], s, seconds_left)
    assert decision.fits and decision.predicted is None


@given(durations, settings, st.floats(-1e4, 1e4))
def test_without_a_recorded_start_up_the_step_alone_decides(
    steps: list[float], s: BoundarySettings, seconds_left: float
) -> None:
    decision = decide_start([], steps, s, seconds_left)
    alone = decide(predict(steps, s), seconds_left)
    assert (decision.fits, decision.predicted, decision.startup) == (alone.fits, alone.predicted, None)


def test_a_decision_without_a_recorded_start_up_says_so() -> None:
    decision = decide_start([], [600.0], BoundarySettings(), 40.0)
    assert decision.describe("step 1") == ("the backend's start (none recorded yet) and step 1 (predicted 720.0s) "
                                           "would not end before the job's stop signal may come: 40.0s left")


def test_the_rule_checks_the_start_against_the_same_deadline_as_a_step() -> None:
    s = BoundarySettings(5, 1.2, 30)
    rule = rule_at(1000.0, 1300.0, 60, s, [])
    decision = rule.check_start([100.0], [50.0])
    assert (decision.fits, decision.predicted, decision.seconds_left) == (True, 180.0, 210.0)
    assert not rule.check_start([150.0], [50.0]).fits, "180 + 60 s do not fit in 210 s"


def test_start_ups_go_to_startups_jsonl_with_the_job_and_the_time(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    run = RunDir(tmp_path)
    run.append_startup(131.23456)
    run.append_startup(95)
    with run.startups_file.open("a") as handle:
        handle.write('{"seconds": 1')  # a line torn mid-write

    first, second = run.read_startups()
    assert run.startups_file == tmp_path / "startups.jsonl"
    assert (first["seconds"], first["job_id"], second["seconds"]) == (131.235, "77", 95)
    assert datetime.fromisoformat(first["time"]).tzinfo is not None
    assert startup_durations(run) == [131.235, 95.0]


# -- stops.jsonl -------------------------------------------------------------------------------------


def test_stop_records_go_to_stops_jsonl_with_the_job_and_the_time(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    run = RunDir(tmp_path)
    record_stop(run, StopRecord.boundary(12, decide(44.04, 31.26)))
    record_stop(run, StopRecord(12, "signal", 123.45678))
    record_stop(run, StopRecord(40, "finished"))

    first, second, third = run.read_stops()
    assert run.stops_file == tmp_path / "stops.jsonl"
    assert {k: first[k] for k in ("job_id", "step", "reason", "lost_rollout_seconds", "predicted_step_seconds",
                                  "seconds_left")} == {"job_id": "77", "step": 12, "reason": "boundary",
                                                       "lost_rollout_seconds": 0.0, "predicted_step_seconds": 44.0,
                                                       "seconds_left": 31.3}
    assert datetime.fromisoformat(first["time"]).tzinfo is not None
    assert (second["reason"], second["lost_rollout_seconds"], second["predicted_step_seconds"]) == ("signal", 123.457, None)
    assert (third["reason"], third["step"]) == ("finished", 40)


def test_an_unknown_stop_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown stop reason 'timeout'; known: boundary, signal, finished"):
        StopRecord(3, "timeout")


def test_a_stop_reason_given_as_a_word_is_held_as_its_member() -> None:
    """The trainer branches on the member (a declined stop exits 0, others 75), never on the word."""
    assert StopRecord(3, "declined").reason is StopReason.DECLINED  # type: ignore[arg-type]
