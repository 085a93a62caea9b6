"""In-job hooks that carry a run across wall-time-limited jobs: the command the job script calls.

The job script (sbatch/_job_control.sh.j2) calls

    python -m hpc.job.continuation begin --run_dir D --model_dir M
    python -m hpc.job.continuation end   --run_dir D --model_dir M --exit_code RC --mode requeue|afterany|chain \
                                     --script S --max_resubmits N --max_failures N [--log_err PATH]

``begin`` (hpc/job/begin_hook.py) takes the run's lease and says whether this job carries the run
(exit 10: nothing to do; 12: another job holds the run; 3: the model folder is another run's), and
records where it starts. ``end`` (hpc/job/end_hook.py) records how the workload ended, decides
(hpc/job/end_decision.py: a pure function of the ledger and what Slurm says, hpc/job/end_slurm.py)
and continues the run or stops it. The job's shell passes the first stop signal it got
(``--signal``): a TERM with no USR1 before it is a cancel, never a stop for time, when accounting
cannot say.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from hpc.job.begin_hook import Limits, begin
from hpc.job.continuation_modes import MODE_CHOICES
from hpc.job.end_hook import EndArgs, end
from hpc.run.rundir import RunDir


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpc.job.continuation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("begin", "end"):
        s = sub.add_parser(name)
        s.add_argument("--run_dir", type=Path, required=True)
        s.add_argument("--model_dir", type=Path, required=True)
        s.add_argument("--job_id", default=os.environ.get("SLURM_JOB_ID", "local"))
    b = sub.choices["begin"]
    b.add_argument("--successor", type=Path, default=None, metavar="SCRIPT",
                   help="queue SCRIPT to follow this job (afterany), whatever ends it")
    b.add_argument("--max_resubmits", type=int, default=Limits.max_resubmits)
    b.add_argument("--max_failures", type=int, default=Limits.max_failures)
    e = sub.choices["end"]
    e.add_argument("--exit_code", type=int, required=True)
    e.add_argument("--mode", choices=MODE_CHOICES, required=True)
    e.add_argument("--script", type=Path, required=True)
    e.add_argument("--max_resubmits", type=int, required=True)
    e.add_argument("--max_failures", type=int, required=True)
    e.add_argument("--log_err", default=None)
    e.add_argument("--packed", action="store_true", help="a run of a pack job: record and decide, continue nothing")
    e.add_argument("--signal", default="", help="the first stop signal the job's shell got (USR1, TERM), if any")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[continuation] %(message)s", stream=sys.stderr)
    run = RunDir(args.run_dir)
    if args.command == "begin":
        return begin(run, args.model_dir, args.job_id, int(os.environ.get("SLURM_RESTART_COUNT") or 0),
                     args.successor, Limits(args.max_resubmits, args.max_failures))
    end(EndArgs(run, args.model_dir, args.job_id, args.exit_code, args.mode, args.script,
                args.max_resubmits, args.max_failures, args.log_err,
                int(os.environ.get("SLURM_RESTART_COUNT") or 0), args.packed, args.signal or None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
