"""How a run uses its node's GPUs, decided at launch: the GPU mode, GPUs asked for, and
whether the config fits (hpc/launcher/gpu_memory.py). Login-node side; stdlib + PyYAML."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpc.errors import UsageError
from hpc.job.gpu_modes import AUTO, GpuMode
from hpc.launcher.clusters import Cluster
from hpc.launcher.gpu_memory import Plan, check_fit
from hpc.launcher.trainer_config import vllm_share

if TYPE_CHECKING:
    from hpc.launcher.trainer_config import TrainerConfig

GPUS_PER_RUN: dict[str, int] = {GpuMode.SHARED: 1, GpuMode.DEDICATED: 2}


@dataclass(frozen=True)
class GpuPlan:
    """What the job asks for and tells the trainer about GPUs."""

    gpus_per_node: int
    gpu_mode: str | None  # None: the workload is not the trainer (test workloads)
    extra_train_args: tuple[str, ...] = ()  # gpu_mode=<cluster default> when the config says auto
    fit: str | None = None  # the memory estimate, for the dry run

    def describe(self) -> str:
        if self.gpu_mode is None:
            return f"{self.gpus_per_node} per node"
        use = ("vLLM and training take turns on one GPU" if self.gpu_mode == GpuMode.SHARED
               else "training on the first GPU, vLLM on the second")
        return f"{self.gpus_per_node} per node, gpu_mode {self.gpu_mode} ({use}); memory: {self.fit}"


def plan_gpus(requested: int | None, cluster: Cluster, trainer: "TrainerConfig | None") -> GpuPlan:
    """Resolve ``gpu_mode: auto`` to the cluster's default, size the GPU request to the mode,
    and refuse a config whose estimate does not fit the cluster's GPUs."""
    if trainer is None:
        return GpuPlan(check_gpus(1 if requested is None else requested, cluster), None)
    mode = cluster.gpu_mode if trainer.gpu_mode == AUTO else trainer.gpu_mode
    extra = (f"gpu_mode={mode}",) if trainer.gpu_mode == AUTO else ()
    per_run = GPUS_PER_RUN[mode]
    gpus = check_gpus(per_run if requested is None else requested, cluster)
    if gpus < per_run:
        raise UsageError(f"gpu_mode {mode} needs {per_run} GPUs per run, but --gpus_per_node is {gpus}: "
                         f"pass --gpus_per_node {per_run}, or --train_arg gpu_mode=shared")
    return GpuPlan(gpus, mode, extra, check_memory(trainer, mode, cluster))


def check_gpus(gpus: int, cluster: Cluster) -> int:
    if not 0 <= gpus <= cluster.gpus_per_node:
        raise UsageError(f"invalid --gpus_per_node {gpus}: accepted 0..{cluster.gpus_per_node} "
                         f"({cluster.name} has {cluster.gpus_per_node} GPUs per node)")
    return gpus


def check_memory(trainer: "TrainerConfig", mode: str, cluster: Cluster) -> str:
    """The estimate's line; a UsageError naming the ways that fit when it does not."""
    if trainer.backend != "local":
        return f"not estimated (backend {trainer.backend})"
    plan = Plan(cluster.gpu_memory_gb, mode, vllm_share(trainer, mode), trainer.max_seq_length, trainer.load_in_4bit)
    where = f"{cluster.gpu_memory_gb} GB GPUs of {cluster.name}"
    fit = check_fit(trainer.base_model, plan, cluster.gpus_per_node, where)
    if not fit.ok:
        raise UsageError(f"the config does not fit: {fit.line}; ways that fit: {' | '.join(fit.ways)}")
    return fit.line


# -- the fit table of docs/training.md ---------------------------------------------------


def fit_table(configs: tuple[str, ...] = ("agent_008", "smoke")) -> str:
    """A Markdown table: each cluster's GPU and what each config needs there (docs/training.md shows it)."""
    from hpc.launcher.clusters import load_registry
    from hpc.launcher.trainer_config import load_config

    head = "| cluster | GPU per node | default gpu_mode | " + " | ".join(configs) + " |"
    rows = [head, "|" + " --- |" * (3 + len(configs))]
    for cluster in load_registry().clusters.values():
        cells = []
        for name in configs:
            try:
                plan = plan_gpus(None, cluster, load_config(name))
                cells.append(f"fits ({plan.gpus_per_node} GPU{'s' if plan.gpus_per_node > 1 else ''})")
            except UsageError as refused:
                cells.append("refused; fits with " + str(refused).split("ways that fit: ")[1].split(" | ")[0])
        rows.append(f"| {cluster.name} | {cluster.gpus_per_node} x {cluster.gpu_memory_gb} GB | "
                    f"{cluster.gpu_mode} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(fit_table(), end="")
