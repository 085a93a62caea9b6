"""hpc.job.end_decision: what a run does after one of its jobs, a pure function of the ledger and
what Slurm says (no Slurm, no files)."""

from __future__ import annotations

import pytest

from hpc.job import end_decision
from hpc.job.end_decision import Action
from hpc.run import ledger as ledger_module
from hpc.run.ledger import Record


def records(lines: list[dict]) -> list[Record]:
    """Ledger lines (the file's format) as hpc/run/ledger.py reads them."""
    return ledger_module.parse(lines)


def start(job: str, step: int) -> dict:
    return {"event": "job_start", "job_id": job, "step": step, "restart_count": 0}


def end(job: str, step: int, outcome: str, exit_code: int = 1) -> dict:
    return {"event": "job_end", "job_id": job, "exit_code": exit_code, "step": step, "outcome": outcome}


def decide(ledger: list[dict], *, done: bool = False, mode: str = "afterany", max_resubmits: int = 20,
           max_failures: int = 2, slurm: end_decision.SlurmView | None = None) -> end_decision.Decision:
    return end_decision.decide(records(ledger), done=done, mode=mode, max_resubmits=max_resubmits, max_failures=max_failures,
                       slurm=slurm or end_decision.SlurmView())


@pytest.mark.parametrize("rc,done,outcome", [
    (0, True, "finished"), (75, True, "finished"), (75, False, "stopped_for_time"),
    (0, False, "finished"), (1, False, "failed"), (137, False, "failed"), (1, True, "failed"),
])
def test_outcome_of_exit_code(rc, done, outcome):
    assert end_decision.outcome_of(rc, done) == outcome


def test_done_finishes_whatever_the_rest_of_the_ledger_says():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 0, "failed")]
    assert decide(ledger, done=True).action == Action.FINISH


@pytest.mark.parametrize("mode,action", [("requeue", Action.REQUEUE), ("afterany", Action.RESUBMIT),
                                         ("chain", Action.NONE)])
def test_stopped_for_time_continues_by_the_modes_means(mode, action):
    ledger = [start("1", 0), end("1", 12, "stopped_for_time", 75)]
    decision = decide(ledger, mode=mode)
    assert decision.action == action
    if mode != "chain":
        assert "stopped for time; continuation 1 of at most 20" == decision.reason


def test_a_failure_with_progress_continues():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 5, "failed")]
    assert decide(ledger, max_failures=1).action == Action.RESUBMIT


def test_failures_without_progress_give_up_at_max_failures():
    ledger = [start("1", 3), end("1", 3, "failed")]
    assert decide(ledger).action == Action.RESUBMIT
    ledger += [start("2", 3), end("2", 3, "failed", 1)]
    decision = decide(ledger)
    assert decision.action == Action.GIVE_UP
    assert "2 failed job(s) in a row without progress (--max_failures 2); last exit code 1" == decision.reason


def test_a_stopped_or_progressing_job_breaks_the_failure_streak():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 4, "stopped_for_time", 75),
              start("3", 4), end("3", 4, "failed")]
    assert end_decision.failures_without_progress(records(ledger)) == 1
    assert decide(ledger).action == Action.RESUBMIT


def test_requeued_jobs_keep_their_id_and_pair_with_their_latest_start():
    ledger = [start("7", 0), end("7", 9, "stopped_for_time", 75), {"event": "requeue", "job_id": "7"},
              start("7", 9), end("7", 9, "failed"), {"event": "requeue", "job_id": "7"},
              start("7", 9), end("7", 9, "failed")]
    assert end_decision.failures_without_progress(records(ledger)) == 2
    assert decide(ledger, mode="requeue").action == Action.GIVE_UP


def test_chain_mode_still_gives_up_on_a_broken_run():
    ledger = [start("1", 0), end("1", 0, "failed"), start("2", 0), end("2", 0, "failed")]
    assert decide(ledger, mode="chain").action == Action.GIVE_UP


def test_max_resubmits_bounds_the_continuations():
    ledger = [start("1", 0), end("1", 3, "stopped_for_time", 75), {"event": "resubmit", "job_id": "2", "after": "1"},
              start("2", 3), end("2", 6, "stopped_for_time", 75), {"event": "requeue", "job_id": "2"},
              start("2", 6), end("2", 9, "stopped_for_time", 75)]
    assert ledger_module.continuations(records(ledger)) == 2
    assert decide(ledger, max_resubmits=3).action == Action.RESUBMIT
    decision = decide(ledger, max_resubmits=2)
    assert decision.action == Action.GIVE_UP and "--max_resubmits 2" in decision.reason
    assert decide(ledger, mode="chain", max_resubmits=0).action == Action.NONE  # chain: pre-submitted, not counted


def test_a_job_slurm_already_requeued_is_not_continued_again():
    ledger = [start("1", 0), end("1", 4, "stopped_for_time", 75)]
    for mode in ("requeue", "afterany", "chain"):
        assert decide(ledger, mode=mode, slurm=end_decision.SlurmView(requeued=True)).action == Action.REQUEUED


def test_a_cancelled_job_stops_the_run_without_marking_it_failed():
    ledger = [start("1", 0), end("1", 4, "stopped_for_time", 75)]
    for mode in ("requeue", "afterany", "chain"):
        decision = decide(ledger, mode=mode, slurm=end_decision.SlurmView(cancelled=True))
        assert decision.action == Action.STOP and "launch again to resume" in decision.reason
    assert decide(ledger, done=True, slurm=end_decision.SlurmView(cancelled=True)).action == Action.FINISH


def test_a_broken_run_is_given_up_even_when_slurm_requeued_its_job():
    ledger = [start("1", 0), end("1", 0, "failed"), start("1", 0), end("1", 0, "failed")]
    assert decide(ledger, mode="requeue", slurm=end_decision.SlurmView(requeued=True)).action == Action.GIVE_UP


def test_chain_mode_names_the_next_job_or_says_the_chain_is_used_up():
    ledger = [{"event": "submit", "job_id": "1"}, {"event": "chain", "job_id": "2", "after": "1"},
              start("1", 0), end("1", 3, "stopped_for_time", 75)]
    assert "pre-submitted job 2 continues" in decide(ledger, mode="chain").reason
    ledger += [start("2", 3), end("2", 6, "stopped_for_time", 75)]
    decision = decide(ledger, mode="chain")
    assert decision.action == Action.NONE and "last pre-submitted job: launch again" in decision.reason


def test_a_job_end_without_a_start_counts_as_no_progress():
    assert end_decision.failures_without_progress(records([end("1", 5, "failed"), end("2", 5, "failed")])) == 2


def test_unclosed_start_finds_a_job_lost_before_its_end_hook():
    assert end_decision.unclosed_start(records([start("1", 0), end("1", 2, "stopped_for_time")])) is None
    assert end_decision.unclosed_start(records([start("1", 0), end("1", 2, "stopped_for_time"), start("2", 2)])).job_id == "2"
    assert end_decision.unclosed_start(records([])) is None



def test_a_configuration_error_exit_78_gives_the_run_up_at_once_quoting_its_error():
    line = "preflight check 'data' failed (permanent): the data directory /d does not exist; fix: stage it"
    ledger = [start("1", 0), end("1", 0, "failed", 78) | {"error": line}]
    decision = decide(ledger, max_failures=5)
    assert decision.action == Action.GIVE_UP
    assert decision.reason == f"configuration error (exit 78), not retried: {line}"
    for mode in ("requeue", "chain"):
        assert decide(ledger, mode=mode, max_failures=5).action == Action.GIVE_UP


def test_other_failures_are_retried_and_the_reason_quotes_the_last_error_line():
    line = "preflight check 'judge' failed (transient): the answer judge j did not answer"
    ledger = [start("1", 0), end("1", 0, "failed", 69) | {"error": line}]
    assert decide(ledger).action == Action.RESUBMIT
    ledger += [start("2", 0), end("2", 0, "failed", 69) | {"error": line}]
    assert decide(ledger).reason == ("2 failed job(s) in a row without progress (--max_failures 2); "
                                     f"last exit code 69: {line}")


def test_a_new_launch_starts_a_fresh_failure_count():
    failed_run = [{"event": "submit", "job_id": "1"}, start("1", 0), end("1", 0, "failed"),
                  {"event": "resubmit", "job_id": "2", "after": "1"}, start("2", 0), end("2", 0, "failed")]
    assert decide(failed_run).action == Action.GIVE_UP
    relaunched = failed_run + [{"event": "failed"}, {"event": "submit", "job_id": "3"}, start("3", 0),
                               end("3", 0, "failed")]
    assert end_decision.failures_without_progress(records(relaunched)) == 1
    assert decide(relaunched).action == Action.RESUBMIT
    relaunched += [start("4", 0), end("4", 0, "failed")]
    assert decide(relaunched).action == Action.GIVE_UP



def test_a_workload_refusing_its_input_with_exit_2_is_not_retried():
    """trainer.eval and trainer.serve say "bad input" with 2: the same input cannot do better."""
    ledger = [{"event": "submit", "job_id": "1"}, {"event": "job_start", "job_id": "1", "step": 0},
              {"event": "job_end", "job_id": "1", "exit_code": 2, "step": 0, "outcome": "failed",
               "error": "trainer.eval: error: invalid model 'o3'"}]
    decision = end_decision.decide(records(ledger), done=False, mode="afterany", max_resubmits=20, max_failures=2)
    assert decision.action == Action.GIVE_UP and "exit 2" in decision.reason and "invalid model" in decision.reason


def test_a_decision_is_an_action_and_the_ledgers_outcomes_are_outcomes():
    """The end hook and the pack branch on members, not on words: a word read from the ledger is
    parsed into the enum where the ledger is read."""
    ledger = [start("1", 0), end("1", 12, "stopped_for_time", 75)]
    job_end = records(ledger)[1]
    assert isinstance(job_end, ledger_module.JobEnd)
    assert type(job_end.outcome) is ledger_module.Outcome and job_end.outcome is ledger_module.Outcome.STOPPED
    assert type(decide(ledger).action) is Action


@pytest.mark.parametrize("action,continues,ends", [
    (Action.REQUEUE, True, False), (Action.RESUBMIT, True, False), (Action.FINISH, False, True),
    (Action.GIVE_UP, False, True), (Action.STOP, False, True), (Action.REQUEUED, False, False),
    (Action.NONE, False, False)])
def test_each_action_either_continues_the_run_ends_it_or_leaves_it_to_another_job(action, continues, ends):
    assert (action in end_decision.CONTINUES, action in end_decision.ENDS) == (continues, ends)
