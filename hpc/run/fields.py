"""What each record of a run directory holds for its readers.

Stdlib only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time of the run's records (UTC, hpc.run.rundir.utc_now), aware."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
