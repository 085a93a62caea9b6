"""hpc.job.continuation: the in-job begin/end hooks and their pure decision (no Slurm:
sbatch and scontrol are replaced by recording fakes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpc.job import continuation as cont
from hpc.job.exit_codes import EXIT_NOTHING_TO_DO, EXIT_RUN_HELD
from hpc.run import ledger as ledger_module
from hpc.run.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, step_dir
from hpc.run.ledger import Record
from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines, write_record
from tests.doubles.slurm_output import queue_text, runs_text
from tests.doubles.step_trainer import safetensors_bytes

REPO = Path(__file__).resolve().parents[3]


# -- helpers ---------------------------------------------------------------------------


def records(lines: list[dict]) -> list[Record]:
    """Ledger lines (the file's format) as hpc/run/ledger.py reads them."""
    return ledger_module.parse(lines)


def start(job: str, step: int) -> dict:
    return {"event": "job_start", "job_id": job, "step": step, "restart_count": 0}


def end(job: str, step: int, outcome: str, exit_code: int = 1) -> dict:
    return {"event": "job_end", "job_id": job, "exit_code": exit_code, "step": step, "outcome": outcome}


def decide(ledger: list[dict], *, done: bool = False, mode: str = "afterany", max_resubmits: int = 20,
           max_failures: int = 2, slurm: cont.SlurmView | None = None) -> cont.Decision:
    return cont.decide(records(ledger), done=done, mode=mode, max_resubmits=max_resubmits, max_failures=max_failures,
                       slurm=slurm or cont.SlurmView())


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
    monkeypatch.setattr(cont.signal, "signal", lambda *a: None)
    no_patience(monkeypatch)
    return fake


def no_patience(monkeypatch) -> None:
    """Hooks that ask Slurm once: no time left to ask again (the retries are tested on their own)."""
    monkeypatch.setattr(cont, "seconds_left", lambda job: 0.0)
    monkeypatch.setattr(cont, "CANCEL_ASK_SECONDS", 0.0)
    monkeypatch.setattr(cont.successor, "ASK_SECONDS", 0.0)


def end_args(run: RunDir, model: Path, rc: int, mode: str = "afterany", job: str = "100",
             max_resubmits: int = 20, max_failures: int = 2) -> cont.EndArgs:
    return cont.EndArgs(run, model, job, rc, mode, Path("/runs/r/scripts/s.sbatch"), max_resubmits,
                        max_failures, "/runs/r/logs/r-100.err")


def events(run: RunDir) -> list[str]:
    return [r["event"] for r in ledger_lines(run)]


# -- pure decision ------------------------------------------------------------------------


@pytest.mark.parametrize("rc,done,outcome", [
    (0, True, "finished"), (75, True, "finished"), (75, False, "stopped_for_time"),
    (0, False, "finished"), (1, False, "failed"), (137, False, "failed"), (1, True, "failed"),
])
def test_outcome_of_exit_code(rc, done, outcome):
    assert cont.outcome_of(rc, done) == outcome


def test_done_finishes_whatever_the_rest_of_the_ledger_says():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 0, "failed")]
    assert decide(ledger, done=True).action == cont.FINISH


@pytest.mark.parametrize("mode,action", [("requeue", cont.REQUEUE), ("afterany", cont.RESUBMIT),
                                         ("chain", cont.NONE)])
def test_stopped_for_time_continues_by_the_modes_means(mode, action):
    ledger = [start("1", 0), end("1", 12, "stopped_for_time", 75)]
    decision = decide(ledger, mode=mode)
    assert decision.action == action
    if mode != "chain":
        assert "stopped for time; continuation 1 of at most 20" == decision.reason


def test_a_failure_with_progress_continues():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 5, "failed")]
    assert decide(ledger, max_failures=1).action == cont.RESUBMIT


def test_failures_without_progress_give_up_at_max_failures():
    ledger = [start("1", 3), end("1", 3, "failed")]
    assert decide(ledger).action == cont.RESUBMIT
    ledger += [start("2", 3), end("2", 3, "failed", 1)]
    decision = decide(ledger)
    assert decision.action == cont.GIVE_UP
    assert "2 failed job(s) in a row without progress (--max_failures 2); last exit code 1" == decision.reason


def test_a_stopped_or_progressing_job_breaks_the_failure_streak():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 4, "stopped_for_time", 75),
              start("3", 4), end("3", 4, "failed")]
    assert cont.failures_without_progress(records(ledger)) == 1
    assert decide(ledger).action == cont.RESUBMIT


def test_requeued_jobs_keep_their_id_and_pair_with_their_latest_start():
    ledger = [start("7", 0), end("7", 9, "stopped_for_time", 75), {"event": "requeue", "job_id": "7"},
              start("7", 9), end("7", 9, "failed"), {"event": "requeue", "job_id": "7"},
              start("7", 9), end("7", 9, "failed")]
    assert cont.failures_without_progress(records(ledger)) == 2
    assert decide(ledger, mode="requeue").action == cont.GIVE_UP


def test_chain_mode_still_gives_up_on_a_broken_run():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 0, "failed")]
    assert decide(ledger, mode="chain").action == cont.GIVE_UP


def test_max_resubmits_bounds_the_continuations():
    ledger = [start("1", 0), end("1", 3, "stopped_for_time", 75), {"event": "resubmit", "job_id": "2", "after": "1"},
              start("2", 3), end("2", 6, "stopped_for_time", 75), {"event": "requeue", "job_id": "2"},
              start("2", 6), end("2", 9, "stopped_for_time", 75)]
    assert ledger_module.continuations(records(ledger)) == 2
    assert decide(ledger, max_resubmits=3).action == cont.RESUBMIT
    decision = decide(ledger, max_resubmits=2)
    assert decision.action == cont.GIVE_UP and "--max_resubmits 2" in decision.reason
    assert decide(ledger, mode="chain", max_resubmits=0).action == cont.NONE  # chain: pre-submitted, not counted


def test_a_job_slurm_already_requeued_is_not_continued_again():
    ledger = [start("1", 0), end("1", 4, "stopped_for_time", 75)]
    for mode in ("requeue", "afterany", "chain"):
        assert decide(ledger, mode=mode, slurm=cont.SlurmView(requeued=True)).action == cont.REQUEUED


def test_a_cancelled_job_stops_the_run_without_marking_it_failed():
    ledger = [start("1", 0), end("1", 4, "stopped_for_time", 75)]
    for mode in ("requeue", "afterany", "chain"):
        decision = decide(ledger, mode=mode, slurm=cont.SlurmView(cancelled=True))
        assert decision.action == cont.STOP and "launch again to resume" in decision.reason
    assert decide(ledger, done=True, slurm=cont.SlurmView(cancelled=True)).action == cont.FINISH


def test_a_broken_run_is_given_up_even_when_slurm_requeued_its_job():
    ledger = [start("1", 0), end("1", 0, "failed"), start("1", 0), end("1", 0, "failed")]
    assert decide(ledger, mode="requeue", slurm=cont.SlurmView(requeued=True)).action == cont.GIVE_UP


def test_chain_mode_names_the_next_job_or_says_the_chain_is_used_up():
    ledger = [{"event": "submit", "job_id": "1"}, {"event": "chain", "job_id": "2", "after": "1"},
              start("1", 0), end("1", 3, "stopped_for_time", 75)]
    assert "pre-submitted job 2 continues" in decide(ledger, mode="chain").reason
    ledger += [start("2", 3), end("2", 6, "stopped_for_time", 75)]
    decision = decide(ledger, mode="chain")
    assert decision.action == cont.NONE and "last pre-submitted job: launch again" in decision.reason


def test_a_job_end_without_a_start_counts_as_no_progress():
    assert cont.failures_without_progress(records([end("1", 5, "failed"), end("2", 5, "failed")])) == 2


def test_unclosed_start_finds_a_job_lost_before_its_end_hook():
    assert cont.unclosed_start(records([start("1", 0), end("1", 2, "stopped_for_time")])) is None
    assert cont.unclosed_start(records([start("1", 0), end("1", 2, "stopped_for_time"), start("2", 2)])).job_id == "2"
    assert cont.unclosed_start(records([])) is None


@pytest.mark.parametrize("show,sacct,restart_count,view", [
    ("JobId=7 JobState=RUNNING Restarts=0", "RUNNING\n", 0, cont.SlurmView()),
    # `scontrol requeue` (an admin, preemption): seen inside the job as COMPLETING, Restarts up by one
    ("JobId=7 JobState=COMPLETING Requeue=1 Restarts=2", "RUNNING\n", 1, cont.SlurmView(requeued=True)),
    ("JobId=7 JobState=COMPLETING Restarts=1", "REQUEUED\n", 1, cont.SlurmView()),
    # `scancel`: COMPLETING, and accounting already says why
    ("JobId=7 JobState=COMPLETING Restarts=0", "CANCELLED by 0\n", 0, cont.SlurmView(cancelled=True)),
    ("JobId=7 JobState=COMPLETING Restarts=0", "TIMEOUT\n", 0, cont.SlurmView()),
    # accounting has no record yet: not cancelled as far as anyone knows, and the view says so
    ("", "", 0, cont.SlurmView(cancel_unknown="sacct has not yet recorded job 7")),
])
def test_slurm_view_reads_requeue_and_cancel_from_scontrol_and_sacct(monkeypatch, show, sacct, restart_count, view):
    answers = {"scontrol": show, "sacct": runs_text("7", sacct.split("\n")[:-1])}
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, answers[cmd[0]], ""))
    assert cont.slurm_view("7", restart_count) == view


def test_slurm_view_asks_nothing_outside_a_slurm_job(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **kw: pytest.fail("Slurm was asked"))
    assert cont.slurm_view("local", 0) == cont.SlurmView()


# -- begin ----------------------------------------------------------------------------------


def test_begin_records_the_start_step_and_moves_incomplete_checkpoints_aside(run, model):
    save(model, 0)
    save(model, 1)
    save(model, 2, whole=False)
    assert cont.begin(run, model, "41", 3) == 0
    (record,) = ledger_lines(run)
    assert record["event"] == "job_start" and (record["job_id"], record["step"], record["restart_count"]) == ("41", 1, 3)
    assert not step_dir(model, 2).exists() and len(list((model / "checkpoints_incomplete").iterdir())) == 1


def test_begin_of_a_new_run_starts_at_step_0(run, model):
    assert cont.begin(run, model, "1", 0) == 0
    assert ledger_lines(run)[0]["step"] == 0


@pytest.mark.parametrize("marker", ["done", "failed"])
def test_begin_has_nothing_to_do_for_a_finished_or_failed_run(run, model, marker, capsys):
    run.mark_done(628, 628) if marker == "done" else run.mark_failed("broken", "/x.err")
    assert cont.begin(run, model, "9", 0) == EXIT_NOTHING_TO_DO
    assert ledger_lines(run) == []
    out = capsys.readouterr().out
    assert ("finished at step 628" if marker == "done" else "marked failed (broken)") in out


def test_begin_has_nothing_to_do_for_a_run_that_moved_to_another_cluster_until_it_is_reclaimed(run, model, capsys):
    save(model, 5)
    write_record(run, "moved", to="jureca:/p/runs", step=5, bundle="ab" * 16)
    assert cont.begin(run, model, "9", 0) == EXIT_NOTHING_TO_DO
    assert "moved to jureca:/p/runs at step 5" in capsys.readouterr().out
    assert [r["event"] for r in ledger_lines(run)] == ["moved"]
    write_record(run, "reclaimed", bundle="ab" * 16)
    assert cont.begin(run, model, "9", 0) == 0


def test_begin_closes_a_job_lost_without_its_end_hook(run, model, slurm_calls):
    save(model, 4)
    write_record(run, "job_start", job_id="7", step=2, restart_count=0)
    cont.begin(run, model, "8", 0)
    lost, new = ledger_lines(run)[1:]
    assert lost["event"] == "job_end" and lost["outcome"] == "failed" and lost["step"] == 4 and lost["exit_code"] is None
    assert new["event"] == "job_start" and new["job_id"] == "8" and new["step"] == 4


def test_begin_of_a_job_slurm_requeued_after_losing_it_records_the_requeue(run, model, slurm_calls):
    save(model, 4)
    write_record(run, "job_start", job_id="8", step=2, restart_count=0)
    slurm_calls.sacct = "NODE_FAIL\nRUNNING\n"  # sacct -D: the lost run, then this one
    cont.begin(run, model, "8", 1)
    assert [(r["event"], r.get("by")) for r in ledger_lines(run)[1:]] == [
        ("job_end", None), ("requeue", "slurm"), ("job_start", None)]
    assert ledger_lines(run)[1]["slurm_state"] == "NODE_FAIL"
    assert ledger_lines(run)[-1]["restart_count"] == 1
    assert cont.failures_without_progress(records(ledger_lines(run))) == 0  # it had advanced from 2 to 4


# -- end --------------------------------------------------------------------------------------


# -- the successor queued at the start (hpc/job/successor.py) --------------------------------------

SCRIPT = Path("/runs/r/scripts/s.sbatch")


def test_begin_queues_its_successor_afterany_on_itself(run, model, slurm_calls):
    slurm_calls.queue = {"100": "RUNNING"}
    assert cont.begin(run, model, "100", 0, SCRIPT) == 0
    assert slurm_calls == [["sbatch", "--parsable", "--dependency=afterany:100", str(SCRIPT)]]
    assert [(r["event"], r["job_id"], r.get("after")) for r in ledger_lines(run)] == [
        ("job_start", "100", None), ("successor", "501", "100")]


def test_a_requeued_job_keeps_the_successor_that_still_waits_on_it(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"501": "PENDING"}
    cont.begin(run, model, "100", 1, SCRIPT)
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
    assert cont.begin(run, model, "501", 0, SCRIPT) == 0
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
    assert cont.begin(run, model, "4242", 0, SCRIPT) == 0
    assert not [c for c in slurm_calls if c[0] == "sbatch"] and events(run) == ["job_start", "slurm_unknown"]


def test_a_successor_of_a_job_its_user_cancelled_stops_the_run(run, model, slurm_calls):
    write_record(run, "submit", job_id="100")
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.sacct = "CANCELLED by 0\n"
    assert cont.begin(run, model, "501", 0, SCRIPT) == EXIT_NOTHING_TO_DO
    assert events(run)[-2:] == ["job_end", "cancelled"] and not slurm_calls


def test_successors_of_jobs_killed_without_progress_give_up_at_max_failures(run, model, slurm_calls):
    write_record(run, "submit", job_id="100")
    slurm_calls.sacct = "FAILED\n"
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)  # killed (OOM) at step 0
    write_record(run, "job_end", job_id="100", exit_code=None, step=0, outcome="failed")  # closed by 501
    write_record(run, "job_start", job_id="501", step=0, restart_count=0)  # killed the same way
    write_record(run, "successor", job_id="502", after="501")
    limits = cont.Limits(max_resubmits=20, max_failures=2)
    assert cont.begin(run, model, "502", 0, SCRIPT, limits) == EXIT_NOTHING_TO_DO
    assert "2 failed job(s) in a row without progress" in run.read_failed()["reason"]
    assert not [c for c in slurm_calls if c[0] == "sbatch"]


def test_a_successor_exits_at_once_while_its_requeued_predecessor_is_back_in_the_queue(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"100": "PENDING"}
    before = ledger_lines(run)
    assert cont.begin(run, model, "501", 0, SCRIPT) == EXIT_NOTHING_TO_DO
    assert ledger_lines(run) == before and not slurm_calls


def test_a_job_requeued_after_its_successor_began_leaves_the_run_to_it(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "job_end", job_id="100", exit_code=None, step=3, outcome="failed")
    write_record(run, "job_start", job_id="501", step=3, restart_count=0)
    slurm_calls.queue = {"501": "RUNNING"}
    before = ledger_lines(run)
    assert cont.begin(run, model, "100", 1, SCRIPT) == EXIT_NOTHING_TO_DO
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
    assert cont.begin(run, model, "501", 0, SCRIPT) == EXIT_NOTHING_TO_DO
    assert ledger_lines(run) == before and not slurm_calls


def test_a_launch_after_a_cancel_resumes(run, model, slurm_calls):
    write_record(run, "cancelled", job_id="100")
    write_record(run, "submit", job_id="200")
    assert cont.begin(run, model, "200", 0) == 0


def test_end_continues_through_the_waiting_successor_and_submits_nothing(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"501": "PENDING"}
    assert cont.end(end_args(run, model, 75)).action == cont.RESUBMIT
    assert slurm_calls == []
    last = ledger_lines(run)[-1]
    assert (last["event"], last["job_id"], last["after"], last["by"]) == ("resubmit", "501", "100", "successor")


def test_end_in_requeue_mode_requeues_and_leaves_the_successor_waiting_on_the_same_id(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue = {"501": "PENDING"}
    cont.end(end_args(run, model, 75, mode="requeue"))
    assert slurm_calls == [["scontrol", "requeue", "100"]]
    assert events(run)[-1] == "requeue"


@pytest.mark.parametrize("rc,sacct,last", [(0, "RUNNING\n", "done"), (75, "CANCELLED by 0\n", "cancelled")])
def test_end_of_a_finished_or_cancelled_run_cancels_the_waiting_successor(run, model, slurm_calls, rc, sacct, last):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    write_record(run, "successor", job_id="501", after="100")
    slurm_calls.queue, slurm_calls.sacct = {"501": "PENDING"}, sacct
    cont.end(end_args(run, model, rc))
    assert slurm_calls == [["scancel", "501"]]
    assert events(run)[-1] == last


def test_end_after_stopping_for_time_resubmits_with_afterany(run, model, slurm_calls):
    save(model, 6)
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    decision = cont.end(end_args(run, model, 75))
    assert decision.action == cont.RESUBMIT
    assert slurm_calls == [["sbatch", "--parsable", "--dependency=afterany:100", "/runs/r/scripts/s.sbatch"]]
    job_end, resubmit = ledger_lines(run)[1:]
    assert (job_end["exit_code"], job_end["step"], job_end["outcome"]) == (75, 6, "stopped_for_time")
    assert (resubmit["event"], resubmit["job_id"], resubmit["after"]) == ("resubmit", "501", "100")


def test_end_in_requeue_mode_requeues_the_same_job(run, model, slurm_calls):
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    cont.end(end_args(run, model, 75, mode="requeue"))
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
    monkeypatch.setattr(cont.signal, "signal", lambda *a: None)
    no_patience(monkeypatch)
    cont.end(end_args(run, model, 75, mode="requeue"))
    assert calls == ["scontrol", "sbatch"]
    assert events(run)[-1] == "resubmit" and ledger_lines(run)[-1]["job_id"] == "777"
    assert "requeue" not in events(run)


def test_end_of_a_job_slurm_requeued_records_it_and_submits_nothing(run, model, slurm_calls):
    slurm_calls.show = "JobId=100 JobState=COMPLETING Requeue=1 Restarts=1"
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    for mode in ("requeue", "afterany"):
        assert cont.end(end_args(run, model, 75, mode=mode)).action == cont.REQUEUED
    assert slurm_calls == []
    assert [(r["event"], r.get("by")) for r in ledger_lines(run)[-2:]] == [("job_end", None), ("requeue", "slurm")]


def test_end_of_a_cancelled_job_records_it_and_continues_nothing(run, model, slurm_calls):
    slurm_calls.sacct = "CANCELLED by 1000\n"
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    assert cont.end(end_args(run, model, 75, mode="requeue")).action == cont.STOP
    assert slurm_calls == [] and events(run)[-2:] == ["job_end", "cancelled"]
    assert not run.failed_file.exists()


def test_end_in_chain_mode_submits_nothing(run, model, slurm_calls):
    cont.end(end_args(run, model, 75, mode="chain"))
    assert slurm_calls == [] and events(run) == ["job_end"]


def test_end_of_a_finished_run_records_done_once(run, model, slurm_calls):
    save(model, 10)
    run.mark_done(10, 10)
    cont.end(end_args(run, model, 0))
    cont.end(end_args(run, model, 0, job="101"))
    assert slurm_calls == []
    assert events(run) == ["job_end", "done", "job_end"]
    assert ledger_lines(run)[1]["step"] == 10


def test_end_of_a_workload_that_exits_0_without_a_done_marker_marks_the_run_done(run, model, slurm_calls):
    save(model, 3)
    cont.end(end_args(run, model, 0, mode="requeue"))
    assert slurm_calls == []  # neither requeued nor resubmitted
    assert events(run) == ["job_end", "done"]
    assert ledger_lines(run)[0]["outcome"] == "finished"
    assert run.read_done()["final_step"] == 3


def test_end_gives_up_after_max_failures_without_progress(run, model, slurm_calls):
    for job in ("100", "101"):
        write_record(run, "job_start", job_id=job, step=0, restart_count=0)
        cont.end(end_args(run, model, 1, job=job))
    assert [c[0] for c in slurm_calls] == ["sbatch"]
    failed = run.read_failed()
    assert "without progress" in failed["reason"] and failed["log_tail"] == "/runs/r/logs/r-100.err"
    assert events(run)[-1] == "failed" and ledger_lines(run)[-1]["log_tail"] == failed["log_tail"]


def test_end_gives_up_when_the_follow_up_cannot_be_submitted(run, model, monkeypatch):
    monkeypatch.setattr(subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "sbatch: error: QOSMaxSubmitJobPerUserLimit"))
    cont.end(end_args(run, model, 75))
    assert "QOSMaxSubmitJobPerUserLimit" in run.read_failed()["reason"]


def test_end_gives_up_at_max_resubmits(run, model, slurm_calls):
    write_record(run, "resubmit", job_id="100", after="99")
    cont.end(end_args(run, model, 75, max_resubmits=1))
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


# -- configuration errors, error lines, a fresh count per launch (issue 13, preflight) --------------


def test_a_configuration_error_exit_78_gives_the_run_up_at_once_quoting_its_error():
    line = "preflight check 'data' failed (permanent): the data directory /d does not exist; fix: stage it"
    ledger = [start("1", 0), end("1", 0, "failed", 78) | {"error": line}]
    decision = decide(ledger, max_failures=5)
    assert decision.action == cont.GIVE_UP
    assert decision.reason == f"configuration error (exit 78), not retried: {line}"
    for mode in ("requeue", "chain"):
        assert decide(ledger, mode=mode, max_failures=5).action == cont.GIVE_UP


def test_other_failures_are_retried_and_the_reason_quotes_the_last_error_line():
    line = "preflight check 'judge' failed (transient): the answer judge j did not answer"
    ledger = [start("1", 0), end("1", 0, "failed", 69) | {"error": line}]
    assert decide(ledger).action == cont.RESUBMIT
    ledger += [start("2", 0), end("2", 0, "failed", 69) | {"error": line}]
    assert decide(ledger).reason == ("2 failed job(s) in a row without progress (--max_failures 2); "
                                     f"last exit code 69: {line}")


def test_a_new_launch_starts_a_fresh_failure_count():
    failed_run = [{"event": "submit", "job_id": "1"}, start("1", 0), end("1", 0, "failed"),
                  {"event": "resubmit", "job_id": "2", "after": "1"}, start("2", 0), end("2", 0, "failed")]
    assert decide(failed_run).action == cont.GIVE_UP
    relaunched = failed_run + [{"event": "failed"}, {"event": "submit", "job_id": "3"}, start("3", 0),
                               end("3", 0, "failed")]
    assert cont.failures_without_progress(records(relaunched)) == 1
    assert decide(relaunched).action == cont.RESUBMIT
    relaunched += [start("4", 0), end("4", 0, "failed")]
    assert decide(relaunched).action == cont.GIVE_UP


@pytest.mark.parametrize("text,expected", [
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad value\n", "ValueError: bad value"),
    ("trainer.train: error: training data not found\n\n", "trainer.train: error: training data not found"),
    ("step_trainer: crashing before any step (crash=always)\n", "step_trainer: crashing before any step (crash=always)"),
    ("an error first\nprogress 10%\rprogress 100%\n", "an error first"),
    ("\x1b[31mRuntimeError: red\x1b[0m\x07\n", "RuntimeError: red"),
    ("job failed\n[continuation] run r marked failed: ...\n", "job failed"),
    ("\n  \n", None),
])
def test_error_line_is_the_last_line_that_reads_like_an_error(tmp_path, text, expected):
    log = tmp_path / "r-1.err"
    log.write_text(text)
    assert cont.error_line(log) == expected


def test_error_line_reads_only_this_jobs_part_of_an_appended_log(tmp_path):
    log = tmp_path / "r-1.err"
    log.write_text("RuntimeError: the previous run of this requeued job\n")
    offset = log.stat().st_size
    assert cont.error_line(log, offset) is None
    with log.open("a") as handle:
        handle.write("x" * 5000 + "\n")
    assert cont.error_line(log, offset) == "x" * (cont.ERROR_LINE_CHARS - 3) + "..."
    assert cont.error_line(tmp_path / "missing.err") is None


def test_end_quotes_this_jobs_error_line_in_job_end_failed_json_and_the_ledger(run, model, slurm_calls):
    err = run.log_paths("100")[1]
    err.parent.mkdir(parents=True)
    err.write_text("ValueError: from an earlier run of job 100\n")
    assert cont.begin(run, model, "100", 0) == 0
    line = "preflight check 'judge' failed (permanent): the answer judge j rejects the key (HTTP 401); fix: key"
    with err.open("a") as handle:
        handle.write(f"2026-01-01T00:00:00 [trainer] some warning\n{line}\n")
    args = cont.EndArgs(run, model, "100", 78, "afterany", Path("/x.sbatch"), 20, 2, str(err))
    assert cont.end(args).action == cont.GIVE_UP
    assert slurm_calls == []  # nothing resubmitted: permanent
    job_end, failed_record = ledger_lines(run)[-2:]
    assert job_end["error"] == line and failed_record["event"] == "failed" and failed_record["error"] == line
    failed = run.read_failed()
    assert failed["error"] == line and failed["reason"].endswith(line) and failed["log_tail"] == str(err)


def test_a_job_that_stopped_for_time_records_no_error(run, model, slurm_calls):
    err = run.log_paths("100")[1]
    err.parent.mkdir(parents=True)
    err.write_text("RuntimeError: not this job's end\n")
    cont.end(end_args(run, model, 75))
    (job_end,) = [r for r in ledger_lines(run) if r["event"] == "job_end"]
    assert job_end["outcome"] == "stopped_for_time" and "error" not in job_end


def test_a_workload_refusing_its_input_with_exit_2_is_not_retried():
    """trainer.eval and trainer.serve say "bad input" with 2: the same input cannot do better."""
    ledger = [{"event": "submit", "job_id": "1"}, {"event": "job_start", "job_id": "1", "step": 0},
              {"event": "job_end", "job_id": "1", "exit_code": 2, "step": 0, "outcome": "failed",
               "error": "trainer.eval: error: invalid model 'o3'"}]
    decision = cont.decide(records(ledger), done=False, mode="afterany", max_resubmits=20, max_failures=2)
    assert decision.action == cont.GIVE_UP and "exit 2" in decision.reason and "invalid model" in decision.reason


# -- when Slurm answers badly (issue 40) ----------------------------------------------------------------


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
    monkeypatch.setattr(cont.signal, "signal", lambda *a: None)
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
    cont.end(end_args(run, model, 75))
    assert not [c for c in bad_slurm if c[0] == "sbatch"]
    assert [(r["job_id"], r.get("by")) for r in ledger_lines(run) if r["event"] == "resubmit"] == [("501", "successor")]


def test_an_end_hook_that_cannot_learn_whether_its_successor_waits_submits_no_second_job(run, model, bad_slurm):
    started_with_successor(run)
    bad_slurm.failing = {"squeue", "sacct"}
    cont.end(end_args(run, model, 75))
    assert not [c for c in bad_slurm if c[0] == "sbatch"] and "failed" not in events(run)
    unknown = [r for r in ledger_lines(run) if r["event"] == "slurm_unknown"]
    assert len(unknown) == 1 and "Socket timed out" in unknown[0]["why"] and "follow-up" in unknown[0]["held_back"]


def test_a_term_with_no_usr1_before_it_while_accounting_fails_is_a_cancel_not_a_stop_for_time(run, model, bad_slurm):
    started_with_successor(run)
    bad_slurm.failing = {"sacct"}
    bad_slurm.queue = {"501": "PENDING"}
    args = end_args(run, model, 75)
    decision = cont.end(cont.EndArgs(**{**args.__dict__, "stop_signal": "TERM"}))
    assert decision.action == cont.STOP and "SIGTERM" in decision.reason
    assert events(run)[-1] == "cancelled" and not [c for c in bad_slurm if c[0] == "sbatch"]
    assert [r["signal"] for r in ledger_lines(run) if r["event"] == "job_end"] == ["TERM"]


def test_a_usr1_stop_for_time_goes_on_though_accounting_fails(run, model, bad_slurm):
    started_with_successor(run)
    bad_slurm.failing, bad_slurm.queue = {"sacct"}, {"501": "PENDING"}
    args = end_args(run, model, 75)
    assert cont.end(cont.EndArgs(**{**args.__dict__, "stop_signal": "USR1"})).action == cont.RESUBMIT
    assert events(run)[-1] == "resubmit"


def test_sbatch_refusing_a_moment_is_tried_again_within_the_time_left(run, model, bad_slurm, monkeypatch):
    write_record(run, "submit", job_id="100", argv=["--job_name", "r"])
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    bad_slurm.sbatch_failures = 2
    monkeypatch.setattr(cont, "seconds_left", lambda job: 60.0)
    monkeypatch.setattr(cont.answers.time, "sleep", lambda s: None)
    cont.end(end_args(run, model, 75))
    assert len([c for c in bad_slurm if c[0] == "sbatch"]) == 3 and events(run)[-1] == "resubmit"


def test_a_run_given_up_because_slurm_kept_refusing_says_its_error_and_how_to_resume(run, model, bad_slurm):
    write_record(run, "submit", job_id="100", argv=["--job_name", "r", "--cluster", "local"])
    write_record(run, "job_start", job_id="100", step=0, restart_count=0)
    bad_slurm.sbatch_failures = 5
    cont.end(end_args(run, model, 75))
    reason = run.read_failed()["reason"]
    assert "Resource temporarily unavailable" in reason and "--chain" not in reason
    assert "resume with: cd " in reason and "hpc.launch --job_name r --cluster local" in reason


def test_a_job_that_finds_the_run_held_by_another_touches_nothing(run, model, slurm_calls, monkeypatch):
    assert cont.begin(run, model, "100", 0) == 0  # holds the run; its keeper would renew it
    monkeypatch.setattr(cont.lease, "take", lambda *a, **k: cont.lease.Held(cont.lease.read(run)))
    save(model, 3, whole=False)  # a half-written checkpoint the holder is saving
    assert cont.begin(run, model, "200", 0, SCRIPT) == EXIT_RUN_HELD
    assert events(run) == ["job_start", "lease_held"] and ledger_lines(run)[-1]["holder"] == "100"
    assert (step_dir(model, 3) / ADAPTER_WEIGHTS).exists() and not slurm_calls  # not moved aside, nothing queued


def test_the_end_hook_releases_the_run_for_the_next_job(run, model, slurm_calls):
    assert cont.begin(run, model, "100", 0) == 0
    assert not cont.lease.read(run).released
    cont.end(end_args(run, model, 75))
    assert cont.lease.read(run).released


def test_a_successor_whose_predecessor_continued_nothing_on_an_unknown_answer_records_that_it_goes_on(
        run, model, slurm_calls):
    started_with_successor(run)
    write_record(run, "job_end", job_id="100", exit_code=75, step=0, outcome="stopped_for_time")
    write_record(run, "slurm_unknown", job_id="100", asked="?", why="squeue failed", waited=30, held_back="submit")
    assert cont.begin(run, model, "501", 0) == 0
    assert [(r["job_id"], r["after"], r["by"]) for r in ledger_lines(run) if r["event"] == "resubmit"] == [
        ("501", "100", "successor")]
