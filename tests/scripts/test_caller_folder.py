"""No command of the project imports from the caller's working folder: a folder holding
``hpc/remote/__main__.py`` or ``pip/__main__.py`` (a download, a neighbour's checkout) must not
run as the user who calls a helper from it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLANTED = "import pathlib, sys\npathlib.Path({marker!r}).write_text('ran ' + ' '.join(sys.argv))\n"


def hostile_folder(tmp_path: Path) -> tuple[Path, Path]:
    """A folder whose hpc, hpc.remote, pip and json modules write a marker when imported."""
    folder, marker = tmp_path / "downloads", tmp_path / "marker"
    code = PLANTED.format(marker=str(marker))
    for module in ("hpc/__init__.py", "hpc/remote/__init__.py", "hpc/remote/__main__.py", "pip/__init__.py",
                   "pip/__main__.py", "json.py", "venv/__init__.py", "venv/__main__.py"):
        (folder / module).parent.mkdir(parents=True, exist_ok=True)
        (folder / module).write_text(code)
    return folder, marker


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH") and not k.startswith("HPC_")}
    return {**env, **extra}


@pytest.mark.parametrize("argv", [
    ["status.sh", "-h"], ["scancelall.sh", "--help"],
    ["status.sh", "--remote", "nobody@unreachable.invalid", "--remote_di", "/x"],
    ["scancelall.sh", "--remote=nobody@unreachable.invalid", "--remote-dir", "/x"],
])
def test_a_helper_run_from_a_folder_holding_hpc_remote_never_imports_it(tmp_path, argv):
    folder, marker = hostile_folder(tmp_path)
    done = subprocess.run(["bash", str(REPO / "scripts" / argv[0]), *argv[1:]], cwd=folder, env=clean_env(),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert not marker.exists(), marker.read_text()
    if "-h" in argv or "--help" in argv:
        assert done.returncode == 0 and "--remote DEST" in done.stdout
    else:  # the real hpc.remote answered: the typo refused before any connection
        assert done.returncode == 2 and "unknown remote flag" in done.stderr, done.stderr


def test_setup_sh_runs_every_python_with_the_callers_folder_off_the_import_path(tmp_path):
    """setup.sh's first Python call is the version check of $PYTHON: a stand-in records the
    environment it was given, and every later call inherits the same export."""
    folder, _ = hostile_folder(tmp_path)
    seen = tmp_path / "seen"
    stand_in = tmp_path / "python3.12"
    stand_in.write_text(f"#!/bin/sh\necho \"safe=${{PYTHONSAFEPATH:-}} cwd=$PWD\" >> {seen}\nexit 1\n")
    stand_in.chmod(0o755)
    done = subprocess.run(["bash", str(REPO / "setup.sh")], cwd=folder, env=clean_env(PYTHON=str(stand_in)),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "Python >= 3.12 is required" in done.stderr + done.stdout
    calls = seen.read_text().splitlines()
    assert calls and all(call == f"safe=1 cwd={folder}" for call in calls), calls
