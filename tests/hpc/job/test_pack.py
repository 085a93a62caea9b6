"""The in-job side of pack jobs (hpc/job/pack.py): slots for the runs with work, and one continuation."""

from pathlib import Path

import pytest

from hpc.job import begin_hook, end_decision, end_hook, end_slurm, pack
from hpc.job.exit_codes import EXIT_NOTHING_TO_DO
from hpc.run.rundir import RunDir
from hpc.slurm.answer import known
from hpc.slurm.states import JobState
from tests.doubles.ledger_lines import ledger_lines, write_record


def member(tmp_path: Path, name: str, *, done: bool = False, failed: bool = False) -> pack.Member:
    run = RunDir(tmp_path / name)
    run.path.mkdir(parents=True)
    if done:
        run.mark_done(5, 5)
    if failed:
        run.mark_failed("crashed")
    return pack.Member(run, run.path / "scripts" / "x.sbatch")


def test_each_run_with_work_gets_its_own_gpus_port_and_logs(tmp_path):
    members = [member(tmp_path, "a"), member(tmp_path, "b", done=True), member(tmp_path, "c"),
               member(tmp_path, "d", failed=True)]
    slots = pack.slots(members, 2, {"CUDA_VISIBLE_DEVICES": "4,5,6,7,8,9,10,11"})
    assert [s.member.run.name for s in slots] == ["a", "c"]
    assert [s.devices for s in slots] == [["4", "5"], ["6", "7"]]
    assert len({s.port for s in slots}) == 2
    script, devices, port, out, err, name = slots[1].line("42").split("\t")
    assert (devices, name) == ("6,7", "c") and out.endswith("c/logs/c-42.out") and err.endswith("c/logs/c-42.err")


def test_without_cuda_visible_devices_the_gpus_are_numbered_from_zero(tmp_path):
    slots = pack.slots([member(tmp_path, "a"), member(tmp_path, "b")], 1, {})
    assert [s.devices for s in slots] == [["0"], ["1"]]


def test_the_judge_takes_the_gpus_after_the_runs():
    assert pack.device_slice({"CUDA_VISIBLE_DEVICES": "2,3,5,7"}, first=3, count=1) == ["7"]
    assert pack.device_slice({}, first=2, count=2) == ["2", "3"]


def ran(m: pack.Member, job: str, outcome: str, step: int, start_step: int = 0) -> None:
    """A job of the run (the launch's submit record first, once)."""
    if not ledger_lines(m.run):
        write_record(m.run, "submit", job_id=job)
    write_record(m.run, "job_start", job_id=job, step=start_step, restart_count=0)
    write_record(m.run, "job_end", job_id=job, exit_code=75 if outcome == "stopped_for_time" else 1,
                        step=step, outcome=outcome)


@pytest.fixture
def slurm_calls(monkeypatch):
    calls: list = []
    monkeypatch.setattr(end_slurm, "slurm_view", lambda job, restarts, stop_signal=None: end_decision.SlurmView())
    monkeypatch.setattr(end_slurm, "requeued", lambda job: calls.append(("requeue", job)) or True)
    monkeypatch.setattr(pack.successor, "resubmit", lambda script, job, options=(): calls.append(
        ("resubmit", job, options)) or "99")
    return calls


def settings(mode: str, resize=None) -> pack.Settings:
    return pack.Settings(mode, Path("pack.sbatch"), max_resubmits=20, max_failures=2, resize=resize)


def test_the_pack_continues_once_for_the_runs_that_want_to(tmp_path, slurm_calls):
    going, finished, idle = member(tmp_path, "going"), member(tmp_path, "finished", done=True), member(tmp_path, "idle")
    ran(going, "7", "stopped_for_time", 3)
    ran(finished, "7", "finished", 5)
    continued = pack.end([going, finished, idle], "7", settings("afterany"), 0)
    assert [m.run.name for m in continued] == ["going"]
    assert slurm_calls == [("resubmit", "7", ())]
    assert ledger_lines(going.run)[-1] == {**ledger_lines(going.run)[-1], "event": "resubmit", "job_id": "99",
                                           "after": "7"}
    assert all(r["event"] != "resubmit" for r in ledger_lines(finished.run) + ledger_lines(idle.run))


def test_requeue_mode_requeues_the_job_and_records_it_per_run(tmp_path, slurm_calls):
    a, b = member(tmp_path, "a"), member(tmp_path, "b")
    ran(a, "7", "stopped_for_time", 3)
    ran(b, "7", "stopped_for_time", 4)
    pack.end([a, b], "7", settings("requeue"), 0)
    assert slurm_calls == [("requeue", "7")]
    assert [r["by"] for m in (a, b) for r in ledger_lines(m.run) if r["event"] == "requeue"] == ["job", "job"]


def test_a_run_at_its_failure_limit_does_not_keep_the_pack_going(tmp_path, slurm_calls):
    crashing = member(tmp_path, "crashing")
    ran(crashing, "6", "failed", 0)
    ran(crashing, "7", "failed", 0)
    assert pack.end([crashing], "7", settings("afterany"), 0) == []
    assert slurm_calls == []


def test_fewer_runs_ask_for_fewer_gpus_where_gpus_are_charged_as_asked(tmp_path, slurm_calls):
    going, finished = member(tmp_path, "going"), member(tmp_path, "finished", done=True)
    ran(going, "7", "stopped_for_time", 3)
    pack.end([going, finished], "7", settings("requeue", resize=(1, 1)), 0)
    assert slurm_calls == [("resubmit", "7", ("--gres=gpu:2",))]  # one run's GPU and the judge's, not requeued


def test_a_run_of_a_pack_records_its_end_but_leaves_continuing_to_the_pack(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    write_record(run, "submit", job_id="7")
    write_record(run, "job_start", job_id="7", step=0, restart_count=0)
    monkeypatch.setattr(end_slurm, "slurm_view", lambda job, restarts, stop_signal=None: end_decision.SlurmView())
    monkeypatch.setattr(end_slurm, "requeue", lambda job: pytest.fail("a packed run must not requeue the pack's job"))
    decision = end_hook.end(end_hook.EndArgs(run, tmp_path / "models", "7", 75, "requeue", Path("s"), 20, 2, None,
                                     packed=True))
    assert decision.action == end_decision.Action.REQUEUE
    assert [r["event"] for r in ledger_lines(run)] == ["submit", "job_start", "job_end"]


# -- the pack's successor, queued when the pack job starts (hpc/job/successor.py) -------------------


@pytest.fixture
def queue(monkeypatch, slurm_calls):
    """squeue as the pack sees it (job id -> state), and the scancels it makes."""
    states: dict[str, str] = {}
    monkeypatch.setattr(pack.successor, "queue_state", lambda job: known(JobState(states[job]), False)
                        if job in states else known(JobState.UNKNOWN, True))
    monkeypatch.setattr(end_slurm, "seconds_left", lambda job: 0.0)
    monkeypatch.setattr(pack.successor, "cancel", lambda run, job: slurm_calls.append(("cancel", job)))
    monkeypatch.setattr(pack.successor, "ensure", lambda runs, job, script, options=(): slurm_calls.append(
        ("successor", job, tuple(r.name for r in runs))) or "98")
    return states


def test_begin_queues_one_successor_for_the_runs_with_work(tmp_path, slurm_calls, queue):
    a, done = member(tmp_path, "a"), member(tmp_path, "done", done=True)
    assert pack.begin([a, done], "7", Path("pack.sbatch")) == 0
    assert slurm_calls == [("successor", "7", ("a",))]


def test_a_successor_pack_exits_while_its_requeued_predecessor_is_back_in_the_queue(tmp_path, slurm_calls, queue):
    a = member(tmp_path, "a")
    write_record(a.run, "successor", job_id="8", after="7")
    queue["7"] = "PENDING"
    assert pack.begin([a], "8", Path("pack.sbatch")) == EXIT_NOTHING_TO_DO
    assert slurm_calls == []


def test_the_pack_continues_through_its_waiting_successor(tmp_path, slurm_calls, queue):
    a, b = member(tmp_path, "a"), member(tmp_path, "b")
    for m in (a, b):
        ran(m, "7", "stopped_for_time", 3)
        write_record(m.run, "successor", job_id="8", after="7")
    queue["8"] = "PENDING"
    pack.end([a, b], "7", settings("afterany"), 0)
    assert slurm_calls == []
    assert [(r["job_id"], r["by"]) for m in (a, b) for r in ledger_lines(m.run) if r["event"] == "resubmit"] == [
        ("8", "successor"), ("8", "successor")]


def test_a_pack_whose_runs_all_stop_cancels_its_successor(tmp_path, slurm_calls, queue):
    a = member(tmp_path, "a", done=True)
    ran(a, "7", "finished", 5)
    write_record(a.run, "successor", job_id="8", after="7")
    queue["8"] = "PENDING"
    assert pack.end([a], "7", settings("afterany"), 0) == []
    assert slurm_calls == [("cancel", "7")]


def test_a_run_whose_log_is_a_planted_link_sits_the_job_out_and_nothing_is_written_through(tmp_path, capsys):
    """The pack's script appends each run's output with ``>>``, which follows a link: its logs are
    made plain files of the run first, and a run where that is refused gets no slot line."""
    a, b = member(tmp_path, "a"), member(tmp_path, "b")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out, _ = b.run.log_paths("42")
    out.parent.mkdir(parents=True)
    out.symlink_to(victim)
    args = ["slots", "--gpus_per_run", "1", "--job_id", "42"]
    for m in (a, b):
        args += ["--member", str(m.run.path), str(m.script)]
    assert pack.main(args) == 0
    printed = capsys.readouterr()
    assert [line.split("\t")[-1] for line in printed.out.splitlines()] == ["a"]
    assert "b is not started" in printed.err and victim.read_text() == "precious\n"
    assert all(path.is_file() and not path.is_symlink() for path in a.run.log_paths("42"))
