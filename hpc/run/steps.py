"""A run's trained steps (steps.jsonl) as ``Step`` records, its usual step time, the run's ISO
times, and how spans of time are written.

hpc/run/accounting.py (where the time went) and hpc/run/health.py (STALLED, COLLAPSED) and the
in-job watcher read them; health sits apart from accounting so that accounting can ask it
whether a running job stalled. (``RunDir.read_steps`` gives the lines as written; the trainer's
boundary rule reads their seconds directly: hpc/job/deadline.py.)"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

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


def number(value: Any) -> float | None:
    """A JSON number as a float; None for anything else (a bool is no number here)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def step_of(record: Any) -> Step | None:
    """One line of steps.jsonl as a Step; None without the times it needs."""
    if not isinstance(record, dict):
        return None
    end, seconds = parse_time(record.get("ended")), number(record.get("seconds"))
    start = parse_time(record.get("started")) if seconds is None else None
    if end is None or (seconds is None and start is None):
        return None
    seconds = seconds if seconds is not None else (end - start).total_seconds()  # type: ignore[operator]
    step = record.get("step")
    return Step(step if isinstance(step, int) and not isinstance(step, bool) else 0, str(record.get("job_id", "")),
                end - timedelta(seconds=seconds), end, seconds, number(record.get("reward_spread")))


def trained_steps(run: RunDir) -> list[Step]:
    """steps.jsonl as records, in the order they were trained; lines without times are skipped, and a
    file that cannot be read at all reads as none (the views over many runs show the others)."""
    try:
        records = run.read_steps()
    except (OSError, UnicodeDecodeError):
        return []
    return [step for step in map(step_of, records) if step is not None]


def usual_step_seconds(steps: list[Step]) -> float | None:
    """The median of the last RECENT_STEPS steps' seconds; None before the first step."""
    recent = [s.seconds for s in steps[-RECENT_STEPS:]]
    return statistics.median(recent) if recent else None


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time of the run's records (UTC, hpc.run.rundir.utc_now), aware."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


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
