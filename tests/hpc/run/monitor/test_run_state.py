"""hpc/run/monitor/run_state.py: where a run stands, typed, and what the runs view decides from it
(the ETA column, the sweep summary's word) without reading its own display text."""

from __future__ import annotations

import pytest

from hpc.run import ledger
from hpc.run.health import Flag, FlagKind
from hpc.run.monitor import run_state, runs
from hpc.run.monitor.run_state import Parked, RunState
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import write_record

ETA = runs.HEADERS.index("ETA")


@pytest.fixture
def run(tmp_path) -> RunDir:
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.write_progress({"step": 3, "total_steps": 10, "eta_seconds": 4000})
    write_record(run, "submit", job_id="9", argv=["--job_name", "r"])
    return run


def test_a_going_runs_eta_shows_though_its_result_words_begin_like_a_stopped_runs(run):
    """The ETA follows the typed state: a health flag whose words begin with "cancelled" or
    "PARKED" leaves a running run's ETA shown."""
    for words in ("cancelled rollouts: 3 of 8 groups", "PARKED rollouts", "MOVED weights"):
        row = runs.run_row(run, "9", "RUNNING", ledger.read(run), flags=[Flag(FlagKind.STALLED, words)])
        assert row[-1] == words and row[ETA] == "1h06m"


@pytest.mark.parametrize("mark,state", [
    ("done", RunState.FINISHED), ("failed", RunState.FAILED), ("cancelled", RunState.CANCELLED),
    ("moved", RunState.MOVED), ("parked", RunState.PARKED), ("unknown", RunState.SLURM_UNKNOWN),
    ("", RunState.GOING)])
def test_each_runs_state_comes_from_its_records_and_decides_its_eta(run, mark, state):
    parked_run = None
    if mark == "done":
        run.mark_done(3)
    elif mark == "failed":
        run.mark_failed("broken")
    elif mark == "cancelled":
        write_record(run, "cancelled", job_id="9")
    elif mark == "moved":
        write_record(run, "moved", to="jureca:/p/runs", step=3, bundle="ab" * 16)
    elif mark in ("parked", "unknown"):
        parked_run = Parked("9", "TIMEOUT", "resume", "squeue omits job(s)" if mark == "unknown" else "")
    records = ledger.read(run)
    assert run_state.state_of(run, records, parked_run) is state
    row = runs.run_row(run, "9", "", records, parked_run=parked_run)
    assert (row[ETA] == "-") == state.over
    assert state.over == (state not in (RunState.GOING, RunState.SLURM_UNKNOWN))


@pytest.mark.parametrize("state,job_state,word", [
    (RunState.FINISHED, "COMPLETED", "finished"), (RunState.FAILED, "FAILED", "failed"),
    (RunState.PARKED, "TIMEOUT", "parked"), (RunState.SLURM_UNKNOWN, "", "parked"),
    (RunState.CANCELLED, "CANCELLED", "CANCELLED"), (RunState.GOING, "RUNNING", "RUNNING"),
    (RunState.GOING, "", "no job")])
def test_a_runs_word_in_its_sweeps_summary_comes_from_its_state(state, job_state, word):
    assert run_state.sweep_word(state, job_state) == word
