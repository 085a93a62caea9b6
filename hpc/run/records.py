"""A run directory's records: JSON objects and JSONL lines, each checked against its file's fields.

A record that is not what its file holds (not JSON, not an object, a field of the wrong kind:
hpc/run/fields.py) is skipped and told to the reader's ``Tell`` as a ``Skipped``, so that one corrupt
record costs that record, never a reader's view of the run or of other runs. Files are read through
hpc/run/safe_io.py. Stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from hpc.run.fields import Check, Fields, problem, shown
from hpc.run.safe_io import read_bytes


@dataclass(frozen=True)
class Skipped:
    """A record of a run directory (or a whole file) that could not be read, and why: skipped, and
    named, so that one corrupt record costs that record and the run shows as unreadable."""

    file: str  # as the run directory names it: "validation.jsonl", "evaluations/.../summary.json"
    line: int | None  # from 1; None: the whole file
    why: str

    def __str__(self) -> str:
        return f"{self.file}{f' line {self.line}' if self.line else ''}: {self.why}"


Tell = Callable[[Optional[int], str], None]  # (line or None, why) of a skipped record


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


# One decoder for every record: json.loads with parse_constant makes a new one per call, which was a
# fifth of reading a long steps.jsonl.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def parse_record(data: bytes, fields: Fields | Check | None = None) -> tuple[dict[str, Any] | None, str]:
    """One JSON object from ``data`` with ``fields``' kinds, or (None, why not in one line)."""
    try:
        value = _DECODER.decode(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except RecursionError:
        return None, "JSON nested too deeply"
    except json.JSONDecodeError as error:
        return None, f"not JSON ({error.msg} at character {error.pos})"
    except ValueError as error:  # NaN, Infinity; an integer of thousands of digits
        return None, " ".join(str(error).split())[:200]
    if not isinstance(value, dict):
        return None, f"not a JSON object ({kind_of(value)})"
    why = problem(value, fields) if fields else None
    return (None, why) if why else (value, "")


def kind_of(value: Any) -> str:
    return "a list" if isinstance(value, list) else f"the value {shown(value)}"


def unreadable(error: OSError) -> str:
    """Why a file could not be read, in a few words (the OS's own)."""
    return error.strerror or str(error)


def read_json(path: Path, root: Path | None = None, fields: Fields | None = None,
              tell: Tell | None = None) -> dict[str, Any] | None:
    """A JSON object from ``path`` (with ``fields``' kinds), or None: missing, or unreadable
    (told to ``tell``)."""
    try:
        record, why = parse_record(read_bytes(path, root), fields)
    except FileNotFoundError:
        return None
    except OSError as error:
        record, why = None, unreadable(error)
    if record is None and tell is not None:
        tell(None, why)
    return record


def read_jsonl(path: Path, root: Path | None = None, fields: Fields | Check | None = None,
               tell: Tell | None = None) -> list[dict[str, Any]]:
    """JSON objects, one per line (with ``fields``' kinds); a missing file has none. A torn last
    line (an object a crash cut short) is dropped quietly; any other line that is no such object
    is skipped and told to ``tell``."""
    try:
        data = read_bytes(path, root)
    except FileNotFoundError:
        return []
    except OSError as error:
        if tell is not None:
            tell(None, unreadable(error))
        return []
    return parse_lines(data, fields, tell)


def parse_lines(data: bytes, fields: Fields | Check | None = None, tell: Tell | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file's bytes, as ``read_jsonl`` takes them (a reader that must
    tell an unreadable file from an empty one reads the bytes itself: hpc/run/ledger.py)."""
    lines = data.split(b"\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record, why = parse_record(line, fields)
        torn = number == len(lines) and line.lstrip().startswith(b"{") and why.startswith("not JSON")
        if record is not None:
            records.append(record)
        elif tell is not None and not torn:
            tell(number, why)
    return records


