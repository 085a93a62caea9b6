"""Offline installs: a wheelhouse of the training backend and ART's vLLM runtime.

GPU nodes are often offline, and some machines that run jobs (the project's lent GPU
machine among them) reach no package index at all. There the backend and the vLLM
runtime can only arrive as files. On a machine with PyPI::

    bash setup.sh --wheelhouse DIR [--arch x86_64|aarch64] [--have FREEZE]

resolves both requirement sets for the target (Python 3.12, manylinux on ``--arch``) and
downloads their wheels into ``DIR``; on the target, without an index::

    bash setup.sh --from-wheelhouse DIR

installs from ``DIR`` alone. Each set is a lock file (``DIR/backend.lock``,
``DIR/runtime.lock``: ``name==version`` lines) beside ``DIR/wheels/``.

What the target already has counts (``--have`` is its ``pip list --format=freeze``;
the install reads the target's own):

- a target that has torch keeps its own torch and everything torch brings (CUDA
  libraries, triton): those are built for its driver, and they are gigabytes;
- the lock prefers the target's versions wherever they satisfy the requirements, so
  only what must differ ships; a package the target has at the locked version is
  neither downloaded nor installed;
- the rest goes into a virtual environment that sees the target's packages
  (``--system-site-packages``) and shadows them where the lock needs other versions
  (transformers 5.2.0 for Unsloth beside a node's newer one, say).

Installs use ``--no-deps``: the lock is the whole resolution, and pip's resolver
would otherwise ask the (absent) index for the target's torch pins again.

    python -m hpc.job.wheelhouse download DIR --requirements FILE [--overrides FILE] --name backend ...
    python -m hpc.job.wheelhouse install DIR --name backend --python VENV/bin/python
    python -m hpc.job.wheelhouse plan DIR --name backend --python PY   # what install would do
    python -m hpc.job.wheelhouse venv VENV   # a venv that sees this Python's packages
"""

from __future__ import annotations

import argparse
import re
import site
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

ARCHES = ("x86_64", "aarch64")
PYTHON_VERSION = "3.12"
# torch's own stack: kept from a target that has torch (its driver's build, gigabytes of CUDA)
TORCH_STACK = re.compile(r"^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*|cupy-.*)$")
# Requirements of vLLM 0.25.1 that a runtime serving a LoRA on a dense model never imports: prebuilt
# kernel caches, video codecs, another backend's compiler (650 MB). Seen serving without them on an
# offline H200, 2026-11-26; the rest of the lock is installed as resolved. (TileLang is not among
# them: ART's runtime patches import its kernels at start-up.)
OPTIONAL = re.compile(r"^(flashinfer-cubin|tokenspeed-.*|pynvvideocodec|torchcodec|nvidia-cutlass-dsl-libs-.*)$")
# manylinux tags a wheel may carry for the target (the 2_28 glibc of the vLLM wheels and older)
_MANYLINUX = [f"manylinux_2_{minor}" for minor in range(39, 16, -1)] + ["manylinux2014", "manylinux1", "linux"]


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


# -- resolving and downloading (a machine with PyPI) -------------------------------------------


def check_arch(arch: str) -> str:
    if arch not in ARCHES:
        raise WheelhouseError(f"--arch {arch!r} is not a target this project builds for; accepted: {', '.join(ARCHES)}")
    return arch


def preferences(have: dict[str, str]) -> str:
    """The target's versions as a lock file's contents: uv prefers the pins of an existing
    output file, so the resolution keeps them wherever they satisfy the requirements.
    Build labels are dropped (``+cu130`` is on no public index)."""
    return "".join(f"{name}=={base_version(version)}\n" for name, version in sorted(have.items()))


def compile_command(uv: str, requirements: Path, overrides: Path | None, arch: str, out: Path) -> list[str]:
    command = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python-version", PYTHON_VERSION,
               "--python-platform", f"{arch}-manylinux_2_28", "-o", str(out), str(requirements)]
    return command + (["--override", str(overrides)] if overrides else [])


def lock(uv: str, requirements: Path, overrides: Path | None, arch: str, have: dict[str, str], out: Path) -> list[Pin]:
    """Resolve ``requirements`` for the target into ``out`` (``name==version`` lines)."""
    out.write_text(preferences(have))
    result = subprocess.run(compile_command(uv, requirements, overrides, arch, out), capture_output=True, text=True)
    if result.returncode != 0:
        raise WheelhouseError(f"resolving {requirements} for {arch} failed: {last_line(result.stderr)}")
    return read_pins(out.read_text())


def platform_args(arch: str) -> list[str]:
    tags = [arg for tag in _MANYLINUX if not (tag == "manylinux1" and arch != "x86_64")
            for arg in ("--platform", f"{tag}_{arch}")]
    return tags + ["--python-version", PYTHON_VERSION, "--implementation", "cp", "--only-binary", ":all:"]


def download(pins: list[Pin], arch: str, wheels: Path) -> None:
    """The wheels of ``pins`` for the target, into ``wheels`` (pip's cache makes a rerun cheap)."""
    if not pins:
        return
    wheels.mkdir(parents=True, exist_ok=True)
    requirements = wheels.parent / ".download.txt"
    requirements.write_text("".join(f"{pin}\n" for pin in pins))
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels),
               "-r", str(requirements), *platform_args(arch)]
    result = subprocess.run(command, capture_output=True, text=True)
    requirements.unlink()
    if result.returncode != 0:
        raise WheelhouseError(f"downloading the {arch} wheels failed: {last_line(result.stderr)}")


# -- installing (the target, no index) ---------------------------------------------------------------


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


def read_lock(directory: Path, name: str) -> list[Pin]:
    path = directory / f"{name}.lock"
    if not path.is_file():
        raise WheelhouseError(f"{path} does not exist: not a wheelhouse made by `setup.sh --wheelhouse`")
    return read_pins(path.read_text())


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


# -- command line -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hpc.job.wheelhouse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    down = sub.add_parser("download", help="lock a requirement set for the target and download what it lacks")
    down.add_argument("directory", type=Path)
    down.add_argument("--name", required=True, help="the set's name: DIR/<name>.lock")
    down.add_argument("--requirements", type=Path, required=True)
    down.add_argument("--overrides", type=Path)
    down.add_argument("--arch", default="x86_64")
    down.add_argument("--have", type=Path, help="the target's `pip list --format=freeze`")
    down.add_argument("--uv", default="uv")
    for verb in ("install", "plan"):
        cmd = sub.add_parser(verb, help=f"{verb} what the target lacks of DIR/<name>.lock, from DIR/wheels")
        cmd.add_argument("directory", type=Path)
        cmd.add_argument("--name", required=True)
        cmd.add_argument("--python", default=sys.executable)
    sub.add_parser("venv", help="a venv that sees this Python's packages").add_argument("path", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "download":
            have = installed(args.have.read_text()) if args.have else {}
            pins = needed(lock(args.uv, args.requirements, args.overrides, check_arch(args.arch), have,
                               args.directory / f"{args.name}.lock"), have)
            download(pins, args.arch, args.directory / "wheels")
            print(f"{args.name}: {len(pins)} wheel(s) the target lacks, in {args.directory / 'wheels'}")
        elif args.command == "venv":
            print(make_venv(args.path))
        elif args.command == "plan":
            print("\n".join(map(str, needed(read_lock(args.directory, args.name), target_packages(args.python)))))
        else:
            pins = install(args.directory, args.name, args.python)
            print(f"{args.name}: installed {len(pins)} package(s) from {args.directory}")
    except (WheelhouseError, OSError) as error:
        print(f"hpc.job.wheelhouse: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
