"""hpc/run/ledger.py: the ledger's vocabulary writes the lines docs/design.md documents (and runs on
clusters already have), reads them back typed, and skips (and names) what is no record instead of failing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpc.run import ledger
from hpc.run.ledger import (
    KINDS,
    By,
    Cancelled,
    Chain,
    Decline,
    DeclineAction,
    Done,
    Failed,
    JobEnd,
    JobStart,
    LeaseHeld,
    Moved,
    MovedIn,
    Outcome,
    Reclaimed,
    Requeue,
    Resubmit,
    SlurmUnknown,
    Submit,
    Successor,
)
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines, write_record

T = "2026-11-22T10:00:00+00:00"
EVERY_KIND = [
    Submit(time=T, job_id="5", cluster="jureca", script="/r/s.sbatch", git_commit=None, argv=["--job_name", "r"],
           log_out="/r/logs/r-5.out", log_err="/r/logs/r-5.err"),
    Submit(time=T, job_id="6", cluster="local", script="/r/s.sbatch", git_commit="abc", argv=[], log_out="o",
           log_err="e", pack="sw.pack", pack_script="/sw/scripts/p.sbatch", pack_runs=2),
    Chain(time=T, job_id="7", cluster="jureca", script="/r/s.sbatch", argv=[], log_out="o", log_err="e", after="5"),
    JobStart(time=T, job_id="5", step=3, restart_count=1, err_offset=120),
    JobStart(time=T, job_id="6", step=0, restart_count=0, err_offset=0, pack_runs=2),
    JobEnd(time=T, job_id="5", exit_code=75, step=4, outcome=Outcome.STOPPED),
    JobEnd(time=T, job_id="5", exit_code=1, step=4, outcome=Outcome.FAILED, error="RuntimeError: boom"),
    JobEnd(time=T, job_id="5", exit_code=None, step=4, outcome=Outcome.FAILED, note="ended without its end hook",
           slurm_state="NODE_FAIL"),
    Requeue(time=T, job_id="5", by="slurm"),
    Successor(time=T, job_id="8", after="5", script="/r/s.sbatch"),
    Resubmit(time=T, job_id="8", after="5", by="successor"),
    Resubmit(time=T, job_id="9", after="8", script="/r/s.sbatch"),
    Cancelled(time=T, job_id="9"),
    Done(time=T, step=628),
    Failed(time=T, reason="2 failed job(s) in a row without progress", log_tail=None),
    Failed(time=T, reason="configuration error (exit 78)", log_tail="/r/logs/r-9.err", error="preflight check failed"),
    Moved(time=T, to="jureca:/p/runs", step=5, bundle="ab" * 16),
    MovedIn(time=T, source="vista:/w/runs/r", step=5, bundle="ab" * 16),
    Reclaimed(time=T, bundle="ab" * 16),
    Decline(time=T, action="rollback", step=52, accuracy=0.7033, best_step=20, best_accuracy=0.98, reason="fell",
            rollback=1, to_step=53, lr_scale=0.5),
    Decline(time=T, action="stop", step=72, accuracy=0.93, best_step=20, best_accuracy=0.98, reason="fell",
            steps_left=28),
    LeaseHeld(time=T, job_id="10", holder="9", holder_host="n1"),
    SlurmUnknown(time=T, job_id="9", asked="does this job's successor still wait", why="squeue failed: timed out",
                 waited=30, held_back="submit a follow-up job"),
    JobEnd(time=T, job_id="9", exit_code=75, step=5, outcome=Outcome.STOPPED, signal="TERM"),
]


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path / "r")


def test_each_kind_is_written_as_the_documented_line(run: RunDir) -> None:
    for record in EVERY_KIND:
        ledger.append(run, record)
    lines = ledger_lines(run)
    assert [list(line)[:2] for line in lines] == [["event", "time"]] * len(EVERY_KIND)
    assert lines[0] == {"event": "submit", "time": T, "job_id": "5", "cluster": "jureca", "script": "/r/s.sbatch",
                        "git_commit": None, "argv": ["--job_name", "r"], "log_out": "/r/logs/r-5.out",
                        "log_err": "/r/logs/r-5.err"}
    assert {k: lines[1][k] for k in ("pack", "pack_script", "pack_runs")} == {
        "pack": "sw.pack", "pack_script": "/sw/scripts/p.sbatch", "pack_runs": 2}
    assert lines[2]["after"] == "5" and "pack" not in lines[2]
    assert lines[3] == {"event": "job_start", "time": T, "job_id": "5", "step": 3, "restart_count": 1, "err_offset": 120}
    assert lines[5] == {"event": "job_end", "time": T, "job_id": "5", "exit_code": 75, "step": 4,
                        "outcome": "stopped_for_time"}
    assert lines[6]["error"] == "RuntimeError: boom"
    assert lines[7] == {"event": "job_end", "time": T, "job_id": "5", "exit_code": None, "step": 4, "outcome": "failed",
                        "note": "ended without its end hook", "slurm_state": "NODE_FAIL"}
    assert lines[8] == {"event": "requeue", "time": T, "job_id": "5", "by": "slurm"}
    assert lines[9] == {"event": "successor", "time": T, "job_id": "8", "after": "5", "script": "/r/s.sbatch"}
    assert lines[10] == {"event": "resubmit", "time": T, "job_id": "8", "after": "5", "by": "successor"}
    assert lines[11] == {"event": "resubmit", "time": T, "job_id": "9", "after": "8", "script": "/r/s.sbatch"}
    assert lines[12] == {"event": "cancelled", "time": T, "job_id": "9"}
    assert lines[13] == {"event": "done", "time": T, "step": 628}
    assert lines[14] == {"event": "failed", "time": T, "reason": "2 failed job(s) in a row without progress",
                         "log_tail": None}
    assert lines[15]["error"] == "preflight check failed"
    assert lines[16] == {"event": "moved", "time": T, "to": "jureca:/p/runs", "step": 5, "bundle": "ab" * 16}
    assert lines[17] == {"event": "moved_in", "time": T, "source": "vista:/w/runs/r", "step": 5, "bundle": "ab" * 16}
    assert lines[18] == {"event": "reclaimed", "time": T, "bundle": "ab" * 16}
    assert lines[19] == {"event": "decline", "time": T, "action": "rollback", "step": 52, "accuracy": 0.7033,
                         "best_step": 20, "best_accuracy": 0.98, "reason": "fell", "rollback": 1, "to_step": 53,
                         "lr_scale": 0.5}
    assert "rollback" not in lines[20] and lines[20]["steps_left"] == 28
    assert lines[21] == {"event": "lease_held", "time": T, "job_id": "10", "holder": "9", "holder_host": "n1"}
    assert lines[22] == {"event": "slurm_unknown", "time": T, "job_id": "9", "asked": "does this job's successor "
                         "still wait", "why": "squeue failed: timed out", "waited": 30, "held_back": "submit a follow-up job"}
    assert lines[23]["signal"] == "TERM" and "signal" not in lines[5]


def test_every_kind_reads_back_as_it_was_written(run: RunDir) -> None:
    for record in EVERY_KIND:
        ledger.append(run, record)
    assert ledger.read(run) == EVERY_KIND
    assert set(KINDS) == {"submit", "chain", "job_start", "job_end", "requeue", "successor", "resubmit", "cancelled",
                          "done", "failed", "moved", "moved_in", "reclaimed", "decline", "lease_held", "slurm_unknown"}


def test_a_ledger_written_line_by_line_as_runs_on_clusters_have_it_reads_typed(run: RunDir) -> None:
    write_record(run, "submit", job_id="41", cluster="jureca", script="/s", git_commit=None, argv=["-x"],
                 log_out="o", log_err="e")
    write_record(run, "job_start", job_id="41", step=0, restart_count=0, err_offset=0)
    write_record(run, "job_end", job_id=41, exit_code=0, step=9, outcome="finished")  # a job id written as a number
    write_record(run, "done", step=9)
    submit, start, end, done = ledger.read(run)
    assert isinstance(submit, Submit) and submit.argv == ["-x"] and submit.git_commit is None
    assert isinstance(start, JobStart) and start.job_id == "41" and start.moment is not None
    assert isinstance(end, JobEnd) and end.job_id == "41" and end.outcome == Outcome.FINISHED and end.error is None
    assert done == Done(time=done.time, step=9)


def test_what_is_no_record_is_skipped_and_named_and_the_rest_read(run: RunDir) -> None:
    write_record(run, "submit", job_id="1")
    with open(run.ledger, "a") as handle:
        handle.write("7\n[1, 2]\nnot json\n" + json.dumps({"event": "paused", "job_id": "1"}) + "\n"
                     + json.dumps({"event": "requeue", "time": T}) + "\n" + json.dumps({"no": "event"}) + "\n")
    write_record(run, "job_start", job_id="1", step="three", restart_count=True)  # fields of the wrong kind
    with open(run.ledger, "a") as handle:
        handle.write('{"event": "job_end", "job_id": "1", "ex')  # torn mid-write
    records = ledger.read(run)
    assert [type(r) for r in records] == [Submit]
    skipped = {s.line: s.why for s in run.unreadable}
    assert sorted(skipped) == [2, 3, 4, 6, 7, 8], "each bad line named; a newer release's event and the torn end not"
    assert skipped[6] == "no 'job_id'" and skipped[7] == "no 'event'"
    assert skipped[8].startswith("step 'three' is not a whole number")


def test_a_state_word_this_code_does_not_know_makes_its_line_unreadable_never_another_state(run: RunDir) -> None:
    """A ``job_end`` whose outcome is no Outcome (a newer release's, a hand edit) is skipped and named:
    read as text it would have broken the failure streak as if the job had made progress."""
    write_record(run, "job_start", job_id="1", step=0, restart_count=0)
    write_record(run, "job_end", job_id="1", exit_code=1, step=0, outcome="exploded")
    write_record(run, "requeue", job_id="1", by="operator")
    write_record(run, "decline", action="pause", step=4)
    assert [type(r) for r in ledger.read(run)] == [JobStart]
    skipped = {s.line: s.why for s in run.unreadable}
    assert skipped == {2: "outcome 'exploded' is not one of stopped_for_time, finished, failed",
                       3: "by 'operator' is not one of job, slurm, successor",
                       4: "action 'pause' is not one of continue, stop, rollback"}


def test_a_records_state_fields_hold_members_whatever_word_they_were_given() -> None:
    end = JobEnd(job_id="1", outcome="stopped_for_time")  # type: ignore[arg-type]
    assert end.outcome is Outcome.STOPPED and Requeue(job_id="1", by="slurm").by is By.SLURM  # type: ignore[arg-type]
    assert Decline(action="rollback").action is DeclineAction.ROLLBACK  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'exploded' is not a valid Outcome"):
        JobEnd(job_id="1", outcome="exploded")  # type: ignore[arg-type]


def test_a_ledger_that_cannot_be_read_at_all_is_none_for_the_views_and_an_error_for_the_hooks(run: RunDir) -> None:
    run.ledger.mkdir(parents=True)
    assert ledger.readable(run) == []
    assert [(s.file, s.line) for s in run.unreadable] == [("ledger.jsonl", None)], "the views name it"
    with pytest.raises(OSError):
        ledger.read(run)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=8)
fields = st.sampled_from(["job_id", "step", "exit_code", "outcome", "after", "by", "argv", "time", "reason",
                          "pack_runs", "err_offset", "error", "log_tail"])
lines = st.dictionaries(fields, json_values, max_size=6).flatmap(
    lambda d: st.sampled_from([*KINDS, "other"]).map(lambda event: {"event": event, **d}))


@settings(max_examples=300, deadline=None)
@given(st.lists(lines | json_values, max_size=8))
def test_any_json_lines_read_without_failing_as_records_of_known_kinds(data: list) -> None:
    records = ledger.parse(data)
    assert all(type(r) in KINDS.values() for r in records)
    for record in records:
        assert ledger.from_json(ledger.to_json(record)) == record


def test_the_jobs_a_ledger_names_come_in_the_order_it_last_names_them() -> None:
    records = [Submit(job_id="5"), Resubmit(job_id="6", after="5"), JobStart(job_id="5"), Done(step=3)]
    assert ledger.job_ids(records) == ["6", "5"]
    chain = [Submit(job_id="1"), Chain(job_id="2", after="1"), Chain(job_id="3", after="2"), JobStart(job_id="1")]
    assert ledger.job_ids(chain) == ["2", "3", "1"], "the running job last, after the ones waiting for it"


def test_continuations_count_requeues_and_resubmissions() -> None:
    records = [Submit(job_id="1"), Requeue(job_id="1"), Successor(job_id="2", after="1"),
               Resubmit(job_id="2", after="1", by="successor"), Chain(job_id="3", after="2")]
    assert ledger.continuations(records) == 2


def test_a_run_counts_as_cancelled_only_until_it_is_launched_again() -> None:
    cancelled = [Submit(job_id="1"), JobEnd(job_id="1"), Cancelled(job_id="1")]
    assert ledger.cancelled_since_launch(cancelled)
    assert not ledger.cancelled_since_launch([*cancelled, Submit(job_id="2")])
    assert not ledger.cancelled_since_launch([*cancelled, Submit(job_id="2"), Chain(job_id="3", after="2")])
    assert not ledger.cancelled_since_launch([])


def test_the_newest_launch_and_its_cluster() -> None:
    records = [Submit(job_id="1", cluster="a"), JobStart(job_id="1"), Submit(job_id="2", cluster="b"),
               Chain(job_id="3", cluster="c", after="2"), JobEnd(job_id="2")]
    assert ledger.since_launch(records) == records[2:]
    latest = ledger.latest_launch(records)
    assert latest is not None and latest.job_id == "2" and ledger.cluster_of(records) == "c"
    assert ledger.latest_launch([]) is None and ledger.cluster_of([]) is None
