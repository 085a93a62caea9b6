"""A run's trained steps (steps.jsonl) as ``Step`` records, its usual step time, and how spans of
time are written.

The run's reader (hpc/run/rundir.py) has already skipped and named any line that is not a step
(hpc/run/fields.py: a whole step, an ISO end time, seconds in range), so what is built here holds.

hpc/run/accounting.py (where the time went) and hpc/run/health.py (STALLED, COLLAPSED) and the
in-job watcher read them; health sits apart from accounting so that accounting can ask it
whether a running job stalled. (``RunDir.read_steps`` gives the checked lines as written; the
trainer's boundary rule reads their seconds directly: hpc/job/deadline.py.)"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from hpc.run.fields import parse_time  # the run's ISO times, read where its records are checked
from hpc.run.rundir import RunDir

RECENT_STEPS = 10  # a run's usual step: the median of its last RECENT_STEPS steps


@dataclass(frozen=True)
class Step:
    """One trained step of steps.jsonl."""

    step: int
    job_id: str
    start: datetime
    end: datetime
    seconds: float
    reward_spread: float | None = None
    reward_mean: float | None = None


def trained_steps(run: RunDir) -> list[Step]:
    """steps.jsonl as records, in the order they were trained; records with neither ``seconds`` nor
    ``started`` (none the trainer writes) say no span and are left out. A file that cannot be read
    at all reads as none, named in ``run.unreadable`` (the views over many runs show the others)."""
    steps = []
    for record in run.read_steps():
        end, seconds = parse_time(record["ended"]), record.get("seconds")
        start = parse_time(record.get("started")) if seconds is None else None
        if end is None or (seconds is None and start is None):
            continue
        seconds = float(seconds) if seconds is not None else max(0.0, (end - start).total_seconds())  # type: ignore[operator]
        steps.append(Step(record["step"], str(record.get("job_id") or ""), end - timedelta(seconds=seconds), end,
                          seconds, record.get("reward_spread"), record.get("reward_mean")))
    return steps


def usual_step_seconds(steps: list[Step]) -> float | None:
    """The median of the last RECENT_STEPS steps' seconds; None before the first step."""
    recent = [s.seconds for s in steps[-RECENT_STEPS:]]
    return statistics.median(recent) if recent else None


def span(seconds: float | None) -> str:
    """45s, 3m20s, 1h05m, 2d03h; '-' when unknown."""
    if seconds is None:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
