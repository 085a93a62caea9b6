"""Where a run stands, as status.sh's runs view says it: a typed ``RunState`` worked out from the run's
records (its done and failed markers, its ledger) and Slurm's queue, and the words the view shows
for it. What the view decides (the ETA column, a sweep's summary) it decides from the state, never
from the words."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Optional, Sequence

from hpc.run import lease, ledger
from hpc.run.decline import Decisions
from hpc.run.health import Flag
from hpc.run.ledger import JobStart, Record, resume_command
from hpc.run.monitor.rundirs import read_marker
from hpc.run.rundir import RunDir
from hpc.slurm.states import QUEUED


class RunState(Enum):
    """Where a run stands, first match wins: finished, failed (given up), cancelled by its user since its
    newest launch, moved (to another cluster, or arrived and not launched here), parked (nothing
    continues it), parked as far as Slurm's queue says while its directory says a job carries it
    (``SLURM_UNKNOWN``), else going (its jobs carry it, or it has none yet)."""

    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    MOVED = "moved"
    PARKED = "parked"
    SLURM_UNKNOWN = "slurm_unknown"
    GOING = "going"

    @property
    def over(self) -> bool:
        """Nothing trains it now or later without the user: it has no time left to finish (ETA)."""
        return self not in (RunState.GOING, RunState.SLURM_UNKNOWN)


@dataclass(frozen=True)
class Parked:
    """A run nothing continues: no job of it in the queue, and not finished, failed or
    cancelled by its user (docs/design.md: a run across jobs). Launching it again resumes it."""

    job: str  # the job that ended it
    state: str  # that job's state in accounting
    resume: str  # the command that resumes the run
    unknown: str = ""  # not parked as far as the run directory knows: why Slurm's state of it is unknown

    @property
    def text(self) -> str:
        if self.unknown:
            return f"Slurm state unknown: {self.unknown}"
        return f"PARKED: job {self.job or '?'} ended {self.state or '?'} and nothing continues the run"


def parked(run_dir: RunDir, records: list[Record], active: dict[str, str],
           states: dict[str, str]) -> Optional[Parked]:
    launch = ledger.latest_launch(ledger.since_arrival(records))
    if launch is None or ledger.moved_away(records) is not None or read_marker(run_dir.read_done) or read_marker(run_dir.read_failed) \
            or ledger.cancelled_since_launch(records):
        return None
    if any(job in active for job in ledger.job_ids(records)):
        return None
    started = [r.job_id for r in ledger.of_kind(records, JobStart)]
    ended = started[-1] if started else launch.job_id
    return Parked(ended, states.get(ended, ""), resume_command(launch), unknown_state(run_dir, records, states))


def unknown_state(run_dir: RunDir, records: list[Record], states: dict[str, str]) -> str:
    """Why a run squeue shows no job of is not PARKED as far as its directory knows (its job holds the
    run's lease; the ledger shows a job running that accounting has not seen end; accounting has a job
    of it still queued), or ''."""
    holder = lease.read(run_dir)
    if holder is not None and not lease.free(holder, datetime.now(timezone.utc).timestamp()):
        return f"squeue shows no job, but {holder.holder()} holds the run (lease renewed at {holder.renewed})"
    running = [job for job in ledger.open_jobs(records) if states.get(job, "") in ("", *QUEUED)]
    running += [job for job in ledger.job_ids(records) if job not in running and states.get(job, "") in QUEUED]
    if running:
        said = {job: states.get(job) or "not yet recorded by sacct" for job in running}
        return "squeue omits job(s) of the run: " + ", ".join(f"{j} ({s} as far as sacct knows)"
                                                             if s in QUEUED else f"{j} ({s})" for j, s in said.items())
    return ""


def moved_text(records: list[Record]) -> str:
    """A run that moved away (it trains elsewhere), or one that arrived and has not been launched here."""
    moved = ledger.moved_away(records)
    if moved is not None:
        return f"MOVED to {moved.to} at step {moved.step} (python -m hpc.run reclaim takes it back)"
    arrived = ledger.since_arrival(records)
    if arrived and isinstance(arrived[0], ledger.MovedIn) and ledger.latest_launch(arrived) is None:
        return f"MOVED in at step {arrived[0].step} from {arrived[0].source}: launch it here to continue"
    return ""



def run_state(done: dict[str, Any], failed: dict[str, Any], records: list[Record],
              parked_run: Optional[Parked]) -> RunState:
    """The run's state from its markers (``done.json``, ``failed.json``), its ledger and ``parked``'s answer."""
    if done:
        return RunState.FINISHED
    if failed:
        return RunState.FAILED
    if ledger.cancelled_since_launch(records):
        return RunState.CANCELLED
    if moved_text(records):
        return RunState.MOVED
    if parked_run is not None:
        return RunState.SLURM_UNKNOWN if parked_run.unknown else RunState.PARKED
    return RunState.GOING


def state_of(run_dir: RunDir, records: list[Record], parked_run: Optional[Parked]) -> RunState:
    return run_state(read_marker(run_dir.read_done), read_marker(run_dir.read_failed), records, parked_run)


def result_text(state: RunState, done: dict[str, Any], failed: dict[str, Any], records: list[Record],
                parked_run: Optional[Parked], flags: Sequence[Flag]) -> str:
    """The RESULT column: what the state means for the run, in words."""
    if state is RunState.FINISHED:
        return f"finished ({done['reason']})" if done.get("reason") else "finished"
    if state is RunState.FAILED:
        return f"failed: {failed.get('reason') or '?'}"
    if state is RunState.CANCELLED:
        return "cancelled (launch again to resume)"
    if state is RunState.MOVED:
        return moved_text(records)
    if parked_run is not None:
        return parked_run.text
    said = [flag.message for flag in flags] + [Decisions.of(records).summary()]
    return "; ".join(filter(None, said)) or "-"


def sweep_word(state: RunState, job_state: str) -> str:
    """The run in its sweep's summary: finished, failed, parked, else its job's state."""
    if state in (RunState.FINISHED, RunState.FAILED):
        return state.value
    if state in (RunState.PARKED, RunState.SLURM_UNKNOWN):
        return "parked"
    return job_state or "no job"
