"""In the job: act on a declining run (hpc/run/decline.py's rule), and finish what a job that
died mid-decision left undone.

After each validation the trainer (and the step double) asks ``after_validation``. When the
rule's verdict is there to act on, the decision is written first (a ``decline`` record of the
ledger: the run's state, which every later job reads back), then carried out, then told to the
webhook (``declined``):

- ``continue``: nothing more; the run goes on (each declining episode recorded once).
- ``stop``: ``done.json`` with the reason, the best and last validated steps and the steps left
  untrained; the workload exits 0 and the end hook records ``done`` (hpc.accounting shows the
  GPU-hours the steps left would have cost).
- ``rollback``: the best step's checkpoint is copied forward as the next step (``to_step`` =
  this step + 1: through a temporary folder and a rename, so ART, which resumes from the largest
  step folder, never sees half of it); nothing is deleted or moved, so every checkpoint stays.
  The workload then exits 75 and the next job's backend starts from the copy, with every later
  step's learning rate x ``lr_scale`` (trainer/training/schedule.py). A step number, and that
  step's batch of the data, are spent on the copy: the steps stay in order everywhere (ART,
  steps.jsonl, W&B). After ``max_rollbacks`` rollbacks a further decline stops the run; so does a
  rollback whose best checkpoint is gone.

``settle`` runs at every job's start, before the backend picks its step: a rollback recorded
but not copied is copied; a stop recorded but not marked done is marked done.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

from hpc.job import notify
from hpc.run import health, ledger
from hpc.run.best import best_and_last
from hpc.run.checkpoints import CHECKPOINTS, is_complete, latest_complete, step_dir
from hpc.run.decline import Decisions, DeclineSettings, Verdict, to_act_on
from hpc.run.ledger import Decline, DeclineAction
from hpc.run.rundir import RunDir
from hpc.run.steps import trained_steps

Say = Callable[[str], None]


@dataclass(frozen=True)
class Acted:
    """What the workload does next: ``action`` continue (go on), stop (exit 0) or rollback (exit 75)."""

    action: DeclineAction
    record: Decline


def collapse_settings(env: Mapping[str, str], say: Say) -> health.HealthSettings:
    """COLLAPSED's thresholds (HPC_COLLAPSE_*, as the watcher and status.sh read them)."""
    try:
        return health.HealthSettings.from_env(env)
    except health.SettingError as error:
        say(f"{error}; the decline rule uses COLLAPSED's defaults")
        return health.HealthSettings()


def after_validation(run: RunDir, model_dir: Path, settings: DeclineSettings, total: int, say: Say,
                     env: Mapping[str, str] = os.environ) -> Acted | None:
    """Judge the run at its latest validation and act on a decline; None when there is nothing to do."""
    decisions = Decisions.read(run)
    verdict = to_act_on(run.read_validations(), trained_steps(run), settings, decisions.since_step,
                        collapse_settings(env, say))
    if verdict is None:
        return None
    record = decide(verdict, settings, decisions, model_dir, total)
    ledger.append(run, record)
    say(f"declining: {record.reason}; {record.action}")
    carry_out(run, model_dir, record, say)
    notify.tell(run, "declined", f"{record.action}: {record.reason}", env)
    return Acted(record.action, record)


def decide(verdict: Verdict, settings: DeclineSettings, decisions: Decisions, model_dir: Path,
           total: int) -> Decline:
    """The decision's record: the settings' action, or stop where a rollback cannot be made."""
    action, reason = settings.action, verdict.reason()
    if action is DeclineAction.ROLLBACK and len(decisions.rollbacks) >= settings.max_rollbacks:
        action = DeclineAction.STOP
        reason = f"{reason}; {settings.max_rollbacks} rollback(s) made already (max_rollbacks)"
    elif action is DeclineAction.ROLLBACK and not is_complete(step_dir(model_dir, verdict.best.step)):
        action, reason = DeclineAction.STOP, f"{reason}; the best step's checkpoint is gone, so no rollback"
    record = Decline(action=action, step=verdict.latest.step, accuracy=verdict.latest.accuracy,
                     best_step=verdict.best.step, best_accuracy=verdict.best.accuracy, reason=reason)
    if action is DeclineAction.ROLLBACK:
        return replace(record, rollback=len(decisions.rollbacks) + 1, to_step=verdict.latest.step + 1,
                       lr_scale=decisions.lr_scale * settings.lr_scale)
    if action is DeclineAction.STOP:
        return replace(record, steps_left=max(total - verdict.latest.step, 0))
    return record


def carry_out(run: RunDir, model_dir: Path, record: Decline, say: Say) -> None:
    if record.action is DeclineAction.STOP:
        mark_stopped(run, record)
    elif record.action is DeclineAction.ROLLBACK:
        copy_forward(model_dir, record, say)


def mark_stopped(run: RunDir, record: Decline) -> None:
    """done.json for a run the decline rule stopped: its reason and the steps it did not train."""
    total = record.step + (record.steps_left or 0)
    run.mark_done(record.step, total, reason=f"declined: {record.reason}", steps_left=record.steps_left,
                  **best_and_last(run))


def copy_forward(model_dir: Path, record: Decline, say: Say) -> None:
    """The best step's checkpoint as step ``to_step``: copied into a temporary folder beside the
    step folders (not all digits: ART and hpc.run.checkpoints never count it), then renamed."""
    assert record.to_step is not None
    target = step_dir(model_dir, record.to_step)
    if target.exists():
        return
    temporary = Path(model_dir) / CHECKPOINTS / f".rollback-{target.name}"
    if temporary.exists():  # this module's own copy, cut short by a kill: never a checkpoint
        shutil.rmtree(temporary)
    shutil.copytree(step_dir(model_dir, record.best_step), temporary)
    temporary.rename(target)
    say(f"rollback {record.rollback}: step {record.best_step}'s checkpoint copied as step {record.to_step}; "
        f"learning rate x{record.lr_scale:g} from here on")


def settle(run: RunDir, model_dir: Path, say: Say) -> Decline | None:
    """At a job's start: finish a decision a killed job left half done. Returns the stop when the
    run was stopped (the workload then exits 0 at once), else None."""
    last = Decisions.read(run).last
    if last is None:
        return None
    if last.action is DeclineAction.STOP:
        if run.read_done() is None:
            mark_stopped(run, last)
        say(f"the decline rule stopped this run at step {last.step}: {last.reason}")
        return last
    latest = latest_complete(model_dir)
    behind = last.to_step is not None and (latest is None or latest.step < last.to_step)
    if last.action is DeclineAction.ROLLBACK and behind:
        say(f"rollback {last.rollback} was recorded but not made: making it now")
        copy_forward(model_dir, last, say)
    return None
