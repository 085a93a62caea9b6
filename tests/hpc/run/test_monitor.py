"""hpc/run/monitor.py, the report program behind the monitoring helpers: parsing
of squeue/sacct output, log path discovery, run directory reading. No Slurm."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from hpc.run import checkpoints as ck
from hpc.run import monitor
from hpc.run.rundir import RunDir
from hpc.slurm.output import EndedJob
from hpc.slurm.states import JobState
from tests.doubles.step_trainer import safetensors_bytes

def test_printable_escapes_control_characters_but_keeps_spaces_quotes_and_pipes():
    assert monitor.printable("a b 'c' |d") == "a b 'c' |d"
    assert monitor.printable("x\ny\t\x1b[31m") == "x\\ny\\t\\x1b[31m"


@pytest.mark.parametrize("seconds, text", [(129002, "1d11h"), (4000, "1h06m"), (59, "0m"), (None, "-"),
                                           ("soon", "-"), (-5, "-")])
def test_duration_is_short_and_readable(seconds, text):
    assert monitor.duration(seconds) == text


def test_table_pads_every_column_but_the_last():
    lines = monitor.table(["A", "NAME"], [["long-cell", "x y"], ["s", "z\nw"]])
    assert lines == ["A          NAME", "long-cell  x y", "s          z\\nw"]


# --- log paths ----------------------------------------------------------------------------


def job(job_id: str, name: str, workdir: str = "/work", submit_line: str = "sbatch x",
        end: datetime | None = datetime(2020, 1, 1, tzinfo=timezone.utc)) -> EndedJob:
    """A sacct record that ended long ago, so slurmctld is not asked."""
    return EndedJob(job_id, job_id, JobState.FAILED, "1:0", "00:00:01", end, "alice", workdir, submit_line, name)


def test_log_paths_come_from_the_ledger_for_the_launchers_jobs(tmp_path):
    run = RunDir(tmp_path / "runs" / "r1")
    run.append_ledger("submit", job_id="11", log_out="/elsewhere/a.out", log_err="/elsewhere/a.err")
    finder = monitor.LogFinder(tmp_path / "runs")
    assert finder.find(job("11", "r1")) == ("/elsewhere/a.out", "/elsewhere/a.err")


def test_log_paths_of_a_resubmitted_job_follow_the_run_layout(tmp_path):
    run = RunDir(tmp_path / "runs" / "r1")
    run.append_ledger("resubmit", job_id="12", after="11")
    finder = monitor.LogFinder(tmp_path / "runs")
    out, err = run.log_paths("12")
    assert finder.find(job("12", "r1", submit_line="sbatch --parsable --dependency=afterany:11")) == (str(out), str(err))


def test_log_paths_come_from_the_sbatch_command_line(tmp_path):
    finder = monitor.LogFinder(tmp_path)
    line = "sbatch --parsable -J n -o logs/%x-%j.out --error=/abs/%u-%A_%a.err --wrap echo -o nope"
    assert finder.find(job("13", "n", "/w", line)) == ("/w/logs/n-13.out", "/abs/alice-13_4294967294.err")
    only_out = "sbatch -o/tmp/%j.log --wrap true"
    assert finder.find(job("14", "n", "/w", only_out)) == ("/tmp/14.log", "/tmp/14.log")
    only_err = "sbatch -e err-%j.txt --wrap true"
    assert finder.find(job("15", "n", "/w", only_err)) == ("/w/slurm-15.out", "/w/err-15.txt")


def test_log_paths_come_from_the_scripts_sbatch_lines(tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH --output='/logs dir/%x-%j.out'  # out\n"
                      "#SBATCH -e /logs/%x-%j.err\necho hi\n#SBATCH -o /ignored.out\n")
    finder = monitor.LogFinder(tmp_path)
    assert finder.find(job("16", "x", "/w", f"sbatch --parsable {script}")) == ("/logs dir/x-16.out",
                                                                                 "/logs/x-16.err")
    overridden = f"sbatch -o /cli-%j.out {script}"
    assert finder.find(job("17", "x", "/w", overridden)) == ("/cli-17.out", "/logs/x-17.err")
    script_args = f"sbatch --parsable {script.name} -o /its-own-option.out"  # relative to the workdir
    assert finder.find(job("18", "x", str(tmp_path), script_args)) == ("/logs dir/x-18.out", "/logs/x-18.err")


def test_log_paths_fall_back_to_a_run_named_like_the_job_then_to_slurms_default(tmp_path):
    run = RunDir(tmp_path / "runs" / "named")
    run.logs_dir.mkdir(parents=True)
    finder = monitor.LogFinder(tmp_path / "runs")
    out, err = run.log_paths("18")
    assert finder.find(job("18", "named")) == (str(out), str(err))
    assert finder.find(job("19", "other", "/w")) == ("/w/slurm-19.out", "/w/slurm-19.out")
    assert finder.find(job("20_3", "../x", "/w")) == ("/w/slurm-20_3.out", "/w/slurm-20_3.out")


def test_slurmctld_is_asked_only_about_recently_ended_jobs():
    recent = datetime.now(timezone.utc) - timedelta(seconds=60)
    assert monitor.LogFinder.recently_ended(job("1", "x", end=recent))
    assert monitor.LogFinder.recently_ended(job("1", "x", end=None))  # Unknown: still ending
    assert not monitor.LogFinder.recently_ended(job("1", "x"))


# --- run directories -------------------------------------------------------------------------


def test_the_checkpoint_column_is_the_latest_complete_checkpoint_of_the_jobs_model_dir(tmp_path):
    model = tmp_path / "art dir" / "proj" / "models" / "m"
    for step in (2, 3):
        folder = ck.step_dir(model, step)
        folder.mkdir(parents=True)
        (folder / ck.ADAPTER_CONFIG).write_text(json.dumps({"r": 8}))
        (folder / ck.ADAPTER_WEIGHTS).write_bytes(safetensors_bytes(step))
    torn = ck.step_dir(model, 4)
    torn.mkdir()
    (torn / ck.ADAPTER_CONFIG).write_text("{")
    script = tmp_path / "job.sbatch"
    script.write_text(f"#!/bin/bash\nexport HPC_MODEL_DIR='{model}'\n")
    records = [{"event": "submit", "job_id": "1", "script": str(script)}]
    assert monitor.model_dir_of(records) == model
    assert monitor.checkpoint_text(records) == "3"
    assert monitor.checkpoint_text([{"event": "submit", "job_id": "1", "script": "/no/such"}]) == "-"


def test_a_run_shows_its_running_job_rather_than_newer_chained_ones():
    assert monitor.pick_job(["1", "2", "3"], {"1": "RUNNING", "2": "PENDING", "3": "PENDING"}) == "1"
    assert monitor.pick_job(["1", "2"], {}) == "2"
    assert monitor.pick_job([], {}) == ""
    records = [{"event": "submit", "job_id": "5"}, {"event": "resubmit", "job_id": "6", "after": "5"},
               {"event": "job_start", "job_id": "5"}, {"event": "done", "step": 3}]
    assert monitor.ledger_job_ids(records) == ["6", "5"]


def test_runs_moved_aside_by_restart_are_listed_only_by_name(tmp_path):
    for name in ("r1", "r1.20261122T101010Z", "r.2"):
        RunDir(tmp_path / name).append_ledger("submit", job_id="1")
    (tmp_path / "not-a-run").mkdir()
    assert [r.name for r in monitor.run_dirs(tmp_path)] == ["r.2", "r1"]
    assert [r.name for r in monitor.run_dirs(tmp_path, "r1.20261122T101010Z")] == ["r1.20261122T101010Z"]


def test_unreadable_markers_and_torn_ledgers_do_not_break_a_row(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.ledger.write_text('{"event": "submit", "job_id": "9"}\n7\n{"event": "requeue", "job_id": "9"}\n{"torn')
    run.progress_file.write_text("[1, 2]")
    os.mkdir(run.done_file)  # a directory where a file should be
    row = monitor.run_row(run, "9", "RUNNING", monitor.ledger(run))
    assert row == ["r", "9", "RUNNING", "-", "-", "-", "-", "-", "-", 1, "-"]


def test_the_validation_column_shows_the_latest_accuracy_and_the_best_step(tmp_path):
    run = RunDir(tmp_path / "r")
    for step, accuracy in ((0, 0.4), (30, 0.9), (60, 0.85)):
        run.record_validation({"step": step, "accuracy": accuracy}, [])
    assert monitor.validation_text(run) == "85%@60 best@30"
    assert monitor.validation_text(RunDir(tmp_path / "none")) == "-"


def test_monitor_refuses_unknown_commands_with_exit_2(capsys):
    assert monitor.main(["bogus"]) == 2
    assert "bad arguments" in capsys.readouterr().err


def test_a_run_counts_as_cancelled_only_until_it_is_launched_again():
    cancelled = [{"event": "submit", "job_id": "1"}, {"event": "job_end", "job_id": "1"},
                 {"event": "cancelled", "job_id": "1"}]
    assert monitor.cancelled_by_user(cancelled)
    assert not monitor.cancelled_by_user([*cancelled, {"event": "submit", "job_id": "2"}])
    assert not monitor.cancelled_by_user([])


def test_a_sweeps_name_lists_its_runs(tmp_path):
    from hpc.run.rundir import SweepDir

    SweepDir(tmp_path / "sw").write_record({"sweep": "sw", "runs": [{"name": "sw.seed=1"}, {"name": "sw.seed=2"}]})
    for name in ("sw.seed=1", "sw.seed=2", "sw.seed=3", "other"):
        RunDir(tmp_path / name).append_ledger("submit", job_id="1")
    assert [r.name for r in monitor.run_dirs(tmp_path, "sw")] == ["sw.seed=1", "sw.seed=2"]
    assert "sw" not in [r.name for r in monitor.run_dirs(tmp_path)]  # the sweep's own folder is no run


def test_a_sweeps_runs_are_grouped_after_the_runs_on_their_own(tmp_path):
    views = []
    for name, sweep in (("b.seed=1", "b"), ("alone", None), ("b.seed=2", "b"), ("a.x=1", "a")):
        run = RunDir(tmp_path / name)
        run.path.mkdir()
        if sweep:
            run.write_sweep_member(sweep, {"seed": name[-1]})
        views.append(monitor.RunView(run, [], "", "RUNNING" if name == "b.seed=1" else "", None, []))
    RunDir(tmp_path / "b.seed=2").mark_done(5, 5)
    groups = monitor.by_sweep(views)
    assert [(sweep, [v.run_dir.name for v in group]) for sweep, group in groups] == [
        ("", ["alone"]), ("a", ["a.x=1"]), ("b", ["b.seed=1", "b.seed=2"])]
    assert monitor.sweep_summary(groups[2][1]) == "2 runs: 1 RUNNING, 1 finished"
