"""ART's vLLM runtime: where jobs find it, whether it is built, and how to build it from PyPI.

ART's LocalBackend serves rollouts from a vLLM runtime in a virtual
environment of its own (ART 0.5.23: vLLM 0.25.1, torch 2.11, Python 3.12).
ART builds it on first use (``art.vllm_runtime.ensure_vllm_runtime``) from a
lockfile it ships, which takes torch from PyTorch's own index and vLLM's
x86_64 wheel from GitHub. Two things make that unfit for our clusters:

- compute nodes are often offline, so the runtime must be built on the login
  node, into a directory both see: ``ART_VLLM_RUNTIME_CACHE_DIR`` (ART's own
  setting; its default, ``/tmp/art-cache``, is node-local). The dotenv files
  put it on each cluster's shared filesystem;
- the lockfile pins an x86_64 vLLM wheel, so GH200 clusters (aarch64: Vista,
  JUPITER) need the same pinned versions from PyPI, which has vLLM's aarch64
  wheel and aarch64 torch. The same PyPI build serves an x86_64 login node
  that cannot reach PyPI's sibling indexes.

This module (stdlib only: it reads ART's bundle as files and never imports
art) gives the requirements of that PyPI build, where it goes, and which
runtime a job will use, for ``setup.sh``, the dry run and the trainer.

    python -m hpc.job.vllm_runtime requirements DIR   # writes DIR/requirements.txt and DIR/overrides.txt
    python -m hpc.job.vllm_runtime status             # what a job on this cluster would use
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from hpc.job.exit_codes import EXIT_BAD_INPUT

RUNTIME_SERVER = "art-vllm-runtime-server"
ART_DEFAULT_CACHE = Path("/tmp/art-cache/vllm_runtime")  # art.utils.cache_dirs: node-local
_WHEEL_URL = re.compile(r"^(?P<name>vllm) @ \S*/vllm-(?P<version>[0-9][^-+%]*)")
CUDA_EXTRA = "cuda12"  # the CUDA 12 build: what the clusters' drivers run today


@dataclass(frozen=True)
class Bundle:
    """The runtime project ART ships inside its wheel (art/_vllm_runtime)."""

    path: Path
    manifest: dict

    @property
    def wheel(self) -> Path:
        return self.path / self.manifest["runtime_wheel"]


def find_bundle() -> Bundle | None:
    """ART's runtime bundle, located without importing art (None where ART is not installed)."""
    spec = importlib.util.find_spec("art")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "_vllm_runtime"
    manifest = path / "manifest.json"
    return Bundle(path, json.loads(manifest.read_text())) if manifest.is_file() else None


def pypi_requirements(bundle: Bundle) -> tuple[list[str], list[str]]:
    """The runtime's pinned requirements with every package from PyPI (vLLM's wheel URL
    becomes ``vllm==<its version>``), and uv's override list from the bundle."""
    project = tomllib.loads((bundle.path / "pyproject.toml").read_text())
    requirements = []
    for line in [*project["project"]["dependencies"], *project["project"]["optional-dependencies"][CUDA_EXTRA]]:
        pinned = line.split(";")[0].strip()
        url = _WHEEL_URL.match(pinned)
        requirements.append(f"{url['name']}=={url['version']}" if url else pinned)
    overrides = list(project.get("tool", {}).get("uv", {}).get("override-dependencies", []))
    return requirements, overrides


def write_requirements(bundle: Bundle, out: Path) -> Path:
    """``out/requirements.txt`` (the PyPI build's requirements and ART's runtime wheel) and
    ``out/overrides.txt``; returns the first."""
    requirements, overrides = pypi_requirements(bundle)
    out.mkdir(parents=True, exist_ok=True)
    (out / "requirements.txt").write_text("\n".join([*requirements, str(bundle.wheel)]) + "\n")
    (out / "overrides.txt").write_text("\n".join(overrides) + "\n")
    return out / "requirements.txt"


TORCH_FAMILY = ("torch", "torchvision", "torchaudio")


def torch_pins(bundle: Bundle) -> list[str]:
    """torch and the torchvision and torchaudio releases built for it, as ART's runtime pins
    them. The backend's torch override needs all three: resolved alone, a newer torchvision
    (built for a newer torch) comes along and fails at import ('torchvision::nms does not exist')."""
    requirements, _ = pypi_requirements(bundle)
    return [line for line in requirements if line.split("==")[0] in TORCH_FAMILY]


_ART_TORCH = re.compile(r"torch==([^+;\s]+)")


def art_backend_torch() -> str:
    """The torch release ART's [backend] extra pins, without its ``+cu128`` label: that build
    is on PyTorch's own index only, and PyPI's build of the same release takes its place."""
    import importlib.metadata  # here, not at the top: it costs a dry run 15 ms (email, zipfile, csv)

    for requirement in importlib.metadata.requires("openpipe-art") or []:
        match = _ART_TORCH.match(requirement)
        if match and "backend" in requirement:
            return match.group(1)
    raise LookupError("openpipe-art's [backend] extra pins no torch")


def backend_torch_overrides(bundle: Bundle) -> list[str]:
    """uv's overrides for PyPI's torch in place of ART's ``+cu128`` pin: torch at ART's backend
    release, with the torchvision and torchaudio ``torch_pins`` gives for it."""
    return [f"torch=={art_backend_torch()}", *(pin for pin in torch_pins(bundle) if not pin.startswith("torch=="))]


def cache_dir(env: Mapping[str, str]) -> Path:
    """Where runtimes are built and looked for (ART_VLLM_RUNTIME_CACHE_DIR, else ART's default)."""
    value = env.get("ART_VLLM_RUNTIME_CACHE_DIR")
    return Path(value).expanduser() if value else ART_DEFAULT_CACHE


def pypi_runtime_dir(env: Mapping[str, str], arch: str | None = None) -> Path:
    """The PyPI build's directory: one per CPU architecture, beside ART's managed ones."""
    return cache_dir(env) / f"pypi-{arch or platform.machine()}"


def server(runtime_dir: Path) -> Path:
    return runtime_dir / ".venv" / "bin" / RUNTIME_SERVER


def managed_runtime(env: Mapping[str, str], bundle: Bundle | None) -> Path | None:
    """ART's own managed runtime in the cache, built for this ART (its install.json marker)."""
    root = cache_dir(env)
    if bundle is None or not root.is_dir():
        return None
    for marker in sorted(root.glob("*/install.json")):
        try:
            wheel_sha = json.loads(marker.read_text()).get("runtime_wheel_sha256")
        except (OSError, ValueError):
            continue
        if wheel_sha == bundle.manifest.get("runtime_wheel_sha256") and server(marker.parent).is_file():
            return server(marker.parent)
    return None


@dataclass(frozen=True)
class Choice:
    """The runtime server a job will use, and how it was found."""

    server: Path | None
    how: str


def choose(env: Mapping[str, str], arch: str | None = None, bundle: Bundle | None = None) -> Choice:
    """ART_VLLM_RUNTIME_BIN if set; else ART's managed runtime; else our PyPI build."""
    if env.get("ART_VLLM_RUNTIME_BIN"):
        path = Path(env["ART_VLLM_RUNTIME_BIN"].split()[0]).expanduser()
        return Choice(path if path.is_file() else None, "ART_VLLM_RUNTIME_BIN")
    bundle = bundle or find_bundle()
    if (arch or platform.machine()) == "x86_64" and (found := managed_runtime(env, bundle)):
        return Choice(found, "ART's managed runtime")
    pypi = server(pypi_runtime_dir(env, arch))
    return Choice(pypi if pypi.is_file() else None, "PyPI build")


def describe(env: Mapping[str, str], arch: str) -> str:
    """One line for the dry run: which runtime the job will use, or how to build it."""
    choice = choose(env, arch)
    root = cache_dir(env)
    local = " (node-local: set ART_VLLM_RUNTIME_CACHE_DIR on the shared filesystem)" if root == ART_DEFAULT_CACHE else ""
    if choice.server is not None:
        return f"{choice.how} at {choice.server}"
    if choice.how == "ART_VLLM_RUNTIME_BIN":
        return f"MISSING: ART_VLLM_RUNTIME_BIN={env['ART_VLLM_RUNTIME_BIN']} does not exist"
    return (f"not built in {root}{local}: run `bash setup.sh --backend` on the login node "
            f"(the first job would otherwise build it, which an offline node cannot)")


# vLLM 0.25.1 runs dense models (Qwen2) on its new "V2" model runner, where the patch of ART's
# runtime that tracks each request's policy (art_vllm_runtime.policy_spans) fails during vLLM's
# start-up profiling: KeyError 'req_0_...', on H200s, in ART's training runtime and in a judge
# served with the runtime's own `vllm serve`. The V1 runner works with the patch,
# so every vLLM the project starts gets it, unless the user set the variable.
RUNNER_DEFAULTS = {"VLLM_USE_V2_MODEL_RUNNER": "0"}


def with_runner_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus RUNNER_DEFAULTS where it sets none of them."""
    return {**RUNNER_DEFAULTS, **env}


def job_runtime_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the trainer adds to its environment so ART finds the PyPI build (ART looks only
    for its managed runtime unless ART_VLLM_RUNTIME_BIN names another)."""
    choice = choose(env)
    if choice.server is not None and choice.how == "PyPI build":
        return {"ART_VLLM_RUNTIME_BIN": str(choice.server)}
    return {}


def art_runtime_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a process that starts ART's vLLM runtime (trainer.train, trainer/proof/baseline_loop.py)
    adds to its environment: RUNNER_DEFAULTS where ``env`` sets none, and the PyPI build's
    location (``job_runtime_env``)."""
    runner = {name: value for name, value in RUNNER_DEFAULTS.items() if name not in env}
    return {**runner, **job_runtime_env(env)}


# -- TileLang's CUDA runtime stub ------------------------------------------------------

SHIM_DIR = Path("nvidia") / "cudart_shim" / "lib"  # ART puts <runtime site-packages>/nvidia/*/lib on LD_LIBRARY_PATH
STUB = "libcudart_stub.so"
# run by the runtime's Python: the CUDA runtime its torch loads, as the process maps it
_LOADED_CUDART = """import torch, re
torch.cuda.is_available()
paths = {line.split()[-1] for line in open('/proc/self/maps') if re.search(r'/libcudart\\.so[.0-9]*$', line.strip())}
print('\\n'.join(sorted(paths)))"""


def cudart_shim(site_packages: Path, cudart: Path) -> Path:
    """Make TileLang's CUDA runtime stub resolve to the real runtime in ART's vLLM runtime.

    vLLM 0.25.1 needs TileLang (ART's runtime patches import its kernels), whose libraries
    link ``libcudart_stub.so``, a stub exporting 39 of the runtime's functions. vLLM finds
    "the" CUDA runtime as the first mapping whose name starts with ``libcudart`` and the stub,
    loaded last, comes first: its sleep mode then fails at start-up ("undefined symbol:
    cudaDeviceReset" on an H200). A ``libcudart_stub.so`` that is the real
    runtime, in a folder ART puts first on the runtime's ``LD_LIBRARY_PATH``, wins over the
    stub (TileLang's libraries find it through RUNPATH, which comes after LD_LIBRARY_PATH);
    the loader sees the runtime torch already loaded and maps nothing new."""
    folder = site_packages / SHIM_DIR
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / STUB
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(cudart)
    return link


def loaded_cudart(python: str) -> Path | None:
    """The CUDA runtime the runtime Python's torch loads (None: linked statically, or no GPU driver)."""
    result = subprocess.run([python, "-c", _LOADED_CUDART], capture_output=True, text=True)
    paths = result.stdout.split() if result.returncode == 0 else []
    return Path(paths[0]) if paths else None


def shim_runtime(python: str) -> str:
    """``cudart_shim`` for the runtime of ``python``, where TileLang is installed; one line saying what."""
    probe = "import sysconfig, importlib.util as u; print(sysconfig.get_path('purelib')); print(bool(u.find_spec('tilelang')))"
    site_packages, has_tilelang = subprocess.run([python, "-c", probe], capture_output=True, text=True,
                                                 check=True).stdout.split()
    if has_tilelang != "True":
        return "TileLang is not installed in the runtime: no CUDA runtime shim needed"
    cudart = loaded_cudart(python)
    if cudart is None:
        return "the runtime's torch maps no libcudart (static, or no driver here): no CUDA runtime shim"
    return f"TileLang's {STUB} resolves to {cudart} ({cudart_shim(Path(site_packages), cudart)})"


# -- command line --------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpc.job.vllm_runtime", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("requirements", help="write requirements.txt and overrides.txt of the PyPI build").add_argument(
        "out", type=Path)
    sub.add_parser("status", help="which runtime a job here would use")
    sub.add_parser("pypi-dir", help="the PyPI build's directory for this machine")
    sub.add_parser("art-torch-pin", help="the torch release ART's [backend] extra pins")
    sub.add_parser("torch-overrides", help="uv's overrides for PyPI's torch in place of ART's +cu128 pin")
    sub.add_parser("shim", help="TileLang's CUDA runtime stub resolves to the real one in a runtime").add_argument(
        "python", help="the runtime's Python")
    args = parser.parse_args(argv)
    if args.command == "status":
        print(describe(os.environ, platform.machine()))
        return 0
    if args.command == "shim":
        print(shim_runtime(args.python))
        return 0
    if args.command == "pypi-dir":
        print(pypi_runtime_dir(os.environ))
        return 0
    bundle = find_bundle()
    if bundle is None:
        print("hpc.job.vllm_runtime: ART (openpipe-art) is not installed here: no runtime bundle to read",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.command in ("art-torch-pin", "torch-overrides"):
        print(art_backend_torch() if args.command == "art-torch-pin" else "\n".join(backend_torch_overrides(bundle)))
        return 0
    print(write_requirements(bundle, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
