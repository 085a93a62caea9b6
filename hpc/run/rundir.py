"""The run directory: the one place a run's state lives on disk.

Every part of the project meets here: the launcher writes scripts and the
ledger, the job appends continuations, the trainer writes progress and the
done marker, and the monitoring helpers read all of it. Keeping the layout in
one module (stdlib only, so the trainer and the launcher can both import it
cheaply) means there is exactly one definition of where things are.

Layout of ``<runs_dir>/<job_name>/``::

    ledger.jsonl            one JSON record per line, append-only: its events are hpc/run/ledger.py's
    scripts/<launch>.sbatch rendered job scripts, one per launch, never overwritten
    secrets.env             secret variables for the job, mode 0600, never in a script
    model.json              the model folder this run owns (and --init_from's source); hpc/run/ownership.py
    logs/<job>-<id>.out     Slurm stdout/stderr (``%x-%j``), appended across requeues
    progress.json           written by the trainer after every step (atomic rename)
    steps.jsonl             one record per trained step (times, reward, spread, job id): reports, accounting
    stops.jsonl             one record per workload stop: boundary | signal | finished, lost rollout-seconds; hpc/job/deadline.py
    startups.jsonl          one record per training-backend start-up (seconds to registered, job id, phases); hpc/job/deadline.py
    validation.jsonl        one record per completed validation (step, summary); trainer/training/validation.py
    validation/step_NNNN.jsonl   that validation's per-question records
    evaluations/<split>/<model>/  records.jsonl + summary.json of `python -m trainer.eval`
    report/                 `python -m hpc.report`: report.md and its PNG figures
    serve/                  a serve job's address.json (where it listens), token (0600), vllm.log
    sweep_member.json       the sweep this run belongs to and its values (hpc/launcher/sweeps.py)
    judge/                  an in-job judge's vllm.log and address (sbatch/_judge_server.sh.j2)
    done.json               written once when all training steps are finished (or the decline rule stopped the run)
    failed.json             written when the run is given up (crash guard): reason, log, the error line
    .lock                   flock target serialising launches and ledger appends

Nothing here follows a link below the run's folder, reading or writing (hpc/run/safe_io.py,
OutsideRun: a ``report/`` that links elsewhere is refused, not written through), and every record
read is checked against its file's fields (hpc/run/records.py, hpc/run/fields.py): one that does not
fit is skipped and named in ``RunDir.unreadable``, so a corrupt record costs that record, never a
reader's view of the run or of other runs. The launcher and the job use a run's folder only when it
is the user's alone (hpc/run/trust.py); folders are made 0755 whatever the umask
(``safe_io.make_folders``). This module is the layout; those two are how it is read and written.

A sweep (hpc/launcher/sweeps.py) also has ``<runs_dir>/<sweep>/`` (``SweepDir``): ``sweep.json``
(its runs and their values), ``scripts/`` and ``logs/`` of the pack jobs that run
several of its runs at once (hpc/launcher/packing.py), ``secrets.env`` for those jobs, and
``.lock``. It has no ledger: every job is recorded in the ledgers of the runs it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Optional

from hpc.run import fields as kinds
from hpc.run.fields import Check, Fields
from hpc.run.records import Skipped, Tell, read_json, read_jsonl, unreadable
from hpc.run.safe_io import (
    append_jsonl,
    folder_inside,
    make_dirs,
    open_inside,
    read_bytes,
    relative_parts,
    remove,
    write_bytes_atomic,
    write_json_atomic,
    write_jsonl_atomic,
)

# A run's name: its folder under the runs directory (the launcher's --job_name). Never a '/', never
# only dots: a name can only ever name one folder inside the runs directory.
RUN_NAME_RE = re.compile(r"[A-Za-z0-9._=+-]{1,64}")
RUN_NAME_ACCEPTED = "1-64 characters from A-Z a-z 0-9 . _ = + - (not only dots)"
UNBUNDLING = ".unbundle-"  # a folder beside the runs that is a run being unbundled, before its rename: no run yet


def is_run_name(name: str) -> bool:
    return bool(RUN_NAME_RE.fullmatch(name)) and set(name) != {"."}


# Locks this process holds, by run path, with their nesting depth.
_HELD: dict[str, int] = {}


def utc_now() -> str:
    """ISO-8601 UTC timestamp with seconds, used in every record."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory, and its records. Creating the object touches nothing.

    Its readers skip a record that is not what its file holds (hpc/run/fields.py) and keep it
    in ``skipped``: the caller shows the rest and names those (``unreadable``)."""

    path: Path
    skipped: dict[tuple[str, Optional[int]], Skipped] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def ledger(self) -> Path:
        return self.path / "ledger.jsonl"

    @property
    def scripts_dir(self) -> Path:
        return self.path / "scripts"

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    @property
    def secrets_file(self) -> Path:
        return self.path / "secrets.env"

    @property
    def model_record_file(self) -> Path:
        return self.path / "model.json"

    @property
    def progress_file(self) -> Path:
        return self.path / "progress.json"

    @property
    def done_file(self) -> Path:
        return self.path / "done.json"

    @property
    def failed_file(self) -> Path:
        return self.path / "failed.json"

    @property
    def validation_file(self) -> Path:
        return self.path / "validation.jsonl"

    def validation_details(self, step: int) -> Path:
        return self.path / "validation" / f"step_{step:04d}.jsonl"

    @property
    def evaluations_dir(self) -> Path:
        return self.path / "evaluations"

    @property
    def report_dir(self) -> Path:
        return self.path / "report"

    @property
    def serve_dir(self) -> Path:
        return self.path / "serve"

    @property
    def sweep_member_file(self) -> Path:
        return self.path / "sweep_member.json"

    def read_sweep_member(self) -> dict[str, Any] | None:
        """``{"sweep": name, "values": {key: value}}`` for a run launched by a sweep, else None."""
        return self.read_object(self.sweep_member_file, kinds.SWEEP_MEMBER)

    def write_sweep_member(self, sweep: str, values: dict[str, str]) -> None:
        self.write_json(self.sweep_member_file, {"sweep": sweep, "values": values})

    @property
    def judge_dir(self) -> Path:
        return self.path / "judge"

    @property
    def lock_file(self) -> Path:
        return self.path / ".lock"

    # -- files, never through a link ----------------------------------------------

    @property
    def unreadable(self) -> list[Skipped]:
        """The records the readers skipped so far (each named once), in the order met."""
        return list(self.skipped.values())

    def unreadable_line(self, limit: int = 3) -> str:
        """``N unreadable record(s) skipped: FILE line L: why; ...`` (the first ``limit``), or ''."""
        found = self.unreadable
        if not found:
            return ""
        more = f"; and {len(found) - limit} more" if len(found) > limit else ""
        return f"{len(found)} unreadable record(s) skipped: " + "; ".join(map(str, found[:limit])) + more

    def holds(self, path: Path) -> bool:
        """Whether ``path`` is there inside the run, as itself (a link is there: reading it is refused)."""
        parts = relative_parts(self.path, path)
        try:
            with folder_inside(self.path, parts[:-1]) as folder:
                os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
        except OSError:
            return False
        return True

    def teller(self, path: Path) -> Tell:
        """Where a reader of ``path`` tells a skipped record."""
        name = path.relative_to(self.path).as_posix() if path.is_relative_to(self.path) else str(path)

        def tell(line: Optional[int], why: str) -> None:
            self.skipped.setdefault((name, line), Skipped(name, line, why))

        return tell

    def read_object(self, path: Path, fields: Fields | None = None) -> dict[str, Any] | None:
        """The JSON object at ``path`` inside the run (with ``fields``' kinds), else None (skipped)."""
        return read_json(path, self.path, fields, self.teller(path))

    def read_records(self, path: Path, fields: Fields | Check | None = None) -> list[dict[str, Any]]:
        """The JSONL records at ``path`` inside the run that have ``fields``' kinds (others skipped)."""
        return read_jsonl(path, self.path, fields, self.teller(path))

    def read_text(self, path: Path) -> str | None:
        """A text file inside the run (undecodable bytes replaced), or None: missing or refused (skipped)."""
        try:
            return read_bytes(path, self.path).decode(errors="replace")
        except FileNotFoundError:
            return None
        except OSError as error:
            self.skip_file(path, error)
            return None

    def skip_file(self, path: Path, error: OSError) -> None:
        """Name a whole file of the run its reader could not read (a folder, a link, a FIFO)."""
        self.teller(path)(None, unreadable(error))

    def write_json(self, path: Path, data: dict[str, Any], mode: int = 0o644) -> None:
        write_json_atomic(path, data, mode, self.path)

    def write_bytes(self, path: Path, data: bytes, mode: int = 0o644) -> None:
        write_bytes_atomic(path, data, mode, self.path)

    def write_new(self, path: Path, data: bytes, mode: int = 0o644) -> None:
        """A file that must not exist yet (FileExistsError when it does: never overwritten)."""
        fd = open_inside(self.path, path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), mode)

    def make_dirs(self, path: Path) -> None:
        make_dirs(path, self.path)

    def remove(self, path: Path) -> None:
        remove(path, self.path)

    def log_paths(self, job_id: str) -> tuple[Path, Path]:
        """The stdout and stderr log of one job, as Slurm's ``%x-%j`` expands."""
        stem = f"{self.name}-{job_id}"
        return self.logs_dir / f"{stem}.out", self.logs_dir / f"{stem}.err"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold an exclusive lock on the run, so concurrent writers take turns.

        Re-entrant within one process (the launcher appends to the ledger while
        it holds the lock for a whole submission); flock alone would deadlock,
        since a second open() of the lock file is a separate lock holder."""
        key = str(self.path.resolve())
        if _HELD.get(key):
            _HELD[key] += 1
            try:
                yield
            finally:
                _HELD[key] -= 1
            return
        fd = open_inside(self.path, self.lock_file, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK)  # a FIFO: refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            _HELD[key] = 1
            try:
                yield
            finally:
                _HELD.pop(key, None)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    # -- markers and progress -------------------------------------------------

    def read_progress(self) -> dict[str, Any] | None:
        return self.read_object(self.progress_file, kinds.PROGRESS)

    def write_progress(self, progress: dict[str, Any]) -> None:
        self.write_json(self.progress_file, {**progress, "updated_at": utc_now()})

    def read_model_record(self) -> dict[str, Any] | None:
        """Which model folder this run owns (hpc/run/ownership.py), or None before its first launch."""
        return self.read_object(self.model_record_file, kinds.MODEL)

    def write_model_record(self, record: dict[str, Any]) -> None:
        self.write_json(self.model_record_file, record)

    @property
    def steps_file(self) -> Path:
        return self.path / "steps.jsonl"

    def append_step(self, record: dict[str, Any]) -> None:
        """One trained step, with the job that trained it (the job's id is in its environment)."""
        append_jsonl(self.steps_file, {**record, "job_id": os.environ.get("SLURM_JOB_ID", "local"),
                                       "ended": utc_now()}, self.path)

    def read_steps(self) -> list[dict[str, Any]]:
        return self.read_records(self.steps_file, kinds.STEP)

    @property
    def stops_file(self) -> Path:
        return self.path / "stops.jsonl"

    def append_stop(self, record: dict[str, Any]) -> None:
        """Why a job's workload stopped (hpc.job.deadline.StopRecord), with the job and the time."""
        append_jsonl(self.stops_file, {**record, "job_id": os.environ.get("SLURM_JOB_ID", "local"),
                                       "time": utc_now()}, self.path)

    def read_stops(self) -> list[dict[str, Any]]:
        return self.read_records(self.stops_file, kinds.STOP)

    @property
    def startups_file(self) -> Path:
        return self.path / "startups.jsonl"

    def append_startup(self, seconds: float, phases: dict[str, Any] | None = None) -> None:
        """How long a job's training backend took to start (constructed to registered: the model
        loaded, vLLM up), with the job and the time; the next jobs predict their start-up from it.
        ``phases``: where those seconds went (trainer/training/startup_phases.py)."""
        record = {"seconds": round(seconds, 3), "job_id": os.environ.get("SLURM_JOB_ID", "local"), "time": utc_now()}
        append_jsonl(self.startups_file, {**record, **({"phases": phases} if phases else {})}, self.path)

    def read_startups(self) -> list[dict[str, Any]]:
        """Recorded start-ups, oldest first (a torn last line is dropped, a bad one skipped)."""
        return self.read_records(self.startups_file, kinds.STARTUP)

    def read_validations(self) -> list[dict[str, Any]]:
        """Completed validations, oldest first (a torn last line is dropped, a bad one skipped)."""
        return self.read_records(self.validation_file, kinds.VALIDATION)

    def record_validation(self, record: dict[str, Any], details: list[dict[str, Any]]) -> None:
        """The per-question file first, then the record: the record is what says "done"."""
        write_jsonl_atomic(self.validation_details(record["step"]), details, self.path)
        append_jsonl(self.validation_file, {**record, "time": utc_now()}, self.path)

    def read_done(self) -> dict[str, Any] | None:
        return self.read_object(self.done_file, kinds.DONE)

    def mark_done(self, final_step: int, total_steps: int | None = None, **details: Any) -> None:
        """``details``: the best and last validated steps (hpc/run/best.py), a decline's ``reason``
        and ``steps_left`` (hpc/job/on_decline.py)."""
        self.write_json(self.done_file, {"final_step": final_step, "total_steps": total_steps, **details,
                                         "time": utc_now()})

    def read_failed(self) -> dict[str, Any] | None:
        return self.read_object(self.failed_file, kinds.FAILED)

    def mark_failed(self, reason: str, log_tail: str | None = None, error: str | None = None) -> None:
        """``error``: the failed job's own last error line (its .err log), quoted as is."""
        self.write_json(self.failed_file, {"reason": reason, "log_tail": log_tail, "error": error, "time": utc_now()})


@dataclass(frozen=True)
class SweepDir(RunDir):
    """``<runs_dir>/<sweep>/``: a sweep's record and its pack jobs' scripts, logs and secrets
    (the RunDir paths of the same names), never a run's state: it has no ledger."""

    @property
    def record_file(self) -> Path:
        return self.path / "sweep.json"

    def read_record(self) -> dict[str, Any] | None:
        return self.read_object(self.record_file, kinds.SWEEP)

    def write_record(self, record: dict[str, Any]) -> None:
        self.write_json(self.record_file, record)

    def is_sweep(self) -> bool:
        return self.record_file.exists() and not self.ledger.exists()
