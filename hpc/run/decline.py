"""Is a run declining, and what has it decided? The rule and the run's decisions, read back.

agent_008's loop makes an agent better and does not keep it: on the learning curve's two H100s
(docs/results/learning_curve_runs/2026-11-27-2xH100-copy-lesson) held-out accuracy rose from 47%
to 97-99% in 8-12 steps, held there, then fell (seed 1 to 51% at step 56, seed 2 to 0% from step
60), while the trainer went on spending GPU-hours on a model worse than one it had saved.

**Declining** (judged at each validation, the run's own measure of a checkpoint): the held-out
accuracy has been below the run's best by more than ``points`` percentage points for the last
``validations`` validations in a row; or, with ``on_collapse``, the run is COLLAPSED
(hpc/run/health.py: every group's rollouts score alike) and this validation is below the best by
more than ``points``. After a rollback only the validations since it count towards the streak (the
best stays the best over the whole run).

Defaults from those records (300 questions per validation, a validation every 4 steps): on the
plateau one validation fell up to 7.7 points below the best and the next was back within 1 (seed 1,
steps 28 and 40), and the control run (learning rate 0: noise alone) never had two in a row more
than 3.3 points below its best; the falls were 10.0 then 27.7 points below (seed 1, steps 48-52)
and 10.0 then 99.0 (seed 2, steps 56-60). So ``points`` 5 and ``validations`` 2: no plateau or
control point acts, both falls act at their second validation below (seed 1 at step 52, seed 2 at
step 60). A validation of fewer questions is noisier (100 questions: about 1.7x the spread), so
such runs want a larger ``points``.

**Decisions** are ``decline`` records of the run's ledger (hpc/run/ledger.py), written by the
trainer when it acts (hpc/job/on_decline.py); a later job reads them back here: how many rollbacks
were made, the learning-rate scale they left, a rollback whose checkpoint copy is not made yet, a
stop not yet marked done. Stdlib only: the trainer, the step double, status.sh, hpc.report and
hpc.accounting read it alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from hpc.run import health, ledger
from hpc.run.best import Validated, best_of
from hpc.run.ledger import Decline, DeclineAction, Record
from hpc.run.rundir import RunDir
from hpc.run.steps import Step

ACTIONS = tuple(action.value for action in DeclineAction)  # the words on_decline accepts


SUMMARY_WORDS = {DeclineAction.CONTINUE: "DECLINING", DeclineAction.STOP: "STOPPED (declined)",
                 DeclineAction.ROLLBACK: "ROLLED BACK"}  # the last decision as status.sh and the report name it


@dataclass(frozen=True)
class DeclineSettings:
    """The trainer config's ``on_decline``, ``decline_*``, ``rollback_lr_scale``, ``max_rollbacks``."""

    action: DeclineAction = DeclineAction.CONTINUE
    points: float = 5.0
    validations: int = 2
    on_collapse: bool = True
    lr_scale: float = 0.5
    max_rollbacks: int = 2


@dataclass(frozen=True)
class Verdict:
    """A declining run at its latest validation: how far below its best, for how long, and why."""

    latest: Validated
    best: Validated
    streak: int  # validations in a row below the best by more than the points (since the last rollback)
    collapsed: bool

    @property
    def points_below(self) -> float:
        return 100 * (self.best.accuracy - self.latest.accuracy)

    def reason(self) -> str:
        why = " and COLLAPSED (every group's rollouts score alike)" if self.collapsed else ""
        return (f"held-out accuracy {100 * self.latest.accuracy:.1f}% at step {self.latest.step} is "
                f"{self.points_below:.1f} points below the best, {self.best.describe()}, for "
                f"{self.streak} validation(s) in a row{why}")


def below_streak(validations: Sequence[dict[str, Any]], best: float, points: float) -> int:
    """How many of the last validations in a row are below ``best`` by more than ``points``."""
    streak = 0
    for record in reversed(validations):
        if 100 * (best - record["accuracy"]) <= points + 1e-9:
            break
        streak += 1
    return streak


def judge(validations: list[dict[str, Any]], steps: list[Step], settings: DeclineSettings,
          since_step: int = -1, collapse: health.HealthSettings | None = None) -> Verdict | None:
    """The verdict at the latest validation when the run is declining, else None. ``since_step``:
    the last rollback's step (validations up to it do not count towards the streak)."""
    best = best_of(validations)
    recent = [v for v in validations if v["step"] > since_step]
    if best is None or not recent:
        return None
    streak = below_streak(recent, best.accuracy, settings.points)
    collapsed = settings.on_collapse and health.collapsed(steps, collapse or health.HealthSettings()) is not None
    if streak >= settings.validations or (collapsed and streak >= 1):
        latest = recent[-1]
        return Verdict(Validated(int(latest["step"]), float(latest["accuracy"])), best, streak, collapsed)
    return None


def to_act_on(validations: list[dict[str, Any]], steps: list[Step], settings: DeclineSettings,
              since_step: int = -1, collapse: health.HealthSettings | None = None) -> Verdict | None:
    """``judge``'s verdict, when there is one to act on: stop and rollback act on any; ``continue``
    only where the run became declining at this validation (not already at the one before), so
    each episode is recorded and told once."""
    verdict = judge(validations, steps, settings, since_step, collapse)
    if verdict is None or settings.action is not DeclineAction.CONTINUE or len(validations) < 2:
        return verdict
    before = [s for s in steps if s.step <= int(validations[-2]["step"])]
    return verdict if judge(validations[:-1], before, settings, since_step, collapse) is None else None


# -- the decisions made so far (the ledger's decline records) ----------------------------------------------


@dataclass(frozen=True)
class Decisions:
    """What the run's ``decline`` records say, for the job that reads them at its start."""

    records: tuple[Decline, ...]

    @classmethod
    def of(cls, records: list[Record]) -> Decisions:
        return cls(tuple(ledger.of_kind(records, Decline)))

    @classmethod
    def read(cls, run: RunDir) -> Decisions:
        return cls.of(ledger.readable(run))

    @property
    def rollbacks(self) -> list[Decline]:
        return [r for r in self.records if r.action is DeclineAction.ROLLBACK]

    @property
    def lr_scale(self) -> float:
        """The learning-rate scale the rollbacks left (1 without any)."""
        scales = [r.lr_scale for r in self.rollbacks if r.lr_scale is not None]
        return scales[-1] if scales else 1.0

    @property
    def since_step(self) -> int:
        """The last rollback's step: validations up to it do not count towards a new decline."""
        return self.rollbacks[-1].step if self.rollbacks else -1

    @property
    def stop(self) -> Decline | None:
        return next((r for r in reversed(self.records) if r.action is DeclineAction.STOP), None)

    @property
    def last(self) -> Decline | None:
        return self.records[-1] if self.records else None

    def summary(self) -> str:
        """One line for status.sh and the report: the last decision, '' without any."""
        last = self.last
        if last is None:
            return ""
        text = SUMMARY_WORDS[last.action]
        extra = (f" to step {last.best_step} as step {last.to_step}, lr x{last.lr_scale:g} (rollback "
                 f"{last.rollback})" if last.action is DeclineAction.ROLLBACK else "")
        return f"{text} at step {last.step}{extra}: {last.reason}"
