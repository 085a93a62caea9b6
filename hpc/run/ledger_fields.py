"""A ledger record class's fields as hpc/run/fields.py checks them, worked out from its type hints.

hpc/run/ledger.py's record classes are the ledger's vocabulary; this reads their fields: each one's
kind (a job id, a time, text, a number, one of an enum's values), whether it may be null and whether
it is required. A field typed by an enum takes only the enum's values. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import types
from enum import StrEnum
from typing import Any, get_args, get_origin, get_type_hints

from hpc.run import fields as kinds
from hpc.run.fields import Fields, Kind

# A ledger line's fields as hpc/run/fields.py checks them: by their class's types, with these kinds.
JOB_ID = Kind(lambda value: kinds.JOB.accepts(value) and value != "", "a job id")
TEXTS = Kind(lambda value: isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of text")
BY_NAME = {"time": kinds.MOMENT, "job_id": JOB_ID}
BY_TYPE = {str: kinds.TEXT, int: kinds.WHOLE, float: kinds.NUMBER}
EVENT: Fields = {"event": kinds.required(kinds.TEXT)}


def fields_of(kind: type[Any]) -> Fields:
    """A record class's fields: a ``X | None`` one may be null, one without a default (the job id)
    is required."""
    hints, found = get_type_hints(kind), {}
    for f in dataclasses.fields(kind):
        options = options_of(hints[f.name])
        base = next(option for option in options if option is not type(None))
        checked = BY_NAME.get(f.name) or (TEXTS if get_origin(base) is list else enum_kind(base) if is_enum(base)
                                          else BY_TYPE[base])
        needed = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        found[f.name] = (checked.or_null() if type(None) in options else checked, needed)
    return found


def is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, StrEnum)


def enum_kind(kind: type[StrEnum]) -> Kind:
    """A field typed by one of the ledger's enums: one of its values; a value this code does not know (a
    newer release's) makes the line unreadable, named, rather than read as some other state."""
    values = tuple(member.value for member in kind)
    return Kind(lambda value: value in values, "one of " + ", ".join(values))


ENUM_FIELDS: dict[type, dict[str, type[StrEnum]]] = {}  # per record class, worked out on its first record


def enum_fields(kind: type[Any]) -> dict[str, type[StrEnum]]:
    """A record class's fields typed by an enum (``Record.__post_init__`` makes their values members)."""
    if kind not in ENUM_FIELDS:
        hints = get_type_hints(kind)
        ENUM_FIELDS[kind] = {f.name: option for f in dataclasses.fields(kind) for option in options_of(hints[f.name])
                             if is_enum(option)}
    return ENUM_FIELDS[kind]


def options_of(hint: Any) -> tuple[Any, ...]:
    """The types a field's hint allows: ``X | None`` allows X and None."""
    return get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
