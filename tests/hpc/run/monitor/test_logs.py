"""hpc/run/monitor/logs.py: where an ended job's logs are, from every source in turn. No Slurm."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hpc.run.monitor.logs import LogFinder
from hpc.run.rundir import RunDir
from hpc.slurm.output import EndedJob
from hpc.slurm.states import JobState
from tests.doubles.ledger_lines import write_record


def job(job_id: str, name: str, workdir: str = "/work", submit_line: str = "sbatch x",
        end: datetime | None = datetime(2020, 1, 1, tzinfo=timezone.utc)) -> EndedJob:
    """A sacct record that ended long ago, so slurmctld is not asked."""
    return EndedJob(job_id, job_id, JobState.FAILED, "1:0", "00:00:01", end, "alice", workdir, submit_line, name)


def test_log_paths_come_from_the_ledger_for_the_launchers_jobs(tmp_path):
    run = RunDir(tmp_path / "runs" / "r1")
    write_record(run, "submit", job_id="11", log_out="/elsewhere/a.out", log_err="/elsewhere/a.err")
    finder = LogFinder(tmp_path / "runs")
    assert finder.find(job("11", "r1")) == ("/elsewhere/a.out", "/elsewhere/a.err")


def test_log_paths_of_a_resubmitted_job_follow_the_run_layout(tmp_path):
    run = RunDir(tmp_path / "runs" / "r1")
    write_record(run, "resubmit", job_id="12", after="11")
    finder = LogFinder(tmp_path / "runs")
    out, err = run.log_paths("12")
    assert finder.find(job("12", "r1", submit_line="sbatch --parsable --dependency=afterany:11")) == (str(out), str(err))


def test_log_paths_come_from_the_sbatch_command_line(tmp_path):
    finder = LogFinder(tmp_path)
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
    finder = LogFinder(tmp_path)
    assert finder.find(job("16", "x", "/w", f"sbatch --parsable {script}")) == ("/logs dir/x-16.out",
                                                                                 "/logs/x-16.err")
    overridden = f"sbatch -o /cli-%j.out {script}"
    assert finder.find(job("17", "x", "/w", overridden)) == ("/cli-17.out", "/logs/x-17.err")
    script_args = f"sbatch --parsable {script.name} -o /its-own-option.out"  # relative to the workdir
    assert finder.find(job("18", "x", str(tmp_path), script_args)) == ("/logs dir/x-18.out", "/logs/x-18.err")


def test_log_paths_fall_back_to_a_run_named_like_the_job_then_to_slurms_default(tmp_path):
    run = RunDir(tmp_path / "runs" / "named")
    run.logs_dir.mkdir(parents=True)
    finder = LogFinder(tmp_path / "runs")
    out, err = run.log_paths("18")
    assert finder.find(job("18", "named")) == (str(out), str(err))
    assert finder.find(job("19", "other", "/w")) == ("/w/slurm-19.out", "/w/slurm-19.out")
    assert finder.find(job("20_3", "../x", "/w")) == ("/w/slurm-20_3.out", "/w/slurm-20_3.out")


def test_slurmctld_is_asked_only_about_recently_ended_jobs():
    recent = datetime.now(timezone.utc) - timedelta(seconds=60)
    assert LogFinder.recently_ended(job("1", "x", end=recent))
    assert LogFinder.recently_ended(job("1", "x", end=None))  # Unknown: still ending
    assert not LogFinder.recently_ended(job("1", "x"))
