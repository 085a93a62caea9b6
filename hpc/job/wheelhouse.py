"""Offline installs: a wheelhouse of the training backend and ART's vLLM runtime.

GPU nodes are often offline, and some machines that run jobs (the project's lent GPU
machine among them) reach no package index at all. There the backend and the vLLM
runtime can only arrive as files. On a machine with PyPI::

    bash setup.sh --wheelhouse DIR [--arch x86_64|aarch64] [--have FREEZE]

resolves both requirement sets for the target (Python 3.12, manylinux on ``--arch``) to
wheels alone and downloads them into ``DIR``; on the target, without an index::

    bash setup.sh --from-wheelhouse DIR

installs from ``DIR`` alone. Each set is a lock file (``DIR/backend.lock``,
``DIR/runtime.lock``: ``name==version`` lines) beside ``DIR/wheels/``; what the locks leave
out and why is ``DIR/requirements/left-out.txt`` (``LEFT_OUT``).

A lock takes wheels up to manylinux_2_39, and pip takes the newest-glibc wheel of each
release; the download says which glibc its wheels then need (2.34 for aarch64 with ART 0.5.23),
to compare with ``ldd --version`` on the target.

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

This module makes the wheelhouse (a machine with PyPI) and is the command;
hpc/job/wheelhouse_install.py installs one on the target; hpc/job/wheelhouse_locks.py reads the
locks both sides share.

    python -m hpc.job.wheelhouse download DIR [--arch A] [--have FREEZE]   # lock both sets, download
    python -m hpc.job.wheelhouse check DIR [--arch A]   # lock both sets; does PyPI have every wheel? (no download)
    python -m hpc.job.wheelhouse install DIR --name backend --python VENV/bin/python
    python -m hpc.job.wheelhouse plan DIR --name backend --python PY   # what install would do
    python -m hpc.job.wheelhouse venv VENV   # a venv that sees this Python's packages
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hpc.job import vllm_runtime
from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.job.wheelhouse_install import install, make_venv, target_packages, wheels_for
from hpc.job.wheelhouse_locks import (
    Pin,
    WheelhouseError,
    base_version,
    installed,
    last_line,
    needed,
    read_lock,
    read_pins,
)

ARCHES = ("x86_64", "aarch64")
PYTHON_VERSION = "3.12"
# Left out of the resolution itself (uv --excludes), with why. ART's [backend] extra requires
# nvidia-resiliency-ext<0.5 on Linux for its Megatron backend (art/_megatron_runtime); nothing
# LocalBackend, Unsloth, TRL, PEFT or transformers imports uses it. Below 0.5 PyPI has 0.0.0a0, a
# source-only placeholder (a lock that takes it has no wheel to download), and 0.1.3-0.4.1,
# whose wheels need glibc 2.31 (aarch64 from 0.3.0).
LEFT_OUT = {
    "nvidia-resiliency-ext": "ART's Megatron backend only (art/_megatron_runtime); LocalBackend with Unsloth never imports it",
}
# The newest glibc whose wheels a lock may take (manylinux_2_39, and every older tag).
NEWEST_GLIBC = 39
_MANYLINUX = [f"manylinux_2_{minor}" for minor in range(NEWEST_GLIBC, 16, -1)] + [
    "manylinux2014", "manylinux2010", "manylinux1", "linux"]
_X86_ONLY = ("manylinux2010", "manylinux1")  # as pip reads manylinux2014: these two on x86 only (PEP 599)
_LEGACY_GLIBC = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}
# PyPI's simple index, whose pages ``check`` reads (PEP 691 JSON: a project's file names, no file itself)
SIMPLE_INDEX = "https://pypi.org/simple"


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


@dataclass(frozen=True)
class RequirementSet:
    """One set a wheelhouse locks: its requirements, uv's overrides, and what it leaves out."""

    name: str
    requirements: Path
    overrides: Path
    excludes: Path


def write_requirement_sets(folder: Path, repo: Path) -> list[RequirementSet]:
    """The two sets as ``setup.sh --backend`` installs them online, as files in ``folder``: the
    backend (this project with ART's [backend] extra, PyPI's torch in place of ART's +cu128
    pin) and ART's vLLM runtime (its PyPI build); both leave out ``LEFT_OUT`` (left-out.txt)."""
    bundle = vllm_runtime.find_bundle()
    if bundle is None:
        raise WheelhouseError("ART (openpipe-art) is not installed here: run `bash setup.sh` first (the sets are ART's pins)")
    folder.mkdir(parents=True, exist_ok=True)
    excludes = folder / "left-out.txt"
    excludes.write_text("".join(f"{name}  # {why}\n" for name, why in LEFT_OUT.items()))
    backend = RequirementSet("backend", folder / "backend.in", folder / "backend-overrides.txt", excludes)
    backend.requirements.write_text(f"-e {repo}[frontend,backend]\n")
    backend.overrides.write_text("".join(f"{line}\n" for line in vllm_runtime.backend_torch_overrides(bundle)))
    runtime = vllm_runtime.write_requirements(bundle, folder / "runtime")
    return [backend, RequirementSet("runtime", runtime, runtime.with_name("overrides.txt"), excludes)]


def compile_command(uv: str, wanted: RequirementSet, arch: str, out: Path) -> list[str]:
    """uv's resolution of ``wanted`` for the target from wheels alone: a source-only release
    or a placeholder is never taken, so every pin has a wheel ``download`` can fetch."""
    return [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--python-version", PYTHON_VERSION,
            "--python-platform", f"{arch}-manylinux_2_{NEWEST_GLIBC}", "--only-binary", ":all:",
            "--excludes", str(wanted.excludes), "--override", str(wanted.overrides), "-o", str(out),
            str(wanted.requirements)]


def lock(uv: str, wanted: RequirementSet, arch: str, have: dict[str, str], out: Path) -> list[Pin]:
    """Resolve ``wanted`` for the target into ``out`` (``name==version`` lines)."""
    out.write_text(preferences(have))
    result = subprocess.run(compile_command(uv, wanted, arch, out), capture_output=True, text=True)
    if result.returncode != 0:
        raise WheelhouseError(f"resolving the {wanted.name} set for {arch} failed: {uv_reason(result.stderr)}")
    return read_pins(out.read_text())


def uv_reason(stderr: str) -> str:
    """Why uv found no resolution, as one line: its ``cause:`` paragraph (else its last line)."""
    cause = re.search(r"cause: (.*?)(?:\n\s*\n|\Z)", stderr, re.DOTALL)
    return " ".join(cause[1].split()) if cause else last_line(stderr)


def platforms(arch: str) -> list[str]:
    """The platform tags a wheel for the target may carry, best first (as pip is asked)."""
    return [f"{tag}_{arch}" for tag in _MANYLINUX if arch == "x86_64" or tag not in _X86_ONLY]


def platform_args(arch: str) -> list[str]:
    tags = [arg for platform in platforms(arch) for arg in ("--platform", platform)]
    return tags + ["--python-version", PYTHON_VERSION, "--implementation", "cp", "--only-binary", ":all:"]


def download(pins: list[Pin], arch: str, wheels: Path) -> list[Path]:
    """The wheels of ``pins`` for the target, into ``wheels`` (pip's cache makes a rerun cheap)."""
    if not pins:
        return []
    wheels.mkdir(parents=True, exist_ok=True)
    requirements = wheels.parent / ".download.txt"
    requirements.write_text("".join(f"{pin}\n" for pin in pins))
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels),
               "-r", str(requirements), *platform_args(arch)]
    result = subprocess.run(command, capture_output=True, text=True)
    requirements.unlink()
    if result.returncode != 0:
        raise WheelhouseError(f"downloading the {arch} wheels failed: {last_line(result.stderr)}")
    return wheels_for(pins, wheels)


def glibc_needed(wheels: Iterable[Path]) -> tuple[int, int] | None:
    """The newest glibc among what ``wheels`` need (each needs the oldest its manylinux tags
    name); None where none is built for a glibc."""
    needs = [min(glibcs) for glibcs in map(wheel_glibcs, wheels) if glibcs]
    return max(needs) if needs else None


def wheel_glibcs(wheel: Path) -> list[tuple[int, int]]:
    """The glibc of each manylinux tag in a wheel's name (``manylinux_2_17_x86_64.manylinux2014_x86_64``)."""
    platform_tags = wheel.name.removesuffix(".whl").split("-")[-1].split(".")
    glibcs = []
    for tag in platform_tags:
        pep600 = re.match(r"manylinux_(\d+)_(\d+)_", tag)
        legacy = _LEGACY_GLIBC.get(tag.split("_", 1)[0])
        glibcs += [(int(pep600[1]), int(pep600[2]))] if pep600 else [legacy] if legacy else []
    return glibcs


# -- checking a lock against the index's metadata (no wheel downloaded) -------------------------------


def index_files(name: str, tries: int = 3) -> list[str]:
    """The names of a project's files on PyPI (its PEP 691 JSON page, where uv resolves from);
    none where PyPI has no such project."""
    request = urllib.request.Request(f"{SIMPLE_INDEX}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return [entry["filename"] for entry in json.load(response)["files"]]
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return []
            problem: OSError = error
        except OSError as error:  # DNS, refused, timed out: another try
            problem = error
        time.sleep(2 ** attempt)
    raise WheelhouseError(f"cannot read the files of {name} from {SIMPLE_INDEX}: {problem}")


def index_of(names: Iterable[str]) -> dict[str, list[str]]:
    """``index_files`` of each project, a few at a time (each is one small request)."""
    names = sorted(set(names))
    with ThreadPoolExecutor(max_workers=6) as pool:
        return dict(zip(names, pool.map(index_files, names)))


def lacking_wheels(pins: list[Pin], arch: str, files: Mapping[str, list[str]]) -> list[Pin]:
    """The pins with no wheel among ``files`` (a project's file names) that the target can
    install: a source-only release, a placeholder, or wheels for other platforms or Pythons."""
    from packaging.tags import compatible_tags, cpython_tags  # the download side only: the install side is stdlib
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    target = {*cpython_tags((3, 12), ["cp312"], platforms(arch)), *compatible_tags((3, 12), "cp312", platforms(arch))}

    def installable(pin: Pin) -> bool:
        for filename in files.get(pin.name, []):
            try:
                _, version, _, tags = parse_wheel_filename(filename)
            except InvalidWheelFilename:  # a source archive, or a wheel named before the rules
                continue
            if version == Version(pin.version) and tags & target:
                return True
        return False

    return [pin for pin in pins if not installable(pin)]


def check(uv: str, sets: list[RequirementSet], arches: list[str], directory: Path) -> list[str]:
    """Lock each set for each target (``DIR/<set>-<arch>.lock``) and ask the index whether every
    pin a target without packages would download has a wheel there for it; one line per lock.
    Nothing is downloaded: the index's pages list each project's files by name."""
    locks = {(arch, wanted.name): needed(lock(uv, wanted, arch, {}, directory / f"{wanted.name}-{arch}.lock"), {})
             for arch in arches for wanted in sets}
    files = index_of(pin.name for pins in locks.values() for pin in pins)
    lacking = {key: missing for key, pins in locks.items() if (missing := lacking_wheels(pins, key[0], files))}
    if lacking:
        raise WheelhouseError("; ".join(f"the {name} lock for {arch} pins what PyPI has no cp312 {arch} wheel of: "
                                        f"{', '.join(map(str, missing))}" for (arch, name), missing in lacking.items())
                              + " (a source-only release, a placeholder, or wheels for other platforms only)")
    return [f"{name} ({arch}): {len(pins)} pins, each with a cp312 wheel on PyPI; none downloaded"
            for (arch, name), pins in locks.items()]


# -- command line -------------------------------------------------------------------------------------


REPO = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hpc.job.wheelhouse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    down = sub.add_parser("download", help="lock both requirement sets for the target and download what it lacks")
    probe = sub.add_parser("check", help="lock both sets for the target; has the index a wheel of every pin? (no download)")
    for cmd in (down, probe):
        cmd.add_argument("directory", type=Path)
        cmd.add_argument("--uv", default="uv")
        cmd.add_argument("--repo", type=Path, default=REPO, help="this project's checkout (the backend set installs it)")
    down.add_argument("--arch", default="x86_64")
    down.add_argument("--have", type=Path, help="the target's `pip list --format=freeze`")
    probe.add_argument("--arch", action="append", help=f"a target (again for another); default: {', '.join(ARCHES)}")
    for verb in ("install", "plan"):
        cmd = sub.add_parser(verb, help=f"{verb} what the target lacks of DIR/<name>.lock, from DIR/wheels")
        cmd.add_argument("directory", type=Path)
        cmd.add_argument("--name", required=True)
        cmd.add_argument("--python", default=sys.executable)
    sub.add_parser("venv", help="a venv that sees this Python's packages").add_argument("path", type=Path)
    return parser.parse_args(argv)


def download_house(args: argparse.Namespace) -> list[str]:
    """``download``: each set locked for the target and what it lacks fetched; one line per set."""
    arch = check_arch(args.arch)
    have = installed(args.have.read_text()) if args.have else {}
    lines = []
    for wanted in write_requirement_sets(args.directory / "requirements", args.repo):
        pins = needed(lock(args.uv, wanted, arch, have, args.directory / f"{wanted.name}.lock"), have)
        glibc = glibc_needed(download(pins, arch, args.directory / "wheels"))
        lines.append(f"{wanted.name}: {len(pins)} wheel(s) the target lacks, in {args.directory / 'wheels'}"
                     + (f"; they need glibc >= {glibc[0]}.{glibc[1]} on the target" if glibc else ""))
    return lines


def check_house(args: argparse.Namespace) -> list[str]:
    """``check``: both sets locked for each target in DIR, checked against the index's metadata."""
    arches = [check_arch(arch) for arch in args.arch or ARCHES]
    return check(args.uv, write_requirement_sets(args.directory / "requirements", args.repo), arches, args.directory)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.command in ("download", "check"):
            print("\n".join(download_house(args) if args.command == "download" else check_house(args)))
        elif args.command == "venv":
            print(make_venv(args.path))
        elif args.command == "plan":
            print("\n".join(map(str, needed(read_lock(args.directory, args.name), target_packages(args.python)))))
        else:
            pins = install(args.directory, args.name, args.python)
            print(f"{args.name}: installed {len(pins)} package(s) from {args.directory}")
    except (WheelhouseError, OSError) as error:
        print(f"hpc.job.wheelhouse: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
