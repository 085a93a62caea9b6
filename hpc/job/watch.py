"""In-job side: watch the run while its job runs, and tell the webhook when it stalls.

    python -m hpc.job.watch --run_dir D [--job_id ID] [--interval SECONDS]

Started in the background by the job script (sbatch/_watch.sh.j2) when
``HPC_WEBHOOK_URL`` is set, after the begin hook, and stopped with the job
(HPC_CLEANUP). Every ``--interval`` seconds (``HPC_WATCH_INTERVAL``, default
60) it applies hpc/run/health.py's rules to the run's records (this job is running:
it is this job) and posts one notice per episode: "stalled" once until a step
(or a validation) comes again, "collapsed" once until the reward spread comes
back. Reading the run directory is all it does; it never touches the workload.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from hpc.job import notify
from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.job.workload_env import HPC_WATCH_INTERVAL
from hpc.run import ledger
from hpc.run.health import Flag, HealthSettings, SettingError, check
from hpc.run.ledger import JobStart
from hpc.run.rundir import RunDir
from hpc.run.steps import trained_steps
from hpc.slurm.states import JobState

DEFAULT_INTERVAL = 60.0


class Watcher:
    """The flags told so far in their current episode (a flag that clears is told again next time)."""

    def __init__(self, run: RunDir, job_id: str, job_start: datetime, settings: HealthSettings):
        self.run, self.job_id, self.job_start, self.settings = run, job_id, job_start, settings
        self.told: set[str] = set()

    def flags(self, now: datetime) -> list[Flag]:
        return check(trained_steps(self.run), self.run.read_validations(), self.job_id, JobState.RUNNING, self.job_start,
                     now, self.settings)

    def once(self, now: datetime) -> list[Flag]:
        """Check the run; tell the webhook each new flag; return the flags told now."""
        flags = self.flags(now)
        new = [flag for flag in flags if flag.kind not in self.told]
        self.told = {flag.kind for flag in flags}
        for flag in new:
            notify.tell(self.run, flag.kind, flag.message)
        return new


def job_start_of(run: RunDir, job_id: str) -> datetime | None:
    """When the begin hook started this job (its latest job_start: a requeued job has several)."""
    starts = [r.moment for r in ledger.of_kind(ledger.read(run), JobStart) if r.job_id == job_id]
    return next((s for s in reversed(starts) if s is not None), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpc.job.watch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run_dir", type=Path, required=True)
    parser.add_argument("--job_id", default=os.environ.get("SLURM_JOB_ID", "local"))
    parser.add_argument("--interval", type=float, default=float(os.environ.get(HPC_WATCH_INTERVAL) or DEFAULT_INTERVAL))
    args = parser.parse_args(argv)
    try:
        settings = HealthSettings.from_env()
    except SettingError as err:
        print(f"[watch] {err}; the run is not watched", file=sys.stderr)
        return EXIT_BAD_INPUT
    run = RunDir(args.run_dir)
    started = datetime.now(timezone.utc)
    watcher = Watcher(run, args.job_id, job_start_of(run, args.job_id) or started, settings)
    print(f"[watch] watching run {run.name} (job {args.job_id}) every {args.interval:g}s", file=sys.stderr, flush=True)
    while True:
        time.sleep(max(1.0, args.interval))
        watcher.once(datetime.now(timezone.utc))


if __name__ == "__main__":
    sys.exit(main())
