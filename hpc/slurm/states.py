"""A Slurm job's state, typed.

sacct writes a user's cancellation as ``CANCELLED by <uid>``, squeue and scontrol write
extended states (``REQUEUE_HOLD``, ``SIGNALING``...), and newer releases add states
(``OUT_OF_MEMORY`` since 17.11, ``PREEMPTED``, ``DEADLINE``...): ``parse_state`` reads the
first word of any of them, and a word it does not know is ``UNKNOWN`` rather than an error,
so a newer Slurm never breaks a reader.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Base and extended job states of Slurm 22.05 to 24.11 (squeue --help, sacct --helpformat)."""

    BOOT_FAIL = "BOOT_FAIL"
    CANCELLED = "CANCELLED"
    COMPLETED = "COMPLETED"
    COMPLETING = "COMPLETING"
    CONFIGURING = "CONFIGURING"
    DEADLINE = "DEADLINE"
    FAILED = "FAILED"
    LAUNCH_FAILED = "LAUNCH_FAILED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PENDING = "PENDING"
    POWER_UP_NODE = "POWER_UP_NODE"
    PREEMPTED = "PREEMPTED"
    RECONFIG_FAIL = "RECONFIG_FAIL"
    REQUEUED = "REQUEUED"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    RESIZING = "RESIZING"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    REVOKED = "REVOKED"
    RUNNING = "RUNNING"
    SIGNALING = "SIGNALING"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    STAGE_OUT = "STAGE_OUT"
    STOPPED = "STOPPED"
    SUSPENDED = "SUSPENDED"
    TIMEOUT = "TIMEOUT"
    UNKNOWN = "UNKNOWN"  # a word this code does not know (a newer Slurm), or none


# States in which a job is still in the queue and carries, or will carry, its run.
QUEUED = frozenset({
    JobState.PENDING, JobState.RUNNING, JobState.CONFIGURING, JobState.COMPLETING, JobState.REQUEUED,
    JobState.REQUEUE_HOLD, JobState.REQUEUE_FED, JobState.RESIZING, JobState.SUSPENDED, JobState.STOPPED,
    JobState.SIGNALING, JobState.STAGE_OUT,
})


def parse_state(text: str) -> JobState:
    """The state in ``text``'s first word (``CANCELLED by 0``, ``CANCELLED+``, ``RUNNING``); UNKNOWN
    for an empty or unknown one."""
    words = text.split()
    word = words[0].rstrip("+*") if words else ""
    try:
        return JobState(word)
    except ValueError:
        return JobState.UNKNOWN
