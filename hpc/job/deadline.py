"""In-job side: when does this job end, and does the next step fit before it?

Every Slurm tool stops a job at a fixed signal offset and lets the work in flight
die: for agentic RL that is a step's rollouts, minutes of GPU time. The trainer
(and the step double) therefore asks this module before each step, and before a
validation that is due, whether it would end before the job's stop signal can
come; when it would not, it starts nothing, exits 75 and the job continues the
run at once. SIGUSR1/SIGTERM stay the safety net (docs/design.md, "How a job ends").

- **The end** is Slurm's EndTime of the job, read in the job with ``scontrol show
  job`` and re-read at most every ``END_TIME_MAX_AGE`` seconds, so a requeue or an
  ``scontrol update JobId=.. TimeLimit=..`` is seen before the next step.
  ``HPC_JOB_END_TIME`` (epoch seconds) overrides it (runs outside Slurm, tests).
  No end known: the rule is off (the caller says so once).
- **The deadline** is when the stop signal may come: end - ``HPC_SIGNAL_GRACE``
  (the job's ``--signal_grace``, exported by the job script) - a margin. Slurm
  sends ``--signal=B:USR1@grace`` on its 30 s time-limit tick, so the signal may
  come up to 30 s before end - grace: the default margin is those 30 s.
- **The prediction** of a step is the longest of the last ``recent`` steps
  (``steps.jsonl`` ``seconds``: rollouts, training and the checkpoint save; across
  jobs, so a job's first step has one too) times a safety factor; a validation's
  likewise from ``validation.jsonl``. No history: no prediction, and the work starts.
- **Before the backend starts** (minutes on a GPU: the model loaded, vLLM up) the
  work is that start-up and the first step after it: the longest recent start-up
  (``startups.jsonl``) x the factor plus the step's prediction. A job that cannot
  fit them starts nothing, so a job begun too late wastes no GPU time on a start-up.
- **Stops** are recorded in ``<run>/stops.jsonl`` (``StopRecord``): why the
  workload stopped, and the rollout-seconds it threw away.

Stdlib only: the trainer and the step double import it in the job.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from enum import StrEnum
from typing import Callable, Mapping, Sequence

from hpc.job.workload_env import HPC_JOB_END_TIME, HPC_SIGNAL_GRACE
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.calls import SlurmError

END_TIME_MAX_AGE = 30.0  # seconds a value read from Slurm is trusted before it is read again


class StopReason(StrEnum):
    """Why a workload stopped training (``stops.jsonl``'s ``reason``)."""

    BOUNDARY = "boundary"  # the next step or validation would not fit before the stop signal
    SIGNAL = "signal"  # the job's stop signal came
    FINISHED = "finished"
    DECLINED = "declined"  # the decline rule stopped the run (hpc/job/on_decline.py)
    ROLLBACK = "rollback"  # the decline rule copied the best checkpoint forward; the next job starts from it


STOP_REASONS = tuple(reason.value for reason in StopReason)


class EndTimeError(ValueError):
    """A setting the rule cannot use (a bad HPC_JOB_END_TIME or HPC_SIGNAL_GRACE), as one line."""


# -- when the job ends --------------------------------------------------------------------


def query_slurm_end(job_id: str) -> float | None:
    """Ask Slurm for the job's end time (``scontrol show job``'s EndTime, asked in UTC: hpc/slurm),
    as epoch seconds; None when Slurm does not answer (the rule then waits for the next reading)."""
    try:
        shown = calls.show_job(job_id, timeout=20, in_job=True)
    except SlurmError:
        return None
    end = shown.end_time if shown is not None else None
    return end.timestamp() if end is not None else None


def _number(env: Mapping[str, str], name: str, what: str) -> float | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise EndTimeError(f"{name}={text!r} is not usable: expected {what}")
    return value


@dataclass
class JobEnd:
    """The job's end time: ``HPC_JOB_END_TIME`` if set, else Slurm's for ``SLURM_JOB_ID``
    (read again once ``max_age`` seconds old), else None."""

    env: Mapping[str, str]
    read_slurm: Callable[[str], float | None] = query_slurm_end
    clock: Callable[[], float] = time.monotonic
    max_age: float = END_TIME_MAX_AGE
    _cached: tuple[float, float | None] | None = field(default=None, repr=False)  # (read at, value)

    def get(self) -> float | None:
        override = _number(self.env, HPC_JOB_END_TIME, "the job's end as epoch seconds")
        if override is not None:
            return override
        job_id = self.env.get("SLURM_JOB_ID", "")
        if not job_id.isdigit():
            return None
        now = self.clock()
        if self._cached is None or now - self._cached[0] >= self.max_age or self._cached[1] is None:
            self._cached = (now, self.read_slurm(job_id))
        return self._cached[1]

    @property
    def source(self) -> str:
        return HPC_JOB_END_TIME if self.env.get(HPC_JOB_END_TIME, "").strip() else "Slurm"


def signal_grace(env: Mapping[str, str]) -> float:
    """Seconds before the end at which the job is told to stop (0 outside a job)."""
    return _number(env, HPC_SIGNAL_GRACE, "seconds (the job's --signal_grace)") or 0.0


# -- how long the next step takes ------------------------------------------------------------


@dataclass(frozen=True)
class BoundarySettings:
    """The rule's knobs (trainer config keys ``boundary_*``, the step double's options)."""

    recent_steps: int = 5  # the prediction is the longest of this many recent steps ...
    safety_factor: float = 1.2  # ... times this
    margin_seconds: float = 30.0  # kept free before end - grace: Slurm's time-limit tick may signal that early


DEFAULT_SETTINGS = BoundarySettings()


def predict(durations: Sequence[float], settings: BoundarySettings) -> float | None:
    """The longest of the last ``recent_steps`` durations times the safety factor; None
    without any (a run's first step, or its first validation)."""
    recent = [d for d in list(durations)[-settings.recent_steps:] if d >= 0]
    return max(recent) * settings.safety_factor if recent else None


def step_durations(run: RunDir) -> list[float]:
    """Seconds of every trained step so far, oldest first (steps.jsonl, across jobs)."""
    return [float(s["seconds"]) for s in run.read_steps() if isinstance(s.get("seconds"), (int, float))]


def validation_durations(run: RunDir) -> list[float]:
    """Seconds of every recorded validation so far (validation.jsonl ``seconds``)."""
    return [float(v["seconds"]) for v in run.read_validations() if isinstance(v.get("seconds"), (int, float))]


def startup_durations(run: RunDir) -> list[float]:
    """Seconds of every recorded backend start-up so far, oldest first (startups.jsonl, across jobs)."""
    return [float(s["seconds"]) for s in run.read_startups() if isinstance(s.get("seconds"), (int, float))]


# -- the decision ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """Whether the next piece of work starts, with the figures it was decided on."""

    fits: bool
    predicted: float | None  # seconds the work is predicted to take (None: no history)
    seconds_left: float | None  # seconds from now to the deadline (None: the end is unknown)

    def describe(self, what: str) -> str:
        return (f"{what} would not end before the job's stop signal may come: predicted "
                f"{self.predicted:.1f}s, {self.seconds_left:.1f}s left")


def decide(predicted: float | None, seconds_left: float | None) -> Decision:
    """Start unless both are known and the prediction does not fit in the time left."""
    fits = predicted is None or seconds_left is None or predicted <= seconds_left
    return Decision(fits, predicted, seconds_left)


@dataclass(frozen=True)
class StartDecision(Decision):
    """The decision before the backend starts, on its start-up and the step after it as one
    piece of work (``predicted`` is their sum); the two predictions are kept for the log line."""

    startup: float | None  # the start-up's prediction (None: none recorded yet, counted as 0 s)
    step: float | None  # the step's prediction (None: no step history, so no prediction at all)

    def describe(self, what: str) -> str:
        startup = "none recorded yet" if self.startup is None else f"predicted {self.startup:.1f}s"
        return (f"the backend's start ({startup}) and {what} (predicted {self.step:.1f}s) would not end before "
                f"the job's stop signal may come: {self.seconds_left:.1f}s left")


def decide_start(startups: Sequence[float], steps: Sequence[float], settings: BoundarySettings,
                 seconds_left: float | None) -> StartDecision:
    """Start the backend unless its start-up and the next step, each predicted as a step is,
    would not fit in the time left. No step history: no prediction (a run's first job starts as
    before). Step history without a recorded start-up: the step alone, since a job that cannot fit
    one step after an instant start-up surely cannot fit it after a real one."""
    startup, step = predict(startups, settings), predict(steps, settings)
    total = None if step is None else (startup or 0.0) + step
    return StartDecision(decide(total, seconds_left).fits, total, seconds_left, startup, step)


@dataclass
class BoundaryRule:
    """The rule, as one job applies it before each step (and each due validation)."""

    end: JobEnd
    grace: float
    settings: BoundarySettings = DEFAULT_SETTINGS
    enabled: bool = True
    clock: Callable[[], float] = time.time
    say: Callable[[str], None] = print
    _off_said: bool = field(default=False, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str], settings: BoundarySettings, *, enabled: bool = True,
                 say: Callable[[str], None] = print) -> BoundaryRule:
        """The job's rule; an unusable HPC_SIGNAL_GRACE or HPC_JOB_END_TIME raises EndTimeError here, at the job's start."""
        rule = cls(JobEnd(env), signal_grace(env), settings, enabled, say=say)
        if enabled:
            rule.end.get()
        return rule

    def seconds_left(self) -> float | None:
        """Seconds until the stop signal may come, or None (rule off, or no end known)."""
        if not self.enabled:
            return None
        end = self.end.get()
        if end is None:
            self._say_off_once()
            return None
        return end - self.grace - self.settings.margin_seconds - self.clock()

    def check(self, durations: Sequence[float]) -> Decision:
        """Does work like ``durations`` (the recent ones of its kind) fit before the deadline?"""
        return decide(predict(durations, self.settings), self.seconds_left())

    def check_start(self, startups: Sequence[float], steps: Sequence[float]) -> StartDecision:
        """Do the backend's start-up (like ``startups``) and the step after it (like ``steps``)
        fit before the deadline? Asked before the backend starts, so a misfit costs no start-up."""
        return decide_start(startups, steps, self.settings, self.seconds_left())

    def describe(self) -> str:
        """One line for the job log: what the rule will do in this job."""
        if not self.enabled:
            return "stop at a step boundary: off (the stop signal alone ends the job's work)"
        end = self.end.get()
        if end is None:
            self._off_said = True
            return "stop at a step boundary: off (the job's end time is not known: no Slurm job, no HPC_JOB_END_TIME)"
        s = self.settings
        when = datetime.fromtimestamp(end, timezone.utc).isoformat(timespec="seconds")
        return (f"stop at a step boundary: the job ends {when} ({self.end.source}); a step starts only if the "
                f"longest of the last {s.recent_steps} x {s.safety_factor} ends {self.grace:.0f}s (signal grace) "
                f"+ {s.margin_seconds:.0f}s (margin) before that")

    def _say_off_once(self) -> None:
        if not self._off_said:
            self._off_said = True
            self.say("stop at a step boundary: off for now (the job's end time is not known)")


# -- what a stop threw away --------------------------------------------------------------------


@dataclass(frozen=True)
class StopRecord:
    """One line of ``<run>/stops.jsonl`` (RunDir.append_stop adds job_id and time)."""

    step: int  # steps done: the checkpoint the next job resumes from
    reason: StopReason
    lost_rollout_seconds: float = 0.0  # rollout-seconds started and not trained on
    predicted_step_seconds: float | None = None  # at a boundary: the work not started (+ a start-up before it)
    seconds_left: float | None = None

    def __post_init__(self) -> None:
        if self.reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {self.reason!r}; known: {', '.join(STOP_REASONS)}")
        object.__setattr__(self, "reason", StopReason(self.reason))  # a word given becomes the member

    @classmethod
    def boundary(cls, step: int, decision: Decision) -> StopRecord:
        return cls(step, StopReason.BOUNDARY, 0.0, _rounded(decision.predicted), _rounded(decision.seconds_left))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def record_stop(run: RunDir, record: StopRecord) -> None:
    run.append_stop({**asdict(record), "lost_rollout_seconds": round(record.lost_rollout_seconds, 3)})
