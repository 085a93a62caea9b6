"""hpc.job.wheelhouse: what an offline target lacks, and an install from a folder of wheels alone."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hpc.job.wheelhouse import (
    Pin,
    WheelhouseError,
    check_arch,
    install,
    installed,
    make_venv,
    needed,
    platform_args,
    preferences,
    read_pins,
    wheels_for,
)


def test_a_lock_and_a_freeze_read_as_pins_with_canonical_names() -> None:
    text = "# comment\n-e file:///repo\nTyping_Extensions==4.16.0 ; python_version >= '3.12'\nart-vllm-runtime @ file:///x.whl\ntorch==2.11.0+cu130\n"
    assert read_pins(text) == [Pin("typing-extensions", "4.16.0"), Pin("torch", "2.11.0+cu130")]


def test_a_target_with_torch_keeps_its_torch_stack_and_what_it_has_at_the_locked_version() -> None:
    lock = [Pin("torch", "2.11.0"), Pin("nvidia-cublas", "13.1.0.3"), Pin("triton", "3.6.0"), Pin("numpy", "2.3.5"),
            Pin("transformers", "5.2.0"), Pin("safetensors", "0.8.0"), Pin("tilelang", "0.1.9"),
            Pin("flashinfer-cubin", "0.6.13")]
    have = installed("torch==2.11.0+cu130\nnumpy==2.5.2\ntransformers==5.17.0\nsafetensors==0.8.0\n")
    assert needed(lock, have) == [Pin("numpy", "2.3.5"), Pin("transformers", "5.2.0"), Pin("tilelang", "0.1.9")]


def test_a_target_without_torch_needs_the_whole_stack() -> None:
    lock = [Pin("torch", "2.11.0"), Pin("nvidia-cublas", "13.1.0.3")]
    assert needed(lock, {}) == lock


def test_the_targets_versions_become_preferences_without_build_labels() -> None:
    assert preferences({"torch": "2.11.0+cu130", "numpy": "2.5.2"}) == "numpy==2.5.2\ntorch==2.11.0\n"


def test_wheels_are_asked_for_the_targets_platform_and_python() -> None:
    args = platform_args("aarch64")
    assert "manylinux_2_28_aarch64" in args and "manylinux1_aarch64" not in args
    assert args[-2:] == ["--only-binary", ":all:"] and "3.12" in args
    with pytest.raises(WheelhouseError, match="--arch 'arm64' is not a target this project builds for; accepted"):
        check_arch("arm64")


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


def test_setup_refuses_a_folder_that_is_no_wheelhouse_in_one_line(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    result = subprocess.run(["bash", str(repo / "setup.sh"), "--from-wheelhouse", str(tmp_path)], capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"setup.sh: --from-wheelhouse {tmp_path} is not a wheelhouse (no backend.lock; "
                                     "make one with --wheelhouse)")
    result = subprocess.run(["bash", str(repo / "setup.sh"), "--wheelhouse"], capture_output=True, text=True)
    assert result.returncode == 2 and "--wheelhouse needs a value" in result.stderr
