"""The run's lease (``lease.json``): one job trains a run at a time, whatever Slurm says.

Slurm's answers only save queue time: when ``squeue`` answers empty while slurmctld fails over,
two jobs of one run can start, and each would take the other for "not running". The run
directory itself decides instead. The job that trains holds the run: ``lease.json`` names its
job id, its restart, its host and its batch shell's pid, and an expiry ``LEASE_SECONDS`` ahead,
which the job's keeper (``python -m hpc.run.lease keep``, started by sbatch/_job_control.sh.j2
beside the workload) renews every ``RENEW_EVERY`` seconds while the workload runs. The end hook
releases it. Another job takes the run only when the lease is released, has expired (by the
reader's clock, less ``SKEW`` for the hosts' clocks; or not renewed for ``LEASE_SECONDS`` as the
reader watched it), or its holder's shell is gone from this very host; a job that finds the
lease held, and renewed while it watches, exits at once without touching the run
(``EXIT_RUN_HELD``, a ``lease_held`` record).

Every read-check-write happens under the run's lock (``RunDir.locked``: flock on ``.lock``) and
every write is a temporary file renamed into place (``RunDir.write_json``), so two jobs that
start at the same moment on two nodes of one shared filesystem never both take it, and a
reader never sees half a lease. Stdlib only.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hpc.run import fields as kinds
from hpc.run.fields import Fields, required
from hpc.run.rundir import RunDir, utc_now

LEASE_SECONDS = 90.0  # a lease not renewed for this long is expired
RENEW_EVERY = 15.0  # the keeper's period: several renewals fit in a lease
SKEW = 10.0  # seconds the clocks of a shared filesystem's hosts may disagree
WATCH_EVERY = 2.0  # how often a job that finds the lease held looks again

FIELDS: Fields = {
    "job_id": required(kinds.TEXT), "host": required(kinds.TEXT), "pid": required(kinds.WHOLE),
    "restart": required(kinds.WHOLE), "taken": required(kinds.MOMENT), "renewed": required(kinds.MOMENT),
    "expires": required(kinds.NUMBER), "renewals": required(kinds.WHOLE), "released": required(kinds.FLAG),
}


@dataclass(frozen=True)
class Lease:
    """Who holds the run, until when (``expires``: epoch seconds by the holder's clock)."""

    job_id: str
    host: str
    pid: int  # the holder's batch shell: alive as long as the job is
    restart: int
    taken: str
    renewed: str
    expires: float
    renewals: int = 0
    released: bool = False

    def holder(self) -> str:
        return f"job {self.job_id} (restart {self.restart}) on {self.host}"

    def same_holder(self, job_id: str, restart: int) -> bool:
        return self.job_id == job_id and self.restart == restart


def path_of(run: RunDir) -> Path:
    return run.path / "lease.json"


def read(run: RunDir) -> Lease | None:
    """The lease as written, or None (none yet, or unreadable: named in ``run.unreadable``)."""
    data = run.read_object(path_of(run), FIELDS)
    if data is None:
        return None
    return Lease(**{name: data[name] for name in FIELDS})


def write(run: RunDir, lease: Lease) -> None:
    run.write_json(path_of(run), asdict(lease))


def fresh(job_id: str, restart: int, shell_pid: int, now: float) -> Lease:
    stamp = utc_now()
    return Lease(job_id, socket.gethostname(), shell_pid, restart, stamp, stamp, now + LEASE_SECONDS)


def shell_gone(lease: Lease) -> bool:
    """The holder's batch shell is known gone: it ran on this host, and no process has its pid."""
    if lease.host != socket.gethostname():
        return False
    try:
        os.kill(lease.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def free(lease: Lease | None, now: float) -> bool:
    """May a job take the run without watching first?"""
    return lease is None or lease.released or lease.expires + SKEW < now or shell_gone(lease)


# -- taking it ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taken:
    """This job holds the run now; ``before`` is the lease it replaced (None: the run's first)."""

    before: Lease | None


@dataclass(frozen=True)
class Held:
    """Another job holds the run, and renewed its lease while this one watched (or would not let go)."""

    lease: Lease


@dataclass
class Watch:
    """What a job that found the lease held has seen of it: renewals, or none for LEASE_SECONDS."""

    first: Lease | None = None
    since: float = 0.0

    def stale(self, lease: Lease, now: float) -> bool:
        """Not renewed for LEASE_SECONDS while watched (the holder's clock notwithstanding)."""
        if self.first is None or self.first != lease:
            self.first, self.since = lease, now
            return False
        return now - self.since >= LEASE_SECONDS

    def renewed(self, lease: Lease) -> bool:
        return self.first is not None and lease.renewals > self.first.renewals and lease.job_id == self.first.job_id


def take(run: RunDir, job_id: str, restart: int, shell_pid: int, wait: float = LEASE_SECONDS + SKEW,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Taken | Held:
    """Take the run for this job, watching a held lease for at most ``wait`` seconds: taken when it
    is free or goes stale; held as soon as its holder renews it (alive, training), or when the time is up."""
    watch, deadline = Watch(), clock() + wait
    while True:
        with run.locked():
            lease = read(run)
            if lease is not None and lease.same_holder(job_id, restart) and not lease.released:
                return Taken(lease)
            if lease is not None and watch.renewed(lease):
                return Held(lease)
            if lease is None or free(lease, time.time()) or watch.stale(lease, clock()):
                write(run, fresh(job_id, restart, shell_pid, time.time()))
                return Taken(lease)
        if clock() + WATCH_EVERY > deadline:
            return Held(lease)
        sleep(WATCH_EVERY)


def renew(run: RunDir, job_id: str, restart: int) -> Lease | None:
    """Push this job's lease LEASE_SECONDS ahead; None (nothing written) when it is not this job's."""
    with run.locked():
        lease = read(run)
        if lease is None or lease.released or not lease.same_holder(job_id, restart):
            return None
        renewed = replace(lease, renewed=utc_now(), expires=time.time() + LEASE_SECONDS, renewals=lease.renewals + 1)
        write(run, renewed)
    return renewed


def release(run: RunDir, job_id: str, restart: int) -> bool:
    """Let the run go (the job's end hook, or a begin that found nothing to do); False when it was not ours."""
    with run.locked():
        lease = read(run)
        if lease is None or lease.released or not lease.same_holder(job_id, restart):
            return False
        write(run, replace(lease, released=True, renewed=utc_now()))
    return True


def held_by_other(run: RunDir, job_id: str, restart: int) -> Lease | None:
    """The lease, when another job holds it now (unreleased, not this job's)."""
    lease = read(run)
    if lease is None or lease.released or lease.same_holder(job_id, restart):
        return None
    return lease


# -- the keeper ----------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def keep(run: RunDir, job_id: str, restart: int, shell_pid: int, workload_pid: int,
         sleep: Callable[[float], None] = time.sleep) -> int:
    """Renew the lease while the job's shell and workload live. Should the lease be lost (renewals
    stalled past its expiry on a hung filesystem, and another job took the run), the workload is
    killed at once: two trainers on one run is the one thing worse than a lost step."""
    while alive(shell_pid) and alive(workload_pid):
        try:
            renewed = renew(run, job_id, restart)
        except OSError as error:  # a filesystem hiccup: the next renewal may pass, the lease has room
            print(f"[lease] could not renew the lease of run {run.name}: {error}", file=sys.stderr)
            renewed = read(run)
        if renewed is None and alive(workload_pid):
            other = held_by_other(run, job_id, restart)
            print(f"[lease] job {job_id} no longer holds run {run.name} "
                  f"({'now ' + other.holder() if other else 'released'}): stopping its workload now", file=sys.stderr)
            os.kill(workload_pid, signal.SIGKILL)
            return 1
        sleep(RENEW_EVERY)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpc.run.lease", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    k = sub.add_parser("keep", help="renew the job's lease while its workload runs")
    k.add_argument("--run_dir", type=Path, required=True)
    k.add_argument("--job_id", required=True)
    k.add_argument("--restart", type=int, default=0)
    k.add_argument("--shell_pid", type=int, required=True)
    k.add_argument("--workload_pid", type=int, required=True)
    a = p.parse_args(argv)
    return keep(RunDir(a.run_dir), a.job_id, a.restart, a.shell_pid, a.workload_pid)


if __name__ == "__main__":
    sys.exit(main())
