"""``--init_from RUN[:STEP]``: fine-tune from another run's checkpoint, in a folder of your own.

"Continue from run X's step N with another learning rate" is a real need, and
the dangerous way to get it is to point a new run at X's model folder. Here
the starting adapter is copied into the new run's own model folder as its step
0 (``checkpoints/0000``), which is where ART's LocalBackend starts a run from:
the new run numbers its steps from 0 again and walks its data from the start,
X's folder is only read, and the lineage (run, step, source folder) is recorded
in the new run's ``model.json``. Login-node side; stdlib only.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc.digits import is_count
from hpc.errors import UsageError
from hpc.run.checkpoints import is_complete, latest_complete, list_checkpoints, step_dir
from hpc.run.rundir import RunDir, utc_now
from hpc.run.safe_io import make_folders


@dataclass(frozen=True)
class Source:
    """The checkpoint a new run starts from."""

    run: RunDir
    step: int
    path: Path

    def record(self) -> dict[str, Any]:
        return {"run": self.run.name, "run_dir": str(self.run.path), "step": self.step, "source": str(self.path),
                "copied": utc_now()}


def parse(text: str) -> tuple[str, int | None]:
    """``NAME`` or ``NAME:STEP`` -> (NAME, STEP or None for the latest complete one)."""
    name, sep, step = text.partition(":")
    if not name or (sep and not is_count(step)):
        raise UsageError(f"invalid --init_from {text!r}: expected RUN or RUN:STEP, e.g. agent_008:42")
    return name, int(step) if sep else None


def find_source(runs_dir: Path, text: str) -> Source:
    """The complete checkpoint ``text`` names, in a run under ``runs_dir`` (or a run directory path)."""
    name, step = parse(text)
    run = RunDir(Path(name) if os.sep in name else runs_dir / name)
    record = run.read_model_record()
    if record is None:
        raise UsageError(f"invalid --init_from {text!r}: {run.path} is not a run directory with checkpoints "
                         "(no model.json); name a run under the runs directory")
    model_dir = Path(record["model_dir"])
    checkpoint = latest_complete(model_dir) if step is None else next(
        (c for c in list_checkpoints(model_dir) if c.step == step), None)
    if checkpoint is None or not is_complete(checkpoint.path):
        have = ", ".join(str(c.step) for c in list_checkpoints(model_dir) if is_complete(c.path)) or "none"
        raise UsageError(f"invalid --init_from {text!r}: run {run.name} has no complete checkpoint "
                         f"{'at all' if step is None else f'at step {step}'} (complete steps: {have})")
    return Source(run, checkpoint.step, checkpoint.path)


def check_target(model_dir: Path, source: Source) -> None:
    if list_checkpoints(model_dir):
        raise UsageError(f"--init_from {source.run.name}:{source.step} starts a new run, but {model_dir} "
                         "already has checkpoints: choose another --job_name, or add --restart")
    if Path(model_dir).resolve() == Path(source.path).parent.parent.resolve():
        raise UsageError(f"--init_from {source.run.name}: that is this run's own model folder")


def seed(model_dir: Path, source: Source) -> Path:
    """Copy the source adapter to ``<model_dir>/checkpoints/0000`` (through a temporary
    folder and a rename: a half-copied adapter is never a checkpoint)."""
    target = step_dir(model_dir, 0)
    partial = target.with_name(f".0000.copying-{os.getpid()}")
    make_folders(target.parent)
    shutil.copytree(source.path, partial)
    take_away_others_write(partial)
    os.rename(partial, target)
    return target


def take_away_others_write(folder: Path) -> None:
    """copytree copies the source's modes (a neighbour's 0777 checkpoint stays 0777, whatever the
    umask): the new run's copy is writable by its owner alone (hpc/run/trust.py)."""
    for path in [folder, *folder.rglob("*")]:
        info = path.lstat()
        if not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022:
            path.chmod(stat.S_IMODE(info.st_mode) & ~0o022)
