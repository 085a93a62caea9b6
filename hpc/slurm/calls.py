"""The Slurm commands the project runs from Python, each in one function.

Every command is an argument list (no shell: paths and names pass exactly as they are) with
a timeout, and runs with ``SLURM_TIME_FORMAT=standard`` and ``TZ=UTC0``, so the times it
prints are read as UTC whatever the user's format or the node's zone (``hpc/slurm/times.py``).
``in_job=True`` (the job's hooks, a pack job, the trainer's deadline) runs it without the
job's own ``SLURM_*`` output variables, which sbatch would otherwise carry into the job it
submits (``SLURM_CONF`` stays: it locates the cluster's configuration).

A command that is missing, does not answer in time or fails raises a ``SlurmError`` (one
line: ``SlurmMissing``, ``SlurmTimeout``, ``SlurmFailed``); what a caller makes of that is
its own business (the job's hooks take "no answer" as "nothing known" and go on).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hpc.slurm.output import (
    ENDED_FIELDS,
    FS,
    QUEUE_FORMAT,
    RUN_FIELDS,
    EndedJob,
    QueuedJob,
    SacctRow,
    ShownJob,
    parse_ended,
    parse_queue,
    parse_runs,
    parse_show_job,
    parse_submitted,
)
from hpc.slurm.states import JobState

TIME_ENV = {"SLURM_TIME_FORMAT": "standard", "TZ": "UTC0"}
NO_ACCOUNTING = "accounting storage is disabled"  # sacct without slurmdbd


class SlurmError(RuntimeError):
    """A Slurm command could not be run or failed; the message is one line that says why."""


class SlurmMissing(SlurmError):
    """The command is not installed (or not on the PATH)."""


class SlurmTimeout(SlurmError):
    """The command did not answer in time (slurmctld or slurmdbd busy or down)."""


class SlurmFailed(SlurmError):
    """The command answered with an error; ``stderr`` is what it said."""

    def __init__(self, message: str, returncode: int, stderr: str):
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


def without_job_variables(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without a job's own SLURM_* variables (SLURM_CONF stays)."""
    return {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def command_env(in_job: bool = False) -> dict[str, str]:
    """The environment every Slurm command runs with (see the module's docstring)."""
    base = without_job_variables(os.environ) if in_job else dict(os.environ)
    return {**base, **TIME_ENV}


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "(no message)")


def run(argv: list[str], timeout: float, in_job: bool = False, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command; SlurmMissing or SlurmTimeout when it cannot answer (any exit code is returned)."""
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, errors="replace", timeout=timeout,
                              env=command_env(in_job))
    except FileNotFoundError:
        raise SlurmMissing(f"'{argv[0]}' not found: the Slurm client commands are not installed or not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmTimeout(f"'{argv[0]}' did not answer within {timeout:.0f} s (is the Slurm controller up?)") from None


def output(argv: list[str], timeout: float, in_job: bool = False) -> str:
    """stdout of a command that must succeed; SlurmFailed with its first line of error otherwise."""
    result = run(argv, timeout, in_job)
    if result.returncode != 0 or NO_ACCOUNTING in result.stderr:  # sacct says so with exit 0 too, printing nothing
        raise SlurmFailed(f"{argv[0]} failed: {first_line(result.stderr + result.stdout)}", result.returncode,
                          result.stderr)
    return result.stdout


def slurm_ids(job_ids: Iterable[str]) -> list[str]:
    """The ids Slurm can be asked about (``123``, ``123_4``), once each, in order: one id it
    cannot parse (``local``: a job script run by hand) would fail the whole question."""
    ids = {j: None for j in job_ids if j and j.split("_")[0].split("+")[0].isdigit()}
    return sorted(ids, key=lambda j: (len(j), j))


# -- sbatch ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TestOnly:
    ok: bool
    message: str


def sbatch_command(script: Path, dependency: str | None = None, options: tuple[str, ...] = ()) -> list[str]:
    """The exact sbatch command for a script (shown by the dry run, run by submit); ``options``
    override the script's own #SBATCH lines (a pack job with fewer runs asks for fewer GPUs)."""
    command = ["sbatch", "--parsable", *options]
    if dependency:
        command.append(f"--dependency={dependency}")
    command.append(str(script))
    return command


def submit(script: Path, dependency: str | None = None, options: tuple[str, ...] = (), in_job: bool = False) -> str:
    """Submit and return the job id; SlurmFailed (sbatch's message) when refused."""
    result = run(sbatch_command(script, dependency, options), 120, in_job)
    if result.returncode != 0:
        raise SlurmFailed(f"sbatch of {script} failed (exit {result.returncode}): "
                          f"{(result.stderr or result.stdout).strip()}", result.returncode, result.stderr)
    try:
        return parse_submitted(result.stdout)
    except ValueError as error:
        raise SlurmFailed(str(error), 0, result.stderr) from None


def test_only(script_text: str) -> TestOnly:
    """Ask the live scheduler whether it would accept the script; submits nothing.
    The script goes through stdin, so a dry run writes no file."""
    result = run(["sbatch", "--test-only"], 60, stdin=script_text)
    return TestOnly(result.returncode == 0, (result.stderr + result.stdout).strip())


# -- squeue ------------------------------------------------------------------------------------------


def queue_argv(job_ids: list[str], user: str | None = None) -> list[str]:
    argv = ["squeue", "-h", "-o", QUEUE_FORMAT]
    if user is not None:
        argv += ["-u", user]
    return argv + (["-j", ",".join(job_ids)] if job_ids else [])


def queue(job_ids: Iterable[str] = (), user: str | None = None, timeout: float = 60,
          in_job: bool = False) -> list[QueuedJob]:
    """The queued and running jobs among ``job_ids`` (ended ones have left the queue), or a user's."""
    ids = slurm_ids(job_ids)
    if not ids and user is None:
        return []
    result = run(queue_argv(ids, user), timeout, in_job)
    if result.returncode != 0 and "Invalid job id" not in result.stderr:  # one id asked, and it left the queue
        raise SlurmFailed(f"squeue failed: {first_line(result.stderr + result.stdout)}", result.returncode,
                          result.stderr)
    return parse_queue(result.stdout)


def queue_states(job_ids: Iterable[str], timeout: float = 60, in_job: bool = False) -> dict[str, JobState]:
    """The state of each of these jobs still in the queue."""
    return {job.job_id: job.state for job in queue(job_ids, timeout=timeout, in_job=in_job)}


# -- sacct --------------------------------------------------------------------------------------------


def job_runs(job_ids: Iterable[str], timeout: float = 60, in_job: bool = False) -> list[SacctRow]:
    """Every run of these jobs (``sacct -X -D``: a requeued job has a row per run, oldest first),
    in one call; none asked, none returned."""
    ids = slurm_ids(job_ids)
    return parse_runs(output(runs_argv(ids), timeout, in_job)) if ids else []


def runs_argv(job_ids: list[str]) -> list[str]:
    return ["sacct", "-X", "-D", "-n", "-P", f"--delimiter={FS}", "-j", ",".join(job_ids), "-o", ",".join(RUN_FIELDS)]


def ended_jobs(user: str, states: str, start: str, timeout: float = 120) -> list[EndedJob]:
    """A user's jobs in ``states`` (sacct's ``-s`` list) from ``start`` (``-S``, as sacct takes it) to now."""
    return parse_ended(output(ended_argv(user, states, start), timeout))


def ended_argv(user: str, states: str, start: str) -> list[str]:
    return ["sacct", "-X", "-n", "-P", f"--delimiter={FS}", "-u", user, "-S", start, "-E", "now", "-s", states,
            "-o", ",".join(ENDED_FIELDS)]


# -- scontrol and scancel -------------------------------------------------------------------------------


def show_job(job_id: str, timeout: float = 60, in_job: bool = False) -> ShownJob | None:
    """What slurmctld says of a job (it forgets one MinJobAge, 300 s by default, after its end);
    None when it does not know the job."""
    result = run(show_job_argv(job_id), timeout, in_job)
    return parse_show_job(result.stdout) if result.returncode == 0 else None


def show_job_argv(job_id: str) -> list[str]:
    return ["scontrol", "show", "job", job_id]


def requeue(job_id: str, in_job: bool = True) -> None:
    result = run(["scontrol", "requeue", job_id], 120, in_job)
    if result.returncode != 0:
        raise SlurmFailed(f"scontrol requeue {job_id} failed (exit {result.returncode}): {result.stderr.strip()}",
                          result.returncode, result.stderr)


def cancel(job_ids: Iterable[str], in_job: bool = False) -> None:
    """scancel these jobs; SlurmFailed with scancel's message when it refuses."""
    ids = list(job_ids)
    if ids:
        result = run(["scancel", *ids], 60, in_job)
        if result.returncode != 0:
            raise SlurmFailed(result.stderr.strip() or f"scancel exited {result.returncode}", result.returncode,
                              result.stderr)
