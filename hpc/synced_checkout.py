"""A checkout that ``--remote`` synced from a laptop (hpc/remote/) onto a cluster.

It is the laptop's committed tree without ``.git``, so the commit it came from cannot be
asked of git there: the sync writes it into ``.hpc-remote/synced`` (last, after every file is
in place), and the launcher records it in the ledger's ``git_commit`` as it records a git
checkout's HEAD. Both sides read the layout from here (stdlib only).

    <checkout>/.hpc-remote/synced   tree=<git tree id>  commit=<HEAD, or HEAD-dirty>  (the marker: complete)
    <checkout>/.hpc-remote/files    every synced file, sorted (the next sync removes the ones gone)
    <checkout>/.hpc-remote/setup    what ``bash setup.sh`` last succeeded for (setup.sh's and pyproject's blobs)
"""

from __future__ import annotations

from pathlib import Path

FOLDER = ".hpc-remote"
MARKER = f"{FOLDER}/synced"
FILES = f"{FOLDER}/files"
SETUP = f"{FOLDER}/setup"
# What a sync never writes or removes in the checkout: the cluster's own venvs, keys, runs and data.
KEPT = (".venv", ".venv-backend", ".env", "runs", "data", FOLDER)


def parse_marker(text: str) -> dict[str, str]:
    """``key=value`` lines of the marker as a mapping (unknown lines are left out)."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def synced_commit(repo: Path) -> str | None:
    """The commit a complete sync put into ``repo`` (``-dirty`` when it carried uncommitted
    changes), or None where ``repo`` was not synced by ``--remote`` or its sync did not finish."""
    try:
        return parse_marker((repo / MARKER).read_text()).get("commit") or None
    except OSError:
        return None
