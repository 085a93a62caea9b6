"""What each record of a run directory must hold for its readers to use it.

A run directory is written by the launcher, the job and the trainer, and read by status.sh,
``hpc.accounting``, ``hpc.report``, the job's hooks and the trainer itself. A record that a
crash, a hand edit or a hostile neighbour left malformed (a list for an object, a string for
an accuracy, a number too large for a float) must cost the readers that record only: the
run's readers (hpc/run/rundir.py) check every record against its file's fields here, skip
one that does not fit and name it (the run is then shown as unreadable), so no reader meets a
value of the wrong kind. Only the fields some reader relies on are listed; others pass as they
are. The ledger's records are checked by the same rule with the fields of their record classes
(hpc/run/ledger.py, where its vocabulary lives). Stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Optional

# Beyond these no figure of a run is meant: they keep sums, floats and dates from overflowing.
LARGEST_WHOLE = 10**12
LONGEST_SECONDS = 10**9  # about 31 years
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2999, 12, 31, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Kind:
    """A kind of value a field holds, and how a message names it."""

    accepts: Callable[[Any], bool]
    name: str

    def or_null(self) -> Kind:
        return Kind(lambda value: value is None or self.accepts(value), f"{self.name} or null")


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= LARGEST_WHOLE


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= LARGEST_WHOLE


def parse_time(value: Any) -> datetime | None:
    """An ISO-8601 time of the run's records (UTC, hpc.run.rundir.utc_now), aware."""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _is_moment(value: Any) -> bool:
    moment = parse_time(value) if isinstance(value, str) else None
    return moment is not None and EARLIEST <= moment <= LATEST


WHOLE = Kind(_is_whole, f"a whole number from 0 to {LARGEST_WHOLE}")
NUMBER = Kind(_is_number, "a finite number")
FRACTION = Kind(lambda v: _is_number(v) and 0 <= v <= 1, "a number from 0 to 1")
SECONDS = Kind(lambda v: _is_number(v) and 0 <= v <= LONGEST_SECONDS, f"seconds from 0 to {LONGEST_SECONDS}")
TEXT = Kind(lambda v: isinstance(v, str), "text")
JOB = Kind(lambda v: isinstance(v, str) or _is_whole(v), "a job id")
MOMENT = Kind(_is_moment, "an ISO-8601 time (years 1970 to 2999)")
FLAG = Kind(lambda v: isinstance(v, bool), "true or false")
LIST = Kind(lambda v: isinstance(v, list), "a list")
OBJECT = Kind(lambda v: isinstance(v, dict), "an object")

Fields = Mapping[str, tuple[Kind, bool]]  # field -> (its kind, whether it is required)
# A file whose records differ by kind checks each with its own rule: why one is no record, or None
# (ledger.jsonl's, by event: hpc/run/ledger.py builds its fields from its record classes).
Check = Callable[[dict[str, Any]], Optional[str]]


def required(kind: Kind) -> tuple[Kind, bool]:
    return kind, True


def optional(kind: Kind) -> tuple[Kind, bool]:
    return kind.or_null(), False


PROGRESS: Fields = {"step": optional(WHOLE), "total_steps": optional(WHOLE), "reward_mean": optional(NUMBER),
                    "eta_seconds": optional(NUMBER)}
DONE: Fields = {"final_step": optional(WHOLE), "total_steps": optional(WHOLE), "best_step": optional(WHOLE),
                "best_accuracy": optional(FRACTION), "last_step": optional(WHOLE),
                "last_accuracy": optional(FRACTION), "reason": optional(TEXT), "steps_left": optional(WHOLE)}
FAILED: Fields = {"reason": optional(TEXT), "error": optional(TEXT), "log_tail": optional(TEXT)}
MODEL: Fields = {"model_dir": required(TEXT)}
STEP: Fields = {"step": required(WHOLE), "ended": required(MOMENT), "started": optional(MOMENT),
                "seconds": optional(SECONDS), "job_id": optional(JOB), "reward_mean": optional(NUMBER),
                "reward_spread": optional(NUMBER), "rollout_seconds": optional(SECONDS)}
STOP: Fields = {"time": required(MOMENT), "job_id": optional(JOB), "reason": optional(TEXT),
                "step": optional(WHOLE), "lost_rollout_seconds": optional(SECONDS)}
STARTUP: Fields = {"seconds": required(SECONDS), "job_id": optional(JOB), "time": optional(MOMENT)}
RATES = ("i_dont_know_rate", "wrong_answer_rate", "tool_error_rate")
SUMMARY: Fields = {"accuracy": required(FRACTION), "questions": optional(WHOLE), "failed": optional(WHOLE),
                   "reward_mean": optional(NUMBER), "mean_turns": optional(NUMBER),
                   "latency_mean_s": optional(NUMBER), "split_key": optional(TEXT), "inbox_domain": optional(TEXT),
                   **{rate: optional(FRACTION) for rate in RATES}}
VALIDATION: Fields = {**SUMMARY, "step": required(WHOLE), "time": optional(MOMENT), "seconds": optional(SECONDS)}
EVALUATION: Fields = {**SUMMARY, "model": required(TEXT), "split_key": required(TEXT)}
SWEEP_MEMBER: Fields = {"sweep": required(TEXT), "values": optional(OBJECT)}
SWEEP: Fields = {"sweep": optional(TEXT), "runs": optional(LIST)}
ADDRESS: Fields = {"host": required(TEXT), "port": required(WHOLE), "node": required(TEXT),
                   "token_required": optional(FLAG), "model": optional(TEXT)}


def problem(record: dict[str, Any], fields: Fields | Check) -> str | None:
    """Why ``record`` cannot be read as one of ``fields``' records (one line), or None."""
    if callable(fields):
        return fields(record)
    for name, (kind, needed) in fields.items():
        if name not in record:
            if needed:
                return f"no {name!r}"
        elif not kind.accepts(record[name]):
            return f"{name} {shown(record[name])} is not {kind.name}"
    return None


def shown(value: Any) -> str:
    """A value in a message: short, on one line, and never a deep structure walked."""
    if isinstance(value, (dict, list)):
        return f"(a JSON {'object' if isinstance(value, dict) else 'list'})"
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "(a huge number)"
    return text if len(text) <= 40 else text[:37] + "..."
