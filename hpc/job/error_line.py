"""A failed job's error line: what its ``job_end``, ``failed.json`` and the ledger's ``failed`` quote.

The last line of the job's part of its .err log that reads like an error, else its last line; read
from where the job began (a requeued job appends to the same log: its ``job_start``'s ``err_offset``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hpc.run.ledger import JobStart, Record

ERROR_WORDS = re.compile(r"error|exception|traceback|fail|fatal|killed|cancelled|denied|refused|timed out", re.I)
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ERROR_TAIL_BYTES = 65536
ERROR_LINE_CHARS = 1000  # a preflight line with its fix fits; a runaway line does not


def error_line(log: Path, offset: int = 0) -> str | None:
    """The last meaningful line a job wrote to its .err log from ``offset`` (where it began):
    the last that reads like an error (a traceback's exception, the trainer's one-line
    errors, Slurm's CANCELLED line), else the last one; printable, one line. None if none."""
    try:
        with open(log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(offset if offset <= size else 0, size - ERROR_TAIL_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line for line in map(clean_line, text.splitlines()) if line and not line.startswith("[continuation]")]
    if not lines:
        return None
    return next((line for line in reversed(lines) if ERROR_WORDS.search(line)), lines[-1])


def clean_line(line: str) -> str:
    """Without terminal escapes and control characters, at most ERROR_LINE_CHARS long."""
    line = "".join(ch if ch.isprintable() else " " for ch in ANSI_ESCAPE.sub("", line)).strip()
    return line if len(line) <= ERROR_LINE_CHARS else line[: ERROR_LINE_CHARS - 3] + "..."


def log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def start_offset(records: list[Record], job_id: str) -> int:
    """Where this job's part of its .err log begins (its job_start's ``err_offset``)."""
    start = next((r for r in reversed(records) if isinstance(r, JobStart) and r.job_id == job_id), None)
    return start.err_offset if start is not None else 0
