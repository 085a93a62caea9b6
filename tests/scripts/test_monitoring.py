"""The job monitoring helpers (status.sh, sfail.sh, scompleted.sh, scancelled.sh,
scancelall.sh, rmlogs.sh): argument handling and error messages with stand-in
Slurm commands, then the real local Slurm with accounting, on temporary runs
directories laid out as hpc/run/rundir.py says.

Every real job here carries a name prefix unique to this test run and is
cancelled in teardown, so tests running at the same time on the cluster (same
user!) are unaffected; scancelall.sh is only ever run with --name."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hpc.run import lease
from hpc.run.monitor.display import printable
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import write_record
from tests.hpc.slurm_helpers import launch
from tests.scripts.slurm_util import (
    REPO,
    SCRIPTS,
    bin_without_slurm,
    calls,
    cancel,
    fake_slurm,
    run_script,
    sbatch,
    unique_prefix,
    wait_final,
    wait_running,
)

HELPERS = ["status.sh", "sfail.sh", "scompleted.sh", "scancelled.sh", "scancelall.sh", "rmlogs.sh"]
SACCT_VIEWS = ["sfail.sh", "scompleted.sh", "scancelled.sh"]


def user() -> str:
    return subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()


# --- every helper, no Slurm needed -------------------------------------------------------


@pytest.mark.parametrize("helper", HELPERS)
def test_help_prints_usage(helper, tmp_path):
    result = run_script(helper, "-h", env={"PATH": str(bin_without_slurm(tmp_path / "bin"))})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage:") and result.stderr == ""


@pytest.mark.parametrize("helper", HELPERS)
def test_every_helper_runs_with_set_euo_pipefail_before_anything_else(helper):
    code = [line for line in (SCRIPTS / helper).read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert code[0] == "set -euo pipefail"


@pytest.mark.parametrize("helper, args, needle", [
    ("status.sh", ["--watch", "soon"], "bad --watch 'soon' (accepted: a whole number from 1 to 86400)"),
    ("status.sh", ["--watch", "0"], "bad --watch '0'"),
    ("status.sh", ["--count", "2"], "--count needs --watch"),
    ("status.sh", ["--watch", "1", "--count", "x"], "bad --count 'x'"),
    ("status.sh", ["--run", ""], "bad --run ''"),
    ("status.sh", ["--run", "../x"], "bad --run '../x'"),
    ("status.sh", ["--bogus"], "unknown argument '--bogus' (accepted: --run NAME"),
    ("sfail.sh", ["-n", "-3"], "bad -n '-3' (accepted: a whole number from 0 to 10000)"),
    ("sfail.sh", ["-S"], "-S needs a value"),
    ("sfail.sh", ["-S", ""], "bad -S ''"),
    ("sfail.sh", ["--name", ""], "bad --name '' (accepted: a non-empty job-name prefix)"),
    ("scompleted.sh", ["-n", "3"], "unknown argument '-n' (accepted: -S TIME, --name PREFIX"),
    ("scancelled.sh", ["x"], "unknown argument 'x'"),
    ("scancelall.sh", ["--name"], "--name needs a value"),
    ("scancelall.sh", ["--name="], "bad --name ''"),
    ("scancelall.sh", ["--sweep"], "--sweep needs a value"),
    ("scancelall.sh", ["--yes-please"], "unknown argument '--yes-please' (accepted: --name PREFIX, --sweep NAME, -y, -h)"),
    ("rmlogs.sh", ["--days", "two"], "bad --days 'two' (accepted: a whole number from 0 to 100000)"),
    ("rmlogs.sh", ["--days", "99999999999999999999"], "bad --days '99999999999999999999'"),
])
def test_bad_usage_is_one_line_naming_the_value_and_exit_2(helper, args, needle, tmp_path):
    # No Slurm on the PATH: usage errors come first, before any check of the cluster.
    result = run_script(helper, *args, env={"PATH": str(bin_without_slurm(tmp_path / "bin"))})
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is missing (.ci/run installs it: apt-get install shellcheck)")
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    files = [str(SCRIPTS / name) for name in ["common.sh", *HELPERS]]
    result = subprocess.run(["shellcheck", "-x", *files], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout


def _args_without_slurm(helper: str, runs: Path) -> list[str]:
    return ["-y", "--name", "x"] if helper == "scancelall.sh" else ["--runs_dir", str(runs)]


@pytest.mark.parametrize("helper", HELPERS)
def test_missing_slurm_is_one_clear_error(helper, tmp_path):
    result = run_script(helper, *_args_without_slurm(helper, tmp_path),
                        env={"PATH": str(bin_without_slurm(tmp_path / "bin"))})
    assert result.returncode == 1
    assert "not found: the Slurm client commands are not installed or not on PATH" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


@pytest.mark.parametrize("helper", SACCT_VIEWS)
@pytest.mark.parametrize("sacct_exit", [0, 1])
def test_missing_accounting_is_one_clear_error(helper, sacct_exit, tmp_path):
    env = fake_slurm(tmp_path)
    sacct = Path(env["PATH"]) / "sacct"
    sacct.write_text(f"#!/bin/sh\necho 'sacct: Slurm accounting storage is disabled' >&2\nexit {sacct_exit}\n")
    result = run_script(helper, "--runs_dir", str(tmp_path), env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"{helper}: error: Slurm accounting is not available (sacct: Slurm accounting "
                                     "storage is disabled); this view needs slurmdbd")


@pytest.mark.parametrize("helper", SACCT_VIEWS)
def test_a_sacct_that_fails_for_a_moment_is_not_called_accounting_not_available(helper, tmp_path):
    env = fake_slurm(tmp_path)
    sacct = Path(env["PATH"]) / "sacct"
    sacct.write_text("#!/bin/sh\necho 'sacct: error: Socket timed out on send/recv operation' >&2\nexit 1\n")
    result = run_script(helper, "--runs_dir", str(tmp_path), env=env)
    assert result.returncode == 1 and "not available" not in result.stderr
    assert result.stderr.strip() == (f"{helper}: error: sacct did not answer (error: Socket timed out on send/recv "
                                     "operation): Slurm's accounting is unknown for now; try again in a minute")


def test_status_with_a_sacct_that_fails_for_a_moment_shows_the_runs_marked_not_accounting_not_available(tmp_path):
    env = fake_slurm(tmp_path / "fake")
    (Path(env["PATH"]) / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Socket timed out on send/recv "
                                             "operation' >&2\nexit 1\n")
    _progress_run(tmp_path / "runs", "r1", "5", step=1, total_steps=2)
    result = run_script("status.sh", "--runs_dir", str(tmp_path / "runs"), env=env)
    assert result.returncode == 1 and "not available" not in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Socket timed out" in result.stderr
    assert "ACCOUNTING UNKNOWN (sacct did not answer)" in result.stdout
    assert _row(result.stdout, "r1")[:4] == ["r1", "5", "-", "1/2"]


@pytest.mark.parametrize("sacct_exit", [0, 1])
def test_status_without_accounting_shows_the_runs_marked_and_says_why_in_one_line(sacct_exit, tmp_path):
    env = fake_slurm(tmp_path / "fake")
    (Path(env["PATH"]) / "sacct").write_text(f"#!/bin/sh\necho 'sacct: Slurm accounting storage is disabled' >&2\n"
                                             f"exit {sacct_exit}\n")
    _progress_run(tmp_path / "runs", "r1", "5", step=1, total_steps=2)
    result = run_script("status.sh", "--runs_dir", str(tmp_path / "runs"), env=env)
    assert result.returncode == 1
    assert result.stderr.strip() == ("status.sh: error: Slurm accounting is not available (sacct: Slurm accounting "
                                     "storage is disabled); this view needs slurmdbd")
    assert "ACCOUNTING UNKNOWN (sacct did not answer)" in result.stdout
    assert _row(result.stdout, "r1")[:4] == ["r1", "5", "-", "1/2"]


def test_status_shows_the_runs_marked_when_squeue_does_not_answer(tmp_path):
    env = fake_slurm(tmp_path / "fake", states={"5": "COMPLETED"})
    (Path(env["PATH"]) / "squeue").write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm "
                                              "controller (connect failure)' >&2\nexit 1\n")
    _progress_run(tmp_path / "runs", "r1", "5", step=1, total_steps=2)
    result = run_script("status.sh", "--runs_dir", str(tmp_path / "runs"), env=env)
    assert result.returncode == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "squeue failed: squeue: error: Unable to contact slurm controller" in result.stderr
    assert "Queued and running jobs of" in result.stdout and "UNKNOWN (squeue failed" in result.stdout
    assert "SLURM QUEUE UNKNOWN (squeue did not answer)" in result.stdout
    assert _row(result.stdout, "r1")[:4] == ["r1", "5", "COMPLETED", "1/2"]


def test_status_asks_squeue_once_and_sacct_at_most_once_whatever_the_number_of_runs(tmp_path):
    env = fake_slurm(tmp_path / "fake", states={str(job): "COMPLETED" for job in range(10, 30)})
    for job in range(10, 30):
        _progress_run(tmp_path / "runs", f"r{job}", str(job), step=1, total_steps=2)
    result = run_script("status.sh", "--runs_dir", str(tmp_path / "runs"), env=env)
    assert result.returncode == 0, result.stderr
    names = [c[0] for c in calls(tmp_path / "fake")]
    assert names.count("squeue") == 1 and names.count("sacct") == 1, names
    (sacct,) = [c for c in calls(tmp_path / "fake") if c[0] == "sacct"]
    assert sacct[sacct.index("-j") + 1].split(",") == [str(job) for job in range(10, 30)]


def test_a_failing_slurm_command_is_one_clear_error(tmp_path):
    env = fake_slurm(tmp_path)
    (Path(env["PATH"]) / "squeue").write_text("#!/bin/sh\necho 'squeue: error: Unable to contact slurm "
                                              "controller (connect failure)' >&2\nexit 1\n")
    for helper, args in [("status.sh", ["--runs_dir", str(tmp_path)]), ("scancelall.sh", ["--name", "x", "-y"]),
                         ("rmlogs.sh", ["--runs_dir", str(tmp_path)])]:
        result = run_script(helper, *args, env=env)
        assert result.returncode == 1, (helper, result.stderr)
        assert "squeue failed: squeue: error: Unable to contact slurm controller" in result.stderr, helper
        assert len(result.stderr.splitlines()) == 1, (helper, result.stderr)


# --- common.sh in a user's shell -----------------------------------------------------------


def test_sourcing_common_gives_an_alias_for_each_helper_and_keeps_shell_options(tmp_path):
    aliases = {"hstatus": "status.sh", "sfail": "sfail.sh", "scompleted": "scompleted.sh",
               "scancelled": "scancelled.sh", "scancelall": "scancelall.sh", "rmlogs": "rmlogs.sh",
               "localslurm": "local_slurm.sh"}
    lines = [f'source "{SCRIPTS}/common.sh"', 'echo "opts=$-"', "false", "echo still-here"]
    lines += [f"{alias} -h | head -n 1 | sed 's/^/{alias}: /'" for alias in aliases]
    # An interactive shell (aliases expand) started elsewhere: the aliases must not depend on the cwd.
    result = subprocess.run(["bash", "--norc", "-i", "-c", "\n".join(lines)], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    assert "still-here" in result.stdout, result.stderr
    opts = next(line for line in result.stdout.splitlines() if line.startswith("opts="))
    assert not set("eu") & set(opts.split("=", 1)[1])
    for alias, helper in aliases.items():
        assert re.search(rf"^{alias}: Usage: {re.escape(helper)}", result.stdout, re.M), (alias, result.stdout)


# --- the runs directory: the launcher's -------------------------------------------------------


@pytest.mark.parametrize("helper", ["status.sh", "scompleted.sh", "rmlogs.sh"])
def test_default_runs_dir_is_the_launchers(helper, tmp_path):
    """Vista's dotenv sets RUNS_DIR=${SCRATCH}/art-runs: without --runs_dir the
    helper looks exactly where the launcher's dry run says the run goes."""
    env = {**fake_slurm(tmp_path / "fake"), "HPC_HOSTNAME": "login1.vista", "SCRATCH": str(tmp_path / "scratch")}
    preview = subprocess.run([sys.executable, "-m", "hpc.launch", "--job_name", "r1", "--time_limit", "10", "--dry_run"],
                             cwd=REPO, capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert preview.returncode == 0, preview.stderr
    launcher_runs = Path(re.search(r"^run dir:\s+(.+)$", preview.stdout, re.M).group(1)).parent
    assert launcher_runs == tmp_path / "scratch" / "art-runs"
    _progress_run(launcher_runs, "r1", "5", step=1, total_steps=2)
    result = run_script(helper, env=env)
    assert result.returncode == 0, result.stderr
    shown = {"status.sh": f"Runs under {launcher_runs}:", "scompleted.sh": f"(runs dir: {launcher_runs})",
             "rmlogs.sh": f"under {launcher_runs};"}[helper]
    assert shown in result.stdout, result.stdout


def test_a_default_runs_dir_the_dotenv_cannot_resolve_is_one_clear_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SCRATCH"}
    env.update(fake_slurm(tmp_path), HPC_HOSTNAME="login1.vista")  # vista.env: RUNS_DIR=${SCRATCH}/art-runs
    result = subprocess.run(["bash", str(SCRIPTS / "rmlogs.sh")], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith("rmlogs.sh: error: cannot work out the launcher's runs directory: ")
    assert "${SCRATCH}" in result.stderr and result.stderr.rstrip().endswith("(pass --runs_dir DIR)")
    assert len(result.stderr.splitlines()) == 1


# --- status.sh with stand-in Slurm commands ---------------------------------------------------


def _progress_run(runs: Path, name: str, job: str, **progress) -> RunDir:
    run = RunDir(runs / name)
    write_record(run, "submit", job_id=job, log_out=str(run.log_paths(job)[0]), log_err=str(run.log_paths(job)[1]))
    if progress:
        run.write_progress(progress)
    return run


def _row(text: str, first: str) -> list[str]:
    """The table row that starts with `first`, split on runs of 2+ spaces."""
    line = next((row for row in text.splitlines() if row.startswith(first + " ")), None)
    assert line is not None, f"no row for {first!r} in:\n{text}"
    return re.split(r"\s{2,}", line)


def test_status_lists_the_queue_and_one_line_per_run(tmp_path):
    runs = tmp_path / "runs"
    running = _progress_run(runs, "r-train", "101", step=212, total_steps=628, reward_mean=0.83, eta_seconds=129002)
    write_record(running, "requeue", job_id="101")
    write_record(running, "resubmit", job_id="102", after="101")
    done = _progress_run(runs, "r-done", "90", step=9, total_steps=10)
    done.mark_done(10, 10)
    failed = _progress_run(runs, "r-failed", "80", step=3, total_steps=10, eta_seconds=60)
    failed.mark_failed("2 failed job(s) in a row without progress", "/x.err")
    stopped = _progress_run(runs, "r-stopped", "60", step=4, total_steps=10, eta_seconds=60)
    write_record(stopped, "job_end", job_id="60", exit_code=75, step=4, outcome="stopped_for_time")
    write_record(stopped, "cancelled", job_id="60")
    _progress_run(runs, "r-done.20261101T000000Z", "70")  # moved aside by --restart
    jobs = [{"i": "102", "T": "PENDING", "r": "Dependency", "M": "0:00", "l": "2-00:00:00", "D": "1", "N": "",
             "j": "r-train", "F": "102"},
            {"i": "101", "T": "RUNNING", "r": "None", "M": "1:02:03", "l": "2-00:00:00", "D": "2", "N": "n[1-2]",
             "j": "r-train", "F": "101"},
            {"i": "103", "T": "RUNNING", "r": "None", "M": "5:00", "l": "1:00:00", "D": "1", "N": "n1",
             "j": "odd 'name' |x\nline2", "F": "103"}]
    env = fake_slurm(tmp_path / "fake", jobs=jobs, states={"90": "COMPLETED", "80": "FAILED", "60": "CANCELLED"})

    result = run_script("status.sh", "--runs_dir", str(runs), env=env)
    assert result.returncode == 0, result.stderr
    queue, table = result.stdout.split("\n\n", 1)
    assert _row(queue, "101") == ["101", "RUNNING", "-", "1:02:03/2-00:00:00", "2", "n[1-2]", "r-train"]
    assert _row(queue, "102") == ["102", "PENDING", "Dependency", "0:00/2-00:00:00", "1", "-", "r-train"]
    assert _row(queue, "103")[-1] == "odd 'name' |x\\nline2"
    assert table.startswith(f"Runs under {runs}:\nRUN ")
    assert _row(table, "r-train") == ["r-train", "101", "RUNNING", "212/628", "-", "0.830", "-", "1d11h", "-", "2",
                                      "-"]
    assert _row(table, "r-done") == ["r-done", "90", "COMPLETED", "10/10", "-", "-", "-", "-", "-", "0", "finished"]
    assert _row(table, "r-failed")[-1] == "failed: 2 failed job(s) in a row without progress"
    assert _row(table, "r-failed")[7] == "-"  # no ETA for a run that is over
    assert _row(table, "r-stopped") == ["r-stopped", "60", "CANCELLED", "4/10", "-", "-", "-", "-", "-", "0",
                                        "cancelled (launch again to resume)"]
    assert "20261101T000000Z" not in table
    squeue_calls = [c for c in calls(tmp_path / "fake") if c[0] == "squeue"]
    assert squeue_calls and all(c[c.index("-u") + 1] == user() for c in squeue_calls)

    only = run_script("status.sh", "--runs_dir", str(runs), "--run", "r-done", env=env)
    assert only.returncode == 0, only.stderr
    queue, table = only.stdout.split("\n\n", 1)
    assert "none" in queue and "101" not in queue and "103" not in queue
    assert [row.split()[0] for row in table.splitlines()[2:]] == ["r-done"]
    missing = run_script("status.sh", "--runs_dir", str(runs), "--run", "nope", env=env)
    assert missing.returncode == 2 and f"bad --run 'nope' (accepted: the name of a run directory under {runs})" \
        in missing.stderr


@pytest.mark.parametrize("make", [lambda p: p.write_text("x"), os.mkfifo, lambda p: p.symlink_to("/dev/null")],
                         ids=["file", "fifo", "device"])
def test_status_refuses_a_runs_dir_that_is_no_directory_in_one_line(tmp_path, make):
    not_a_folder = tmp_path / "runs"
    make(not_a_folder)
    result = run_script("status.sh", "--runs_dir", str(not_a_folder), env=fake_slurm(tmp_path / "fake"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"status.sh: bad --runs_dir '{not_a_folder}': not a directory (accepted: a directory of runs)\n"


CORRUPT = {  # a run's file -> what a crash, an edit or a neighbour left there, and how status names it
    "validation.jsonl": (b'[1, 2]\n{"step": 1, "accuracy": "high"}\n', "validation.jsonl line 1: not a JSON object (a list)"),
    "progress.json": (b'{"step": NaN, "total_steps": 10}', "progress.json: NaN is not a number JSON allows"),
    "ledger.jsonl": (b"\xff\xfe\x00\x01" * 50 + b"\n", "ledger.jsonl line 1: not UTF-8 text"),
    "steps.jsonl": (b"[" * 5000 + b"\n", "steps.jsonl line 1: JSON nested too deeply"),
    "done.json": (b'{"final_step": Infinity}', "done.json: Infinity is not a number JSON allows"),
}


@pytest.mark.parametrize("name", CORRUPT)
def test_one_corrupt_run_is_marked_unreadable_and_every_other_run_is_shown(tmp_path, name):
    runs = tmp_path / "runs"
    _progress_run(runs, "a-sound", "90", step=3, total_steps=10)
    corrupt = _progress_run(runs, "b-corrupt", "91", step=1, total_steps=10)
    _progress_run(runs, "c-sound", "92", step=7, total_steps=10)
    text, named = CORRUPT[name]
    (corrupt.path / name).write_bytes(text)
    result = run_script("status.sh", "--runs_dir", str(runs), env=fake_slurm(tmp_path / "fake"))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert _row(result.stdout, "a-sound")[3] == "3/10" and _row(result.stdout, "c-sound")[3] == "7/10"
    assert _row(result.stdout, "b-corrupt")[-1].startswith("UNREADABLE: ")
    assert "Traceback" not in result.stdout
    below = result.stdout.split("\nUnreadable records, skipped (the rest of each run is shown above):\n")[1]
    assert "unreadable record(s) skipped: " in below and named in below


def test_status_names_a_parked_run_with_the_job_that_ended_it_and_the_command_that_resumes_it(tmp_path):
    """r-parked: its job 13 ended TIMEOUT without its end hook (its node lost at the time limit) and
    no job of it is queued: not finished, failed or cancelled, so nothing continues it."""
    runs = tmp_path / "runs"
    run = _progress_run(runs, "r-parked", "13", step=5, total_steps=25, eta_seconds=600)
    run.ledger.write_text(run.ledger.read_text().replace('"job_id": "13"', '"job_id": "13", "argv": '
                                                         '["--job_name", "r-parked", "--time_limit", "2"]'))
    write_record(run, "job_start", job_id="13", step=0, restart_count=0)
    write_record(run, "successor", job_id="14", after="13")  # cancelled by an administrator, say
    waiting = _progress_run(runs, "r-waiting", "20", step=5, total_steps=25)
    write_record(waiting, "job_start", job_id="20", step=0, restart_count=0)
    write_record(waiting, "successor", job_id="21", after="20")
    jobs = [{"i": "21", "T": "PENDING", "r": "Dependency", "M": "0:00", "l": "2:00", "D": "1", "N": "",
             "j": "r-waiting"}]
    env = fake_slurm(tmp_path / "fake", jobs=jobs, states={"13": "TIMEOUT", "14": "CANCELLED", "20": "FAILED"})

    result = run_script("status.sh", "--runs_dir", str(runs), env=env)
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n", 1)[1]
    row = _row(table, "r-parked")
    assert row[-1] == "PARKED: job 13 ended TIMEOUT and nothing continues the run" and row[7] == "-"  # no ETA
    assert _row(table, "r-waiting")[-1] == "-"  # its successor waits in the queue: it continues
    assert ("Parked runs (no job queued, not finished, failed or cancelled): launch again to resume\n"
            f"  r-parked: cd {REPO} && .venv/bin/python -m hpc.launch --job_name r-parked --time_limit 2") in table


def _sacct_time(seconds_ago: float) -> str:
    """A time as sacct prints it without a zone, in UTC: hpc/slurm asks with TZ=UTC0."""
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%S")


def _utc(seconds_ago: float) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)).isoformat(timespec="seconds")


def test_status_shows_gpu_hours_goodput_and_health_flags_from_one_sacct_call(tmp_path):
    """r-stuck: job 201 has run 40 minutes on 2 GPUs, made ten 60 s steps without any reward
    spread and none in the last 20 minutes; r-ok: job 202 ran 10 minutes and finished."""
    runs = tmp_path / "runs"
    stuck = RunDir(runs / "r-stuck")
    stuck.path.mkdir(parents=True)
    stuck.ledger.write_text(f'{{"event": "submit", "job_id": "201", "cluster": "local", "time": "{_utc(2460)}"}}\n')
    stuck.write_progress({"step": 10, "total_steps": 40, "eta_seconds": 1800})
    stuck.steps_file.write_text("".join(
        f'{{"step": {k + 1}, "seconds": 60, "ended": "{_utc(1200 + 60 * (9 - k))}", "job_id": "201", '
        '"reward_spread": 0.0}\n' for k in range(10)))
    ok = RunDir(runs / "r-ok")
    ok.path.mkdir(parents=True)
    ok.ledger.write_text(f'{{"event": "submit", "job_id": "202", "cluster": "local", "time": "{_utc(2460)}"}}\n')
    ok.mark_done(5, 5)
    row = {"Submit": _sacct_time(2460), "Eligible": _sacct_time(2460), "NNodes": "1",
           "AllocTRES": "billing=2,cpu=2,gres/gpu=2,node=2"}
    states = {"201": {**row, "State": "RUNNING", "Start": _sacct_time(2400), "End": "Unknown", "ElapsedRaw": "2400"},
              "202": {**row, "State": "COMPLETED", "Start": _sacct_time(1200), "End": _sacct_time(600),
                      "ElapsedRaw": "600", "AllocTRES": "cpu=1,gres/gpu=1,node=1"}}
    jobs = [{"i": "201", "T": "RUNNING", "r": "None", "M": "40:00", "l": "2:00:00", "D": "1", "N": "n1",
             "j": "r-stuck"}]
    env = fake_slurm(tmp_path / "fake", jobs=jobs, states=states)

    result = run_script("status.sh", "--runs_dir", str(runs), env=env)
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n", 1)[1]
    stuck_row = _row(table, "r-stuck")
    assert stuck_row[:10] == ["r-stuck", "201", "RUNNING", "10/40", "-", "-", "-", "30m", "1.33", "0"]
    assert stuck_row[10].startswith("STALLED: no step for 20m")
    assert "; COLLAPSED: reward spread at most 0.01 for the last 10 steps: each group's rollouts" in stuck_row[10]
    assert _row(table, "r-ok")[8:] == ["0.167", "0", "finished"]
    assert re.search(r"^GPU-hours \(python -m hpc.accounting RUN for the breakdown\):\n"
                     r"  r-ok: goodput 0\.00, 0\.167 GPU-h charged, 0\.167 lost \(start-up 0\.167\), queued 2\dm\d\ds\n"
                     r"  r-stuck: goodput 0\.25, 1\.33 GPU-h charged, 1 lost \(start-up 0\.333, stalled 0\.66\d\), "
                     r"queued (59s|1m0\ds), 0\.066\d GPU-h/step, ~2 GPU-h to finish$", table, re.M), table
    sacct_calls = [c for c in calls(tmp_path / "fake") if c[0] == "sacct" and "-j" in c]
    assert len(sacct_calls) == 1 and sacct_calls[0][sacct_calls[0].index("-j") + 1] == "201,202"

    patient = run_script("status.sh", "--runs_dir", str(runs), env={**env, "HPC_STALL_MIN": "1500"})
    assert "STALLED" not in patient.stdout and "COLLAPSED" in patient.stdout
    # Not flagged yet: the 20 minutes since its last step are the step in flight, neither lost nor productive.
    assert "r-stuck: goodput 0.50, 1.33 GPU-h charged, 0.333 lost (start-up 0.333)" in patient.stdout
    bad = run_script("status.sh", "--runs_dir", str(runs), env={**env, "HPC_COLLAPSE_STEPS": "many"})
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("status.sh: invalid HPC_COLLAPSE_STEPS 'many': accepted a whole number >= 1 "
                                  "(default 10)")


def test_status_watch_refreshes_until_its_count(tmp_path):
    runs = tmp_path / "runs"
    run = _progress_run(runs, "r1", "5", step=1, total_steps=4)
    env = fake_slurm(tmp_path / "fake")
    proc = subprocess.Popen(["bash", str(SCRIPTS / "status.sh"), "--runs_dir", str(runs), "--watch", "1",
                             "--count", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    first = ""
    while "(every 1s; Ctrl-C to stop)" not in first:
        line = proc.stdout.readline()
        assert line, "status.sh ended before its first screen"
        first += line
    run.write_progress({"step": 2, "total_steps": 4})  # between the two screens
    second, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "r1   5    -      1/4" in first and "r1   5    -      2/4" in second
    assert second.count("(every 1s; Ctrl-C to stop)") == 1  # two screens in all, then it ends
    assert "\033[2J" not in first + second  # no terminal: no clear-screen codes in a file or pipe


# --- rmlogs.sh ---------------------------------------------------------------------------------


def _aged(path: Path, days: float, text: str = "x\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    then = time.time() - days * 86400
    os.utime(path, (then, then))
    return path


def test_rmlogs_lists_then_removes_only_old_logs_of_ended_jobs(tmp_path):
    runs = tmp_path / "logs" / "runs"  # a runs dir below a directory called logs
    run = RunDir(runs / "old run")
    old = [_aged(run.logs_dir / "old run-11.out", 20), _aged(run.logs_dir / "old run-11.err", 20, "y" * 4096)]
    queued = _aged(run.logs_dir / "old run-12.out", 20)  # its job is still queued (requeued: appends)
    new = _aged(run.logs_dir / "old run-13.out", 3)
    keep = [_aged(run.ledger, 20), _aged(run.progress_file, 20), _aged(run.path / "art" / "x.out", 20),
            _aged(run.path / "checkpoints" / "0010" / "x.err", 20), _aged(run.logs_dir / "notes.txt", 20),
            _aged(run.logs_dir / "nested" / "deep-1.out", 20)]
    env = fake_slurm(tmp_path / "fake", jobs=[{"i": "12", "F": "12"}])

    listed = run_script("rmlogs.sh", "--runs_dir", str(runs), env=env)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "Would remove (run with -f to remove):", *[f"  {p}" for p in sorted(map(str, old))],
        f"2 log(s) older than 14 day(s) under {runs}; would free 4 KiB",
        "kept 1 log(s) of jobs still queued or running"]
    assert all(p.exists() for p in [*old, queued, new, *keep]), "listing must not remove anything"

    removed = run_script("rmlogs.sh", "--runs_dir", str(runs), "-f", env=env)
    assert removed.returncode == 0, removed.stderr
    assert not any(p.exists() for p in old)
    assert all(p.exists() for p in [queued, new, *keep])
    assert f"removed {old[0]}" in removed.stdout and "freed 4 KiB" in removed.stdout

    everything = run_script("rmlogs.sh", "--runs_dir", str(runs), "-d", "0", "-f", env=env)
    assert everything.returncode == 0 and not new.exists() and queued.exists()


def test_rmlogs_never_follows_a_symlinked_logs_dir(tmp_path):
    outside = _aged(tmp_path / "elsewhere" / "x-1.out", 30)
    (tmp_path / "runs" / "r").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "logs").symlink_to(outside.parent)
    result = run_script("rmlogs.sh", "--runs_dir", str(tmp_path / "runs"), "-f", env=fake_slurm(tmp_path / "f"))
    assert result.returncode == 0 and outside.exists() and "0 log(s)" in result.stdout


# --- scancelall.sh with stand-in Slurm commands ---------------------------------------------------


def test_scancelall_lists_and_cancels_only_the_users_jobs(tmp_path):
    jobs = [{"i": "7", "T": "RUNNING", "j": "pre one"}, {"i": "8", "T": "PENDING", "j": "pre|two\nx"},
            {"i": "9", "T": "RUNNING", "j": "other"}]
    env = fake_slurm(tmp_path, jobs=jobs)
    result = run_script("scancelall.sh", "--name", "pre", "-y", env=env)
    assert result.returncode == 0, result.stderr
    assert "2 job(s) of" in result.stdout and "pre|two?x" in result.stdout and "cancelled 2 job(s)" in result.stdout
    (squeue,) = [c for c in calls(tmp_path) if c[0] == "squeue"]
    (scancel,) = [c for c in calls(tmp_path) if c[0] == "scancel"]
    assert squeue[squeue.index("-u") + 1] == user()
    assert scancel == ["scancel", "-u", user(), "7", "8"]


def test_scancelall_sweep_cancels_the_jobs_of_every_run_and_pack_of_the_sweep(tmp_path):
    jobs = [{"i": "7", "T": "RUNNING", "j": "sw.pack1"}, {"i": "8", "T": "PENDING", "j": "sw.seed=3"},
            {"i": "9", "T": "RUNNING", "j": "sweeper"}, {"i": "10", "T": "RUNNING", "j": "sw"}]
    env = fake_slurm(tmp_path, jobs=jobs)
    result = run_script("scancelall.sh", "--sweep", "sw", "-y", env=env)
    assert result.returncode == 0, result.stderr
    (scancel,) = [c for c in calls(tmp_path) if c[0] == "scancel"]
    assert scancel == ["scancel", "-u", user(), "7", "8"]


def test_scancelall_asks_and_cancels_nothing_unless_told_yes(tmp_path):
    env = fake_slurm(tmp_path, jobs=[{"i": "7", "T": "RUNNING", "j": "pre one"}])
    for answer in ["n\n", "\n", ""]:
        result = run_script("scancelall.sh", "--name", "pre", input=answer, env=env)
        assert result.returncode == 1 and "nothing cancelled" in result.stdout
        assert "7" in result.stdout and "pre one" in result.stdout
    assert not [c for c in calls(tmp_path) if c[0] == "scancel"]
    result = run_script("scancelall.sh", "--name", "pre", input="yes\n", env=env)
    assert result.returncode == 0 and [c for c in calls(tmp_path) if c[0] == "scancel"]


# --- against the real local Slurm ---------------------------------------------------------------


def _run_dir(runs: Path, name: str) -> RunDir:
    run = RunDir(runs / name)
    run.logs_dir.mkdir(parents=True, exist_ok=True)
    return run


def _submit_into(run: RunDir, *wrap: str, extra: tuple[str, ...] = (), log_name: str = "%x-%j") -> str:
    """A plain job writing its logs into the run (the launcher's %x-%j layout by default)."""
    job = sbatch("-J", run.name, "-o", str(run.logs_dir / f"{log_name}.out"),
                 "-e", str(run.logs_dir / f"{log_name}.err"), "-D", str(run.path), *extra, "--wrap", " ".join(wrap))
    write_record(run, "submit", job_id=job, cluster="local", script="-", git_commit="-", argv=[])
    return job


@pytest.fixture(scope="module")
def ended_jobs(slurm, tmp_path_factory):
    """A run launched by hpc.launch that completes, a plain job that completes
    with its log outside any run, two that fail (one with spaces, quotes, '|',
    '$' and a newline in its name) and one cancelled while running."""
    runs = tmp_path_factory.mktemp("runs")
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    prefix = unique_prefix("mon")
    dirs = {"bad": _run_dir(runs, f"{prefix}-bad"), "odd": _run_dir(runs, f"{prefix} odd 'name' |x $y\nz"),
            "cx": _run_dir(runs, f"{prefix}-cx")}
    jobs: dict[str, str] = {}
    try:
        launched = launch("--cluster", "local", "--job_name", f"{prefix}-launched", "--time_limit", "5",
                          "--runs_dir", str(runs), "--gpus_per_node", "0", "--entrypoint", "tests.doubles.step_trainer",
                          "--train_arg", "steps=2", "--train_arg", "step_seconds=0.1")
        assert launched.returncode == 0, launched.stderr
        jobs["launched"] = re.search(r"submitted job (\d+)", launched.stdout).group(1)
        dirs["launched"] = RunDir(runs / f"{prefix}-launched")
        jobs["plain"] = sbatch("-J", f"{prefix}-plain", "-o", str(elsewhere / "%x.%j.log"), "--wrap", "echo hi")
        jobs["bad"] = _submit_into(dirs["bad"], "echo boom-marker >&2; exit 3")
        # A fixed log name: the newline stays in the job name, not in a file name.
        jobs["odd"] = _submit_into(dirs["odd"], "echo odd-marker >&2; exit 4", log_name="odd-%j")
        jobs["cx"] = _submit_into(dirs["cx"], "echo started; sleep 300")
        try:
            wait_running([jobs["cx"]], timeout=60)
        finally:
            cancel([jobs["cx"]])
        wait_final(list(jobs.values()))
        yield {"runs": runs, "prefix": prefix, "jobs": jobs, "dirs": dirs, "elsewhere": elsewhere}
    finally:
        cancel(list(jobs.values()))


def _has_row(text: str, job: str, *cells: str) -> bool:
    """A table row for this job id whose next cells are these (columns are padded)."""
    pattern = r"\s+".join([re.escape(job), *map(re.escape, cells)])
    return re.search(rf"^{pattern}(\s|$)", text, re.M) is not None


def _view(helper: str, ended_jobs, *args: str) -> subprocess.CompletedProcess:
    return run_script(helper, "--runs_dir", str(ended_jobs["runs"]), "--name", ended_jobs["prefix"], *args)


def _ids_in(text: str) -> set[str]:
    return set(re.findall(r"^(\d+)\s", text, re.M))


@pytest.mark.slurm
def test_scompleted_lists_completed_jobs_with_slurms_log_paths(ended_jobs):
    result = _view("scompleted.sh", ended_jobs)
    assert result.returncode == 0, result.stderr
    jobs, text = ended_jobs["jobs"], result.stdout
    assert _ids_in(text) == {jobs["launched"], jobs["plain"]}
    assert _has_row(text, jobs["launched"], "COMPLETED", "0:0")
    out, err = ended_jobs["dirs"]["launched"].log_paths(jobs["launched"])
    assert f"out: {out}\n  err: {err}\n" in text  # both exist: no "(missing)"
    plain_log = ended_jobs["elsewhere"] / f"{ended_jobs['prefix']}-plain.{jobs['plain']}.log"
    assert plain_log.read_text() == "hi\n" and f"out: {plain_log}\n" in text


@pytest.mark.slurm
def test_sfail_lists_failed_jobs_with_exit_code_logs_and_error_tail(ended_jobs):
    result = _view("sfail.sh", ended_jobs, "-n", "3")
    assert result.returncode == 0, result.stderr
    jobs, dirs, text = ended_jobs["jobs"], ended_jobs["dirs"], result.stdout
    assert _ids_in(text) == {jobs["bad"], jobs["odd"]}
    assert _has_row(text, jobs["bad"], "FAILED", "3:0")
    out, err = dirs["bad"].log_paths(jobs["bad"])
    assert f"out: {out}\n  err: {err}\n  last 1 line(s) of the error log:\n    | boom-marker\n" in text
    # The odd name stays on its own row, escaped; its logs and tail come through.
    assert _has_row(text, jobs["odd"], "FAILED", "4:0")
    odd_row = next(line for line in text.splitlines() if line.startswith(jobs["odd"] + " "))
    assert odd_row.endswith(printable(dirs["odd"].name)) and "\\nz" in odd_row
    odd_err = dirs["odd"].logs_dir / f"odd-{jobs['odd']}.err"
    assert f"err: {printable(odd_err)}\n" in text and "| odd-marker" in text


@pytest.mark.slurm
def test_scancelled_lists_the_cancelled_job_with_its_logs(ended_jobs):
    result = _view("scancelled.sh", ended_jobs)
    assert result.returncode == 0, result.stderr
    jobs, cx = ended_jobs["jobs"], ended_jobs["dirs"]["cx"]
    assert _ids_in(result.stdout) == {jobs["cx"]}
    assert _has_row(result.stdout, jobs["cx"], "CANCELLED")
    out, err = cx.log_paths(jobs["cx"])
    assert f"out: {out}\n" in result.stdout and f"err: {err}" in result.stdout
    assert "started" in out.read_text()


@pytest.mark.slurm
def test_sacct_views_cover_seven_days_by_default_and_S_moves_the_window(ended_jobs):
    default = _view("sfail.sh", ended_jobs, "-n", "0")
    assert default.returncode == 0 and "since now-7days" in default.stdout
    assert ended_jobs["jobs"]["bad"] in _ids_in(default.stdout)
    later = _view("sfail.sh", ended_jobs, "-S", "now")
    assert later.returncode == 0, later.stderr
    assert _ids_in(later.stdout) == set() and later.stdout.rstrip().endswith(": 0")


@pytest.mark.slurm
def test_bad_start_time_exits_2(slurm, tmp_path):
    result = run_script("sfail.sh", "-S", "yesterday-ish", "--runs_dir", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == ("sfail.sh: bad -S 'yesterday-ish' (accepted: a time sacct accepts, "
                                     "e.g. now-3days, 2026-11-01, 2026-11-01T08:00)")


@pytest.mark.slurm
def test_status_shows_a_launched_runs_step_checkpoint_and_result(ended_jobs):
    name = f"{ended_jobs['prefix']}-launched"
    result = run_script("status.sh", "--runs_dir", str(ended_jobs["runs"]), "--run", name)
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n", 1)[1]
    assert _row(table, name) == [name, ended_jobs["jobs"]["launched"], "COMPLETED", "2/2", "2", "-", "-", "-", "0",
                                 "0", "finished"]  # GPU-H 0: a job without GPUs


@pytest.mark.slurm
def test_status_shows_a_queued_job_and_its_runs_progress(slurm, tmp_path):
    prefix = unique_prefix("st")
    run = _run_dir(tmp_path, f"{prefix} run")
    jobs: list[str] = []
    try:
        jobs.append(_submit_into(run, "sleep 300", extra=("-t", "5")))
        wait_running(jobs)  # both tables then see the same state (it may not change between them)
        write_record(run, "job_start", job_id=jobs[0], step=200, restart_count=0)
        write_record(run, "requeue", job_id=jobs[0])
        run.write_progress({"step": 212, "total_steps": 628, "epoch": 1, "reward_mean": 0.83,
                            "seconds_per_step": 310.2, "eta_seconds": 129002})

        result = run_script("status.sh", "--runs_dir", str(tmp_path))
        assert result.returncode == 0, result.stderr
        queue, table = result.stdout.split("\n\n", 1)
        job, state, reason, elapsed, nodes, nodelist, job_name = _row(queue, jobs[0])
        assert job_name == run.name and nodes == "1" and re.fullmatch(r"\d+:\d\d/5:00", elapsed)
        assert (state, reason) == ("RUNNING", "-") and re.fullmatch(r"n\d+", nodelist)
        assert _row(table, run.name) == [run.name, jobs[0], "RUNNING", "212/628", "-", "0.830", "-", "1d11h", "0",
                                         "1", "-"]
    finally:
        cancel(jobs)


def _queued(prefix: str) -> set[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i\x1f%j\x1e"], capture_output=True, text=True).stdout
    records = [r.lstrip("\n").split("\x1f", 1) for r in out.split("\x1e") if "\x1f" in r]
    return {job for job, name in records if name.startswith(prefix)}


@pytest.mark.slurm
def test_scancelall_cancels_exactly_the_matching_jobs(slurm):
    prefix = unique_prefix("ca")
    jobs: list[str] = []
    try:
        def submit(name: str) -> str:
            jobs.append(sbatch("-J", name, "-o", "/dev/null", "-t", "5", "--wrap", "sleep 300"))
            return jobs[-1]
        match = {submit(f"{prefix}-x one"), submit(f"{prefix}-x|two"), submit(f"{prefix}-x\nthree")}
        other = {submit(f"{prefix}-y"), submit(f"Z{prefix}-x")}

        declined = run_script("scancelall.sh", "--name", f"{prefix}-x", input="n\n")
        assert declined.returncode == 1 and "nothing cancelled" in declined.stdout
        listed = {line.split()[0] for line in declined.stdout.splitlines() if line.startswith("  ")}
        assert listed == match and f"{prefix}-x?three" in declined.stdout
        assert _queued(prefix) | _queued(f"Z{prefix}") == match | other

        result = run_script("scancelall.sh", "-y", "--name", f"{prefix}-x")
        assert result.returncode == 0, result.stderr
        assert "cancelled 3 job(s)" in result.stdout
        rows = wait_final(sorted(match))
        assert {row["State"] for row in rows.values()} == {"CANCELLED"}
        assert _queued(prefix) | _queued(f"Z{prefix}") == other

        none_left = run_script("scancelall.sh", "-y", "--name", f"{prefix}-x")
        assert none_left.returncode == 0 and "no jobs of" in none_left.stdout
    finally:
        cancel(jobs)


def test_status_calls_a_run_whose_running_job_squeue_omits_slurm_state_unknown_not_parked(tmp_path):
    """squeue answers empty (slurmctld failing over) while accounting still has job 13 RUNNING and job 21
    (a successor) PENDING, and a job holds another run's lease: none is PARKED, and no resume command
    (a second job) is offered."""
    runs = tmp_path / "runs"
    run = _progress_run(runs, "r-omitted", "13", step=5, total_steps=25)
    write_record(run, "job_start", job_id="13", step=0, restart_count=0)
    held = _progress_run(runs, "r-held", "30", step=2, total_steps=25)
    write_record(held, "job_start", job_id="30", step=0, restart_count=0)
    write_record(held, "job_end", job_id="30", exit_code=75, step=2, outcome="stopped_for_time")
    lease.take(held, "31", 0, os.getpid())
    waiting = _progress_run(runs, "r-waiting", "20", step=5, total_steps=25)
    write_record(waiting, "job_start", job_id="20", step=0, restart_count=0)
    write_record(waiting, "successor", job_id="21", after="20")
    write_record(waiting, "job_end", job_id="20", exit_code=75, step=5, outcome="stopped_for_time")
    env = fake_slurm(tmp_path / "fake", jobs=[], states={"13": "RUNNING", "30": "COMPLETED", "20": "COMPLETED",
                                                          "21": "PENDING"})
    result = run_script("status.sh", "--runs_dir", str(runs), env=env)
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("\n\n", 1)[1]
    assert _row(table, "r-omitted")[-1] == ("Slurm state unknown: squeue omits job(s) of the run: "
                                            "13 (RUNNING as far as sacct knows)")
    assert _row(table, "r-held")[-1].startswith("Slurm state unknown: squeue shows no job, but job 31 (restart 0)")
    assert _row(table, "r-waiting")[-1] == ("Slurm state unknown: squeue omits job(s) of the run: "
                                            "21 (PENDING as far as sacct knows)")
    assert "Parked runs" not in table
