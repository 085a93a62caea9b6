"""A run's best checkpoint: the validated step with the highest held-out accuracy.

``validation.jsonl`` (trainer/training/validation.py) is the run's own measure of its
checkpoints; the best is the record with the highest accuracy, then reward, then the later
step. Pruning keeps it (trainer/training/validation.py), the decline rule rolls back to it
(hpc/run/decline.py), ``run:NAME@best`` names it (trainer/serving/policy.py: ``trainer.eval``,
``trainer.serve``, ``trainer.ask``), and done.json, status.sh and ``hpc.report`` show it beside
the last. One definition here, stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc.run.checkpoints import Checkpoint, is_complete, list_checkpoints
from hpc.run.rundir import RunDir


class NoBest(ValueError):
    """``@best`` names no checkpoint (no validation, or the best one is gone): one line."""


@dataclass(frozen=True)
class Validated:
    """One validated step and its held-out accuracy (0 to 1)."""

    step: int
    accuracy: float

    def describe(self) -> str:
        return f"step {self.step} ({100 * self.accuracy:.1f}%)"


def _key(record: dict[str, Any]) -> tuple[float, float, int]:
    reward = record.get("reward_mean")
    return record["accuracy"], reward if isinstance(reward, (int, float)) else 0.0, record["step"]


def best_of(validations: list[dict[str, Any]]) -> Validated | None:
    """The best validation (accuracy, then reward, then the later step), or None without any."""
    if not validations:
        return None
    best = max(validations, key=_key)
    return Validated(int(best["step"]), float(best["accuracy"]))


def last_of(validations: list[dict[str, Any]]) -> Validated | None:
    """The latest validation by step (a step validated twice: its later record)."""
    if not validations:
        return None
    last = max(enumerate(validations), key=lambda item: (item[1]["step"], item[0]))[1]
    return Validated(int(last["step"]), float(last["accuracy"]))


def best_and_last(run: RunDir) -> dict[str, Any]:
    """``best_step``, ``best_accuracy``, ``last_step``, ``last_accuracy`` (done.json's; {} without validation)."""
    validations = run.read_validations()
    best, last = best_of(validations), last_of(validations)
    if best is None or last is None:
        return {}
    return {"best_step": best.step, "best_accuracy": best.accuracy,
            "last_step": last.step, "last_accuracy": last.accuracy}


def best_checkpoint(run: RunDir, model_dir: Path) -> Checkpoint:
    """The best validated step's complete checkpoint; NoBest (one line) when the run has no
    validation or that checkpoint is gone."""
    best = best_of(run.read_validations())
    if best is None:
        raise NoBest(f"run {run.name} has no validation, so it has no best checkpoint: @best needs "
                     f"{run.validation_file.name} (train with val_set_size > 0), or name a step (@STEP, @latest)")
    complete = [c for c in list_checkpoints(model_dir) if is_complete(c.path)]
    found = next((c for c in complete if c.step == best.step), None)
    if found is None:
        have = ", ".join(str(c.step) for c in complete) or "none"
        raise NoBest(f"run {run.name}'s best checkpoint, {best.describe()}, is gone from {model_dir} "
                     f"(pruned or deleted; complete checkpoints: {have})")
    return found
