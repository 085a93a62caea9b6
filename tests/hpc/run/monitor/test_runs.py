"""hpc/run/monitor/runs.py: a run's row in status.sh (its job, checkpoint, validation, result) and
how a sweep's runs are grouped. No Slurm."""

from __future__ import annotations

import json
import os

from hpc.run import checkpoints as ck
from hpc.run import ledger
from hpc.run.monitor import run_state, runs, runs_table
from hpc.run.rundir import RunDir
from tests.doubles.step_trainer import safetensors_bytes


def test_the_checkpoint_column_is_the_latest_complete_checkpoint_of_the_model_folder_the_run_owns(tmp_path):
    model = tmp_path / "art dir" / "proj" / "models" / "m"
    for step in (2, 3):
        folder = ck.step_dir(model, step)
        folder.mkdir(parents=True)
        (folder / ck.ADAPTER_CONFIG).write_text(json.dumps({"r": 8}))
        (folder / ck.ADAPTER_WEIGHTS).write_bytes(safetensors_bytes(step))
    torn = ck.step_dir(model, 4)
    torn.mkdir()
    (torn / ck.ADAPTER_CONFIG).write_text("{")
    run = RunDir(tmp_path / "runs" / "r")
    assert runs.checkpoint_text(run) == "-", "no model.json yet (never launched)"
    run.write_model_record({"model_dir": str(model), "claimed": "2026-11-01T00:00:00+00:00"})
    assert runs.checkpoint_text(run) == "3"
    run.write_model_record({"model_dir": str(tmp_path / "no" / "such")})
    assert runs.checkpoint_text(run) == "-"
    run.model_record_file.write_text("[not, json")
    assert runs.checkpoint_text(run) == "-"


def test_a_run_without_job_scripts_shows_the_checkpoint_of_the_model_dir_it_claimed(tmp_path):
    model = tmp_path / "art" / "email_agent" / "models" / "seed1"
    folder = ck.step_dir(model, 5)
    folder.mkdir(parents=True)
    (folder / ck.ADAPTER_CONFIG).write_text(json.dumps({"r": 8}))
    (folder / ck.ADAPTER_WEIGHTS).write_bytes(safetensors_bytes(5))
    run = RunDir(tmp_path / "runs" / "seed1")  # bench/learning_curve.py's: trainer.train, no Slurm job
    run.path.mkdir(parents=True)
    assert runs.checkpoint_text(run) == "-"
    run.write_model_record({"model_dir": str(model)})
    assert runs.checkpoint_text(run) == "5"


def test_a_run_shows_its_running_job_rather_than_newer_chained_ones():
    assert runs.pick_job(["1", "2", "3"], {"1": "RUNNING", "2": "PENDING", "3": "PENDING"}) == "1"
    assert runs.pick_job(["1", "2"], {}) == "2"
    assert runs.pick_job([], {}) == ""


def test_unreadable_markers_and_torn_ledgers_do_not_break_a_row(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.ledger.write_text('{"event": "submit", "job_id": "9"}\n7\n{"event": "requeue", "job_id": "9"}\n{"torn')
    run.progress_file.write_text("[1, 2]")
    os.mkdir(run.done_file)  # a directory where a file should be
    row = runs.run_row(run, "9", "RUNNING", ledger.readable(run))
    assert row == ["r", "9", "RUNNING", "-", "-", "-", "-", "-", "-", 1, "-"]


def test_the_validation_column_shows_the_latest_and_the_best_accuracy_with_their_steps(tmp_path):
    run = RunDir(tmp_path / "r")
    for step, accuracy in ((0, 0.4), (30, 0.9), (60, 0.85)):
        run.record_validation({"step": step, "accuracy": accuracy}, [])
    assert runs.validation_text(run) == "85%@60 best 90%@30"
    assert runs.validation_text(RunDir(tmp_path / "none")) == "-"


def test_the_result_column_shows_the_decline_rules_last_decision_and_a_declined_finish(tmp_path):
    from hpc.run.ledger import Decline

    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    ledger.append(run, Decline(action="rollback", step=52, accuracy=0.7, best_step=20, best_accuracy=0.98,
                               reason="held-out accuracy fell", rollback=1, to_step=53, lr_scale=0.5))
    row = runs.run_row(run, "9", "RUNNING", ledger.readable(run))
    assert row[-1] == ("ROLLED BACK at step 52 to step 20 as step 53, lr x0.5 (rollback 1): "
                       "held-out accuracy fell")
    run.mark_done(72, 100, reason="declined: held-out accuracy fell", steps_left=28)
    assert runs.run_row(run, "9", "COMPLETED", ledger.readable(run))[-1] == (
        "finished (declined: held-out accuracy fell)")


def test_a_sweeps_runs_are_grouped_after_the_runs_on_their_own(tmp_path):
    views = []
    for name, sweep in (("b.seed=1", "b"), ("alone", None), ("b.seed=2", "b"), ("a.x=1", "a")):
        run = RunDir(tmp_path / name)
        run.path.mkdir()
        if sweep:
            run.write_sweep_member(sweep, {"seed": name[-1]})
    RunDir(tmp_path / "b.seed=2").mark_done(5, 5)
    for name in ("b.seed=1", "alone", "b.seed=2", "a.x=1"):
        run = RunDir(tmp_path / name)
        views.append(runs.computed(run, [], "", "RUNNING" if name == "b.seed=1" else "", runs.accounting.account(
            name, runs.accounting.RunFiles.read(run), [], None), [], None))
    groups = runs_table.by_sweep(views)
    assert [(sweep, [v.run_dir.name for v in group]) for sweep, group in groups] == [
        ("", ["alone"]), ("a", ["a.x=1"]), ("b", ["b.seed=1", "b.seed=2"])]
    assert runs_table.sweep_summary(groups[2][1]) == "2 runs: 1 RUNNING, 1 finished"


def test_a_moved_run_shows_where_it_went_and_an_arrived_one_that_it_waits_for_its_launch_here(tmp_path):
    from tests.doubles.ledger_lines import write_record

    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    write_record(run, "submit", job_id="9", cluster="vista", argv=["--job_name", "r"])
    write_record(run, "moved", to="jureca:/p/runs", step=5, bundle="ab" * 16)
    records = ledger.read(run)
    row = runs.run_row(run, "9", "COMPLETED", records, parked_run=run_state.parked(run, records, {}, {}))
    assert row[-1].startswith("MOVED to jureca:/p/runs at step 5") and row[7] == "-"

    arrived = RunDir(tmp_path / "b")
    arrived.path.mkdir()
    write_record(arrived, "submit", job_id="9", cluster="vista", argv=["--job_name", "r"])
    write_record(arrived, "moved_in", source="vista:/w/runs/r", step=5, bundle="ab" * 16)
    records = ledger.read(arrived)
    assert run_state.parked(arrived, records, {}, {}) is None  # job 9 was vista's
    row = runs.run_row(arrived, "", "", records)
    assert row[-1] == "MOVED in at step 5 from vista:/w/runs/r: launch it here to continue"
