"""hpc/run/accounting.py: GPU-hours from sacct rows, the ledger, steps.jsonl and stops.jsonl.
Pure arithmetic on records laid out as a real run writes them; sacct's own answers are
checked against a real Slurm in test_accounting_slurm.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpc.run import accounting, accounting_text, ledger
from hpc.run.accounting import RunFiles, account
from hpc.run.accounting_records import Charging
from hpc.run.health import HealthSettings
from hpc.run.rundir import RunDir
from hpc.slurm.output import SacctRow

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=timezone.utc)
GRES = Charging("local", whole_nodes=False, gpus_per_node=2)
WHOLE = Charging("jureca", whole_nodes=True, gpus_per_node=4)


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    return t(seconds).isoformat(timespec="seconds")


def row(job: str, state: str, submit: float, start: float | None, end: float | None, *, gpus: int = 2,
        nodes: int = 1, now: float | None = None) -> SacctRow:
    """A sacct row; ElapsedRaw as sacct counts it (to now while it runs)."""
    elapsed = 0 if start is None else int((end if end is not None else now or start) - start)
    return SacctRow(job, state, t(submit), t(submit), None if start is None else t(start),
                    None if end is None else t(end), elapsed, nodes, gpus)


@dataclass
class FakeRun:
    """A run directory written record by record, as the launcher, hooks and trainer do."""

    path: Path
    ledger: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    stops: list[dict] = field(default_factory=list)

    def event(self, at: float, event: str, **fields) -> FakeRun:
        self.ledger.append({"event": event, "time": iso(at), **fields})
        return self

    def step(self, number: int, job: str, began: float, ended: float, spread: float | None = 0.5) -> FakeRun:
        self.steps.append({"step": number, "started": iso(began), "seconds": ended - began, "ended": iso(ended),
                           "job_id": job, "reward_spread": spread})
        return self

    def stop(self, at: float, job: str, reason: str, lost: float = 0.0) -> FakeRun:
        self.stops.append({"job_id": job, "time": iso(at), "step": 0, "reason": reason,
                           "lost_rollout_seconds": lost})
        return self

    def files(self, total: int | None = 10, done: bool = False) -> RunFiles:
        run = RunDir(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        for target, records in ((run.ledger, self.ledger), (run.steps_file, self.steps), (run.stops_file, self.stops)):
            target.write_text("".join(json.dumps(r) + "\n" for r in records))
        last = max((s["step"] for s in self.steps), default=0)
        run.write_progress({"step": last, "total_steps": total})
        if done:
            run.mark_done(last, total)
        return RunFiles.read(run)


@pytest.fixture
def fake(tmp_path: Path) -> FakeRun:
    return FakeRun(tmp_path / "r")


def requeued_run(fake: FakeRun) -> tuple[RunFiles, list[SacctRow]]:
    """Job 11 trains steps 1-3, USR1 abandons step 4's rollouts, it is requeued (same id)
    and its second run trains step 4 and is running at t=638."""
    fake.event(0, "submit", job_id="11", cluster="local").event(60, "job_start", job_id="11", step=0)
    fake.step(1, "11", 120, 200).step(2, "11", 200, 290).step(3, "11", 300, 380)
    fake.stop(395, "11", "signal", lost=42.0)
    fake.event(399, "job_end", job_id="11", outcome="stopped_for_time").event(400, "requeue", job_id="11", by="job")
    fake.event(440, "job_start", job_id="11", step=3).step(4, "11", 500, 580)
    rows = [row("11", "REQUEUED", 1, 60, 401), row("11", "RUNNING", 401, 438, None, now=638)]
    return fake.files(), rows


# -- charging -----------------------------------------------------------------------------------------------


def test_gpu_hours_are_elapsed_times_the_allocated_gpus_where_the_cluster_charges_gres(fake):
    files, rows = requeued_run(fake)
    acc = account("r", files, rows, GRES, now=t(638))
    assert [j.gpus for j in acc.jobs] == [2, 2]
    assert acc.gpu_hours == pytest.approx((341 + 200) * 2 / 3600)
    assert acc.node_hours == pytest.approx((341 + 200) / 3600)


def test_whole_node_clusters_charge_every_gpu_of_the_jobs_nodes(fake):
    fake.event(0, "submit", job_id="7", cluster="jureca").event(10, "job_start", job_id="7", step=0)
    fake.step(1, "7", 20, 100)
    rows = [row("7", "COMPLETED", 0, 10, 110, gpus=1, nodes=2)]  # asked for 1 GPU per node... on 2 nodes
    assert account("r", fake.files(), rows, WHOLE, now=t(200)).gpu_hours == pytest.approx(100 * 8 / 3600)
    assert account("r", fake.files(), rows, GRES, now=t(200)).gpu_hours == pytest.approx(100 * 1 / 3600)
    assert account("r", fake.files(), rows, None, now=t(200)).gpu_hours == pytest.approx(100 * 1 / 3600)


def test_the_charging_rule_is_the_registrys():
    assert accounting.charging_of("jureca") == Charging("jureca", True, 4)
    assert accounting.charging_of("local") == Charging("local", False, 2)
    assert accounting.charging_of("nowhere") is None and accounting.charging_of(None) is None


def test_a_pack_job_is_charged_to_its_runs_in_equal_parts(tmp_path):
    runs = [FakeRun(tmp_path / name) for name in ("a", "b")]
    for fake in runs:
        fake.event(0, "submit", job_id="30", cluster="jureca").event(12, "job_start", job_id="30", step=0)
        fake.step(1, "30", 20, 80)
    rows = [row("30", "COMPLETED", 0, 10, 100, gpus=4)]
    starts = accounting.job_starts([ledger.parse(f.ledger) for f in runs])
    shares = [account(f.path.name, f.files(), rows, WHOLE, starts, now=t(200)) for f in runs]
    assert [s.jobs[0].share for s in shares] == [2, 2]
    assert sum(s.gpu_hours for s in shares) == pytest.approx(90 * 4 / 3600)
    alone = account("a", runs[0].files(), rows, WHOLE, now=t(200))  # without the other's ledger: all of it
    assert alone.gpu_hours == pytest.approx(90 * 4 / 3600)


def test_a_pack_job_start_that_says_how_many_runs_share_it_is_charged_that_part(fake):
    fake.event(0, "submit", job_id="31", cluster="jureca").event(12, "job_start", job_id="31", step=0, pack_runs=4)
    acc = account("r", fake.files(), [row("31", "COMPLETED", 0, 10, 100, gpus=4)], WHOLE, now=t(200))
    assert acc.jobs[0].share == 4 and acc.gpu_hours == pytest.approx(90 * 4 / 4 / 3600)
    assert accounting_text.job_cells(acc.jobs[0])[3] == "4/4"  # the job's GPUs / the runs sharing them


# -- where the time went -------------------------------------------------------------------------------


def test_each_job_run_is_cut_into_queued_starting_training_between_lost_idle_and_in_flight(fake):
    files, rows = requeued_run(fake)
    first, second = account("r", files, rows, GRES, now=t(638)).jobs
    assert [(s.kind, s.seconds) for s in first.segments] == [
        ("queued", 59), ("starting", 60), ("training", 80), ("training", 90), ("between", 10), ("training", 80),
        ("lost", 15), ("idle", 6)]
    assert [(s.kind, s.seconds) for s in second.segments] == [
        ("queued", 37), ("starting", 62), ("training", 80), ("in_flight", 58)]
    for job in (first, second):
        assert sum(s.seconds for s in job.segments if s.kind != "queued") == job.elapsed
    assert (first.steps, first.stop_reason, first.lost_rollout_seconds, first.attempt) == (3, "signal", 42.0, 0)
    assert (second.steps, second.label) == (1, "11 (run 2)")


def test_a_requeued_runs_wait_counts_from_its_requeue_and_a_chained_jobs_from_its_predecessors_end(fake):
    fake.event(0, "submit", job_id="1", cluster="local").event(0, "chain", job_id="2", after="1", cluster="local")
    fake.event(5, "job_start", job_id="1", step=0).step(1, "1", 10, 50).event(58, "job_end", job_id="1",
                                                                          outcome="stopped_for_time")
    fake.event(70, "job_start", job_id="2", step=1).step(2, "2", 75, 115)
    rows = [row("1", "COMPLETED", 0, 5, 60), row("2", "COMPLETED", 0, 68, 120)]
    acc = account("r", fake.files(), rows, GRES, now=t(300))
    assert [j.seconds("queued") for j in acc.jobs] == [5, 8]  # not 68: job 2 could not start before job 1 ended
    assert acc.queue_wait == 13
    assert acc.restart_gaps == (15,)  # job 1 ended at 60, job 2's first step began at 75


def test_goodput_is_training_time_over_allocated_time_and_lost_gpu_hours_say_where_the_rest_went(fake):
    files, rows = requeued_run(fake)
    acc = account("r", files, rows, GRES, now=t(638))
    assert acc.goodput == pytest.approx(330 / (541 - 58))  # the step in flight counts in neither
    assert acc.productive_gpu_hours == pytest.approx(330 * 2 / 3600)
    assert acc.lost_gpu_hours("starting") == pytest.approx(122 * 2 / 3600)
    assert acc.lost_gpu_hours("lost") == pytest.approx(15 * 2 / 3600)
    assert acc.lost_gpu_hours() == pytest.approx((122 + 10 + 15 + 6) * 2 / 3600)
    assert acc.lost_rollout_seconds == 42.0


def test_a_running_jobs_time_since_its_last_step_is_lost_as_stalled_once_the_run_is_flagged_stalled(fake):
    files, _ = requeued_run(fake)
    soon = account("r", files, [row("11", "REQUEUED", 1, 60, 401), row("11", "RUNNING", 401, 438, None, now=700)],
                   GRES, now=t(700))  # 120 s since step 4 ended: within 3x its usual ~80 s step
    assert (soon.jobs[-1].segments[-1].kind, soon.lost_gpu_hours("stalled")) == ("in_flight", 0)
    rows = [row("11", "REQUEUED", 1, 60, 401), row("11", "RUNNING", 401, 438, None, now=880)]
    late = account("r", files, rows, GRES, now=t(880))  # 300 s: the run is flagged STALLED
    assert [(s.kind, s.seconds) for s in late.jobs[-1].segments][-1] == ("stalled", 300)
    assert late.lost_gpu_hours("stalled") == pytest.approx(300 * 2 / 3600)
    assert late.goodput == pytest.approx(330 / (341 + 442))  # counted as allocated, and lost
    assert "stalled 0.167" in accounting_text.summary_line(late)
    assert late.gpu_hours_per_step == soon.gpu_hours_per_step  # a stall is a fault, not what steps cost
    patient = account("r", files, rows, GRES, now=t(880), health=HealthSettings(min_stall_seconds=400))
    assert patient.jobs[-1].segments[-1].kind == "in_flight"


def test_gpu_hours_per_step_and_the_projection_to_finish_use_the_recent_all_in_cost(fake):
    files, rows = requeued_run(fake)
    acc = account("r", files, rows, GRES, now=t(638))
    per_step = (541 - 58) * 2 / 3600 / 4  # 4 steps; the step in flight is not paid for yet
    assert acc.gpu_hours_per_step == pytest.approx(per_step)
    assert acc.remaining_steps == 6 and acc.projected_gpu_hours == pytest.approx(6 * per_step)
    assert acc.step_seconds == 80 and acc.step_gpu_hours == pytest.approx(80 * 2 / 3600)


def test_a_finished_run_has_nothing_left_to_pay(fake):
    fake.event(0, "submit", job_id="5", cluster="local").event(1, "job_start", job_id="5", step=0)
    fake.step(1, "5", 10, 20).stop(22, "5", "finished").event(23, "job_end", job_id="5", outcome="finished")
    acc = account("r", fake.files(total=1, done=True), [row("5", "COMPLETED", 0, 1, 25)], GRES, now=t(99))
    assert acc.finished and acc.remaining_steps == 0 and acc.projected_gpu_hours == 0
    assert [s.kind for s in acc.jobs[0].segments] == ["queued", "starting", "training", "between", "idle"]
    assert "to finish" not in accounting_text.summary_line(acc)


def test_a_run_the_decline_rule_stopped_shows_the_gpu_hours_its_untrained_steps_would_have_cost(fake):
    fake.event(0, "submit", job_id="5", cluster="local").event(1, "job_start", job_id="5", step=0)
    fake.step(1, "5", 10, 20).stop(22, "5", "declined").event(23, "job_end", job_id="5", outcome="finished")
    files = fake.files(total=10)
    run = RunDir(fake.path)
    run.mark_done(1, 10, reason="declined: held-out accuracy fell", steps_left=9)
    files = RunFiles.read(run)
    acc = account("r", files, [row("5", "COMPLETED", 0, 1, 25)], GRES, now=t(99))
    assert acc.finished and acc.saved_steps == 9
    assert acc.saved_gpu_hours == pytest.approx(9 * acc.gpu_hours_per_step)
    assert f"~{accounting_text.hours(acc.saved_gpu_hours)} GPU-h saved (declined: 9 steps not trained)" in (
        accounting_text.summary_line(acc))
    assert ("saved by the decline rule", f"~{accounting_text.hours(acc.saved_gpu_hours)} GPU-h (9 steps not trained)") in (
        accounting_text.totals_rows(acc))


def test_a_crash_or_a_job_without_its_end_hook_loses_the_step_in_flight(fake):
    fake.event(0, "submit", job_id="8", cluster="local").event(1, "job_start", job_id="8", step=0)
    fake.step(1, "8", 5, 15).event(30, "job_end", job_id="8", outcome="failed")
    fake.event(40, "resubmit", job_id="9", after="8").event(41, "job_start", job_id="9", step=1)
    fake.step(2, "9", 45, 55)  # then its node died: no job_end
    rows = [row("8", "FAILED", 0, 1, 31), row("9", "NODE_FAIL", 40, 41, 70)]
    crashed, lost_node = account("r", fake.files(), rows, GRES, now=t(99)).jobs
    assert crashed.segments[-1].kind == "lost" and crashed.seconds("lost") == 16
    assert lost_node.segments[-1].kind == "lost" and lost_node.seconds("lost") == 15


def test_a_boundary_stop_leaves_the_rest_of_the_job_idle_and_loses_nothing(fake):
    fake.event(0, "submit", job_id="4", cluster="local").event(1, "job_start", job_id="4", step=0)
    fake.step(1, "4", 2, 40).stop(40, "4", "boundary").event(41, "job_end", job_id="4", outcome="stopped_for_time")
    (job,) = account("r", fake.files(), [row("4", "COMPLETED", 0, 1, 43)], GRES, now=t(99)).jobs
    assert [(s.kind, s.seconds) for s in job.segments] == [("queued", 1), ("starting", 1), ("training", 38),
                                                           ("idle", 3)]


def test_a_job_that_trained_nothing_is_all_start_up(fake):
    fake.event(0, "submit", job_id="3", cluster="local").event(2, "job_start", job_id="3", step=0)
    fake.event(9, "job_end", job_id="3", outcome="failed")
    acc = account("r", fake.files(), [row("3", "FAILED", 0, 2, 10)], GRES, now=t(99))
    assert [(s.kind, s.seconds) for s in acc.jobs[0].segments] == [("queued", 2), ("starting", 8)]
    assert acc.goodput == 0 and acc.gpu_hours_per_step is None and acc.projected_gpu_hours is None


def test_a_pending_job_is_queued_until_now_and_charged_nothing(fake):
    fake.event(0, "submit", job_id="6", cluster="local")
    acc = account("r", fake.files(), [row("6", "PENDING", 0, None, None)], GRES, now=t(300))
    assert [(s.kind, s.seconds) for s in acc.jobs[0].segments] == [("queued", 300)]
    assert acc.gpu_hours == 0 and acc.goodput is None


def test_a_successor_queued_hours_before_it_ran_is_the_runs_and_one_cancelled_while_waiting_costs_nothing(fake):
    """hpc/job/successor.py: job 12 is queued when job 11 starts, 12 hours before the resubmit
    that names it; job 13, queued when 12 started, is cancelled when the run finishes."""
    fake.event(0, "submit", job_id="11", cluster="local").event(60, "job_start", job_id="11", step=0)
    fake.event(61, "successor", job_id="12", after="11").step(1, "11", 100, 43000)
    fake.event(43200, "job_end", job_id="11", outcome="stopped_for_time")
    fake.event(43200, "resubmit", job_id="12", after="11", by="successor")
    fake.event(43205, "job_start", job_id="12", step=1).event(43206, "successor", job_id="13", after="12")
    fake.step(2, "12", 43210, 43300).event(43301, "job_end", job_id="12", outcome="finished")
    rows = [row("11", "COMPLETED", 0, 60, 43200), row("12", "COMPLETED", 61, 43205, 43302),
            row("13", "CANCELLED", 43206, None, 43302)]
    acc = account("r", fake.files(), rows, GRES, now=t(43400))
    assert [j.job_id for j in acc.jobs] == ["11", "12"]
    assert acc.jobs[1].seconds("queued") == 5  # from its predecessor's end, not from its submission


def test_rows_of_an_older_job_that_had_the_same_id_are_not_the_runs(fake):
    fake.event(1000, "submit", job_id="5", cluster="local").event(1001, "job_start", job_id="5", step=0)
    fake.event(1000, "job_start", job_id="77", step=0)  # a job the ledger only saw start (no submit record)
    rows = [row("5", "COMPLETED", 0, 1, 500),  # long before the run submitted job 5
            row("5", "COMPLETED", 999, 1000, 1100), row("77", "COMPLETED", 0, 1, 50),
            row("77", "COMPLETED", 990, 995, 1050), row("99", "COMPLETED", 990, 995, 1050)]
    acc = account("r", fake.files(), rows, GRES, now=t(2000))
    assert [(j.job_id, j.start) for j in acc.jobs] == [("77", t(995)), ("5", t(1000))]


# -- properties -----------------------------------------------------------------------------------------


@st.composite
def job_layouts(draw):
    """A job run of random length with random steps, stop and outcome."""
    start = draw(st.integers(0, 100))
    cuts = sorted(draw(st.lists(st.integers(1, 2000), min_size=0, max_size=12, unique=True)))
    end = start + draw(st.integers(1, 3000))
    steps = [(start + a, start + b) for a, b in zip(cuts[::2], cuts[1::2])]
    stop = draw(st.none() | st.tuples(st.integers(start, end + 5), st.sampled_from(["signal", "boundary"]),
                                      st.floats(0, 500)))
    return start, end, steps, stop, draw(st.sampled_from(["stopped_for_time", "failed", None]))


@settings(max_examples=200, deadline=None)
@given(layout=job_layouts(), running=st.booleans())
def test_segments_tile_the_job_run_exactly_and_goodput_stays_within_0_and_1(tmp_path_factory, layout, running):
    start, end, steps, stop, outcome = layout
    fake = FakeRun(tmp_path_factory.mktemp("run") / "r")
    fake.event(0, "submit", job_id="1", cluster="local").event(start, "job_start", job_id="1", step=0)
    for number, (began, ended) in enumerate(steps, 1):
        fake.step(number, "1", began, ended)
    if stop:
        fake.stop(stop[0], "1", stop[1], stop[2])
    if outcome:
        fake.event(end, "job_end", job_id="1", outcome=outcome)
    now = end + 10
    sacct = row("1", "RUNNING" if running else "COMPLETED", 0, start, None if running else end, now=now)
    acc = account("r", fake.files(), [sacct], GRES, now=t(now))
    (job,) = acc.jobs
    allocated = [s for s in job.segments if s.kind != "queued"]
    assert all(a.end <= b.start for a, b in zip(allocated, allocated[1:])), "segments overlap"
    assert allocated[0].start == t(start) and allocated[-1].end == t(now if running else end)
    assert sum(s.seconds for s in allocated) == pytest.approx(job.elapsed)
    assert job.productive <= job.elapsed and (acc.goodput is None or 0 <= acc.goodput <= 1)
    assert acc.productive_gpu_hours + acc.lost_gpu_hours() + sum(
        j.kind_gpu_hours("in_flight") for j in acc.jobs) == pytest.approx(acc.gpu_hours)
