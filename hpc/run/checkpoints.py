"""ART checkpoints on disk: which step a run can resume from.

ART's LocalBackend keeps one LoRA adapter per training step under
``<art_path>/<project>/models/<run_name>/checkpoints/<NNNN>/`` (``f"{step:04d}"``;
the run name is the job name, so every run has a folder of its own;
``art.utils.get_model_step.get_step_from_dir`` takes the largest all-digit
folder name as the current step, and step 0 is the untrained adapter ART saves
when a model is first registered). A folder is written in place by PEFT's
``save_pretrained`` (``adapter_config.json`` + ``adapter_model.safetensors``),
so a job killed while saving leaves a newer folder that ART would happily
resume from. This module finds the latest *complete* folder and moves newer
incomplete ones aside (never deleting anything), so ART resumes from the last
good step.

One module serves the trainer (at start), the job's continuation hooks, the
launcher's dry run and the status helpers; stdlib only, so all of them can
import it cheaply. For bash: ``python -m hpc.run.checkpoints latest <model_dir>``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import struct
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

log = logging.getLogger("hpc.run.checkpoints")

CHECKPOINTS = "checkpoints"
INCOMPLETE = "checkpoints_incomplete"  # sibling of checkpoints/, so ART never sees it
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# safetensors refuses headers above 100 MB; a bigger length means a torn or foreign file.
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class Checkpoint:
    """One step folder under ``checkpoints/`` (complete or not)."""

    step: int
    path: Path


def model_dir(art_path: str | Path, project: str, run_name: str) -> Path:
    """ART LocalBackend's folder for one run's model (``checkpoints/`` lives inside).

    ART 0.5.19+ names it after the TrainableModel's ``run_name`` (its durable
    lineage; ``name`` is only the alias vLLM serves it under). The project passes
    the job name as ``run_name``, so two job names never share a folder."""
    return Path(art_path) / project / "models" / run_name


def step_dir(model_dir: Path, step: int) -> Path:
    """The folder ART uses for ``step`` (zero-padded to 4 digits, wider past 9999)."""
    return Path(model_dir) / CHECKPOINTS / f"{step:04d}"


def list_checkpoints(model_dir: Path) -> list[Checkpoint]:
    """Every all-digit folder under ``checkpoints/``, oldest step first (as ART counts them)."""
    base = Path(model_dir) / CHECKPOINTS
    try:
        entries = list(base.iterdir())
    except OSError:  # none yet, or not a folder this user may list
        return []
    found = [Checkpoint(int(p.name), p) for p in entries if p.name.isascii() and p.name.isdigit() and p.is_dir()]
    return sorted(found, key=lambda c: c.step)


def is_complete(path: Path) -> bool:
    """True when the adapter in ``path`` can be loaded: the config parses as a
    JSON object and the safetensors file is whole (header readable, data as long
    as the header says). Cheap: reads the config and the safetensors header only."""
    path = Path(path)
    return _config_ok(path / ADAPTER_CONFIG) and _safetensors_ok(path / ADAPTER_WEIGHTS)


def _config_ok(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text()), dict)
    except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8 or JSON, nested too deeply
        return False


def _safetensors_ok(path: Path) -> bool:
    """safetensors layout: u64 little-endian header length N, N bytes of JSON
    ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}),
    then the data buffer, whose size is exactly the largest ``end``."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) != 8:
                return False
            (length,) = struct.unpack("<Q", head)
            if length == 0 or length > MAX_HEADER_BYTES or 8 + length > size:
                return False
            header = json.loads(handle.read(length))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(header, dict):
        return False
    return _data_end(header) == size - 8 - length


def _data_end(header: dict) -> int | None:
    """The end of the data buffer the header describes, or None if malformed."""
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return None
        begin, stop = offsets
        if not 0 <= begin <= stop:
            return None
        end = max(end, stop)
    return end


def trained_base_model(model_dir: Path) -> str | None:
    """The base model a run's LoRA was trained on: ART's ``model.json`` in the model folder
    (written when the model registers), None where there is none or it does not say."""
    try:
        value = json.loads((Path(model_dir) / "model.json").read_text()).get("base_model")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return value if isinstance(value, str) and value else None


def latest_complete(model_dir: Path) -> Checkpoint | None:
    """The newest checkpoint a run can resume from, or None (a new run)."""
    for checkpoint in reversed(list_checkpoints(model_dir)):
        if is_complete(checkpoint.path):
            return checkpoint
    return None


def incomplete_newer(model_dir: Path) -> list[Checkpoint]:
    """Incomplete folders newer than the latest complete one: what ART would
    wrongly resume from. Older incomplete folders are harmless and left alone."""
    latest = latest_complete(model_dir)
    floor = latest.step if latest else -1
    return [c for c in list_checkpoints(model_dir) if c.step > floor and not is_complete(c.path)]


def quarantine_incomplete(model_dir: Path) -> list[Path]:
    """Move incomplete folders newer than the latest complete checkpoint to
    ``<model_dir>/checkpoints_incomplete/<NNNN>-<timestamp>``; return the new paths.

    Only a job's start (and the trainer's) calls this: nothing may be saving then.
    Never deletes: a folder judged incomplete by mistake can be moved back."""
    moved = []
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    for checkpoint in incomplete_newer(model_dir):
        target = Path(model_dir) / INCOMPLETE / f"{checkpoint.path.name}-{stamp}"
        target.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.path.rename(target)
        log.warning("checkpoint step %d is incomplete (killed while saving?): moved %s aside to %s",
                    checkpoint.step, checkpoint.path, target)
        moved.append(target)
    return moved


def prune(model_dir: Path, keep: set[int]) -> list[int]:
    """Delete complete checkpoints older than the latest complete one, except ``keep``.

    The latest complete checkpoint (where a job resumes) and anything newer
    (a step being saved, or a torn folder the next job moves aside) are never
    touched, nor are incomplete folders (they may be a user's to inspect). A
    folder is renamed out of ART's sight before it is removed, so no reader
    ever sees half a checkpoint."""
    latest = latest_complete(model_dir)
    if latest is None:
        return []
    removed = []
    for checkpoint in list_checkpoints(model_dir):
        if checkpoint.step >= latest.step or checkpoint.step in keep or not is_complete(checkpoint.path):
            continue
        doomed = checkpoint.path.with_name(f".pruning-{checkpoint.path.name}")
        checkpoint.path.rename(doomed)
        shutil.rmtree(doomed)
        removed.append(checkpoint.step)
    return removed


# -- command line -------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``latest``: print the step (exit 1, nothing on stdout, if none);
    ``list``: one line per folder; ``quarantine``: move incomplete ones aside."""
    parser = argparse.ArgumentParser(prog="python -m hpc.run.checkpoints", description=main.__doc__)
    parser.add_argument("command", choices=("latest", "list", "quarantine"))
    parser.add_argument("model_dir", type=Path, help="<art_path>/<project>/models/<run_name>")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[checkpoints] %(message)s", stream=sys.stderr)
    if args.command == "latest":
        latest = latest_complete(args.model_dir)
        if latest is None:
            print(f"no complete checkpoint under {args.model_dir / CHECKPOINTS}", file=sys.stderr)
            return 1
        print(latest.step)
    elif args.command == "list":
        for checkpoint in list_checkpoints(args.model_dir):
            state = "complete" if is_complete(checkpoint.path) else "incomplete"
            print(f"{checkpoint.step}\t{state}\t{checkpoint.path}")
    else:
        for path in quarantine_incomplete(args.model_dir):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
