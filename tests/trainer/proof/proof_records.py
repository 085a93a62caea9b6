"""What the proof's tests write where a stage would: an earlier proof's model record, a run's step
records (shared by the tests of the modules that read them)."""

from __future__ import annotations

import json
from pathlib import Path

from hpc.run.rundir import utc_now
from trainer.proof.workspace import Work


def made_elsewhere(folder: Path) -> Path:
    """A model folder an earlier proof made and warmed up (only its record: the stages here do not load it)."""
    folder.mkdir(parents=True)
    (folder / "made_by.json").write_text(json.dumps({"size": "small", "warmup": {"steps": 300}}))
    return folder


def append_step(work: Work, step: int, started: str | None = None) -> None:
    work.run.append_step({"step": step, "started": started or utc_now(), "seconds": 1.0, "rollout_seconds": 0.5,
                          "trajectories": 12})
