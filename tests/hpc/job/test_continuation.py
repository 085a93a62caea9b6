"""hpc.job.continuation: the in-job begin/end hooks and their pure decision (no Slurm:
sbatch and scontrol are replaced by recording fakes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpc.job import begin_hook, end_decision, end_hook, end_slurm, error_line
from hpc.job.exit_codes import EXIT_NOTHING_TO_DO, EXIT_RUN_HELD
from hpc.run import ledger as ledger_module
from hpc.run.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, step_dir
from hpc.run.ledger import Record
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines, write_record
from tests.doubles.slurm_output import queue_text, runs_text
from tests.doubles.step_trainer import safetensors_bytes
from tests.hpc.job.test_end_decision import decide, end, records, start

REPO = Path(__file__).resolve().parents[3]


# -- helpers ---------------------------------------------------------------------------


def save(model: Path, step: int, whole: bool = True) -> None:
    folder = step_dir(model, step)
    folder.mkdir(parents=True)
    (folder / ADAPTER_CONFIG).write_text("{}")
    blob = safetensors_bytes(step)
    (folder / ADAPTER_WEIGHTS).write_bytes(blob if whole else blob[:10])


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path / "run")


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return tmp_path / "art" / "p" / "models" / "m"


class FakeSlurm(list):
    """The sbatch/scontrol calls that act (recorded, not made; sbatch answers job
    501, 502...). Queries are answered from ``show`` (``scontrol show job``) and
    ``sacct`` (the job's State), as a running job sees them by default."""

    show = "JobId=100 JobName=r JobState=RUNNING Reason=None Requeue=1 Restarts=0 BatchFlag=1"
    sacct = "RUNNING\n"

    queue: dict[str, str] = {}  # squeue: job id -> state (hpc/job/successor.py asks)

    def run(self, cmd, **kwargs):
        if cmd[:2] == ["scontrol", "show"]:
            return subprocess.CompletedProcess(cmd, 0, self.show, "")
        if cmd[0] == "squeue":
            job = cmd[cmd.index("-j") + 1]
            return subprocess.CompletedProcess(cmd, 0, queue_text({job: self.queue[job]} if job in self.queue else {}), "")
        if cmd[0] == "sacct":
            job = cmd[cmd.index("-j") + 1]
            return subprocess.CompletedProcess(cmd, 0, runs_text(job, self.sacct.split("\n")[:-1]), "")
        self.append(list(cmd))
        out = f"{500 + sum(1 for c in self if c[0] == 'sbatch')}\n" if cmd[0] == "sbatch" else ""
        return subprocess.CompletedProcess(cmd, 0, out, "")


@pytest.fixture
def slurm_calls(monkeypatch) -> FakeSlurm:
    fake = FakeSlurm()
    monkeypatch.setattr(subprocess, "run", fake.run)
    monkeypatch.setattr(end_slurm.signal, "signal", lambda *a: None)
    no_patience(monkeypatch)
    return fake


def no_patience(monkeypatch) -> None:
    """Hooks that ask Slurm once: no time left to ask again (the retries are tested on their own)."""
    monkeypatch.setattr(end_slurm, "seconds_left", lambda job: 0.0)
    monkeypatch.setattr(end_slurm, "CANCEL_ASK_SECONDS", 0.0)
    monkeypatch.setattr(end_slurm.successor, "ASK_SECONDS", 0.0)


def end_args(run: RunDir, model: Path, rc: int, mode: str = "afterany", job: str = "100",
             max_resubmits: int = 20, max_failures: int = 2) -> end_hook.EndArgs:
    return end_hook.EndArgs(run, model, job, rc, mode, Path("/runs/r/scripts/s.sbatch"), max_resubmits,
                        max_failures, "/runs/r/logs/r-100.err")


def events(run: RunDir) -> list[str]:
    return [r["event"] for r in ledger_lines(run)]


# -- begin ----------------------------------------------------------------------------------


def test_begin_records_the_start_step_and_moves_incomplete_checkpoints_aside(run, model):
    save(model, 0)
    save(model, 1)
    save(model, 2, whole=False)
    assert begin_hook.begin(run, model, "41", 3) == 0
    (record,) = ledger_lines(run)
    assert record["event"] == "job_start" and (record["job_id"], record["step"], record["restart_count"]) == ("41", 1, 3)
    assert not step_dir(model, 2).exists() and len(list((model / "checkpoints_incomplete").iterdir())) == 1


def test_begin_of_a_new_run_starts_at_step_0(run, model):
    assert begin_hook.begin(run, model, "1", 0) == 0
    assert ledger_lines(run)[0]["step"] == 0


@pytest.mark.parametrize("marker", ["done", "failed"])
def test_begin_has_nothing_to_do_for_a_finished_or_failed_run(run, model, marker, capsys):
    run.mark_done(628, 628) if marker == "done" else run.mark_failed("broken", "/x.err")
    assert begin_hook.begin(run, model, "9", 0) == EXIT_NOTHING_TO_DO
    assert ledger_lines(run) == []
    out = capsys.readouterr().out
    assert ("finished at step 628" if marker == "done" else "marked failed (broken)") in out


def test_begin_has_nothing_to_do_for_a_run_that_moved_to_another_cluster_until_it_is_reclaimed(run, model, capsys):
    save(model, 5)
    write_record(run, "moved", to="jureca:/p/runs", step=5, bundle="ab" * 16)
    assert begin_hook.begin(run, model, "9", 0) == EXIT_NOTHING_TO_DO
    assert "moved to jureca:/p/runs at step 5" in capsys.readouterr().out
    assert [r["event"] for r in ledger_lines(run)] == ["moved"]
    write_record(run, "reclaimed", bundle="ab" * 16)
    assert begin_hook.begin(run, model, "9", 0) == 0


def test_begin_closes_a_job_lost_without_its_end_hook(run, model, slurm_calls):
    save(model, 4)
    write_record(run, "job_start", job_id="7", step=2, restart_count=0)
    begin_hook.begin(run, model, "8", 0)
    lost, new = ledger_lines(run)[1:]
    assert lost["event"] == "job_end" and lost["outcome"] == "failed" and lost["step"] == 4 and lost["exit_code"] is None
    assert new["event"] == "job_start" and new["job_id"] == "8" and new["step"] == 4


def test_begin_of_a_job_slurm_requeued_after_losing_it_records_the_requeue(run, model, slurm_calls):
    save(model, 4)
    write_record(run, "job_start", job_id="8", step=2, restart_count=0)
    slurm_calls.sacct = "NODE_FAIL\nRUNNING\n"  # sacct -D: the lost run, then this one
    begin_hook.begin(run, model, "8", 1)
    assert [(r["event"], r.get("by")) for r in ledger_lines(run)[1:]] == [
        ("job_end", None), ("requeue", "slurm"), ("job_start", None)]
    assert ledger_lines(run)[1]["slurm_state"] == "NODE_FAIL"
    assert ledger_lines(run)[-1]["restart_count"] == 1
    assert end_decision.failures_without_progress(records(ledger_lines(run))) == 0  # it had advanced from 2 to 4


# -- end --------------------------------------------------------------------------------------


# -- the successor queued at the start (hpc/job/successor.py) --------------------------------------

SCRIPT = Path("/runs/r/scripts/s.sbatch")


def test_begin_queues_its_successor_afterany_on_itself(run, model, slurm_calls):
    slurm_calls.queue = {"100": "RUNNING"}
    assert begin_hook.begin(run, model, "100", 0, SCRIPT) == 0
    assert slurm_calls == [["sbatch", "--parsable", "--dependency=afterany:100", str(SCRIPT)]]
    assert [(r["event"], r["job_id"], r.get("after")) for r in ledger_lines(run)] == [
        ("job_start", "100", None), ("successor", "501", "100")]


def test_a_requeued_job_keeps_the_successor_that_still_waits_on_it(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"501": "PENDING"}
    begin_hook.begin(run, model, "100", 1, SCRIPT)
    assert not [c for c in slurm_calls if c[0] == "sbatch"]
    assert events(run)[-3:] == ["job_end", "requeue", "job_start"]


@pytest.mark.parametrize("state", ["TIMEOUT", "FAILED", "NODE_FAIL"])
def test_a_successor_records_a_predecessor_lost_without_its_end_hook_with_its_state_and_resumes(
        run, model, slurm_calls, state):
    save(model, 4)
    write_record(run, "submit", job_id="100")
    write_record(run, "job_start", job_id="100", step=2, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.sacct, slurm_calls.queue = f"{state}\n", {"501": "RUNNING"}
    assert begin_hook.begin(run, model, "501", 0, SCRIPT) == 0
    lost, resubmit, start, succ = ledger_lines(run)[3:]
    assert (lost["event"], lost["job_id"], lost["slurm_state"], lost["step"]) == ("job_end", "100", state, 4)
    assert (resubmit["event"], resubmit["job_id"], resubmit["after"], resubmit["by"]) == (
        "resubmit", "501", "100", "successor")
    assert (start["event"], start["step"], succ["event"], succ["after"]) == ("job_start", 4, "successor", "501")


def test_a_job_script_run_outside_slurm_queues_no_successor(run, model, slurm_calls):
    """SLURM_JOB_ID set by hand (a test runs the job script with bash): sbatch would accept a
    dependency on that unknown id and run the script for real, so nothing is submitted; neither
    squeue nor sacct knows the job, and the ledger says so."""
    slurm_calls.sacct = ""
    assert begin_hook.begin(run, model, "4242", 0, SCRIPT) == 0
    assert not [c for c in slurm_calls if c[0] == "sbatch"] and events(run) == ["job_start", "slurm_unknown"]


def test_a_successor_of_a_job_its_user_cancelled_stops_the_run(run, model, slurm_calls):
    write_record(run, "submit", job_id="100")
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.sacct = "CANCELLED by 0\n"
    assert begin_hook.begin(run, model, "501", 0, SCRIPT) == EXIT_NOTHING_TO_DO
    assert events(run)[-2:] == ["job_end", "cancelled"] and not slurm_calls


def test_successors_of_jobs_killed_without_progress_give_up_at_max_failures(run, model, slurm_calls):
    write_record(run, "submit", job_id="100")
    slurm_calls.sacct = "FAILED\n"
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)  # killed (OOM) at step 0
    write_record(run, "job_end", job_id="100", exit_code=None, step=0, outcome="failed")  # closed by 501
    write_record(run, "job_start", job_id="501", step=0, restart_count=0)  # killed the same way
    write_record(run, "successor", job_id="502", after="501")
    limits = begin_hook.Limits(max_resubmits=20, max_failures=2)
    assert begin_hook.begin(run, model, "502", 0, SCRIPT, limits) == EXIT_NOTHING_TO_DO
    assert "2 failed job(s) in a row without progress" in run.read_failed()["reason"]
    assert not [c for c in slurm_calls if c[0] == "sbatch"]


def test_a_successor_exits_at_once_while_its_requeued_predecessor_is_back_in_the_queue(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"100": "PENDING"}
    before = ledger_lines(run)
    assert begin_hook.begin(run, model, "501", 0, SCRIPT) == EXIT_NOTHING_TO_DO
    assert ledger_lines(run) == before and not slurm_calls


def test_a_job_requeued_after_its_successor_began_leaves_the_run_to_it(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "job_end", job_id="100", exit_code=None, step=3, outcome="failed")
    write_record(run, "job_start", job_id="501", step=3, restart_count=0)
    slurm_calls.queue = {"501": "RUNNING"}
    before = ledger_lines(run)
    assert begin_hook.begin(run, model, "100", 1, SCRIPT) == EXIT_NOTHING_TO_DO
    assert ledger_lines(run) == before and not slurm_calls


@pytest.mark.parametrize("marker", ["done", "failed", "cancelled"])
def test_the_successor_of_a_finished_failed_or_cancelled_run_exits_at_once_writing_nothing(
        run, model, slurm_calls, marker):
    write_record(run, "submit", job_id="100")
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    if marker == "done":
        run.mark_done(3)
    elif marker == "failed":
        run.mark_failed("broken")
    else:
        write_record(run, "job_end", job_id="100", exit_code=75, step=2, outcome="stopped_for_time")
        write_record(run, "cancelled", job_id="100")
    before = ledger_lines(run)
    assert begin_hook.begin(run, model, "501", 0, SCRIPT) == EXIT_NOTHING_TO_DO
    assert ledger_lines(run) == before and not slurm_calls


def test_a_launch_after_a_cancel_resumes(run, model, slurm_calls):
    write_record(run, "cancelled", job_id="100")
    write_record(run, "submit", job_id="200")
    assert begin_hook.begin(run, model, "200", 0) == 0


def test_end_continues_through_the_waiting_successor_and_submits_nothing(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"501": "PENDING"}
    assert end_hook.end(end_args(run, model, 75)).action == end_decision.Action.RESUBMIT
    assert slurm_calls == []
    last = ledger_lines(run)[-1]
    assert (last["event"], last["job_id"], last["after"], last["by"]) == ("resubmit", "501", "100", "successor")


def test_end_in_requeue_mode_requeues_and_leaves_the_successor_waiting_on_the_same_id(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"501": "PENDING"}
    end_hook.end(end_args(run, model, 75, mode="requeue"))
    assert slurm_calls == [["scontrol", "requeue", "100"]]
    assert events(run)[-1] == "requeue"


@pytest.mark.parametrize("rc,sacct,last", [(0, "RUNNING\n", "done"), (75, "CANCELLED by 0\n", "cancelled")])
def test_end_of_a_finished_or_cancelled_run_cancels_the_waiting_successor(run, model, slurm_calls, rc, sacct, last):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue, slurm_calls.sacct = {"501": "PENDING"}, sacct
    end_hook.end(end_args(run, model, rc))
    assert slurm_calls == [["scancel", "501"]]
    assert events(run)[-1] == last


def test_end_after_stopping_for_time_resubmits_with_afterany(run, model, slurm_calls):
    save(model, 6)
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    decision = end_hook.end(end_args(run, model, 75))
    assert decision.action == end_decision.Action.RESUBMIT
    assert slurm_calls == [["sbatch", "--parsable", "--dependency=afterany:100", "/runs/r/scripts/s.sbatch"]]
    job_end, resubmit = ledger_lines(run)[1:]
    assert (job_end["exit_code"], job_end["step"], job_end["outcome"]) == (75, 6, "stopped_for_time")
    assert (resubmit["event"], resubmit["job_id"], resubmit["after"]) == ("resubmit", "501", "100")


def test_end_in_requeue_mode_requeues_the_same_job(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    end_hook.end(end_args(run, model, 75, mode="requeue"))
    assert slurm_calls == [["scontrol", "requeue", "100"]]
    assert events(run)[-1] == "requeue" and ledger_lines(run)[-1]["job_id"] == "100"


def test_a_refused_requeue_falls_back_to_afterany(run, model, monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        if cmd[:2] == ["scontrol", "requeue"]:
            calls.append(cmd[0])
            return subprocess.CompletedProcess(cmd, 1, "", "Requeue of job is not allowed")
        if cmd[0] == "sbatch":
            calls.append(cmd[0])
            return subprocess.CompletedProcess(cmd, 0, "777;local\n", "")
        return subprocess.CompletedProcess(cmd, 0, "", "")  # queries: nothing known

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(end_slurm.signal, "signal", lambda *a: None)
    no_patience(monkeypatch)
    end_hook.end(end_args(run, model, 75, mode="requeue"))
    assert calls == ["scontrol", "sbatch"]
    assert events(run)[-1] == "resubmit" and ledger_lines(run)[-1]["job_id"] == "777"
    assert "requeue" not in events(run)


def test_end_of_a_job_slurm_requeued_records_it_and_submits_nothing(run, model, slurm_calls):
    slurm_calls.show = "JobId=100 JobState=COMPLETING Requeue=1 Restarts=1"
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    for mode in ("requeue", "afterany"):
        assert end_hook.end(end_args(run, model, 75, mode=mode)).action == end_decision.Action.REQUEUED
    assert slurm_calls == []
    assert [(r["event"], r.get("by")) for r in ledger_lines(run)[-2:]] == [("job_end", None), ("requeue", "slurm")]


def test_end_of_a_cancelled_job_records_it_and_continues_nothing(run, model, slurm_calls):
    slurm_calls.sacct = "CANCELLED by 1000\n"
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    assert end_hook.end(end_args(run, model, 75, mode="requeue")).action == end_decision.Action.STOP
    assert slurm_calls == [] and events(run)[-2:] == ["job_end", "cancelled"]
    assert not run.failed_file.exists()


def test_end_in_chain_mode_submits_nothing(run, model, slurm_calls):
    end_hook.end(end_args(run, model, 75, mode="chain"))
    assert slurm_calls == [] and events(run) == ["job_end"]


def test_end_of_a_finished_run_records_done_once(run, model, slurm_calls):
    save(model, 10)
    run.mark_done(10, 10)
    end_hook.end(end_args(run, model, 0))
    end_hook.end(end_args(run, model, 0, job="101"))
    assert slurm_calls == []
    assert events(run) == ["job_end", "done", "job_end"]
    assert ledger_lines(run)[1]["step"] == 10


def test_end_of_a_workload_that_exits_0_without_a_done_marker_marks_the_run_done(run, model, slurm_calls):
    save(model, 3)
    end_hook.end(end_args(run, model, 0, mode="requeue"))
    assert slurm_calls == []  # neither requeued nor resubmitted
    assert events(run) == ["job_end", "done"]
    assert ledger_lines(run)[0]["outcome"] == "finished"
    assert run.read_done()["final_step"] == 3


def test_end_gives_up_after_max_failures_without_progress(run, model, slurm_calls):
    for job in ("100", "101"):
        write_record(run, "job_start", job_id=job, step=0, restart_count=0)
        end_hook.end(end_args(run, model, 1, job=job))
    assert [c[0] for c in slurm_calls] == ["sbatch"]
    failed = run.read_failed()
    assert "without progress" in failed["reason"] and failed["log_tail"] == "/runs/r/logs/r-100.err"
    assert events(run)[-1] == "failed" and ledger_lines(run)[-1]["log_tail"] == failed["log_tail"]


def test_end_gives_up_when_the_follow_up_cannot_be_submitted(run, model, monkeypatch):
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "sbatch: error: QOSMaxSubmitJobPerUserLimit"))
    end_hook.end(end_args(run, model, 75))
    assert "QOSMaxSubmitJobPerUserLimit" in run.read_failed()["reason"]


def test_end_gives_up_at_max_resubmits(run, model, slurm_calls):
    write_record(run, "resubmit", job_id="100", after="99")
    end_hook.end(end_args(run, model, 75, max_resubmits=1))
    assert slurm_calls == [] and "--max_resubmits 1" in run.read_failed()["reason"]


# -- command line -------------------------------------------------------------------------------


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpc.job.continuation", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env)


def test_cli_begin_exits_10_for_a_finished_run_and_0_otherwise(run, model):
    base = ["--run_dir", str(run.path), "--model_dir", str(model)]
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "55", "SLURM_RESTART_COUNT": "2"}
    result = run_cli("begin", *base, env=env)
    assert result.returncode == 0, result.stderr
    assert ledger_lines(run)[0] | {"time": None} == {"event": "job_start", "time": None, "job_id": "55", "step": 0,
                                                     "restart_count": 2, "err_offset": 0}
    run.mark_done(3, 3)
    result = run_cli("begin", *base, env=env)
    assert result.returncode == 10 and "nothing to do" in result.stdout


def test_cli_end_in_chain_mode_records_the_end(run, model):
    result = run_cli("end", "--run_dir", str(run.path), "--model_dir", str(model), "--exit_code", "75",
                     "--mode", "chain", "--script", "/x.sbatch", "--max_resubmits", "20", "--max_failures", "2",
                     "--job_id", "t66")  # not a Slurm id: Slurm is not asked
    assert result.returncode == 0, result.stderr
    assert json.loads(run.ledger.read_text())["outcome"] == "stopped_for_time"
    assert "chain mode" in result.stdout


# -- error lines in the records ------------------------------------------------------------------



def test_end_quotes_this_jobs_error_line_in_job_end_failed_json_and_the_ledger(run, model, slurm_calls):
    err = run.log_paths("100")[1]
    err.parent.mkdir(parents=True)
    err.write_text("ValueError: from an earlier run of job 100\n")
    assert begin_hook.begin(run, model, "100", 0) == 0
    line = "preflight check 'judge' failed (permanent): the answer judge j rejects the key (HTTP 401); fix: key"
    with err.open("a") as handle:
        handle.write(f"2026-01-01T00:00:00 [trainer] some warning\n{line}\n")
    args = end_hook.EndArgs(run, model, "100", 78, "afterany", Path("/x.sbatch"), 20, 2, str(err))
    assert end_hook.end(args).action == end_decision.Action.GIVE_UP
    assert slurm_calls == []  # nothing resubmitted: permanent
    job_end, failed_record = ledger_lines(run)[-2:]
    assert job_end["error"] == line and failed_record["event"] == "failed" and failed_record["error"] == line
    failed = run.read_failed()
    assert failed["error"] == line and failed["reason"].endswith(line) and failed["log_tail"] == str(err)


def test_a_job_that_stopped_for_time_records_no_error(run, model, slurm_calls):
    err = run.log_paths("100")[1]
    err.parent.mkdir(parents=True)
    err.write_text("RuntimeError: not this job's end\n")
    end_hook.end(end_args(run, model, 75))
    (job_end,) = [r for r in ledger_lines(run) if r["event"] == "job_end"]
    assert job_end["outcome"] == "stopped_for_time" and "error" not in job_end



# -- when Slurm answers badly (docs/design.md) ----------------------------------------------------------------


class FailingSlurm(FakeSlurm):
    """FakeSlurm whose queries in ``failing`` exit 1 ("Socket timed out"), and whose sbatch fails ``sbatch_failures`` times."""

    failing: set[str] = set()
    sbatch_failures = 0

    def run(self, cmd, **kwargs):
        if cmd[0] in self.failing:
            return subprocess.CompletedProcess(cmd, 1, "", f"{cmd[0]}: error: Socket timed out on send/recv")
        if cmd[0] == "sbatch" and self.sbatch_failures:
            self.sbatch_failures -= 1
            self.append(list(cmd))
            return subprocess.CompletedProcess(cmd, 1, "", "sbatch: error: Resource temporarily unavailable")
        return super().run(cmd, **kwargs)


@pytest.fixture
def bad_slurm(monkeypatch) -> FailingSlurm:
    fake = FailingSlurm()
    monkeypatch.setattr(subprocess, "run", fake.run)
    monkeypatch.setattr(end_slurm.signal, "signal", lambda *a: None)
    no_patience(monkeypatch)
    return fake


def started_with_successor(run: RunDir, job: str = "100", succ: str = "501") -> None:
    write_record(run, "submit", job_id=job, argv=["--job_name", "r"])
    write_record(run, "job_start", job_id=job, step=0, restart_count=0)
    write_record(run, "successor", job_id=succ, after=job)


def test_a_successor_squeue_omits_but_accounting_shows_pending_continues_the_run_and_nothing_is_submitted(
        run, model, bad_slurm):
    started_with_successor(run)
    bad_slurm.queue, bad_slurm.sacct = {}, "PENDING\n"  # squeue answers empty, exit 0
    end_hook.end(end_args(run, model, 75))
    assert not [c for c in bad_slurm if c[0] == "sbatch"]
    assert [(r["job_id"], r.get("by")) for r in ledger_lines(run) if r["event"] == "resubmit"] == [("501", "successor")]


def test_an_end_hook_that_cannot_learn_whether_its_successor_waits_submits_no_second_job(run, model, bad_slurm):
    started_with_successor(run)
    bad_slurm.failing = {"squeue", "sacct"}
    end_hook.end(end_args(run, model, 75))
    assert not [c for c in bad_slurm if c[0] == "sbatch"] and "failed" not in events(run)
    unknown = [r for r in ledger_lines(run) if r["event"] == "slurm_unknown"]
    assert len(unknown) == 1 and "Socket timed out" in unknown[0]["why"] and "follow-up" in unknown[0]["held_back"]


def test_a_term_with_no_usr1_before_it_while_accounting_fails_is_a_cancel_not_a_stop_for_time(run, model, bad_slurm):
    started_with_successor(run)
    bad_slurm.failing = {"sacct"}
    bad_slurm.queue = {"501": "PENDING"}
    args = end_args(run, model, 75)
    decision = end_hook.end(end_hook.EndArgs(**{**args.__dict__, "stop_signal": "TERM"}))
    assert decision.action == end_decision.Action.STOP and "SIGTERM" in decision.reason
    assert events(run)[-1] == "cancelled" and not [c for c in bad_slurm if c[0] == "sbatch"]
    assert [r["signal"] for r in ledger_lines(run) if r["event"] == "job_end"] == ["TERM"]


def test_a_usr1_stop_for_time_goes_on_though_accounting_fails(run, model, bad_slurm):
    started_with_successor(run)
    bad_slurm.failing, bad_slurm.queue = {"sacct"}, {"501": "PENDING"}
    args = end_args(run, model, 75)
    assert end_hook.end(end_hook.EndArgs(**{**args.__dict__, "stop_signal": "USR1"})).action == end_decision.Action.RESUBMIT
    assert events(run)[-1] == "resubmit"


def test_sbatch_refusing_a_moment_is_tried_again_within_the_time_left(run, model, bad_slurm, monkeypatch):
    write_record(run, "submit", job_id="100", argv=["--job_name", "r"])
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    bad_slurm.sbatch_failures = 2
    monkeypatch.setattr(end_slurm, "seconds_left", lambda job: 60.0)
    monkeypatch.setattr(end_slurm.answers.time, "sleep", lambda s: None)
    end_hook.end(end_args(run, model, 75))
    assert len([c for c in bad_slurm if c[0] == "sbatch"]) == 3 and events(run)[-1] == "resubmit"


def test_a_run_given_up_because_slurm_kept_refusing_says_its_error_and_how_to_resume(run, model, bad_slurm):
    write_record(run, "submit", job_id="100", argv=["--job_name", "r", "--cluster", "local"])
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    bad_slurm.sbatch_failures = 5
    end_hook.end(end_args(run, model, 75))
    reason = run.read_failed()["reason"]
    assert "Resource temporarily unavailable" in reason and "--chain" not in reason
    assert "resume with: cd " in reason and "hpc.launch --job_name r --cluster local" in reason


def test_a_job_that_finds_the_run_held_by_another_touches_nothing(run, model, slurm_calls, monkeypatch):
    assert begin_hook.begin(run, model, "100", 0) == 0  # holds the run; its keeper would renew it
    monkeypatch.setattr(begin_hook.lease, "take", lambda *a, **k: begin_hook.lease.Held(begin_hook.lease.read(run)))
    save(model, 3, whole=False)  # a half-written checkpoint the holder is saving
    assert begin_hook.begin(run, model, "200", 0, SCRIPT) == EXIT_RUN_HELD
    assert events(run) == ["job_start", "lease_held"] and ledger_lines(run)[-1]["holder"] == "100"
    assert (step_dir(model, 3) / ADAPTER_WEIGHTS).exists() and not slurm_calls  # not moved aside, nothing queued


def test_the_end_hook_releases_the_run_for_the_next_job(run, model, slurm_calls):
    assert begin_hook.begin(run, model, "100", 0) == 0
    assert not begin_hook.lease.read(run).released
    end_hook.end(end_args(run, model, 75))
    assert begin_hook.lease.read(run).released


def test_a_successor_whose_predecessor_continued_nothing_on_an_unknown_answer_records_that_it_goes_on(
        run, model, slurm_calls):
    started_with_successor(run)
    write_record(run, "job_end", job_id="100", exit_code=75, step=0, outcome="stopped_for_time")
    write_record(run, "slurm_unknown", job_id="100", asked="?", why="squeue failed", waited=30, held_back="submit")
    assert begin_hook.begin(run, model, "501", 0) == 0
    assert [(r["job_id"], r["after"], r["by"]) for r in ledger_lines(run) if r["event"] == "resubmit"] == [
        ("501", "100", "successor")]
