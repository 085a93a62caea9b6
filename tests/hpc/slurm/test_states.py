"""hpc.slurm.states: every way Slurm writes a state reads as one JobState."""

from __future__ import annotations

import pytest

from hpc.slurm.states import QUEUED, JobState, parse_state


@pytest.mark.parametrize("text, state", [
    ("RUNNING", JobState.RUNNING),
    ("CANCELLED by 0", JobState.CANCELLED),  # sacct: a user's (here root's) scancel
    ("CANCELLED by 1000", JobState.CANCELLED),
    ("CANCELLED+", JobState.CANCELLED),  # sacct without -P cuts a long state short with '+'
    ("OUT_OF_MEMORY", JobState.OUT_OF_MEMORY),
    ("PREEMPTED", JobState.PREEMPTED),
    ("DEADLINE", JobState.DEADLINE),
    ("NODE_FAIL", JobState.NODE_FAIL),
    ("REQUEUE_HOLD", JobState.REQUEUE_HOLD),
    ("  TIMEOUT\n", JobState.TIMEOUT),
])
def test_a_state_is_its_first_word(text: str, state: JobState) -> None:
    assert parse_state(text) is state


@pytest.mark.parametrize("text", ["", "   ", "EXPEDITING_SOMETHING_NEW", "running"])
def test_a_state_this_code_does_not_know_is_unknown_not_an_error(text: str) -> None:
    assert parse_state(text) is JobState.UNKNOWN


def test_states_compare_and_print_as_slurm_writes_them() -> None:
    assert parse_state("CANCELLED by 0") == "CANCELLED" and f"{JobState.TIMEOUT}" == "TIMEOUT"


def test_only_states_of_jobs_still_in_the_queue_count_as_queued() -> None:
    assert {JobState.PENDING, JobState.RUNNING, JobState.COMPLETING, JobState.REQUEUED} <= QUEUED
    ended = {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.NODE_FAIL,
             JobState.OUT_OF_MEMORY, JobState.PREEMPTED, JobState.BOOT_FAIL, JobState.DEADLINE, JobState.UNKNOWN}
    assert not ended & QUEUED
