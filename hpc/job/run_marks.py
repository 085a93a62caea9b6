"""What both hooks of a job record about the run as a whole: the step it stands at (its latest
complete checkpoint) and giving it up (``failed.json``, the ledger's ``failed``, the webhook)."""

from __future__ import annotations

import sys
from pathlib import Path

from hpc.job import notify
from hpc.run import ledger
from hpc.run.checkpoints import latest_complete
from hpc.run.ledger import Failed
from hpc.run.rundir import RunDir


def current_step(model_dir: Path) -> int:
    latest = latest_complete(model_dir)
    return latest.step if latest else 0


def give_up(run: RunDir, reason: str, log_err: str | None, error: str | None = None) -> None:
    """Mark the run failed: failed.json and the ledger's ``failed`` quote the job's error line."""
    run.mark_failed(reason, log_tail=log_err, error=error)
    ledger.append(run, Failed(reason=reason, log_tail=log_err, error=error))
    print(f"[continuation] run {run.name} marked failed: {reason}; log: {log_err or '-'}", file=sys.stderr)
    notify.tell(run, "failed", error or reason)  # the webhook, if any (hpc/job/notify.py)
