"""``python -m hpc.run bundle RUN --out DIR``: what continuing a run elsewhere needs, as parts.

A run is tied to the filesystem it trained on; a bundle carries it to another cluster or
machine, where ``python -m hpc.run unbundle`` (hpc/run/unbundle.py) makes it a run there and the
next ``hpc.launch`` continues it at the next step. A bundle holds:

- the run directory, every file of it but those ``EXCLUDED`` (listed, so a file a newer release
  adds is carried without a change here): the lock, a job's lease, ``secrets.env`` and a serve
  job's token (secrets never leave in a bundle: the next launch writes them from the new
  cluster's dotenv), and ``logs/`` (the old cluster's Slurm output, often the largest part);
- the model folder (``model.json``'s): ART's history and trajectories, any optimizer state ART
  keeps there (the Megatron backend's ``optimizer_states/``, an ``optimizer.pt`` beside a
  checkpoint), and of ``checkpoints/`` only the latest complete step (where it continues) and
  the best validated one; not ``hpc_owner.json``, which the new place writes for itself, nor
  ``logs/`` (ART's vLLM and trainer logs: on a small model most of the bundle, needed by nothing
  that continues);
- where the data order stands: it is the latest checkpoint's step (ART's ``iterate_dataset``
  starts there, in the order the config's seed gives), recorded with the launch that set it.

It is one tar stream cut into parts of at most ``--part_mib`` MiB, each a header line (the run,
the bundle's id, the part's number) and its share of the stream, so a part from another bundle
is named as such; ``manifest.json`` lists each part's size and sha256 and is written last (a
folder without it is no bundle). A run with a job in the queue is refused: its checkpoint and
records could change while they are read, and the run would then train in two places. Once
the bundle is whole the run's ledger says it moved (``moved``, hpc/run/ledger.py): launching it
here is refused until ``python -m hpc.run reclaim RUN`` takes it back. Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import stat
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from hpc.errors import UsageError
from hpc.run import ledger, ownership
from hpc.run.best import NoBest, best_checkpoint
from hpc.run.checkpoints import CHECKPOINTS, latest_complete
from hpc.run.ledger import Moved
from hpc.run.rundir import RunDir, utc_now
from hpc.run.safe_io import write_json_atomic

FORMAT = "hpc-run-bundle/1"
MANIFEST = "manifest.json"
PART_MAGIC = b"HPC-RUN-BUNDLE "
MIB = 1024 * 1024
MAX_PART_MIB = 1024 * 1024
# The run directory's files a bundle leaves out (paths below the run's folder; a folder: all of it).
EXCLUDED = (".lock", "lease.json", "secrets.env", "serve/token", "logs")
OWNER_FILE = ownership.OWNER_FILE  # the model folder's: written again for the new place
RUN, MODEL = "run", "model"  # the two trees in the stream


@dataclass(frozen=True)
class Member:
    """One file in the bundle: its name in the stream (``run/...`` or ``model/...``) and where it is."""

    name: str
    path: Path


@dataclass
class Part:
    """One part file as it is written: its name, size and sha256 (the manifest's row)."""

    name: str
    size: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.digest.hexdigest()}


def part_name(run: str, bundle: str, number: int) -> str:
    return f"{run}.{bundle[:12]}.part{number:04d}"


def part_header(run: str, bundle: str, number: int) -> bytes:
    return PART_MAGIC + json.dumps({"run": run, "bundle": bundle, "part": number}).encode() + b"\n"


class PartWriter:
    """A file-like sink that cuts what is written into parts of at most ``limit`` bytes each
    (header included), hashing each as it goes; tarfile writes its stream into it."""

    def __init__(self, out: Path, run: str, bundle: str, limit: int, progress: Progress | None = None) -> None:
        self.out, self.run, self.bundle, self.limit, self.progress = out, run, bundle, limit, progress
        self.parts: list[Part] = []
        self.handle: IO[bytes] | None = None

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self.handle is None or self.parts[-1].size >= self.limit:
                self._next_part()
            room = self.limit - self.parts[-1].size
            self._put(bytes(view[:room]))
            view = view[room:]
        if self.progress is not None:
            self.progress.add(len(data))
        return len(data)

    def _next_part(self) -> None:
        self.close()
        number = len(self.parts) + 1
        self.parts.append(Part(part_name(self.run, self.bundle, number)))
        self.handle = open(self.out / self.parts[-1].name, "xb")
        self._put(part_header(self.run, self.bundle, number))

    def _put(self, data: bytes) -> None:
        assert self.handle is not None
        self.handle.write(data)
        self.parts[-1].size += len(data)
        self.parts[-1].digest.update(data)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
            self.handle = None


class Progress:
    """``N of M MiB`` on stderr for large transfers, at most every ``every`` bytes."""

    def __init__(self, label: str, total: int, every: int = 64 * MIB) -> None:
        self.label, self.total, self.every, self.done, self.said = label, total, every, 0, 0

    def add(self, count: int) -> None:
        self.done += count
        if self.total >= self.every and self.done - self.said >= self.every:
            self.said = self.done
            print(f"{self.label}: {self.done / MIB:.0f} of {self.total / MIB:.0f} MiB", file=sys.stderr, flush=True)


# -- what a bundle holds ------------------------------------------------------------------------


def excluded(relative: str) -> bool:
    return any(relative == name or relative.startswith(name + "/") for name in EXCLUDED)


def walk(root: Path, prefix: str, skip: Path | None = None,
         leave_out: Callable[[str], bool] | None = None) -> Iterator[Member]:
    """The regular files below ``root`` (links and other kinds left out: a run's files are plain),
    as ``prefix/relative``, in a stable order; ``skip``: a folder below ``root`` that is not walked."""
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not (skip is not None and here / d == skip)
                         and not (leave_out and leave_out(str((here / d).relative_to(root)))))
        for name in sorted(files):
            path = here / name
            relative = str(path.relative_to(root))
            if (leave_out and leave_out(relative)) or not stat.S_ISREG(path.lstat().st_mode):
                continue
            yield Member(f"{prefix}/{relative}", path)


def kept_steps(run: RunDir, model_dir: Path) -> tuple[int, int | None]:
    """The latest complete checkpoint (where the run continues) and the best validated one, if
    it is still there and complete; UsageError when there is nothing to continue from."""
    latest = latest_complete(model_dir)
    if latest is None:
        raise UsageError(f"run {run.name} has no complete checkpoint in {model_dir / CHECKPOINTS}: "
                         "nothing to continue from (launch it here first)")
    try:
        return latest.step, best_checkpoint(run, model_dir).step
    except NoBest:
        return latest.step, None


MODEL_LOGS = "logs"  # ART's vLLM and trainer logs in the model folder: left where they were written


def model_members(model_dir: Path, steps: set[int]) -> Iterator[Member]:
    """The model folder but its other checkpoints, set-aside or pruning ones, its logs and the owner file."""
    wanted = {str(Path(CHECKPOINTS) / f"{step:04d}") for step in steps}

    def leave_out(relative: str) -> bool:
        top = relative.split("/", 1)[0]
        if relative == OWNER_FILE or top == MODEL_LOGS or top != CHECKPOINTS and top.startswith(CHECKPOINTS):
            return True
        parts = relative.split("/")
        return top == CHECKPOINTS and len(parts) > 1 and "/".join(parts[:2]) not in wanted

    return walk(model_dir, MODEL, leave_out=leave_out)


def members(run: RunDir, model_dir: Path, steps: set[int]) -> list[Member]:
    """Every file of the bundle: the run's (the model folder left to its own walk when it lies
    inside the run, as with the default ART_PATH) and the model folder's."""
    inside = model_dir if model_dir.resolve().is_relative_to(run.path.resolve()) else None
    skip = run.path / model_dir.resolve().relative_to(run.path.resolve()) if inside else None
    return [*walk(run.path, RUN, skip, excluded), *model_members(model_dir, steps)]


# -- the command ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Made:
    """A bundle written: its folder, id, step and manifest."""

    out: Path
    bundle: str
    step: int
    manifest: dict[str, Any]


def check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out} is not a new or empty folder: a bundle's parts go into a folder of their own")


def check_part_mib(value: int) -> int:
    if not 1 <= value <= MAX_PART_MIB:
        raise UsageError(f"--part_mib {value} is out of range (accepted: 1 to {MAX_PART_MIB} MiB)")
    return value


def refuse_moved(run: RunDir) -> None:
    """UsageError when the run's ledger says it moved (and was not taken back); a ledger that cannot
    be read says nothing here (the launch's other checks name it)."""
    moved = ledger.moved_away(ledger.readable(run))
    if moved is not None:
        raise UsageError(moved_line(run, moved))


def moved_line(run: RunDir, moved: Moved) -> str:
    return (f"run {run.name} moved to {moved.to} at step {moved.step} (bundle {moved.bundle[:12]}, {moved.time}) "
            f"and continues there: nothing done here. To train it here again instead (its copy there must "
            f"then never be launched): python -m hpc.run reclaim {run.name} --runs_dir {run.path.parent}")


def refuse_active(run: RunDir) -> None:
    """A run a job trains (its lease) or has in the queue is not bundled: its checkpoint and records
    may change. A queue that does not answer is no proof of none (hpc/slurm/answer.py's UNKNOWN): refused too."""
    import time

    from hpc.run import lease
    from hpc.slurm.calls import SlurmError, SlurmMissing, queue_states
    from hpc.slurm.states import QUEUED

    holder = lease.read(run)
    if holder is not None and not lease.free(holder, time.time()):
        raise UsageError(f"run {run.name} is held by {holder.holder()} (its lease, renewed at {holder.renewed}): "
                         f"nothing bundled; a bundle is taken between jobs: scripts/scancelall.sh --name {run.name}, "
                         "then bundle")
    ids = ledger.job_ids(ledger.read(run))
    try:
        states = queue_states(ids) if ids else {}
    except SlurmMissing:
        states = {}  # no Slurm here (a copy off the cluster): no job of it can run here either
    except SlurmError as err:
        raise UsageError(f"run {run.name}: Slurm did not say whether its jobs are still queued ({err}): nothing "
                         "bundled; bundle again once squeue answers") from None
    active = {job: state for job, state in states.items() if state in QUEUED}
    if active:
        listed = ", ".join(f"{job} ({state})" for job, state in active.items())
        raise UsageError(f"run {run.name} has job(s) in the queue ({listed}): nothing bundled; a bundle is taken "
                         f"between jobs: scripts/scancelall.sh --name {run.name} (the step in flight is saved), "
                         "then bundle")


def bundle(run: RunDir, out: Path, part_mib: int, to: str | None = None) -> Made:
    """Write the bundle of ``run`` into ``out`` and record the move in its ledger (under its lock)."""
    check_part_mib(part_mib)
    if not run.path.is_dir():
        raise UsageError(f"no run directory at {run.path}: name a run under the runs directory (or its folder)")
    check_out(out)
    model_dir = ownership.model_dir_of(run)
    if model_dir is None:
        raise UsageError(f"run {run.name} has no model folder recorded ({run.model_record_file}): nothing to move")
    with run.locked():
        refuse_moved(run)
        refuse_active(run)
        step, best = kept_steps(run, model_dir)
        bundle_id = secrets.token_hex(16)
        manifest = write_parts(run, model_dir, out, bundle_id, part_mib, (step, best))
        ledger.append(run, Moved(to=to or str(out.resolve()), step=step, bundle=bundle_id))
    return Made(out, bundle_id, step, manifest)


def write_parts(run: RunDir, model_dir: Path, out: Path, bundle_id: str, part_mib: int,
                steps: tuple[int, int | None]) -> dict[str, Any]:
    """The parts, then the manifest; a bundle cut off leaves no parts of its own behind."""
    files = members(run, model_dir, {s for s in steps if s is not None})
    total = sum(m.path.stat().st_size for m in files)
    out.mkdir(parents=True, exist_ok=True)
    writer = PartWriter(out, run.name, bundle_id, part_mib * MIB, Progress(f"bundle {run.name}", total))
    try:
        with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for member in files:
                tar.add(member.path, member.name, recursive=False)
        writer.close()
        manifest = manifest_of(run, model_dir, bundle_id, steps, writer.parts, len(files))
        write_json_atomic(out / MANIFEST, manifest)
    except BaseException:
        writer.close()
        for part in writer.parts:
            (out / part.name).unlink(missing_ok=True)
        raise
    return manifest


def manifest_of(run: RunDir, model_dir: Path, bundle_id: str, steps: tuple[int, int | None], parts: list[Part],
                files: int) -> dict[str, Any]:
    records = ledger.read(run)
    launch = ledger.latest_launch(records)
    inside = model_dir.resolve().is_relative_to(run.path.resolve())
    return {
        "format": FORMAT, "run": run.name, "bundle": bundle_id, "created": utc_now(),
        "step": steps[0], "best_step": steps[1],
        "data_position": {"step": steps[0], "note": "ART's iterate_dataset continues at this step, in the order "
                                                    "the launch's --config and --train_arg give"},
        "source": {"host": socket.gethostname(), "run_dir": str(run.path.resolve()),
                   "model_dir": str(model_dir.resolve()), "cluster": ledger.cluster_of(records),
                   "model_inside_run": inside},
        "project": model_dir.resolve().parent.parent.name,
        "launched_with": launch.argv if launch is not None else [],
        "files": files,
        "parts": [part.row() for part in parts],
    }


def reclaim(run: RunDir) -> Moved:
    """Take a moved run back here (a ``reclaimed`` record); UsageError when it did not move."""
    if not run.ledger.exists():
        raise UsageError(f"no run with a ledger at {run.path}: nothing to reclaim")
    with run.locked():
        moved = ledger.moved_away(ledger.read(run))
        if moved is None:
            raise UsageError(f"run {run.name} has not moved away (its ledger has no move since it last trained "
                             "here): nothing to reclaim")
        ledger.append(run, ledger.Reclaimed(bundle=moved.bundle))
    return moved
