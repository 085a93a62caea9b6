"""Slurm's times and durations, typed.

Every call of ``hpc/slurm/calls.py`` asks in Slurm's standard format (``SLURM_TIME_FORMAT=standard``:
``2026-11-25T08:46:36``) and in UTC (``TZ=UTC0``), so its times are read as UTC whatever the
node's zone or the user's format; ``parse_time`` also reads the other forms a Slurm prints
(a space for the ``T``, epoch seconds from ``SLURM_TIME_FORMAT=%s``) and gives None for a time
not known yet (``Unknown``, ``None``, ``N/A``, empty). Durations (``Elapsed``, ``TimeLimit``,
squeue's ``%M``): ``[D-]HH:MM:SS``, ``MM:SS``, with fractions of a second in some fields;
``UNLIMITED``, ``Partition_Limit``, ``INVALID`` and the like are None.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo

# D-HH:MM:SS, HH:MM:SS, MM:SS (optionally .fraction), D-HH, D-HH:MM
_DURATION = re.compile(r"(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?(?:\.\d+)?")


def parse_time(text: str, tz: tzinfo = timezone.utc) -> datetime | None:
    """An aware datetime of a Slurm timestamp printed in ``tz``; None for Unknown/None/N/A/empty."""
    value = text.strip()
    if value.isdigit():  # SLURM_TIME_FORMAT=%s
        return datetime.fromtimestamp(int(value), timezone.utc) if int(value) > 0 else None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=tz)


def parse_duration(text: str) -> int | None:
    """Seconds of a Slurm duration as Slurm prints one; None for UNLIMITED, INVALID and the like.

    Slurm prints minutes:seconds (``5:03``) and hours:minutes:seconds with an optional day
    (``1-02:03:04``); with a day and fewer fields the fields are hours (``2-12``) or hours and
    minutes (``2-12:30``)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        return None
    days = int(match["d"] or 0)
    fields = [int(v) for v in (match["a"], match["b"], match["c"]) if v is not None]
    if match["d"] is not None:
        fields += [0] * (3 - len(fields))  # D-HH, D-HH:MM
    elif len(fields) == 1:
        return None  # a bare number is no duration Slurm prints
    hours, minutes, seconds = [0] * (3 - len(fields)) + fields
    return days * 86400 + hours * 3600 + minutes * 60 + seconds
