"""Packing runs onto nodes, and who uses which GPU (login side; stdlib only).

On clusters that charge nodes whole (JURECA, JUPITER and JUWELS Booster: 4 GPUs;
Lonestar6: 3), a job that asks for one GPU pays for all of them. A pack job runs
several runs of a sweep at once instead: with G GPUs per node, g per run and J
for a judge served in the job, ``floor((G - J) / g)`` runs, each pinned to its
own GPUs (``CUDA_VISIBLE_DEVICES``), its own vLLM port and its own logs. The
in-job side (hpc/job/pack.py) assigns the GPUs when the job starts, to the runs that
are still unfinished then, so a finished run leaves its GPU idle only until the
next job of the pack.

``--pack auto`` packs where the cluster charges whole nodes, and not elsewhere;
``--pack N`` packs N runs per job anywhere they fit (the local cluster's nodes
have 2 fake GPUs, which is how the tests pack); ``--pack off`` never packs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, TypeVar

from hpc.digits import is_count
from hpc.errors import UsageError
from hpc.job.gpu_modes import GpuMode
from hpc.launcher.clusters import Cluster, Registry

T = TypeVar("T")
PACK_WORDS = ("auto", "off")


@dataclass(frozen=True)
class GpuUse:
    """How one job of a run (or of a pack of runs) uses its node's GPUs."""

    runs: int  # runs in the job
    gpus_per_run: int
    judge_gpus: int
    gpus_per_node: int  # the node's GPUs
    whole_nodes: bool
    gpu_mode: str | None = None  # shared | dedicated (hpc/launcher/gpus.py); None: not the trainer

    @property
    def requested(self) -> int:
        return self.runs * self.gpus_per_run + self.judge_gpus

    @property
    def charged(self) -> int:
        return self.gpus_per_node if self.whole_nodes else self.requested

    def run_devices(self, slot: int) -> list[int]:
        """The GPU indices (into the job's visible GPUs) of the run in ``slot``."""
        return list(range(slot * self.gpus_per_run, (slot + 1) * self.gpus_per_run))

    def judge_devices(self) -> list[int]:
        """The judge takes the GPUs after the runs'."""
        first = self.runs * self.gpus_per_run
        return list(range(first, first + self.judge_gpus))


def parse_pack(text: str) -> int | str:
    """``auto``, ``off`` or a positive number of runs per job."""
    if text in PACK_WORDS:
        return text
    if is_count(text) and int(text) >= 1:
        return int(text)
    raise UsageError(f"invalid --pack {text!r}: accepted auto, off, or a number of runs per job (1 or more)")


def runs_per_job(pack: int | str, cluster: Cluster, gpus_per_run: int, judge_gpus: int) -> int:
    """How many runs one job holds: ``--pack`` resolved against the node's GPUs."""
    room = cluster.gpus_per_node - judge_gpus
    fits = room // gpus_per_run if gpus_per_run else 1
    if fits < 1:
        raise UsageError(f"a run needs {gpus_per_run} GPU(s) and the judge {judge_gpus}, but a {cluster.name} node "
                         f"has {cluster.gpus_per_node}: use fewer --judge_gpus, or --train_arg gpu_mode=shared")
    if pack == "off":
        return 1
    if pack == "auto":
        return fits if cluster.whole_nodes else 1
    if pack > fits:  # type: ignore[operator]
        raise UsageError(f"invalid --pack {pack}: a {cluster.name} node has {cluster.gpus_per_node} GPUs, which "
                         f"hold at most {fits} run(s) of {gpus_per_run} GPU(s)"
                         + (f" beside a judge on {judge_gpus}" if judge_gpus else ""))
    return int(pack)


def group(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive groups of ``size`` (the last may be smaller)."""
    return [list(items[k:k + size]) for k in range(0, len(items), size)]


def describe(use: GpuUse, names: Sequence[str] = ()) -> str:
    """The dry run's GPU line: charged, used, and which GPU does what."""
    charged = (f"{use.charged} charged ({use.gpus_per_node}-GPU nodes are charged whole)" if use.whole_nodes
               else f"{use.charged} charged")
    parts = [f"{use.requested} used"]
    for slot in range(use.runs):
        parts += run_parts(use, slot, names[slot] if slot < len(names) else f"run {slot + 1}")
    if use.judge_gpus:
        parts.append(f"GPU {','.join(map(str, use.judge_devices()))}: judge")
    idle = use.charged - use.requested
    if idle > 0:
        parts.append(f"{idle} idle")
    return f"{charged}; " + "; ".join(parts)


def run_parts(use: GpuUse, slot: int, who: str) -> list[str]:
    """What one run's GPUs do: training and vLLM take turns (shared), or one each (dedicated)."""
    devices = use.run_devices(slot)
    if use.gpu_mode == GpuMode.DEDICATED and len(devices) >= 2:
        return [f"GPU {devices[0]}: {who} training", f"GPU {','.join(map(str, devices[1:]))}: {who} vLLM"]
    what = " (training and vLLM)" if use.gpu_mode == GpuMode.SHARED else ""
    return [f"GPU {','.join(map(str, devices))}: {who}{what}"]


def table(registry: Registry) -> str:
    """The packing table of docs/sweeps.md: each cluster's GPUs, how it charges them, and how --pack auto packs
    runs of its default gpu_mode there (``python -m hpc.launcher.packing`` prints it)."""
    from hpc.launcher.gpus import GPUS_PER_RUN

    rows = ["| cluster | GPUs per node | charged | default gpu_mode (GPUs per run) | runs per job (--pack auto) "
            "| with a judge on 1 GPU |", "| --- | --- | --- | --- | --- | --- |"]
    for c in registry.clusters.values():
        per_run = GPUS_PER_RUN[c.gpu_mode]
        with_judge = _fits(c, per_run, 1)
        rows.append(f"| {c.name} | {c.gpus_per_node} x {c.gpu_memory_gb} GB | "
                    f"{'whole nodes' if c.whole_nodes else 'GPUs asked for'} | {c.gpu_mode} ({per_run}) | "
                    f"{_fits(c, per_run, 0)} | {with_judge} |")
    return "\n".join(rows)


def _fits(cluster: Cluster, per_run: int, judge: int) -> str:
    try:
        return str(runs_per_job("auto", cluster, per_run, judge))
    except UsageError:
        return "no room"


if __name__ == "__main__":
    from hpc.launcher.clusters import load_registry

    print(table(load_registry()))
