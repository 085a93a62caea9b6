"""status.sh's memory between calls: each run's row as last shown, kept with the signature of
every file it was read from, so that a call reads again only the runs that changed or are live.

Why: a lab's runs directory holds hundreds of runs of thousands of steps; reading every record
of every run on each call made status.sh's cost grow with every step ever written. A run whose
files have not changed and whose jobs have all ended in accounting shows the same row, the same
goodput line and the same skipped records as last time: those are kept here. Everything else
is read again, whole (no tail reading: an edit in the middle of a file must be seen).

What a kept row is keyed on (``signature``), taken before its files are read:

- the run folder's own device, inode, modification and change times (an entry made, removed or
  renamed in it: a file replaced by a rename, a marker written, a bundle unpacked);
- for each file a row is read from (``READ``): inode, size, mode, modification and change
  times in nanoseconds, or its absence. A resumed job's append, an edit in place, a file
  replaced by a rename or a copy all change one of them; the change time cannot be set back.

A row is kept only when (``Entry.settled``) every job of the run has ended in accounting and
none is in the queue (the row then depends on nothing that moves: not on the time, not on the
queue), the signature read after the row was made equals the one before (nothing was written
meanwhile), and no time in it is within ``RACY_NS`` of the moment it was taken (a write in the
same clock tick as the reading could leave every figure equal: such a run is read again next
call, as git treats a "racily clean" file). The settings the rows depend on (the health
thresholds, the cluster table's file, the job starts of runs that share a job) are part of the
key too. The checkpoint column is read from the model folder, outside the run: it is kept with
the signature of the ``checkpoints/`` folder (a step added, removed, renamed aside) and of each
step folder from the latest complete one on, with its adapter's two files (a newer step being
written, the latest one damaged), taken between two readings that agree.

Where: ``$XDG_CACHE_HOME/hpc-art-launcher/status/`` (``~/.cache`` without it), one file per runs
directory (named by a hash of its real path), a folder of mode 0700 and files of mode 0600 owned by
the user, opened without following a link. A folder or file others could write, or owned by
someone else, is not trusted: status.sh then reads every run, as without a cache, and says why
once. Written whole through a temporary file and a rename: two status.sh calls at once leave one
of their files, each whole; either is checked entry by entry. JSON, never pickle: even a file
that passed the checks cannot make this run code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from hpc.run.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, CHECKPOINTS
from hpc.run.rundir import RunDir

VERSION = 1
# The run's files that status.sh's row, goodput line and skipped records are read from.
READ = ("ledger.jsonl", "progress.json", "done.json", "failed.json", "steps.jsonl", "stops.jsonl",
        "validation.jsonl", "model.json", "sweep_member.json", "lease.json")
RACY_NS = 2_000_000_000  # a file changed this close to the signature's moment may change unseen
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW


class Untrusted(OSError):
    """The cache's folder or file is not the user's own (a link, another owner, writable by others)."""


def signature(run: RunDir) -> Optional[list[Any]]:
    """What changes whenever what status.sh reads of ``run`` changes; None when it cannot be taken
    (the run is then read, and not kept)."""
    try:
        folder = os.open(run.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        own = os.fstat(folder)
        files = [file_signature(folder, name) for name in READ]
    except OSError:
        return None
    finally:
        os.close(folder)
    return [[own.st_dev, own.st_ino, own.st_mtime_ns, own.st_ctime_ns], files]


def file_signature(folder: int, name: str) -> Optional[list[int]]:
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return [info.st_ino, info.st_size, info.st_mode, info.st_mtime_ns, info.st_ctime_ns]


def checkpoint_signature(model_dir: Optional[str], names: list[str]) -> Optional[list[Any]]:
    """What changes when the latest complete checkpoint of ``model_dir`` may (hpc/run/checkpoints.py):
    its ``checkpoints/`` folder, and the step folders ``names`` with their adapter files; None when
    it cannot be taken."""
    if model_dir is None:
        return []
    base = os.path.join(model_dir, CHECKPOINTS)  # strings, not Path: a thousand runs are looked at
    try:
        found = [path_signature(base)]
        for name in names:  # the folder itself is one of the entries of checkpoints/, whose times say it
            found += [path_signature(os.path.join(base, name, file)) for file in (ADAPTER_CONFIG, ADAPTER_WEIGHTS)]
    except OSError:
        return None
    return found


def path_signature(path: str) -> Optional[list[int]]:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return [info.st_ino, info.st_size, info.st_mode, info.st_mtime_ns, info.st_ctime_ns]


def racy(sig: list[Any], taken_ns: int) -> bool:
    """Whether a time in ``sig`` (a run's or a checkpoint's) is too close to ``taken_ns`` to tell a
    later write from it."""
    own, files = sig
    stats = [f for f in files if f is not None]
    times = [own[2], own[3]] + [t for f in stats for t in f[3:]]
    return max(times) > taken_ns - RACY_NS


def racy_checkpoints(sig: list[Any], taken_ns: int) -> bool:
    return any(t > taken_ns - RACY_NS for f in sig if f is not None for t in f[3:])


@dataclass
class Entry:
    """One run as status.sh last showed it, and what that depended on."""

    sig: list[Any]
    context: str  # a hash of the settings and shared facts the row depends on
    job_ids: list[str]
    starts: dict[str, list[str]]  # this run's job starts (other runs' rows depend on them: pack jobs)
    cells: list[Any]
    goodput: Optional[str]
    parked: Optional[list[str]]  # job, state, resume command
    unreadable: list[list[Any]]  # file, line, why
    sweep: str
    word: str  # the run in its sweep's summary: finished, failed, parked, a state
    model_dir: Optional[str] = None  # the checkpoint column's: the model folder model.json names
    checkpoints: list[str] = field(default_factory=list)  # its step folders from the latest complete on
    checkpoint_sig: Optional[list[Any]] = None  # checkpoint_signature's, when the column was read


@dataclass
class StatusCache:
    """The entries of one runs directory; ``note`` says why none are used, if so."""

    path: Optional[Path]
    entries: dict[str, Entry] = field(default_factory=dict)
    note: str = ""
    changed: bool = False

    def valid(self, name: str, sig: Optional[list[Any]]) -> Optional[Entry]:
        entry = self.entries.get(name)
        return entry if entry is not None and sig is not None and entry.sig == sig else None

    def keep(self, name: str, entry: Entry) -> None:
        self.entries[name] = entry
        self.changed = True

    def drop(self, name: str) -> None:
        self.changed = self.entries.pop(name, None) is not None or self.changed

    def forget_all_but(self, names: set[str]) -> None:
        for name in set(self.entries) - names:
            self.drop(name)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "hpc-art-launcher" / "status"


def file_name(runs_dir: Path) -> str:
    real = os.path.realpath(runs_dir)
    return hashlib.sha256(real.encode(errors="surrogateescape")).hexdigest()[:32] + ".json"


def owned_folder() -> int:
    """A descriptor of the cache folder, made 0700 if missing; Untrusted unless it is the user's alone."""
    root = cache_root()
    with contextlib.suppress(FileExistsError):
        root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.mkdir(root, 0o700)
    fd = os.open(root, _DIR_FLAGS)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        raise Untrusted(f"{root} is not yours alone (owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}; "
                        "accepted: yours, mode 0700)")
    return fd


def load(runs_dir: Path) -> StatusCache:
    """The kept entries of ``runs_dir``; none (and a note) when the cache is not the user's own."""
    name = file_name(runs_dir)
    try:
        folder = owned_folder()
    except OSError as error:
        return StatusCache(None, note=f"status cache not used: {error}")
    try:
        data = read_owned(folder, name)
    except FileNotFoundError:
        data = None
    except OSError as error:
        return StatusCache(None, note=f"status cache not used: {error}")
    finally:
        os.close(folder)
    return StatusCache(cache_root() / name, entries_of(data, runs_dir))


def read_owned(folder: int, name: str) -> Any:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise Untrusted(f"{cache_root() / name} is not yours alone (accepted: a file of yours, mode 0600)")
        try:
            return json.loads(handle.read())
        except ValueError:  # a file cut short by a full disk: started again
            return None


def entries_of(data: Any, runs_dir: Path) -> dict[str, Entry]:
    if not isinstance(data, dict) or data.get("version") != VERSION or data.get("runs_dir") != os.path.realpath(runs_dir):
        return {}
    entries = {}
    for name, value in (data.get("runs") or {}).items():
        with contextlib.suppress(TypeError):
            entries[name] = Entry(**value)
    return entries


def save(cache: StatusCache, runs_dir: Path) -> None:
    """The entries, written whole (a temporary file, then a rename) in the user's own folder."""
    if cache.path is None or not cache.changed:
        return
    data = json.dumps({"version": VERSION, "runs_dir": os.path.realpath(runs_dir),
                       "runs": {name: asdict(entry) for name, entry in cache.entries.items()}}).encode()
    with contextlib.suppress(OSError):
        folder = owned_folder()
        try:
            write_owned(folder, cache.path.name, data)
        finally:
            os.close(folder)


def write_owned(folder: int, name: str, data: bytes) -> None:
    temporary = f".{name}.{secrets.token_hex(6)}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), 0o600)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        raise


def context_key(**parts: Any) -> str:
    """A short hash of what rows depend on beside the run's own files."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def now_ns() -> int:
    return time.time_ns()
