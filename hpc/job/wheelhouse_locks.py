"""A wheelhouse's locks: pins read from a lock or a freeze, and which of them a target lacks.

Both sides read them: hpc/job/wheelhouse.py where it makes the wheelhouse (a machine with PyPI),
hpc/job/wheelhouse_install.py on the target (no index). Stdlib only: setup.sh runs the target's
side with the system Python before any venv exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# torch's own stack: kept from a target that has torch (its driver's build, gigabytes of CUDA)
TORCH_STACK = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*|cupy-.*)$")
# Requirements of vLLM 0.25.1 that a runtime serving a LoRA on a dense model never imports: prebuilt
# kernel caches, video codecs, another backend's compiler (650 MB); a runtime without them serves on an
# offline H200. The rest of the lock is installed as resolved. (TileLang is not among them: ART's
# runtime patches import its kernels at start-up.)
OPTIONAL = re.compile(r"^(flashinfer-cubin|tokenspeed-.*|pynvvideocodec|torchcodec|nvidia-cutlass-dsl-libs-.*)$")


class WheelhouseError(Exception):
    """Bad input or a missing wheel: one line naming the value and what is accepted."""


@dataclass(frozen=True, order=True)
class Pin:
    """One locked distribution: ``name==version`` (the name canonical, PEP 503)."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def base_version(version: str) -> str:
    """``2.11.0+cu130`` is ``2.11.0`` for our purposes: the same release, another build."""
    return version.split("+", 1)[0]


def read_pins(text: str) -> list[Pin]:
    """``name==version`` lines of a lock or a freeze; comments, options, editables and
    ``name @ url`` lines are skipped (they are not wheels on an index)."""
    pins = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        name, sep, version = line.partition("==")
        if sep and name and not line.startswith("-") and " @ " not in line:
            pins.append(Pin(canonical(name.strip().split("[")[0]), version.strip()))
    return pins


def installed(freeze: str) -> dict[str, str]:
    """A target's packages from its ``pip list --format=freeze``: name -> version."""
    return {pin.name: pin.version for pin in read_pins(freeze)}


def needed(lock: list[Pin], have: dict[str, str]) -> list[Pin]:
    """The pins the target lacks: not torch's stack where it has torch, not what it has at
    the locked version (build labels aside), not what a runtime never imports (``OPTIONAL``)."""
    keep_torch_stack = "torch" in have
    return [
        pin for pin in lock
        if not (keep_torch_stack and TORCH_STACK.match(pin.name)) and not OPTIONAL.match(pin.name)
        and base_version(have.get(pin.name, "")) != base_version(pin.version)
    ]


def read_lock(directory: Path, name: str) -> list[Pin]:
    path = directory / f"{name}.lock"
    if not path.is_file():
        raise WheelhouseError(f"{path} does not exist: not a wheelhouse made by `setup.sh --wheelhouse`")
    return read_pins(path.read_text())


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"

