"""Validation during training, and the checkpoints worth keeping.

As ART-E did: every ``eval_steps`` steps (0, 30, 60, ... for agent_008: step 0 is
the untrained base LoRA) and after the last step, the current model answers the
same ``val_set_size`` held-out questions (the test split's first, in dataset
order; never a training question) through the training loop's own agent and
judge. The figures go to ART's logging (``split="val"``: W&B and ART's history)
and to the run directory (``validation.jsonl``, one record per validation, and
``validation/step_NNNN.jsonl`` per question).

Its contract with job control: validation runs before the next step is
gathered, on a checkpoint that is already saved, so a stop request during it
loses no training (the questions in flight are cancelled and nothing is
recorded); a resumed job starts at that checkpoint and runs the validation it
owes. A validation is done when its record is appended, and one that is done is
never run again. Its record says how many ``seconds`` it took: the trainer starts a
due validation only if one that long ends before the job's stop signal (hpc/job/deadline.py).

After each validation the run prunes its checkpoints as ART-E did with ART's
``delete_checkpoints``: it keeps the latest complete one (where a job resumes),
the best by validation accuracy (hpc/run/best.py: what ``run:NAME@best`` names and
a rollback returns to), every ``keep_every_steps``-th, and step 0 when it is the KL
penalty's reference; it deletes only in its own model folder (``hpc.run.ownership``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpc.run import ownership
from hpc.run.best import best_of
from hpc.run.checkpoints import list_checkpoints, prune
from hpc.run.rundir import RunDir
from trainer.agent.scenarios import load_scenarios
from trainer.evaluation.engine import evaluate, inbox_domain, records, split_key, summarize

if TYPE_CHECKING:
    import art

    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.rollout import AgentConfig
    from trainer.agent.scenarios import Scenario
    from trainer.training.config import TrainerConfig

log = logging.getLogger("trainer")


def validation_scenarios(config: "TrainerConfig", data_dir: Path) -> list["Scenario"]:
    """The held-out questions: the test split's first ``val_set_size``, in the dataset's order."""
    return load_scenarios(data_dir, "test", limit=config.val_set_size, max_messages=config.max_messages,
                          shuffle=False)


def is_due(step: int, every: int, total: int) -> bool:
    return step % every == 0 or step == total


def best_step(validations: list[dict[str, Any]]) -> int | None:
    """The validated step with the highest accuracy (then reward, then the later step)."""
    best = best_of(validations)
    return None if best is None else best.step


@dataclass
class Validator:
    """Everything a validation needs, set up once per job."""

    run: RunDir
    model_dir: Path
    scenarios: list["Scenario"]
    db: "EmailDB"
    judge: "Judge"
    agent: "AgentConfig"
    every: int
    concurrency: int
    keep_every: int
    prune: bool
    keep_initial: bool = False  # step 0: the KL penalty's reference (kl_penalty_reference initial)

    def due(self, step: int, total: int) -> bool:
        done = {int(v["step"]) for v in self.run.read_validations()}
        return bool(self.scenarios) and step not in done and is_due(step, self.every, total)

    async def validate(self, model: "art.Model", step: int, stop: "asyncio.Event | None") -> dict[str, Any] | None:
        """Validate the model as it is at ``step``; None if a stop came first (nothing recorded)."""
        log.info("validation at step %d: %d questions, %d at a time", step, len(self.scenarios), self.concurrency)
        began = time.monotonic()
        results = await evaluate(model, self.scenarios, db=self.db, judge=self.judge, agent=self.agent,
                                 concurrency=self.concurrency, stop=stop)
        if results is None:
            log.info("validation at step %d abandoned (stop requested); the next job runs it", step)
            return None
        summary = {"step": step, **summarize(results), "model": model.get_inference_name(),
                   "split_key": split_key("test", self.scenarios),
                   "inbox_domain": inbox_domain(self.scenarios), "judge_model": self.judge.model,
                   "seconds": round(time.monotonic() - began, 3)}  # the stop-at-boundary rule predicts from it
        self.run.record_validation(summary, records(results))
        await model.log(metrics={k: float(v) for k, v in summary.items() if isinstance(v, (int, float))
                                 and k != "step"}, split="val", step=step)
        log.info("validation at step %d: accuracy %.3f, reward %.3f, I-don't-know %.3f, wrong %.3f",
                 step, summary["accuracy"], summary["reward_mean"], summary["i_dont_know_rate"],
                 summary["wrong_answer_rate"])
        self.prune_checkpoints()
        return summary

    def prune_checkpoints(self) -> list[int]:
        """Keep the latest (hpc.run.checkpoints.prune never touches it), the best and every Nth."""
        if not self.prune or not self.owns_model_dir():
            return []
        best = best_step(self.run.read_validations())
        keep = ({best} if best is not None else set()) | ({0} if self.keep_initial else set())
        removed = prune(self.model_dir, keep | self.every_nth())
        if removed:
            log.info("pruned checkpoints %s (kept the latest, the best: %s, every %s)",
                     removed, best, self.keep_every or "-")
        return removed

    def every_nth(self) -> set[int]:
        if not self.keep_every:
            return set()
        return {c.step for c in list_checkpoints(self.model_dir) if c.step % self.keep_every == 0}

    def owns_model_dir(self) -> bool:
        owner = ownership.owner_of(self.model_dir)
        return owner is None or ownership.same_path(owner.get("run_dir", ""), self.run.path)
