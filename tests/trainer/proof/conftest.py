"""The GPU proof tests' fixtures: an nvidia-smi double for the proof's readings (the staged
fixture corpus and the real-backend Python come from tests/trainer/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NVIDIA_SMI = """#!/usr/bin/env python3
import json, sys
state = json.load(open({state!r}))
query = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--query")), "")
if query == "index,memory.used":
    print("0, %d" % state["used_mib"])
elif query == "index,memory.total":
    print("0, %d" % state["total_mib"])
elif query == "memory.total":
    print(state["total_mib"])
elif query == "name":
    print(state["name"])
elif query == "uuid":
    print("GPU-0")
elif query.startswith("gpu_uuid,pid"):
    for pid, name, mib in state["apps"]:
        print("GPU-0, %s, %s, %d" % (pid, name, mib))
elif query.startswith("index,name,memory.total"):
    print("0, %s, %d MiB, 580.0" % (state["name"], state["total_mib"]))
"""


class FakeGpu:
    """An nvidia-smi on PATH that reports one GPU whose memory a test sets as it goes."""

    def __init__(self, folder: Path, total_mib: int = 143771, name: str = "NVIDIA H200") -> None:
        self.state_file = folder / "nvidia-smi.json"
        self.state = {"total_mib": total_mib, "used_mib": 0, "name": name, "apps": []}
        self.save()
        script = folder / "nvidia-smi"
        script.write_text(NVIDIA_SMI.format(state=str(self.state_file)))
        script.chmod(0o755)

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state))

    def set(self, used_mib: int, apps: list[tuple[str, str, int]] = ()) -> None:
        self.state.update(used_mib=used_mib, apps=list(apps))
        self.save()


@pytest.fixture
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    folder = tmp_path / "fake-gpu"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}:{__import__('os').environ['PATH']}")
    return FakeGpu(folder)
