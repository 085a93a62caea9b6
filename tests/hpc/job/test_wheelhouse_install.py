"""hpc/job/wheelhouse_install.py: an install from a folder of wheels alone, into a venv that sees this
Python's packages; a wheel the lock needs and the folder lacks is named."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hpc.job.wheelhouse_install import install, make_venv, wheels_for
from hpc.job.wheelhouse_locks import Pin, WheelhouseError, installed


def make_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel: one module that knows its version."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}.py", f"VERSION = {version!r}\n")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def test_an_offline_install_adds_only_what_the_target_lacks_and_shadows_other_versions(tmp_path: Path) -> None:
    house = tmp_path / "house"
    make_wheel(house / "wheels", "hpcwhalpha", "1.0")
    make_wheel(house / "wheels", "hpcwhbeta", "2.0")
    (house / "backend.lock").write_text("hpcwhalpha==1.0\nhpcwhbeta==2.0\n")
    venv = make_venv(tmp_path / "venv")
    python = str(venv / "bin" / "python")
    pinned = installed(subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"],
                                      capture_output=True, text=True).stdout)
    assert "hpcwhalpha" not in pinned
    assert install(house, "backend", python) == [Pin("hpcwhalpha", "1.0"), Pin("hpcwhbeta", "2.0")]
    assert install(house, "backend", python) == []  # a second run installs nothing
    result = subprocess.run([python, "-c", "import hpcwhalpha, jinja2; print(hpcwhalpha.VERSION)"], capture_output=True,
                            text=True)
    assert result.stdout.strip() == "1.0", result.stderr  # and the venv sees this Python's packages (jinja2)


def test_a_wheel_the_lock_needs_but_the_house_lacks_is_named(tmp_path: Path) -> None:
    with pytest.raises(WheelhouseError, match=r"lacks hpcwhgamma==3\.0: make it again with --have"):
        wheels_for([Pin("hpcwhgamma", "3.0")], tmp_path)
