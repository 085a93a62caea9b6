"""The GPU proof in the background, for machines lent one command of at most 10 minutes at a time
(the full-size stages run 20 minutes and more):

    .venv/bin/python -m trainer.proof --work DIR --only ... --background   # starts it, returns at once
    .venv/bin/python -m trainer.proof --work DIR --follow 540              # its new lines, for 540 s at most

``--background`` starts the same proof in a session of its own (``setsid``: it outlives the command
that started it), its output in ``DIR/proof.log``, its pid in ``DIR/proof.pid``, its exit code in
``DIR/proof.exit`` when it ends. ``--follow SECONDS`` prints the log's lines that earlier follows
did not (``DIR/proof.follow`` keeps the offset) until the proof ends or SECONDS pass, then one
status line; it exits with the proof's code once it has ended, 0 while it runs, and 2 when there
is no background proof in DIR.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.job.workload_env import REPO_DIR
from trainer.polling import poll_until

LOG, PID, EXIT, OFFSET = "proof.log", "proof.pid", "proof.exit", "proof.follow"
STILL_RUNNING = 0


def start_detached(argv: list[str], log: Path, cwd: Path, *, append: bool = True) -> int:
    """Start ``argv`` in a session of its own (``setsid``: it outlives the command that started it,
    as a lent machine's one command of 10 minutes needs), its output in ``log``; its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab" if append else "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return process.pid


def start(argv: list[str], work: Path) -> int:
    """Start the proof with ``argv`` (--background replaced by --started_in_background) detached;
    prints how to follow it."""
    child = [sys.executable, "-m", "trainer.proof", *[arg for arg in argv if arg != "--background"],
             "--started_in_background"]
    pid = start_detached(child, work / LOG, REPO_DIR)
    (work / PID).write_text(f"{pid}\n")
    print(f"GPU proof started in the background: pid {pid}, log {work / LOG}", flush=True)
    print(f"follow it with: {sys.executable} -m trainer.proof --work {work} --follow 540", flush=True)
    return 0


def record_exit(work: Path, code: int) -> None:
    """What the background proof does last: its exit code, for --follow."""
    (work / EXIT).write_text(f"{code}\n")


def running(work: Path) -> bool:
    try:
        pid = int((work / PID).read_text())
    except (OSError, ValueError):
        return False
    if (work / EXIT).is_file():
        return False
    from hpc.run.lease import alive  # the one liveness check (a pid of another user's counts as alive)

    return alive(pid)


def new_lines(work: Path) -> str:
    """The log's complete lines that no earlier follow printed."""
    offset = int((work / OFFSET).read_text()) if (work / OFFSET).is_file() else 0
    try:
        with (work / LOG).open("rb") as handle:
            handle.seek(offset)
            added = handle.read()
    except OSError:
        return ""
    complete = added[:added.rfind(b"\n") + 1]
    (work / OFFSET).write_text(str(offset + len(complete)))
    return complete.decode(errors="replace")


def follow(work: Path, seconds: float, poll: float = 2.0) -> int:
    """Print the proof's new lines until it ends or ``seconds`` pass; then where it stands."""
    if not (work / PID).is_file():
        print(f"python -m trainer.proof: error: no background proof in {work} (no {PID}): start one with --background", file=sys.stderr)
        return EXIT_BAD_INPUT

    def printed_and_ended() -> bool:
        sys.stdout.write(new_lines(work))
        sys.stdout.flush()
        return not running(work)

    poll_until(printed_and_ended, seconds, poll)
    sys.stdout.write(new_lines(work))
    return status(work)


def status(work: Path) -> int:
    """One line: still running (its pid, the stage it is in), or how it ended."""
    pid = (work / PID).read_text().strip()
    stage = last_stage(work)
    if running(work):
        print(f"== still running: pid {pid}, stage {stage}, log {work / LOG} (follow again)", flush=True)
        return STILL_RUNNING
    code = (work / EXIT).read_text().strip() if (work / EXIT).is_file() else "unknown (it was killed)"
    print(f"== ended: exit {code}; last stage {stage}", flush=True)
    return int(code) if code.isdigit() else 1


def last_stage(work: Path) -> str:
    try:
        lines = (work / LOG).read_text(errors="replace").splitlines()
    except OSError:
        return "-"
    return next((line[3:] for line in reversed(lines) if line.startswith("== ")), "-")
