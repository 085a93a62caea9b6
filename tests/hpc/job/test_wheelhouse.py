"""hpc.job.wheelhouse: the requirement sets, locked for an offline target and checked against the index; the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpc.job import vllm_runtime
from hpc.job.wheelhouse import (
    LEFT_OUT,
    RequirementSet,
    check_arch,
    glibc_needed,
    index_of,
    lacking_wheels,
    lock,
    main,
    platform_args,
    preferences,
    write_requirement_sets,
)
from hpc.job.wheelhouse_locks import Pin, WheelhouseError, read_pins

REPO = Path(__file__).resolve().parents[3]
UV = str(Path(sys.executable).with_name("uv"))
needs_art = pytest.mark.skipif(vllm_runtime.find_bundle() is None, reason="openpipe-art is not installed")


def test_the_targets_versions_become_preferences_without_build_labels() -> None:
    assert preferences({"torch": "2.11.0+cu130", "numpy": "2.5.2"}) == "numpy==2.5.2\ntorch==2.11.0\n"


def test_wheels_are_asked_for_the_targets_platform_and_python() -> None:
    args = platform_args("aarch64")
    assert "manylinux_2_28_aarch64" in args and "manylinux1_aarch64" not in args
    assert "manylinux2010_x86_64" in platform_args("x86_64") and "manylinux2010_aarch64" not in args
    assert args[-2:] == ["--only-binary", ":all:"] and "3.12" in args
    with pytest.raises(WheelhouseError, match="--arch 'arm64' is not a target this project builds for; accepted"):
        check_arch("arm64")


def test_a_pin_without_a_wheel_the_target_can_install_is_named_whatever_the_reason() -> None:
    files = {
        "placeholder": ["placeholder-0.0.0a0.tar.gz"],
        "other-arch": ["other_arch-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", "other_arch-1.0.tar.gz"],
        "other-python": ["other_python-1.0-cp313-cp313-manylinux_2_28_aarch64.whl"],
        "newer-glibc": ["newer_glibc-1.0-cp312-cp312-manylinux_2_40_aarch64.whl"],
        "other-version": ["other_version-2.0-py3-none-any.whl"],
        "abi3": ["abi3-1.0-cp39-abi3-manylinux_2_34_aarch64.whl"],
        "legacy-tag": ["legacy_tag-1.0-cp312-cp312-manylinux2014_aarch64.whl", "legacy_tag-0.1-py36+-none-any.whl"],
        "pure": ["pure-1.0-py3-none-any.whl"],
    }
    pins = [Pin(name, "0.0.0a0" if name == "placeholder" else "1.0") for name in files] + [Pin("absent", "1.0")]
    lacking = [pin.name for pin in lacking_wheels(pins, "aarch64", files)]
    assert lacking == ["placeholder", "other-arch", "other-python", "newer-glibc", "other-version", "absent"]
    assert [pin.name for pin in lacking_wheels([Pin("other-arch", "1.0")], "x86_64", files)] == []


def test_a_wheelhouse_says_the_newest_glibc_its_wheels_need() -> None:
    wheels = [Path("a-1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
              Path("b-1-cp39-abi3-manylinux_2_34_x86_64.whl"), Path("c-1-py3-none-any.whl"),
              Path("d-1-cp312-cp312-manylinux1_x86_64.whl")]
    assert glibc_needed(wheels) == (2, 34)
    assert glibc_needed(wheels[:1]) == (2, 17) and glibc_needed([wheels[3]]) == (2, 5)
    assert glibc_needed(wheels[2:3]) is None


@needs_art
def test_the_sets_are_written_as_setup_installs_them_online_less_the_megatron_only_package(tmp_path: Path) -> None:
    backend, runtime = write_requirement_sets(tmp_path, REPO)
    assert backend.requirements.read_text() == f"-e {REPO}[frontend,backend]\n"
    assert backend.overrides.read_text().split() == vllm_runtime.backend_torch_overrides(vllm_runtime.find_bundle())
    assert "vllm==0.25.1" in runtime.requirements.read_text().split()
    assert backend.excludes == runtime.excludes
    assert backend.excludes.read_text().split()[0] == "nvidia-resiliency-ext" == next(iter(LEFT_OUT))


# -- against PyPI: metadata and resolutions only, no wheel downloaded ------------------------------------------


@needs_art
def test_both_sets_lock_to_wheels_pypi_has_for_x86_64_and_aarch64_without_downloading_one(tmp_path: Path,
                                                                                          pypi: None) -> None:
    """CI's guard for the offline clusters (JUPITER's GH200 nodes are aarch64): a lock that
    takes a source-only release or a placeholder fails here, not on the way to a cluster."""
    assert main(["check", str(tmp_path), "--uv", UV]) == 0
    expected = {"backend": {"openpipe-art", "unsloth", "torch"}, "runtime": {"vllm", "tilelang", "torch"}}
    for arch in ("x86_64", "aarch64"):
        for name, names in expected.items():
            pins = {pin.name for pin in read_pins((tmp_path / f"{name}-{arch}.lock").read_text())}
            assert names <= pins and not pins & set(LEFT_OUT), f"{name} ({arch}): {sorted(pins)}"
    assert not list(tmp_path.rglob("*.whl"))


def test_the_index_check_names_the_source_only_placeholder_and_passes_a_release_with_wheels(pypi: None) -> None:
    pins = [Pin("nvidia-resiliency-ext", "0.0.0a0"), Pin("nvidia-resiliency-ext", "0.4.1")]
    files = index_of(["nvidia-resiliency-ext"])
    assert lacking_wheels(pins, "aarch64", files) == [pins[0]] == lacking_wheels(pins, "x86_64", files)


def test_a_lock_never_takes_a_source_only_placeholder(tmp_path: Path, pypi: None) -> None:
    wanted = RequirementSet("probe", tmp_path / "probe.in", tmp_path / "overrides.txt", tmp_path / "left-out.txt")
    wanted.requirements.write_text("nvidia-resiliency-ext==0.0.0a0\n")
    wanted.overrides.write_text("")
    wanted.excludes.write_text("")
    with pytest.raises(WheelhouseError, match=r"^resolving the probe set for aarch64 failed: Because "
                                              r"nvidia-resiliency-ext==0\.0\.0a0 has no usable wheels and you require"):
        lock(UV, wanted, "aarch64", {}, tmp_path / "probe.lock")


def test_setup_refuses_a_folder_that_is_no_wheelhouse_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(["bash", str(REPO / "setup.sh"), "--from-wheelhouse", str(tmp_path)], capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"setup.sh: --from-wheelhouse {tmp_path} is not a wheelhouse (no backend.lock; "
                                     "make one with --wheelhouse)")
    result = subprocess.run(["bash", str(REPO / "setup.sh"), "--wheelhouse"], capture_output=True, text=True)
    assert result.returncode == 2 and "--wheelhouse needs a value" in result.stderr
