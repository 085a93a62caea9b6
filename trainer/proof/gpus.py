"""The node's GPUs as nvidia-smi reports them: their indices, memory totals and use (sampled each
second for a stage's peaks), and the ``--gpus`` list a command line names them by. Every reading
is empty, never an error, where nvidia-smi fails, so the CPU tests drive it with a double."""

from __future__ import annotations

import argparse
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Self

from hpc.digits import is_count


def parse_gpu_memory(output: str) -> dict[str, int]:
    """``nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits``: MiB by GPU index."""
    used = {}
    for line in output.splitlines():
        index, _, mib = line.partition(",")
        if index.strip().isdigit() and mib.strip().isdigit():
            used[index.strip()] = int(mib.strip())
    return used


def nvidia_smi(*args: str) -> str:
    """nvidia-smi's output, "" where it fails or is missing (a reading is then empty, never an error)."""
    try:
        result = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def node_gpus() -> list[str]:
    """The indices of this node's GPUs (nvidia-smi), [] without one."""
    return list(parse_gpu_memory(nvidia_smi("--query-gpu=index,memory.total", "--format=csv,noheader,nounits")))


def gpu_total_gib(index: str) -> float:
    """The GPU's memory as nvidia-smi (and torch, and vLLM) count it, in GiB."""
    total = nvidia_smi("--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", index).strip()
    return float(total or 0) / 1024


@dataclass
class MemorySampler:
    """nvidia-smi's used memory of each GPU, each second, in a thread: the peaks of a stage."""

    peaks_mib: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Self:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def sample(self) -> dict[str, int]:
        """One reading: MiB used by GPU index (the peaks keep the largest of each)."""
        used = parse_gpu_memory(nvidia_smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits"))
        for index, mib in used.items():
            self.peaks_mib[index] = max(mib, self.peaks_mib.get(index, 0))
        return used

    def peak_gib(self, index: str) -> float:
        return self.peaks_mib.get(index, 0) / 1024



def gpu_list(text: str, most: int | None = None) -> list[str]:
    """``--gpus 0,1``: distinct GPU indices as nvidia-smi numbers them, at most ``most`` of them."""
    gpus = [item.strip() for item in text.split(",") if item.strip()]
    if not gpus or not all(map(is_count, gpus)) or len(set(gpus)) != len(gpus) or len(gpus) > (most or len(gpus)):
        accepted = "distinct GPU indices" if most is None else f"1 to {most} distinct GPU indices"
        raise argparse.ArgumentTypeError(f"invalid --gpus {text!r}: accepted {accepted}, such as 0,1")
    return gpus
