"""Slurm time limits: parse every format sbatch accepts, compare, format.

Slurm accepts "minutes", "minutes:seconds", "hours:minutes:seconds",
"days-hours", "days-hours:minutes" and "days-hours:minutes:seconds".
Digits are ASCII only (hpc/digits.py): sbatch reads no other. We keep whole
minutes (rounding seconds up, as Slurm does) because that is the unit Slurm
enforces limits in.
"""

from __future__ import annotations

import re

from hpc.errors import UsageError

ACCEPTED = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"

_PATTERNS = (
    (re.compile(r"(?P<m>[0-9]+)"), "m"),
    (re.compile(r"(?P<m>[0-9]+):(?P<s>[0-9]+)"), "m:s"),
    (re.compile(r"(?P<h>[0-9]+):(?P<m>[0-9]+):(?P<s>[0-9]+)"), "h:m:s"),
    (re.compile(r"(?P<d>[0-9]+)-(?P<h>[0-9]+)"), "d-h"),
    (re.compile(r"(?P<d>[0-9]+)-(?P<h>[0-9]+):(?P<m>[0-9]+)"), "d-h:m"),
    (re.compile(r"(?P<d>[0-9]+)-(?P<h>[0-9]+):(?P<m>[0-9]+):(?P<s>[0-9]+)"), "d-h:m:s"),
)


def parse_time_limit(text: str) -> int:
    """Minutes in a Slurm time limit; UsageError naming the value otherwise."""
    value = str(text).strip()
    for pattern, _ in _PATTERNS:
        match = pattern.fullmatch(value)
        if match:
            parts = {k: int(v) for k, v in match.groupdict().items()}
            seconds = (
                parts.get("d", 0) * 86400
                + parts.get("h", 0) * 3600
                + parts.get("m", 0) * 60
                + parts.get("s", 0)
            )
            minutes = -(-seconds // 60)
            if minutes <= 0:
                break
            return minutes
    raise UsageError(f"invalid time limit {text!r}: expected a positive Slurm time in digits 0-9 ({ACCEPTED})")


def format_minutes(minutes: int) -> str:
    """Minutes as D-HH:MM:SS, the form Slurm itself prints."""
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00" if days else f"{hours:02d}:{mins:02d}:00"
