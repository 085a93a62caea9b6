"""What the launcher asks of Slurm (through hpc/slurm, the one Slurm layer): whether sbatch is
here at all (the message when it is not), the job script submitted (test-only and real),
the run's jobs still in the queue (never "none" on an answer Slurm did not give: hpc/slurm/answer.py);
and the git commit a launch records.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from hpc.errors import UsageError
from hpc.slurm import answer as answers
from hpc.slurm.answer import Answer, Unanswered, known, unknown
from hpc.slurm.calls import (
    SlurmError,
    TestOnly,
    sbatch_command,
    submit,
    test_only,
)
from hpc.slurm.output import latest_states
from hpc.slurm.states import QUEUED
from hpc.synced_checkout import synced_commit

__all__ = ["SlurmError", "TestOnly", "sbatch_command", "submit", "test_only", "active_jobs", "Unanswered", "require_sbatch",
           "sbatch_path", "git_commit"]

ASK_SECONDS = 60.0  # how long a launch asks again while Slurm does not say whether the run's jobs are active
NO_SLURM = (
    "no Slurm found: 'sbatch' is not on the PATH. Preview with --dry_run, or start the "
    "project's own Slurm on this machine with: bash scripts/local_slurm.sh up"
)


def sbatch_path() -> str | None:
    return shutil.which("sbatch")


def require_sbatch() -> str:
    path = sbatch_path()
    if path is None:
        raise UsageError(NO_SLURM)
    return path


def active_jobs(job_ids: list[str], expected: Iterable[str] = (), seconds: float = ASK_SECONDS) -> dict[str, str]:
    """The state of each of these jobs still in the queue, asked again for at most ``seconds`` while
    Slurm's answer is unknown; ``Unanswered`` (nothing may be submitted on a guess) when it stays
    unknown. ``expected``: jobs the run's ledger shows running: squeue omitting one is no proof it
    ended; accounting then says whether it did."""
    answer = answers.ask_until(lambda: active_answer(job_ids, list(expected)), seconds, say=_say)
    if answer.unknown or answer.value is None:
        raise Unanswered(f"hpc.launch: Slurm did not say whether the run's jobs are still active ({answer.why}; "
                         f"asked for {seconds:.0f} s): nothing submitted, since a second job would train beside one "
                         "still running; launch again once squeue answers")
    return answer.value


def active_answer(job_ids: list[str], expected: list[str]) -> Answer[dict[str, str]]:
    """squeue's answer, and accounting's for the expected jobs squeue omits (unknown when it has not
    recorded them or fails)."""
    queued = answers.queue_states(job_ids)
    if queued.unknown or queued.value is None:
        return unknown(queued.why)
    active = {job: str(state) for job, state in queued.value.items() if state in QUEUED}
    missing = [job for job in expected if job not in queued.value]
    if not missing:
        return known(active, not active)
    rows = answers.job_runs(missing)
    omitted = f"squeue omits job(s) {', '.join(missing)}, which the run's ledger shows running"
    if rows.unknown or rows.value is None:
        return unknown(f"{omitted}; sacct: {rows.why}")
    ended = latest_states(rows.value)
    unrecorded = [job for job in missing if job not in ended]
    if unrecorded:
        return unknown(f"{omitted}; sacct has not yet recorded job(s) {', '.join(unrecorded)}")
    active.update({job: str(ended[job]) for job in missing if ended[job] in QUEUED})
    return known(active, not active)


def _say(line: str) -> None:
    print(f"hpc.launch: {line}", file=sys.stderr)


def git_commit(repo: Path) -> str | None:
    """HEAD of the repo, with '-dirty' when the work tree has changes; in a checkout synced by
    ``--remote`` (no .git), the laptop's HEAD it was synced from; None outside git."""
    synced = synced_commit(repo)
    if synced is not None:
        return synced
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None
