"""``python -m hpc.accounting RUN [--runs_dir DIR]``: where a run's GPU-hours went, as a table.

hpc/accounting.py runs this module as ``__main__``; its help is hpc/run/accounting.py's account of
the figures. Bad input: one line, exit 2; Slurm's accounting not answering: one line, exit 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.run import accounting
from hpc.run.accounting_text import render_text
from hpc.run.monitor.display import printable
from hpc.slurm.calls import SlurmError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpc.accounting", description=accounting.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run name under the runs directory, or a run directory (a path with '/')")
    parser.add_argument("--runs_dir", type=Path, default=None, help="default: the launcher's (RUNS_DIR)")
    args = parser.parse_args(argv)
    from hpc.errors import UsageError
    from hpc.run.report import run_argument

    try:
        run = run_argument(args.run, args.runs_dir)
    except UsageError as error:
        return say(f"python -m hpc.accounting: {error}", EXIT_BAD_INPUT)
    if not run.holds(run.ledger):
        return say(f"python -m hpc.accounting: {run.path} is not a run directory (no ledger.jsonl; accepted: a run "
                   "name under the runs directory, or a run directory)", EXIT_BAD_INPUT)
    try:
        text = render_text(accounting.account_run(run))
    except SlurmError as err:
        return say(f"python -m hpc.accounting: error: {err}", 1)
    print(terminal_text(text + (f"\n\nUNREADABLE: {run.unreadable_line(limit=10)}" if run.unreadable else "")))
    return 0


def say(message: str, code: int) -> int:
    print(terminal_text(message), file=sys.stderr)
    return code


def terminal_text(text: str) -> str:
    """What reaches the terminal: each line's control characters escaped (a run folder or job named
    with ESC or a carriage return can neither drive the terminal nor rewrite a line)."""
    return "\n".join(printable(line) for line in text.split("\n"))


if __name__ == "__main__":
    sys.exit(main())
