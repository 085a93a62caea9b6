"""hpc.job.vllm_runtime: the PyPI build of ART's vLLM runtime (its requirements, and that they
resolve for aarch64, where ART's own lockfile cannot), and which runtime a job finds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hpc.job import vllm_runtime as rt

BUNDLE = rt.find_bundle()
needs_art = pytest.mark.skipif(BUNDLE is None, reason="openpipe-art is not installed")


@needs_art
def test_the_pypi_build_pins_arts_versions_with_vllm_from_pypi() -> None:
    requirements, overrides = rt.pypi_requirements(BUNDLE)
    assert "vllm==0.25.1" in requirements and "torch==2.11.0" in requirements
    assert not [r for r in requirements if "://" in r], "no URL: every package comes from PyPI"
    assert "transformers==5.12.1" in overrides


@needs_art
@pytest.mark.parametrize("platform", ["aarch64-manylinux_2_34", "x86_64-manylinux_2_34"])  # glibc of RHEL 9
def test_the_runtime_resolves_from_pypi_wheels_for_gh200_and_x86(platform: str, tmp_path: Path, pypi: None) -> None:
    assert rt.main(["requirements", str(tmp_path)]) == 0
    lock = tmp_path / "lock.txt"
    uv = Path(sys.executable).with_name("uv")
    result = subprocess.run([str(uv), "pip", "compile", "--python-platform", platform, "--python-version", "3.12",
                             "--only-binary", ":all:", "--override", str(tmp_path / "overrides.txt"),
                             str(tmp_path / "requirements.txt"), "-o", str(lock), "--quiet"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    pins = set(lock.read_text().split())
    assert {"vllm==0.25.1", "torch==2.11.0", "transformers==5.12.1"} <= pins


def test_no_runtime_yet_says_how_to_build_it_and_warns_about_a_node_local_cache(tmp_path: Path) -> None:
    assert "not built in /tmp/art-cache/vllm_runtime (node-local" in rt.describe({}, "x86_64")
    line = rt.describe({"ART_VLLM_RUNTIME_CACHE_DIR": str(tmp_path)}, "x86_64")
    assert line.startswith(f"not built in {tmp_path}: run `bash setup.sh --backend`")


def make_server(path: Path) -> Path:
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@needs_art
def test_arts_managed_runtime_is_found_by_its_marker_on_x86_only(tmp_path: Path) -> None:
    runtime = tmp_path / ("a" * 64)
    server = make_server(rt.server(runtime))
    (runtime / "install.json").write_text(json.dumps({"runtime_wheel_sha256": BUNDLE.manifest["runtime_wheel_sha256"]}))
    env = {"ART_VLLM_RUNTIME_CACHE_DIR": str(tmp_path)}
    assert rt.choose(env, "x86_64") == rt.Choice(server, "ART's managed runtime")
    assert rt.choose(env, "aarch64").server is None, "ART's lockfile pins an x86_64 vLLM wheel"
    (runtime / "install.json").write_text(json.dumps({"runtime_wheel_sha256": "another ART"}))
    assert rt.choose(env, "x86_64").server is None


def test_the_pypi_build_is_found_and_handed_to_art_through_ART_VLLM_RUNTIME_BIN(tmp_path: Path,
                                                                               monkeypatch) -> None:
    env = {"ART_VLLM_RUNTIME_CACHE_DIR": str(tmp_path)}
    server = make_server(rt.server(rt.pypi_runtime_dir(env, "aarch64")))
    assert rt.choose(env, "aarch64") == rt.Choice(server, "PyPI build")
    assert rt.describe(env, "aarch64") == f"PyPI build at {server}"
    monkeypatch.setattr(rt.platform, "machine", lambda: "aarch64")
    assert rt.job_runtime_env(env) == {"ART_VLLM_RUNTIME_BIN": str(server)}


def test_a_process_starting_arts_runtime_gets_the_pypi_build_and_the_v1_runner_unless_the_user_chose(
        tmp_path: Path, monkeypatch) -> None:
    env = {"ART_VLLM_RUNTIME_CACHE_DIR": str(tmp_path)}
    server = make_server(rt.server(rt.pypi_runtime_dir(env, "aarch64")))
    monkeypatch.setattr(rt.platform, "machine", lambda: "aarch64")
    assert rt.art_runtime_env(env) == {"VLLM_USE_V2_MODEL_RUNNER": "0", "ART_VLLM_RUNTIME_BIN": str(server)}
    assert rt.art_runtime_env({**env, "VLLM_USE_V2_MODEL_RUNNER": "1"}) == {"ART_VLLM_RUNTIME_BIN": str(server)}


def test_an_explicit_runtime_bin_wins_and_a_missing_one_is_said(tmp_path: Path) -> None:
    assert rt.describe({"ART_VLLM_RUNTIME_BIN": str(tmp_path / "nope")}, "aarch64").startswith("MISSING")
    server = make_server(tmp_path / "bin" / "server")
    env = {"ART_VLLM_RUNTIME_BIN": f"{server} --flag"}
    assert rt.choose(env, "aarch64") == rt.Choice(server, "ART_VLLM_RUNTIME_BIN")
    assert rt.job_runtime_env(env) == {}, "the user's choice is already in the environment"


def test_the_backends_torch_override_pairs_torch_with_the_torchvision_art_pins_for_it() -> None:
    bundle = rt.find_bundle()
    if bundle is None:
        pytest.skip("ART is not installed")
    pins = dict(line.split("==") for line in rt.torch_pins(bundle))
    assert set(pins) == {"torch", "torchvision", "torchaudio"}
    assert pins["torch"] == "2.11.0" and pins["torchvision"] == "0.26.0"
    assert rt.art_backend_torch() == "2.11.0", "ART's [backend] pins torch==2.11.0+cu128: the release, not the label"
    assert rt.backend_torch_overrides(bundle) == ["torch==2.11.0", "torchaudio==2.11.0", "torchvision==0.26.0"]


def test_tilelangs_cuda_runtime_stub_resolves_where_art_puts_the_runtime_libraries_first(tmp_path: Path) -> None:
    """ART prepends <runtime site-packages>/nvidia/*/lib to the runtime's LD_LIBRARY_PATH; a libcudart_stub.so
    there is found before TileLang's own (RUNPATH), so vLLM finds the real runtime (seen on an H200)."""
    cudart = tmp_path / "cu13" / "libcudart.so.13"
    cudart.parent.mkdir()
    cudart.write_bytes(b"\x7fELF")
    site = tmp_path / "site-packages"
    link = rt.cudart_shim(site, cudart)
    assert link == site / "nvidia" / "cudart_shim" / "lib" / "libcudart_stub.so"
    assert link.resolve() == cudart.resolve()
    assert link.parent in list((site / "nvidia").glob("*/lib"))  # ART's own glob
    assert rt.cudart_shim(site, cudart) == link  # again: replaced, not an error


def test_a_runtime_without_tilelang_needs_no_shim(tmp_path: Path) -> None:
    assert "TileLang is not installed" in rt.shim_runtime(sys.executable)
