"""Is a run healthy? Pure functions over its records and its job's state.

Two ways a run burns GPU-hours for nothing while it looks fine in the queue:

- STALLED: its job is RUNNING but has made no step in ``HPC_STALL_FACTOR`` (3) x
  its usual step time (the median of its recent steps' seconds, at least
  ``HPC_STALL_MIN`` seconds; plus its longest recent validation, which runs
  between steps). A job that has made no step yet is counted from its start,
  with ``HPC_STALL_STARTUP`` seconds (1800) for the start-up (model load, vLLM)
  on top; without any step in the run yet, the start-up allowance alone.
- COLLAPSED: the within-group reward spread (steps.jsonl ``reward_spread``) has
  been at most ``HPC_COLLAPSE_SPREAD`` (0.01) for the last ``HPC_COLLAPSE_STEPS``
  (10) steps: the rollouts of each group score alike, so GRPO has (almost) no
  advantage to learn from. Not exactly 0: in the learning-curve bench's records
  (docs/results/learning_curve_runs/2026-11-27-2xH100-copy-lesson, seed 2) a run that fails every
  rollout still has a group differ by one partial credit (-1.7 against -1.8) now and then, a
  step spread of 0.004-0.008, where its healthy steps have 0 (every rollout right) or 0.09 and more.
  The flag gives the streak's mean reward: all right and all failing look alike
  to GRPO, not to the user.

Used on the login side (status.sh's RESULT column, hpc/run/accounting.py's records)
and in the job (hpc/job/watch.py, which tells the webhook). Stdlib only. The
thresholds are environment variables: the shell's for status.sh, the job's
(``.env`` or ``--env``) for the watcher.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Mapping

from hpc.job.workload_env import (
    HPC_COLLAPSE_SPREAD,
    HPC_COLLAPSE_STEPS,
    HPC_STALL_FACTOR,
    HPC_STALL_MIN,
    HPC_STALL_STARTUP,
)
from hpc.run.steps import Step, parse_time, span, usual_step_seconds
from hpc.slurm.states import JobState

RECENT_VALIDATIONS = 3


class SettingError(ValueError):
    """A threshold variable that is not a number in range; one line naming it."""


@dataclass(frozen=True)
class HealthSettings:
    stall_factor: float = 3.0  # HPC_STALL_FACTOR
    min_stall_seconds: float = 60.0  # HPC_STALL_MIN: no stall is shorter (steps of seconds)
    startup_seconds: float = 1800.0  # HPC_STALL_STARTUP: a job's start-up before its first step
    collapse_steps: int = 10  # HPC_COLLAPSE_STEPS
    collapse_spread: float = 0.01  # HPC_COLLAPSE_SPREAD: a step spread at most this counts as none

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> HealthSettings:
        return cls(stall_factor=setting(env, HPC_STALL_FACTOR, cls.stall_factor, 1.0),
                   min_stall_seconds=setting(env, HPC_STALL_MIN, cls.min_stall_seconds, 0.0),
                   startup_seconds=setting(env, HPC_STALL_STARTUP, cls.startup_seconds, 0.0),
                   collapse_steps=int(setting(env, HPC_COLLAPSE_STEPS, cls.collapse_steps, 1.0, whole=True)),
                   collapse_spread=setting(env, HPC_COLLAPSE_SPREAD, cls.collapse_spread, 0.0))


def setting(env: Mapping[str, str], name: str, default: float, low: float, whole: bool = False) -> float:
    text = (env.get(name) or "").strip()
    if not text:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not value >= low or value == float("inf"):
        kind = "a whole number" if whole else "a number"
        raise SettingError(f"invalid {name} {text!r}: accepted {kind} >= {low:g} (default {default:g})")
    return value


class FlagKind(StrEnum):
    """What a health flag says of a run; its value is the webhook's event (hpc/job/notify.py)."""

    STALLED = "stalled"
    COLLAPSED = "collapsed"


@dataclass(frozen=True)
class Flag:
    kind: FlagKind
    message: str  # one line for status.sh and the webhook


def validation_times(validations: list[dict[str, Any]]) -> list[tuple[int, datetime]]:
    found = [(v.get("step"), parse_time(v.get("time"))) for v in validations]
    return [(int(step), moment) for step, moment in found if isinstance(step, int) and moment is not None]


def validation_allowance(steps: list[Step], validations: list[dict[str, Any]]) -> float:
    """The longest of the recent validations (each from the end of the step it validates)."""
    ends = {s.step: s.end for s in steps}
    durations = [(moment - ends[step]).total_seconds() for step, moment in validation_times(validations)
                 if step in ends and moment > ends[step]]
    return max(durations[-RECENT_VALIDATIONS:], default=0.0)


def stalled(steps: list[Step], validations: list[dict[str, Any]], job_id: str, job_start: datetime,
            now: datetime, settings: HealthSettings) -> Flag | None:
    """STALLED when the running job's last sign of work (a step, a validation; else its
    start) is older than its limit."""
    usual = usual_step_seconds(steps)
    stepped = max((s.end for s in steps if s.job_id == job_id and s.end >= job_start), default=None)
    validated = max((moment for _, moment in validation_times(validations) if moment >= job_start), default=None)
    mine = [moment for moment in (stepped, validated) if moment is not None]
    per_step = max(settings.stall_factor * usual, settings.min_stall_seconds) if usual else 0.0
    if mine:
        since = max(mine)  # after a step a validation may be running: allow for its usual length
        validating = validated is None or (stepped is not None and stepped >= validated)
        limit = per_step + (validation_allowance(steps, validations) if validating else 0.0)
        why = f"{settings.stall_factor:g}x the usual step of {span(usual)}" + (
            " + the longest recent validation" if validating and limit > per_step else "")
    else:
        since, limit = job_start, settings.startup_seconds + per_step
        why = f"start-up allowance {span(settings.startup_seconds)}" + (f" + {span(per_step)}" if usual else "")
    quiet = (now - since).total_seconds()
    if quiet <= limit:
        return None
    what = "no step" if mine else "no step since the job started"
    return Flag(FlagKind.STALLED, f"STALLED: {what} for {span(quiet)} (limit {span(limit)}: {why})")


def low_spread_streak(steps: list[Step], most: float) -> list[Step]:
    """The last steps, newest first, whose reward spread is at most ``most`` (steps without one skipped)."""
    streak: list[Step] = []
    for step in reversed([s for s in steps if s.reward_spread is not None]):
        if step.reward_spread > most + 1e-12:  # type: ignore[operator]
            break
        streak.append(step)
    return streak


def collapsed(steps: list[Step], settings: HealthSettings) -> Flag | None:
    """COLLAPSED when the last ``collapse_steps`` steps that report a spread all report at most
    ``collapse_spread``; the message gives their mean reward (all right or all failing)."""
    streak = low_spread_streak(steps, settings.collapse_spread)
    if len(streak) < settings.collapse_steps:
        return None
    rewards = [s.reward_mean for s in streak if s.reward_mean is not None]
    reward = f", mean reward {sum(rewards) / len(rewards):.2f}" if rewards else ""
    return Flag(FlagKind.COLLAPSED, f"COLLAPSED: reward spread at most {settings.collapse_spread:g} for the last "
                             f"{len(streak)} steps{reward}: each group's rollouts score alike (GRPO has almost "
                             "nothing to learn from)")


def check(steps: list[Step], validations: list[dict[str, Any]], job_id: str, job_state: str,
          job_start: datetime | None, now: datetime, settings: HealthSettings) -> list[Flag]:
    """The run's flags: STALLED only while its job is RUNNING (with a known start)."""
    flags = []
    if job_state == JobState.RUNNING and job_start is not None:
        flags.append(stalled(steps, validations, job_id, job_start, now, settings))
    flags.append(collapsed(steps, settings))
    return [flag for flag in flags if flag is not None]
