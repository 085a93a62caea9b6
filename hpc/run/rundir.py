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
    startups.jsonl          one record per training-backend start-up (seconds to registered, job id); hpc/job/deadline.py
    validation.jsonl        one record per completed validation (step, summary); trainer/training/validation.py
    validation/step_NNNN.jsonl   that validation's per-question records
    evaluations/<split>/<model>/  records.jsonl + summary.json of `python -m trainer.eval`
    report/                 `python -m hpc.report`: report.md and its PNG figures
    serve/                  a serve job's address.json (where it listens), token (0600), vllm.log
    sweep_member.json       the sweep this run belongs to and its values (hpc/launcher/sweeps.py)
    judge/                  an in-job judge's vllm.log and address (sbatch/_judge_server.sh.j2)
    done.json               written once when all training steps are finished
    failed.json             written when the run is given up (crash guard): reason, log, the error line
    .lock                   flock target serialising launches and ledger appends

A sweep (hpc/launcher/sweeps.py) also has ``<runs_dir>/<sweep>/`` (``SweepDir``): ``sweep.json``
(its runs and their values), ``scripts/`` and ``logs/`` of the pack jobs that run
several of its runs at once (hpc/launcher/packing.py), ``secrets.env`` for those jobs, and
``.lock``. It has no ledger: every job is recorded in the ledgers of the runs it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

# Exit code the trainer (or any entrypoint) uses to say "I stopped cleanly
# because time is up; continue the run". 75 is EX_TEMPFAIL from sysexits.h.
EXIT_STOPPED_FOR_TIME = 75
# Exit code for "a configuration error this run cannot outgrow" (missing data, a
# rejected key, a missing package: trainer/training/preflight.py, trainer.train's setup
# errors): job control gives the run up at once instead of retrying. 78 is EX_CONFIG.
EXIT_CONFIG_ERROR = 78

# Locks this process holds, by run path, with their nesting depth.
_HELD: dict[str, int] = {}


def utc_now() -> str:
    """ISO-8601 UTC timestamp with seconds, used in every record."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunDir:
    """Paths inside one run directory. Creating the object touches nothing."""

    path: Path

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
        return read_json(self.sweep_member_file)

    def write_sweep_member(self, sweep: str, values: dict[str, str]) -> None:
        write_json_atomic(self.sweep_member_file, {"sweep": sweep, "values": values})

    @property
    def judge_dir(self) -> Path:
        return self.path / "judge"

    @property
    def lock_file(self) -> Path:
        return self.path / ".lock"

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
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.lock_file, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            _HELD[key] = 1
            try:
                yield
            finally:
                _HELD.pop(key, None)
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- markers and progress -------------------------------------------------

    def read_progress(self) -> dict[str, Any] | None:
        return read_json(self.progress_file)

    def write_progress(self, progress: dict[str, Any]) -> None:
        write_json_atomic(self.progress_file, {**progress, "updated_at": utc_now()})

    def read_model_record(self) -> dict[str, Any] | None:
        """Which model folder this run owns (hpc/run/ownership.py), or None before its first launch."""
        return read_json(self.model_record_file)

    def write_model_record(self, record: dict[str, Any]) -> None:
        write_json_atomic(self.model_record_file, record)

    @property
    def steps_file(self) -> Path:
        return self.path / "steps.jsonl"

    def append_step(self, record: dict[str, Any]) -> None:
        """One trained step, with the job that trained it (the job's id is in its environment)."""
        append_jsonl(self.steps_file, {**record, "job_id": os.environ.get("SLURM_JOB_ID", "local"),
                                       "ended": utc_now()})

    def read_steps(self) -> list[dict[str, Any]]:
        return read_jsonl(self.steps_file)

    @property
    def stops_file(self) -> Path:
        return self.path / "stops.jsonl"

    def append_stop(self, record: dict[str, Any]) -> None:
        """Why a job's workload stopped (hpc.job.deadline.StopRecord), with the job and the time."""
        append_jsonl(self.stops_file, {**record, "job_id": os.environ.get("SLURM_JOB_ID", "local"),
                                       "time": utc_now()})

    def read_stops(self) -> list[dict[str, Any]]:
        return read_jsonl(self.stops_file)

    @property
    def startups_file(self) -> Path:
        return self.path / "startups.jsonl"

    def append_startup(self, seconds: float) -> None:
        """How long a job's training backend took to start (constructed to registered: the model
        loaded, vLLM up), with the job and the time; the next jobs predict their start-up from it."""
        append_jsonl(self.startups_file, {"seconds": round(seconds, 3),
                                          "job_id": os.environ.get("SLURM_JOB_ID", "local"), "time": utc_now()})

    def read_startups(self) -> list[dict[str, Any]]:
        """Recorded start-ups, oldest first (a torn last line is skipped)."""
        return read_jsonl(self.startups_file)

    def read_validations(self) -> list[dict[str, Any]]:
        """Completed validations, oldest first (a torn last line is skipped)."""
        return read_jsonl(self.validation_file)

    def record_validation(self, record: dict[str, Any], details: list[dict[str, Any]]) -> None:
        """The per-question file first, then the record: the record is what says "done"."""
        write_jsonl_atomic(self.validation_details(record["step"]), details)
        append_jsonl(self.validation_file, {**record, "time": utc_now()})

    def read_done(self) -> dict[str, Any] | None:
        return read_json(self.done_file)

    def mark_done(self, final_step: int, total_steps: int | None = None) -> None:
        write_json_atomic(
            self.done_file, {"final_step": final_step, "total_steps": total_steps, "time": utc_now()}
        )

    def read_failed(self) -> dict[str, Any] | None:
        return read_json(self.failed_file)

    def mark_failed(self, reason: str, log_tail: str | None = None, error: str | None = None) -> None:
        """``error``: the failed job's own last error line (its .err log), quoted as is."""
        write_json_atomic(self.failed_file, {"reason": reason, "log_tail": log_tail, "error": error,
                                             "time": utc_now()})


@dataclass(frozen=True)
class SweepDir(RunDir):
    """``<runs_dir>/<sweep>/``: a sweep's record and its pack jobs' scripts, logs and secrets
    (the RunDir paths of the same names), never a run's state: it has no ledger."""

    @property
    def record_file(self) -> Path:
        return self.path / "sweep.json"

    def read_record(self) -> dict[str, Any] | None:
        return read_json(self.record_file)

    def write_record(self, record: dict[str, Any]) -> None:
        write_json_atomic(self.record_file, record)

    def is_sweep(self) -> bool:
        return self.record_file.exists() and not self.ledger.exists()


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None if missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """JSON objects, one per line; missing file = none; a torn line is skipped."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    records = []
    for line in lines:
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """One line, one write() with O_APPEND: concurrent appenders never interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def write_jsonl_atomic(path: Path, records: list[dict[str, Any]]) -> None:
    """Write a JSONL file through a temporary file and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in records)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, data: dict[str, Any], mode: int = 0o644) -> None:
    """Write through a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
