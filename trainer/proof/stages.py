"""The GPU proof's stages, one row each.

A stage is a function ``(work, args) -> lines`` in the module of its kind (one_gpu.py,
two_gpus.py, full_size.py) and its row in ``TABLE``: its name on the command line (``--only``),
the stage that must come before it in the same proof, the GPUs it needs and whether it runs by
default. The command line, the prerequisite check and the runner read only this table, so adding
a stage is writing its function and its row.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

from trainer.proof.full_size import stage_agent008_14b, stage_cards
from trainer.proof.full_size_plan import stage_model14b
from trainer.proof.one_gpu import (
    stage_boundary,
    stage_env,
    stage_eval,
    stage_model,
    stage_resume,
    stage_serve,
    stage_train,
)
from trainer.proof.two_gpus import stage_baseline, stage_dedicated, stage_judge, stage_pack
from trainer.proof.workspace import Work


@dataclass(frozen=True)
class Stage:
    """One stage of the proof."""

    name: str
    run: Callable[[Work, argparse.Namespace], list[str]]
    needs: str | None = None  # a stage before it in the same proof (a "model" stage: or its model given)
    gpus: int = 1  # with fewer the stage is skipped, and the proof says so
    by_default: bool = True  # False: only when --only names it (the full-size stages, a lease each)


TABLE = (
    Stage("env", stage_env),
    Stage("model", stage_model),
    Stage("train", stage_train, needs="model"),
    Stage("resume", stage_resume, needs="train"),
    Stage("boundary", stage_boundary, needs="train"),
    Stage("eval", stage_eval, needs="train"),
    Stage("serve", stage_serve, needs="train"),
    Stage("dedicated", stage_dedicated, needs="model", gpus=2),
    Stage("judge", stage_judge, needs="model", gpus=2),
    Stage("pack", stage_pack, needs="model", gpus=2),
    Stage("baseline", stage_baseline, needs="model"),
    Stage("model14b", stage_model14b, by_default=False),
    Stage("agent008-14b", stage_agent008_14b, needs="model14b", by_default=False),
    Stage("cards", stage_cards, needs="model14b", by_default=False),
)
BY_NAME = {stage.name: stage for stage in TABLE}
NAMES = tuple(BY_NAME)
DEFAULT = tuple(stage.name for stage in TABLE if stage.by_default)
