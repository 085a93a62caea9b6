"""The learning rate of each step: the config's schedule, times the decline rule's scale.

ART sets the optimizer's rate from each ``backend.train`` call (its Unsloth trainer writes the
call's ``learning_rate`` into every parameter group), so a schedule is the rate the trainer
passes at each step, computed here from the step being trained and the run's total:

- ``constant``: ``learning_rate`` at every step (ART-E);
- ``warmup``: a linear ramp from ``learning_rate / lr_warmup_steps`` to ``learning_rate`` over the
  first ``lr_warmup_steps`` steps, then constant;
- ``linear`` / ``cosine``: that ramp (none when ``lr_warmup_steps`` is 0), then a linear or cosine
  decay towards ``lr_min_ratio x learning_rate``, reached just after the run's last step (so
  the last step still trains; the shape of Hugging Face's linear and cosine schedules).

A rollback (hpc/run/decline.py) scales every later step's rate by ``rollback_lr_scale`` per
rollback: ``scale`` here. Stdlib only: the step double computes its rates with it too.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.training.config import TrainerConfig


def shape(schedule: str, step: int, total: int, warmup: int, floor: float) -> float:
    """The schedule's factor (0 to 1] of the base rate at ``step`` (1 = the first step trained)."""
    if schedule != "constant" and warmup and step <= warmup:
        return step / warmup
    if schedule in ("constant", "warmup"):
        return 1.0
    span = max(total - warmup, 1)
    done = min(max(step - warmup - 1, 0) / span, 1.0)  # the first step after the ramp: the full rate
    decayed = 1.0 - done if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * done))
    return floor + (1.0 - floor) * decayed


def learning_rate_at(config: "TrainerConfig", step: int, total: int, scale: float = 1.0) -> float:
    """The rate to pass when training step ``step`` of ``total`` (``scale``: the rollbacks')."""
    factor = shape(config.lr_schedule, step, total, config.lr_warmup_steps, config.lr_min_ratio)
    return config.learning_rate * factor * scale
