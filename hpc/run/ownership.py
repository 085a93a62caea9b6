"""Which run owns which model folder: checkpoints are never shared by accident.

A run's LoRA checkpoints live in ART's model folder,
``<ART_PATH>/<project>/models/<job name>``. Two runs could still meet there: the
same job name under another runs directory with a shared ``ART_PATH``, an
``ART_PATH`` set by hand to another run's folder, a run directory moved. Then a
new run would silently continue another's LoRA and write its own steps into it,
destroying both. So ownership is recorded both ways:

- ``<run dir>/model.json`` (``RunDir.model_record``): the model folder the run
  owns, and, with ``--init_from``, the checkpoint it started from;
- ``<model folder>/hpc_owner.json``: the run directory that owns the folder
  (ART writes ``model.json``, ``history.jsonl`` and ``checkpoints/`` there, never
  this name).

The launcher (before it submits) and the job's ``begin`` hook check both and
refuse, in one line naming both runs and the ways out, to train in a folder
another run owns. A folder made before these records existed is adopted by the
run of its name, and the launcher says so. status.sh finds a run's checkpoints through
``model_dir_of`` (its model.json). Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc.run.records import read_json
from hpc.run.rundir import RunDir, utc_now
from hpc.run.safe_io import write_json_atomic

OWNER_FILE = "hpc_owner.json"


class OwnershipError(Exception):
    """A run would train in a model folder that is not its own (one line for the user)."""


@dataclass(frozen=True)
class Claim:
    """What a launch or a job start found: ``note`` says anything the user should know."""

    adopted: bool = False
    note: str = ""


def owner_file(model_dir: Path) -> Path:
    return Path(model_dir) / OWNER_FILE


def owner_of(model_dir: Path) -> dict[str, Any] | None:
    return read_json(owner_file(model_dir))


def same_path(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def model_dir_of(run: RunDir) -> Path | None:
    """The model folder ``run`` owns (its model.json), None before its first launch or when the
    record is unreadable (status.sh's checkpoint column)."""
    record = run.read_model_record()  # one that is not an object with a model_dir: skipped and named
    folder = record["model_dir"] if record is not None else None
    return Path(folder) if folder else None


def check(run: RunDir, model_dir: Path) -> Claim:
    """Raise OwnershipError unless ``run`` may train in ``model_dir``; writes nothing."""
    recorded = run.read_model_record()
    if recorded and not same_path(recorded["model_dir"], model_dir):
        raise OwnershipError(
            f"run {run.name} trains in {recorded['model_dir']} (recorded in {run.model_record_file}), but this "
            f"launch would use {model_dir} (ART_PATH or project changed): set them back, or --restart "
            "to start a new run")
    owner = owner_of(model_dir)
    if owner and not same_path(owner.get("run_dir", ""), run.path):
        raise OwnershipError(foreign_folder(run, model_dir, owner))
    if owner is None and has_checkpoints(model_dir) and recorded is None:
        return Claim(adopted=True, note=f"adopting {model_dir}: its checkpoints predate ownership records "
                                        f"and it is run {run.name}'s by name")
    return Claim()


def foreign_folder(run: RunDir, model_dir: Path, owner: dict[str, Any]) -> str:
    other = Path(owner.get("run_dir", "?"))
    gone = "" if other.exists() else " (that run directory no longer exists: --restart moves the folder aside)"
    return (f"model folder {model_dir} belongs to run {other.name} ({other}){gone}, not to run {run.name} "
            f"({run.path}); nothing submitted: choose another --job_name, or start from its checkpoint in a "
            f"folder of your own with --init_from {other.name}[:STEP]")


def has_checkpoints(model_dir: Path) -> bool:
    folder = Path(model_dir) / "checkpoints"
    return folder.is_dir() and any(p.name.isdigit() for p in folder.iterdir())


def claim(run: RunDir, model_dir: Path, init_from: dict[str, Any] | None = None) -> Claim:
    """Check, then record ownership both ways (idempotent; the caller holds the run's lock)."""
    found = check(run, model_dir)
    record = run.read_model_record() or {"model_dir": str(Path(model_dir).resolve()), "claimed": utc_now()}
    if init_from is not None:
        record["init_from"] = init_from
    run.write_model_record(record)
    if owner_of(model_dir) is None:
        write_json_atomic(owner_file(model_dir), {"run_dir": str(run.path.resolve()), "job_name": run.name,
                                                  "claimed": utc_now()})
    return found


def can_move_aside(run: RunDir, model_dir: Path) -> bool:
    """--restart may move the model folder aside if it is this run's, or nobody's any more."""
    owner = owner_of(model_dir)
    if owner is None:
        return True
    return same_path(owner.get("run_dir", ""), run.path) or not Path(owner.get("run_dir", "")).exists()
