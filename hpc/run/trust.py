"""Whether a run's folder is the user's alone: the rule the launcher and the job share.

The job sources its run's ``secrets.env`` and submits the scripts under ``scripts/``; the launcher
writes the real keys into that folder. Whoever else can change the folder (a neighbour's folder the
user launches into, one left writable by group or others, a link to somewhere else) can replace
``secrets.env`` with shell code that then runs as the user, or read the keys where the link leads.
So the launcher (hpc/launcher/single_run.py, before anything is written, the dry run too) and the
job (hpc/job/trusted_run.py, before anything is read) refuse a run folder, and the entries of it
they write, source or run (and the run's model folder, whose checkpoints the trainer loads), that:

- is a link (it is not followed: the run's files stay where the runs directory says),
- is not what it must be (a file or a FIFO where the folder goes, a folder where ``.lock`` goes),
- is not owned by the process's effective user,
- is writable by group or others (``secrets.env``: readable by them either).

The runs directory above may be shared like ``/tmp``: writable by others only with the sticky bit
(then no one else can rename or replace the run's folder in it), and owned by the user or root. The
folders above the runs directory are the site's and the user's (a JSC project folder is writable by
its group): they are not checked. Stdlib only: the job runs this with ``python -S``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class Kind(Enum):
    FOLDER = "a folder"
    FILE = "a regular file"


@dataclass(frozen=True)
class Entry:
    """An entry of a run's folder the launcher or the job writes, sources or runs."""

    name: str
    kind: Kind
    private: bool = False  # readable by its owner alone (secrets.env)


# What the launcher and the job write, source or run in a run's (or a sweep's) folder.
ENTRIES = (Entry(".lock", Kind.FILE), Entry("ledger.jsonl", Kind.FILE), Entry("secrets.env", Kind.FILE, private=True),
           Entry("model.json", Kind.FILE), Entry("sweep.json", Kind.FILE), Entry("sweep_member.json", Kind.FILE),
           Entry("failed.json", Kind.FILE), Entry("done.json", Kind.FILE), Entry("scripts", Kind.FOLDER),
           Entry("logs", Kind.FOLDER), Entry("art", Kind.FOLDER))


class Untrusted(Exception):
    """A run's folder, or an entry of it, that someone else could change: one line saying which and why."""


def _kind_of(mode: int) -> str:
    for test, word in ((stat.S_ISLNK, "a link"), (stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a regular file"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "a device"


def _writers(mode: int) -> str:
    return " and ".join(who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit)


def check_entry(path: Path, kind: Kind, private: bool = False) -> None:
    """Untrusted unless ``path`` (not followed) is ``kind``, the user's, and not writable by group or
    others (``private``: not readable by them either); a missing path passes (the launcher makes it)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    mode, euid = info.st_mode, os.geteuid()
    if stat.S_ISLNK(mode):
        raise Untrusted(f"{path} is a link (a run's folder and what the job reads in it are never followed elsewhere)")
    if _kind_of(mode) != kind.value:
        raise Untrusted(f"{path} is {_kind_of(mode)}, not {kind.value}")
    if info.st_uid != euid:
        raise Untrusted(f"{path} is owned by uid {info.st_uid}, not by you (uid {euid}): someone else could change it")
    if mode & 0o022:
        raise Untrusted(f"{path} is writable by {_writers(mode)} (mode {stat.S_IMODE(mode):04o}): "
                        f"someone else could change it; chmod go-w it if it is yours alone")
    if private and mode & 0o077:
        raise Untrusted(f"{path} is readable by others (mode {stat.S_IMODE(mode):04o}): it holds keys; "
                        "chmod 600 it (and change the keys if others read it)")


def check_runs_dir(runs_dir: Path) -> None:
    """Untrusted unless the runs directory (or the nearest folder above it that exists, where the
    launcher would make it) is a folder the user may write in, owned by the user or root, and
    writable by others only with the sticky bit (like /tmp)."""
    place = runs_dir
    while not os.path.lexists(place) and place != place.parent:
        place = place.parent
    what = (f"the runs directory {place}" if place == runs_dir
            else f"{place} (where the runs directory {runs_dir} would be made)")
    try:
        info = os.stat(place)
    except OSError as error:
        raise Untrusted(f"{what} cannot be used: {error.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise Untrusted(f"{what} is {_kind_of(info.st_mode)}, not a folder")
    _check_shared_folder(place, info, what)
    owner_write = info.st_uid != os.geteuid() or info.st_mode & stat.S_IWUSR
    if not (owner_write and os.access(place, os.W_OK | os.X_OK)):
        raise Untrusted(f"{what} is not writable by you (mode {stat.S_IMODE(info.st_mode):04o})")


def _check_shared_folder(place: Path, info: os.stat_result, what: str) -> None:
    if info.st_uid not in (os.geteuid(), 0):
        raise Untrusted(f"{what} is owned by uid {info.st_uid}, not by you or root: its owner could "
                        "replace a run's folder in it; use a runs directory of your own (--runs_dir, RUNS_DIR)")
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise Untrusted(f"{what} is writable by {_writers(info.st_mode)} without the sticky bit "
                        f"(mode {stat.S_IMODE(info.st_mode):04o}): someone else could replace a run's folder in "
                        "it; chmod +t it, or use a runs directory of your own (--runs_dir, RUNS_DIR)")


def check_run_folder(folder: Path) -> None:
    """The whole rule for one run's (or sweep's) folder: its runs directory, the folder itself, and
    the ENTRIES of it that are there."""
    check_runs_dir(folder.parent)
    check_entry(folder, Kind.FOLDER)
    if os.path.lexists(folder):
        for entry in ENTRIES:
            check_entry(folder / entry.name, entry.kind, entry.private)


def check_model_folder(model_dir: Path) -> None:
    """The run's model folder (ART's checkpoints, which the trainer loads and trains on) and its
    ``checkpoints/``, where they are there: the user's, no link, not writable by group or others."""
    check_entry(model_dir, Kind.FOLDER)
    check_entry(model_dir / "checkpoints", Kind.FOLDER)


def tighten_umask() -> None:
    """Take write away from group and others in this process's umask, never loosening it: what the
    launcher makes (the run's folders and files, --init_from's copy, and through sbatch, which passes
    its umask on, the job's Slurm logs) is never writable by them, whatever umask the user has."""
    os.umask(os.umask(0o022) | 0o022)
