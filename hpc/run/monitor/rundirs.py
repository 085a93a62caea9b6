"""The run directories under a runs directory, as the monitoring helpers list them: runs moved
aside by ``--restart``, a sweep's runs, and a run's ledger and markers read without ever failing
the view."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Callable, Optional

from hpc.run.records import Skipped
from hpc.run.rundir import UNBUNDLING, RunDir, SweepDir

FOLDER = "."  # a Skipped record's file when the run's folder itself cannot be read


def is_moved_aside(name: str) -> bool:
    """`hpc.launch --restart` renames an old run to <name>.<YYYYmmddTHHMMSSZ>."""
    stamp = name.rpartition(".")[2]
    return len(stamp) == 16 and stamp[8] == "T" and stamp.endswith("Z") and (stamp[:8] + stamp[9:15]).isdigit()


def sweep_runs(runs_dir: Path, name: str) -> list[str]:
    """The runs of the sweep ``name`` (its sweep.json, hpc/launcher/sweeps.py); [] when it is no sweep."""
    try:
        sweep = SweepDir(runs_dir / name)
        record = sweep.read_record() if sweep.is_sweep() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    runs = record.get("runs") if isinstance(record, dict) else None
    return [str(r.get("name")) for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def run_dirs(runs_dir: Path, only: str = "") -> list[RunDir]:
    """Run directories (a ledger or a progress file inside, whatever it is: a link, a folder), by name;
    runs moved aside by --restart only when asked for by name; ``only`` names a run or a sweep. A
    folder that cannot be looked into (another user's, mode 0700) is listed, its ``skipped`` saying so
    (``FOLDER``): a run never vanishes from the views because it cannot be read."""
    try:
        entries = sorted(runs_dir.iterdir())
    except OSError:
        return []
    wanted = set(sweep_runs(runs_dir, only) or [only]) if only else set()
    runs = []
    for path in entries:
        if only and path.name not in wanted or not only and is_moved_aside(path.name) \
                or path.name.startswith(UNBUNDLING):
            continue
        run_dir = RunDir(path)
        try:
            if path.is_dir() and (there(run_dir.ledger) or there(run_dir.progress_file)):
                runs.append(run_dir)
        except OSError as error:  # the folder is there, what is in it cannot be seen
            run_dir.skipped[(FOLDER, None)] = Skipped(FOLDER, None, f"the run folder cannot be read: {error.strerror}")
            runs.append(run_dir)
    return runs


def there(path: Path) -> bool:
    """Whether a name is in its folder, as itself (a link that loops is there: reading it is refused)."""
    try:
        os.lstat(path)
    except OSError as error:
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            return False
        raise
    return True


def unreadable_folder(run_dir: RunDir) -> Optional[Skipped]:
    """Why the run's folder itself cannot be read (``run_dirs`` found it so), else None."""
    return run_dir.skipped.get((FOLDER, None))


def read_marker(read: Callable[[], Optional[dict]]) -> dict:
    """progress.json / done.json / failed.json as a dict ({} when missing; one that is unreadable
    or not what its file holds the run's reader skipped and named: hpc/run/rundir.py)."""
    return read() or {}
