"""Sweeps: one launch, one run per combination of trainer settings (login side).

    python -m hpc.launch --job_name lr_sweep --time_limit 24:00:00 \\
        --sweep learning_rate=1e-5,2e-5,4e-5 --sweep seed=1,2      # or --sweep_file sweep.yaml

expands to 3 x 2 runs. Each is an ordinary run (its own run directory, model
folder, ledger, continuation, failure count and done marker), named so a person
can read it: ``lr_sweep.learning_rate=2e-5.seed=1``. A name that would be too
long for a run name (64 characters) is ``lr_sweep.<8 hex digits>`` instead,
stable for the same values. The values are recorded in each run's
``sweep.json`` and the sweep's members in ``<runs_dir>/<sweep>/sweep.json``,
so ``status.sh`` can group them and launching ``--job_name lr_sweep`` again
(with or without the --sweep flags) acts on every run of the sweep.

Stdlib + PyYAML only: the launcher stays light. Values are validated by the
trainer's own config loader (hpc.launcher.jobspec.trainer_config) before anything is
written or submitted.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpc import yamlfile
from hpc.errors import UsageError, one_line
from hpc.launcher.jobspec import JOB_NAME_RE, TRAIN_ARG_KEY_RE

MAX_RUNS = 256  # a typo like --sweep seed=1,...,1000 should not submit a thousand jobs
MAX_FILE_BYTES = 1 << 20  # --sweep_file: a sweep is a few lines
VALUE_RE = re.compile(r"[A-Za-z0-9._+-]+")  # what may appear of a value in a run name


@dataclass(frozen=True)
class Axis:
    """One swept key and its values, as the user wrote them."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Member:
    """One run of a sweep: its name and the trainer overrides that make it."""

    name: str
    values: tuple[tuple[str, str], ...]  # (key, value) in axis order

    @property
    def overrides(self) -> list[str]:
        return [f"{key}={value}" for key, value in self.values]

    def describe(self) -> str:
        return " ".join(self.overrides)


# -- parsing ------------------------------------------------------------------------------


def parse_sweep_flag(text: str) -> Axis:
    """``key=v1,v2,...`` -> Axis; one line naming the bad flag otherwise."""
    key, sep, values = text.partition("=")
    items = tuple(v.strip() for v in values.split(","))
    if not sep or not TRAIN_ARG_KEY_RE.fullmatch(key.strip()) or not all(map(printable_value, items)):
        raise UsageError(f"invalid --sweep {text!r}: expected key=value1,value2,... "
                         "(a trainer config key and non-empty values on one line), e.g. learning_rate=1e-5,2e-5")
    return Axis(key.strip(), items)


def printable_value(text: str) -> bool:
    """A sweep value names runs and is shown in tables and errors: not empty, no control characters."""
    return bool(text) and text.isprintable()


def read_sweep_file(path: Path) -> list[Axis]:
    """A YAML mapping of key -> list of values (a scalar is one value)."""
    try:
        data = yamlfile.load_plain(sweep_text(path))
    except (OSError, yaml.YAMLError, RecursionError) as error:
        raise UsageError(f"invalid --sweep_file {str(path)!r}: {one_line(error)}") from None
    if not isinstance(data, dict) or not data:
        raise UsageError(f"invalid --sweep_file {str(path)!r}: expected a mapping of config key to a list of "
                         "values, e.g. 'learning_rate: [1e-5, 2e-5]'")
    return [file_axis(path, key, values) for key, values in data.items()]


def sweep_text(path: Path) -> str:
    """The file's text: a regular file of UTF-8 text, at most MAX_FILE_BYTES (not /dev/zero, not a binary)."""
    if not path.is_file():
        raise OSError(f"not a file{'' if path.exists() else ' (no such file)'}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise OSError(f"larger than {MAX_FILE_BYTES} bytes: a sweep is a short mapping of keys to values")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise OSError("not UTF-8 text; expected a YAML mapping of config key to values") from None


def file_axis(path: Path, key: Any, values: Any) -> Axis:
    items = values if isinstance(values, list) else [values]
    scalars = all(v is None or isinstance(v, (str, int, float, bool)) for v in items)
    texts = tuple(yaml_text(v) for v in items) if scalars else ()
    good = isinstance(key, str) and TRAIN_ARG_KEY_RE.fullmatch(key) and texts and all(map(printable_value, texts))
    if not good:
        raise UsageError(f"invalid --sweep_file {str(path)!r}: entry {str(key)[:64]!r}: expected a config key with "
                         "a non-empty list of plain values (text on one line, numbers, true/false, null)")
    return Axis(key, texts)


def yaml_text(value: Any) -> str:
    """A YAML value as the override text the trainer's loader takes (null -> "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_axes(axes: list[Axis], train_args: list[str]) -> list[Axis]:
    """No key twice, none also fixed by --train_arg, and not too many runs."""
    keys = [axis.key for axis in axes]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise UsageError(f"--sweep key {twice[0]!r} is given twice: give all its values in one --sweep")
    fixed = {pair.partition("=")[0] for pair in train_args}
    clash = [k for k in keys if k in fixed]
    if clash:
        raise UsageError(f"--sweep key {clash[0]!r} is also set by --train_arg: sweep it or fix it, not both")
    count = combinations(axes)
    if count > MAX_RUNS:
        raise UsageError(f"the sweep has {count} runs: accepted at most {MAX_RUNS} per launch")
    for axis in axes:
        doubled = sorted({v for v in axis.values if axis.values.count(v) > 1})
        if doubled:
            raise UsageError(f"--sweep {axis.key}: value {doubled[0]!r} is given twice")
    return axes


def combinations(axes: list[Axis]) -> int:
    count = 1
    for axis in axes:
        count *= len(axis.values)
    return count


# -- expansion and names ---------------------------------------------------------------------


def expand(sweep: str, axes: list[Axis]) -> list[Member]:
    """Every combination, first axis slowest, each with its run name."""
    members = []
    for combo in itertools.product(*(axis.values for axis in axes)):
        values = tuple(zip((axis.key for axis in axes), combo))
        members.append(Member(run_name(sweep, values), values))
    names = [m.name for m in members]
    if len(set(names)) != len(names):  # two values that differ only in characters a name drops
        members = [Member(hashed_name(sweep, m.values), m.values) for m in members]
    return members


def run_name(sweep: str, values: tuple[tuple[str, str], ...]) -> str:
    """``<sweep>.<key>=<value>...``, readable; hashed when too long or not name-safe."""
    readable = ".".join([sweep, *(f"{key}={value}" for key, value in values)])
    if all(VALUE_RE.fullmatch(value) for _, value in values) and JOB_NAME_RE.fullmatch(readable):
        return readable
    return hashed_name(sweep, values)


def hashed_name(sweep: str, values: tuple[tuple[str, str], ...]) -> str:
    digest = hashlib.sha256(repr(values).encode()).hexdigest()[:8]
    name = f"{sweep}.{digest}"
    if not JOB_NAME_RE.fullmatch(name):
        raise UsageError(f"invalid --job_name {sweep!r} for a sweep: its runs are named {sweep}.<values>, "
                         "which must fit in 64 characters: use a shorter name")
    return name


def members_from_record(record: dict[str, Any]) -> list[Member]:
    """The members a sweep.json lists (a relaunch without --sweep flags)."""
    return [Member(str(m["name"]), tuple((str(k), str(v)) for k, v in m["values"])) for m in record.get("runs", [])]


def record(sweep: str, members: list[Member], known: list[Member]) -> dict[str, Any]:
    """sweep.json: every run the sweep ever had (a relaunch may add values), in order."""
    merged = {m.name: m for m in known}
    merged.update({m.name: m for m in members})
    return {"sweep": sweep, "runs": [{"name": m.name, "values": [list(v) for v in m.values]}
                                     for m in merged.values()]}
