"""The run directories under a runs directory, as the monitoring helpers list them: runs moved
aside by ``--restart``, a sweep's runs, and a run's ledger and markers read without ever failing
the view."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Callable, Optional

from hpc.run.rundir import RunDir, SweepDir


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
    """Run directories (a ledger or a progress file inside), by name; runs moved
    aside by --restart only when asked for by name; ``only`` names a run or a sweep."""
    try:
        entries = sorted(runs_dir.iterdir())
    except OSError:
        return []
    wanted = set(sweep_runs(runs_dir, only) or [only]) if only else set()
    runs = []
    for path in entries:
        if only and path.name not in wanted or not only and is_moved_aside(path.name):
            continue
        run_dir = RunDir(path)
        try:
            if path.is_dir() and (run_dir.ledger.exists() or run_dir.progress_file.exists()):
                runs.append(run_dir)
        except OSError:
            continue
    return runs


def ledger(run_dir: RunDir) -> list[dict]:
    """The ledger's records (objects only); an unreadable ledger reads as empty."""
    try:
        return [r for r in run_dir.read_ledger() if isinstance(r, dict)]
    except (OSError, UnicodeDecodeError):
        return []


def read_marker(read: Callable[[], Optional[dict]]) -> dict:
    """progress.json / done.json / failed.json as a dict ({} when missing or odd)."""
    try:
        data = read()
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ledger_job_ids(records: list[dict]) -> list[str]:
    """Job ids in the order the ledger last mentions them (latest last)."""
    ids: dict[str, None] = {}
    for record in records:
        job = str(record.get("job_id") or "")
        if job:
            ids.pop(job, None)
            ids[job] = None
    return list(ids)


def model_dir_of(run_dir: RunDir, records: list[dict]) -> Optional[Path]:
    """The checkpoint folder the run's jobs use: `export HPC_MODEL_DIR=...` in the
    newest job script the launcher wrote (the script is what the job really runs),
    read from the run's scripts/ (never through a link, whatever the ledger says)."""
    for record in reversed(records):
        script = record.get("script") if record.get("event") in ("submit", "chain") else None
        text = run_dir.read_text(run_dir.scripts_dir / Path(script).name) if script else None
        if text is None:
            continue
        for line in text.splitlines():
            if line.startswith("export HPC_MODEL_DIR="):
                try:
                    return Path(shlex.split(line)[1].partition("=")[2])
                except (ValueError, IndexError):
                    return None
    return None
