"""A wheelhouse installed on its target, from its folder alone (``setup.sh --from-wheelhouse DIR``).

What the target lacks of a lock (hpc/job/wheelhouse_locks.py) goes from ``DIR/wheels`` into a
virtual environment that sees the target's own packages (its torch and CUDA stack) and shadows them
where the lock needs other versions. Stdlib only, no index: setup.sh runs this with the system
Python on an offline node (hpc/job/wheelhouse.py's ``install``, ``plan`` and ``venv``).
"""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from hpc.job.wheelhouse_locks import Pin, WheelhouseError, canonical, installed, last_line, needed, read_lock


def pip(python: str) -> list[str]:
    """This Python's pip acting on ``python`` (a venv made here has no pip of its own)."""
    return [sys.executable, "-m", "pip", "--python", python]


def make_venv(path: Path) -> Path:
    """A virtual environment that sees this Python's packages after its own: a node's torch
    and CUDA stack serve it, and what it installs shadows them. ``--system-site-packages``
    alone would not do where this Python is itself a venv (the base's packages are not
    this venv's), so a ``.pth`` file names this Python's site-packages."""
    if not (path / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    purelib = subprocess.run([str(path / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "_target_site.pth").write_text("".join(f"{entry}\n" for entry in our_site_packages()))
    return path


def our_site_packages() -> list[str]:
    return list(dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), *site.getsitepackages()]))


def target_packages(python: str) -> dict[str, str]:
    """What the target Python already has (its venv and what its ``.pth`` files add)."""
    result = subprocess.run([*pip(python), "list", "--format=freeze"], capture_output=True, text=True)
    if result.returncode != 0:
        raise WheelhouseError(f"cannot list the packages of {python}: {last_line(result.stderr)}")
    return installed(result.stdout)


def wheel_pin(path: Path) -> Pin:
    """The distribution a wheel file holds, from its name (``name-version-...whl``)."""
    name, version = path.name.split("-")[:2]
    return Pin(canonical(name), version)


def wheels_for(pins: list[Pin], wheels: Path) -> list[Path]:
    """The wheel file of each pin; a missing one is an error naming it (the wheelhouse was
    made for another target, or with a ``--have`` that claimed more than the target has)."""
    files = {wheel_pin(path): path for path in wheels.glob("*.whl")}
    by_name = {(pin.name, pin.version.lower()): path for pin, path in files.items()}
    missing = [str(pin) for pin in pins if (pin.name, pin.version.lower()) not in by_name]
    if missing:
        raise WheelhouseError(f"the wheelhouse {wheels} lacks {', '.join(missing[:5])}"
                              f"{' and more' if len(missing) > 5 else ''}: make it again with --have naming "
                              "this machine's packages (pip list --format=freeze)")
    return [by_name[(pin.name, pin.version.lower())] for pin in pins]


def install(directory: Path, name: str, python: str) -> list[Pin]:
    """Install what the target lacks of ``DIR/<name>.lock`` from ``DIR/wheels`` alone."""
    pins = needed(read_lock(directory, name), target_packages(python))
    files = wheels_for(pins, directory / "wheels")
    if files:
        command = [*pip(python), "install", "--quiet", "--no-index", "--no-deps", *map(str, files)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise WheelhouseError(f"installing from {directory} failed: {last_line(result.stderr)}")
    return pins

