"""A run's ledger.jsonl as its lines, for tests: records written line by line as the job's hooks
and the launcher write them (the on-disk format of docs/design.md), and the file read back as
JSON objects, so a test checks the format itself rather than hpc/run/ledger.py's reading of it."""

from __future__ import annotations

from typing import Any

from hpc.run.records import read_jsonl
from hpc.run.rundir import RunDir, utc_now
from hpc.run.safe_io import append_jsonl


def write_record(run: RunDir, event: str, **fields: Any) -> dict[str, Any]:
    """Append one record as a line: ``{"event", "time", **fields}``."""
    record = {"event": event, "time": utc_now(), **fields}
    append_jsonl(run.ledger, record)
    return record


def ledger_lines(run: RunDir) -> list[dict[str, Any]]:
    """Every line of the run's ledger that is a JSON object, oldest first."""
    return [line for line in read_jsonl(run.ledger) if isinstance(line, dict)]
