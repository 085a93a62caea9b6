"""What a run's accounting is: its job runs, each one's time cut into kinds, and the figures they add up to.

The records hpc/run/accounting.py computes from Slurm's and the run's records, and that the
views (hpc/run/accounting_text.py, the report's section, status.sh's rows) read. No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from hpc.slurm.output import SacctRow

RECENT_JOB_RUNS = 3  # GPU-h per step is measured over the run's latest job runs that trained

KINDS = ("queued", "starting", "training", "between", "in_flight", "stalled", "lost", "idle")
LABELS = {
    "queued": "queued",
    "starting": "starting (model load, vLLM)",
    "training": "training steps",
    "between": "validation, between steps",
    "in_flight": "step in flight",
    "stalled": "stalled (no step since, flagged STALLED)",
    "lost": "lost work (abandoned, crashed)",
    "idle": "idle, stopping",
}
WASTED = ("starting", "between", "stalled", "lost", "idle")  # allocated time that trained nothing
SHORT = {"starting": "start-up", "between": "validation", "stalled": "stalled", "lost": "abandoned", "idle": "idle"}


@dataclass(frozen=True)
class Charging:
    """How a cluster charges a job's GPUs (hpc/launcher/clusters.yaml)."""

    cluster: str
    whole_nodes: bool  # every GPU of the job's nodes, whatever it asked for
    gpus_per_node: int

    def gpus(self, row: SacctRow) -> int:
        return row.nodes * self.gpus_per_node if self.whole_nodes else row.gpus

    def describe(self) -> str:
        if self.whole_nodes:
            return f"{self.cluster} charges whole nodes: {self.gpus_per_node} GPU(s) per node, whatever a job asks for"
        return f"{self.cluster} charges the GPUs a job is allocated"


@dataclass(frozen=True)
class Stop:
    """One record of stops.jsonl (the stops contract: docs/design.md)."""

    job_id: str
    time: datetime
    reason: str
    lost_rollout_seconds: float


@dataclass(frozen=True)
class Segment:
    kind: str  # one of KINDS
    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())


@dataclass(frozen=True)
class JobRun:
    """One run of one job, as far as this run is concerned."""

    job_id: str
    attempt: int  # 0, then 1 after the job's first requeue, ...
    state: str
    submit: datetime | None
    start: datetime | None
    end: datetime | None  # None while it runs or waits
    elapsed: float  # seconds allocated
    nodes: int
    gpus: int  # GPUs charged for the job run (all of them, before sharing)
    share: int  # runs sharing the job run (a pack job), each charged 1/share
    segments: tuple[Segment, ...]
    steps: int
    productive: float  # seconds of the steps trained in it
    lost_rollout_seconds: float
    stop_reason: str | None

    def seconds(self, kind: str) -> float:
        return sum(s.seconds for s in self.segments if s.kind == kind)

    @property
    def gpu_hours(self) -> float:
        return self.elapsed * self.gpus / self.share / 3600

    @property
    def node_hours(self) -> float:
        return self.elapsed * self.nodes / self.share / 3600

    def kind_gpu_hours(self, kind: str) -> float:
        return self.seconds(kind) * self.gpus / self.share / 3600

    @property
    def weight(self) -> float:
        """What an allocated second of this job run costs: its GPUs, else its nodes (CPU-only jobs)."""
        return (self.gpus or self.nodes or 1) / self.share

    @property
    def label(self) -> str:
        return f"{self.job_id}" + (f" (run {self.attempt + 1})" if self.attempt else "")


@dataclass(frozen=True)
class RunAccounting:
    """A run's GPU-hours: charged, productive, lost, and what finishing will take."""

    run: str
    charging: Charging | None
    jobs: tuple[JobRun, ...]
    steps_done: int
    total_steps: int | None
    finished: bool
    restart_gaps: tuple[float, ...]  # seconds from a job run's end to the next one's first step
    step_seconds: float | None  # median of the recent steps
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    saved_steps: int | None = None  # steps the decline rule did not train (done.json's steps_left: hpc/run/decline.py)
    unrecorded: tuple[str, ...] = ()  # jobs that started (the ledger says) and sacct has no record of yet

    @property
    def gpu_hours(self) -> float:
        return sum(j.gpu_hours for j in self.jobs)

    @property
    def node_hours(self) -> float:
        return sum(j.node_hours for j in self.jobs)

    @property
    def productive_gpu_hours(self) -> float:
        return sum(j.productive * j.gpus / j.share / 3600 for j in self.jobs)

    def lost_gpu_hours(self, kind: str | None = None) -> float:
        kinds = WASTED if kind is None else (kind,)
        return sum(j.kind_gpu_hours(k) for j in self.jobs for k in kinds)

    @property
    def goodput(self) -> float | None:
        """Productive step time / allocated time, each second weighted by what it costs."""
        allocated = sum((j.elapsed - j.seconds("in_flight")) * j.weight for j in self.jobs)
        productive = sum(j.productive * j.weight for j in self.jobs)
        return min(1.0, productive / allocated) if allocated > 0 else None

    @property
    def queue_wait(self) -> float:
        return sum(j.seconds("queued") for j in self.jobs)

    @property
    def lost_rollout_seconds(self) -> float:
        return sum(j.lost_rollout_seconds for j in self.jobs)

    @property
    def gpu_hours_per_step(self) -> float | None:
        """All-in GPU-h per step over the latest job runs that trained: start-ups, validation
        and stops included, as the remaining steps will pay them too (a stall, a fault, is not)."""
        recent = [j for j in self.jobs if j.steps][-RECENT_JOB_RUNS:]
        steps = sum(j.steps for j in recent)
        spent = sum(j.gpu_hours - j.kind_gpu_hours("in_flight") - j.kind_gpu_hours("stalled") for j in recent)
        return spent / steps if steps else None

    @property
    def step_gpu_hours(self) -> float | None:
        """A recent step's own GPU-h (its seconds x the GPUs of the latest job run)."""
        if self.step_seconds is None or not self.jobs:
            return None
        latest = self.jobs[-1]
        return self.step_seconds * latest.gpus / latest.share / 3600

    @property
    def remaining_steps(self) -> int | None:
        if self.finished:
            return 0
        return None if self.total_steps is None else max(0, self.total_steps - self.steps_done)

    @property
    def saved_gpu_hours(self) -> float | None:
        """What the steps a decline stop left untrained would have cost: those steps x the all-in GPU-h per step."""
        per_step = self.gpu_hours_per_step
        return None if not self.saved_steps or per_step is None else self.saved_steps * per_step

    @property
    def projected_gpu_hours(self) -> float | None:
        """GPU-hours to finish: remaining steps x the recent all-in GPU-h per step."""
        per_step, remaining = self.gpu_hours_per_step, self.remaining_steps
        if remaining == 0:
            return 0.0
        return None if per_step is None or remaining is None else remaining * per_step

