"""In-job side of a pack job: several runs of a sweep in one job (hpc/launcher/packing.py).

The pack job's script (sbatch/_pack_control.sh.j2) calls

    python -m hpc.job.pack slots --gpus_per_run g --member RUN_DIR SCRIPT [--member ...]
    python -m hpc.job.pack begin --script PACK_SCRIPT --member RUN_DIR SCRIPT [--member ...]
    python -m hpc.job.pack devices --first N --count J
    python -m hpc.job.pack end --mode requeue|afterany --script PACK_SCRIPT --max_resubmits N \\
                           --max_failures N --member RUN_DIR SCRIPT [--member ...]

``slots`` picks the members that still have work (not done, not given up) and
gives each its own GPUs out of the job's (CUDA_VISIBLE_DEVICES as Slurm set it),
its own vLLM port and its own log files (``<run>/logs/<run>-<job id>.out|.err``,
the paths the launcher recorded in the run's ledger); the script then runs each
member's own job script, whose job control (begin hook, workload, end hook) is
the one a single run has. Each member's end hook records its job's end and
decides for its run (finished, given up, cancelled) but leaves continuing to
the pack: ``end`` then continues the job once (requeue, or the pack's successor)
if any member wants to continue, and records that continuation in the ledger of
each member it continues. ``begin`` queues that successor when the pack job
starts (the pack script again, afterany on this job: hpc/job/successor.py), so the
runs go on even when the pack's script dies without ``end``; it exits 10 when
this job is a successor whose predecessor Slurm requeued (that one carries the runs). Counting, failure
limits and done markers thus stay per run: one failing run does not stop the others.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from hpc.job import end_slurm, successor, trusted_run
from hpc.job.continuation_modes import SUCCESSOR_CHOICES, ContinuationMode
from hpc.job.end_decision import CONTINUES, SlurmView, decide, last_end
from hpc.job.exit_codes import EXIT_NOTHING_TO_DO
from hpc.job.plain_file import make_plain
from hpc.job.run_marks import give_up
from hpc.run import ledger
from hpc.run.ledger import By, Requeue, Resubmit
from hpc.run.rundir import RunDir
from hpc.run.trust import Untrusted
from hpc.slurm.calls import SlurmError


@dataclass(frozen=True)
class Member:
    run: RunDir
    script: Path


@dataclass(frozen=True)
class Slot:
    """One member's place in this job."""

    member: Member
    devices: list[str]
    port: int

    def line(self, job_id: str) -> str:
        out, err = self.member.run.log_paths(job_id)
        return "\t".join([str(self.member.script), ",".join(self.devices), str(self.port), str(out), str(err),
                          self.member.run.name])


def plain_logs(run: RunDir, job_id: str) -> bool:
    """The run's stdout and stderr logs of this job made plain files of the run before the pack's
    script appends to them (``>>`` follows links); False, and the run sits this job out, where a
    link was planted on the way (hpc/job/plain_file.py)."""
    for path in run.log_paths(job_id):
        try:
            make_plain(run.path, path)
        except OSError as error:
            print(f"[pack] error: {run.name} is not started: its log {path}: {error.strerror}", file=sys.stderr)
            return False
    return True


# -- GPUs and ports -----------------------------------------------------------------------


def visible_devices(env: dict[str, str] | os._Environ, count: int) -> list[str]:
    """The job's GPUs as Slurm exposed them (CUDA_VISIBLE_DEVICES), else 0..count-1."""
    given = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    return given or [str(k) for k in range(count)]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on this node now (held open together, so none repeats)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def trusted(member: Member, tell: bool = True) -> bool:
    """The member's folder and script are the user's alone (hpc/job/trusted_run.py); else it sits
    this job out (told once, by ``slots``), its script never run and its folder never written."""
    try:
        trusted_run.check(member.run.path, [member.script])
    except Untrusted as error:
        if tell:
            print(f"[pack] error: {member.run.name} is not started: {error}", file=sys.stderr)
        return False
    return True


def has_work(run: RunDir) -> bool:
    """Not finished and not given up: the run still trains (its begin hook agrees)."""
    return run.read_done() is None and run.read_failed() is None


def slots(members: list[Member], gpus_per_run: int, env: dict[str, str] | os._Environ) -> list[Slot]:
    """The members with work, in order, each on the next ``gpus_per_run`` of the job's GPUs."""
    working = [m for m in members if trusted(m) and has_work(m.run)]
    devices = visible_devices(env, len(members) * gpus_per_run)
    ports = free_ports(len(working))
    return [Slot(m, devices[k * gpus_per_run:(k + 1) * gpus_per_run], ports[k]) for k, m in enumerate(working)]


def device_slice(env: dict[str, str] | os._Environ, first: int, count: int) -> list[str]:
    """``count`` of the job's GPUs from index ``first``: a served judge's (after the runs'), or
    the run's beside it (from 0)."""
    return visible_devices(env, first + count)[first:first + count]


# -- continuing the pack ---------------------------------------------------------------------


def wants_to_continue(member: Member, job_id: str, settings: "Settings", slurm: SlurmView) -> bool:
    """The member ran in this job and its own rule (hpc.job.end_decision.decide) says continue."""
    records = ledger.read(member.run)
    last = last_end(records)
    if last is None or last.job_id != job_id:
        return False
    decision = decide(records, done=member.run.read_done() is not None, mode=settings.mode,
                      max_resubmits=settings.max_resubmits, max_failures=settings.max_failures, slurm=slurm)
    return decision.action in CONTINUES


@dataclass(frozen=True)
class Settings:
    mode: str  # one of SUCCESSOR_CHOICES
    script: Path  # the pack job's script
    max_resubmits: int
    max_failures: int
    resize: tuple[int, int] | None = None  # (GPUs per run, judge GPUs) where GPUs are charged as asked (GRES)

    def options(self, runs: int) -> tuple[str, ...]:
        """sbatch options for the next job of ``runs`` runs: only the GPUs they use, where that saves any."""
        if self.resize is None:
            return ()
        per_run, judge = self.resize
        return (f"--gres=gpu:{runs * per_run + judge}",)


def begin(members: list[Member], job_id: str, script: Path) -> int:
    """Exit 10 when a predecessor of this job is back in the queue; else queue the pack's
    successor for the members with work (hpc/job/successor.py)."""
    working = [m for m in members if trusted(m, tell=False) and has_work(m.run)]
    for m in working:
        before = successor.predecessor(ledger.read(m.run), job_id)
        if before is not None and before != job_id and successor.still_queued(before):
            print(f"[pack] job {before}, which this job follows, is back in the queue and carries the runs")
            return EXIT_NOTHING_TO_DO
    if working and job_id.isdigit():
        successor.ensure([m.run for m in working], job_id, script)
    return 0


class Unknown(Exception):
    """Slurm could not say whether the pack's successor still waits (recorded in the runs' ledgers)."""


def waiting_successor(members: list[Member], job_id: str) -> tuple[Member, str] | None:
    """The pack's successor still waiting on this job, with a member whose ledger names it."""
    for m in members:
        waiting = successor.pending_of(ledger.read(m.run), job_id, end_slurm.seconds_left(job_id))
        if waiting.unknown:
            successor.record_unknown([x.run for x in members], job_id, "does the pack's successor still wait",
                                     waiting.why, end_slurm.seconds_left(job_id), "continue or cancel the pack")
            raise Unknown(waiting.why)
        if waiting.value:
            return m, waiting.value
    return None


def end(members: list[Member], job_id: str, settings: Settings, restart_count: int) -> list[Member]:
    """Continue the pack once for the members that want it; return those members."""
    slurm = end_slurm.slurm_view(job_id, restart_count)
    going = [m for m in members if wants_to_continue(m, job_id, settings, slurm)]
    try:
        waiting = waiting_successor(members, job_id)
    except Unknown:  # neither cancelled nor doubled on a guess: the successor, if it waits, continues the pack
        return going
    fewer = settings.resize is not None and len(going) < len(members)  # requeue would keep the GPUs
    if waiting is not None and (not going or fewer) and not slurm.requeued:
        successor.cancel(waiting[0].run, job_id)  # the runs stop here, or a smaller job follows
        waiting = None
    if not going:
        print(f"[pack] job {job_id}: no run of the pack continues")
        return []
    names = ", ".join(m.run.name for m in going)
    if settings.mode == ContinuationMode.REQUEUE and not fewer and end_slurm.requeued(job_id):
        for m in going:
            ledger.append(m.run, Requeue(job_id=job_id, by=By.JOB))
        print(f"[pack] requeued job {job_id} for {names}")
        return going
    if waiting is not None:
        for m in going:
            ledger.append(m.run, Resubmit(job_id=waiting[1], after=job_id, by=By.SUCCESSOR))
        print(f"[pack] job {waiting[1]}, queued when this job started, continues {names}")
        return going
    try:
        new_id = successor.resubmit(settings.script, job_id, settings.options(len(going)))
    except (SlurmError, OSError) as err:
        for m in going:
            give_up(m.run, f"could not continue the pack job: {err}", None)
        return []
    for m in going:
        ledger.append(m.run, Resubmit(job_id=new_id, after=job_id, script=str(settings.script)))
    print(f"[pack] submitted job {new_id} after job {job_id} for {names}")
    return going


# -- command line ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpc.job.pack", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("slots")
    s.add_argument("--gpus_per_run", type=int, required=True)
    b = sub.add_parser("begin")
    b.add_argument("--script", type=Path, required=True)
    j = sub.add_parser("devices")
    j.add_argument("--first", type=int, required=True)
    j.add_argument("--count", type=int, required=True)
    e = sub.add_parser("end")
    e.add_argument("--mode", choices=SUCCESSOR_CHOICES, required=True)
    e.add_argument("--script", type=Path, required=True)
    e.add_argument("--max_resubmits", type=int, required=True)
    e.add_argument("--max_failures", type=int, required=True)
    e.add_argument("--resize", type=int, nargs=2, default=None, metavar=("GPUS_PER_RUN", "JUDGE_GPUS"),
                   help="ask the next job for only the GPUs its runs use (clusters charging GPUs as asked)")
    for parser in (s, b, e):
        parser.add_argument("--member", nargs=2, action="append", default=[], metavar=("RUN_DIR", "SCRIPT"))
        parser.add_argument("--job_id", default=os.environ.get("SLURM_JOB_ID", "local"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "devices":
        print(",".join(device_slice(os.environ, args.first, args.count)))
        return 0
    members = [Member(RunDir(Path(run)), Path(script)) for run, script in args.member]
    if args.command == "begin":
        return begin(members, args.job_id, args.script)
    if args.command == "slots":
        for slot in slots(members, args.gpus_per_run, os.environ):
            if plain_logs(slot.member.run, args.job_id):
                print(slot.line(args.job_id))
        return 0
    settings = Settings(args.mode, args.script, args.max_resubmits, args.max_failures,
                        tuple(args.resize) if args.resize else None)
    end(members, args.job_id, settings, int(os.environ.get("SLURM_RESTART_COUNT") or 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
