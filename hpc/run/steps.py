"""A run's trained steps (steps.jsonl) as records, the run's ISO times, and how spans of time are written.

hpc/run/accounting.py (where the time went) and hpc/run/health.py (STALLED, COLLAPSED) both read
them; health sits apart from accounting so that accounting can ask it whether a running job stalled."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hpc.run.fields import parse_time  # noqa: F401 - where every record's times are read


@dataclass(frozen=True)
class Step:
    """One trained step of steps.jsonl."""

    step: int
    job_id: str
    start: datetime
    end: datetime
    seconds: float
    reward_spread: float | None = None


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
