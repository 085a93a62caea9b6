"""The cluster registry: `clusters.yaml` loaded into records, and host detection.

The table is data: adding a cluster is a YAML entry plus a dotenv file. This
module only checks that each entry has the fields the rest of the code relies
on, so a typo in the YAML fails at load time with the entry's name, not deep
inside rendering.
"""

from __future__ import annotations

import fnmatch
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from hpc import yamlfile
from hpc.errors import UsageError
from hpc.job.gpu_modes import CLUSTER_CHOICES, GpuMode
from hpc.job.workload_env import HPC_HOSTNAME
from hpc.launcher.timelimit import parse_time_limit

REGISTRY_FILE = Path(__file__).with_name("clusters.yaml")
FALLBACK_CLUSTER = "local"
CPU_ARCHS = ("x86_64", "aarch64")
GPU_GRES_MODES = ("gres", "none")


@dataclass(frozen=True)
class Cluster:
    """One row of the cluster table."""

    name: str
    description: str
    hostnames: tuple[str, ...]
    template: str
    partition: str | None
    account_var: str
    gpus_per_node: int
    gpu_memory_gb: int
    cpus_per_task: int
    gpu_gres: str
    cpu_arch: str
    max_time: str
    max_nodes: int
    internet: bool
    requeue: bool
    whole_nodes: bool  # nodes are allocated and charged whole: a job pays for every GPU of its nodes
    modules: tuple[str, ...]
    dotenv: str
    login_host: str | None = None
    ray_port: int = 6379
    gpu_mode: str = GpuMode.SHARED  # default for configs saying gpu_mode: auto (a GpuMode)
    notes: str = ""

    @property
    def max_minutes(self) -> int:
        return parse_time_limit(self.max_time)

    def matches(self, hostname: str) -> str | None:
        """The first hostname pattern that matches ``hostname``, if any."""
        for pattern in self.hostnames:
            if fnmatch.fnmatch(hostname.lower(), pattern.lower()):
                return pattern
        return None


@dataclass(frozen=True)
class Detection:
    """Which cluster was chosen, and a sentence saying why (shown in a dry run)."""

    cluster: Cluster
    reason: str


@dataclass
class Registry:
    clusters: dict[str, Cluster] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return list(self.clusters)

    def get(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            raise UsageError(
                f"unknown cluster {name!r}; known clusters: {', '.join(self.names)}"
            ) from None

    def detect(self, requested: str | None = None, hostname: str | None = None) -> Detection:
        """Pick the cluster: --cluster (an empty one is an unknown name, not "detect"), else the
        hostname's pattern, else `local`."""
        if requested is not None:
            return Detection(self.get(requested), f"--cluster {requested}")
        host, source = current_hostname() if hostname is None else (hostname, "given hostname")
        for cluster in self.clusters.values():
            pattern = cluster.matches(host)
            if pattern:
                return Detection(cluster, f"{source} {host!r} matches {pattern!r}")
        fallback = self.get(FALLBACK_CLUSTER)
        return Detection(
            fallback,
            f"{source} {host!r} matches no known cluster; falling back to {FALLBACK_CLUSTER!r}",
        )


def current_hostname() -> tuple[str, str]:
    """The hostname used for detection and where it came from (HPC_HOSTNAME wins)."""
    override = os.environ.get(HPC_HOSTNAME)
    if override:
        return override, HPC_HOSTNAME
    return qualified_hostname(), "hostname"


def qualified_hostname() -> str:
    """The fully qualified name where the resolver knows one, else the plain name.

    getfqdn() can answer "localhost" on machines whose /etc/hosts maps the
    host to 127.0.0.1; only a name that extends the short one is accepted."""
    short = socket.gethostname()
    if "." in short:
        return short
    fqdn = socket.getfqdn(short)
    return fqdn if fqdn.startswith(short + ".") else short


def load_registry(path: Path = REGISTRY_FILE) -> Registry:
    """Read and check the cluster table."""
    raw = yamlfile.load(path.read_text()) or {}
    entries = raw.get("clusters")
    if not isinstance(entries, dict) or not entries:
        raise ValueError(f"{path}: expected a top-level 'clusters:' mapping")
    registry = Registry({name: _cluster_from_entry(name, entry, path) for name, entry in entries.items()})
    if FALLBACK_CLUSTER not in registry.clusters:
        raise ValueError(f"{path}: the fallback cluster {FALLBACK_CLUSTER!r} must be defined")
    return registry


def _cluster_from_entry(name: str, entry: dict, path: Path) -> Cluster:
    where = f"{path}: cluster {name!r}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a mapping")
    try:
        cluster = Cluster(
            name=name,
            description=str(entry.get("description", name)),
            hostnames=tuple(entry["hostnames"] or ()),
            template=entry["template"],
            partition=entry["partition"],
            account_var=entry["account_var"],
            gpus_per_node=int(entry["gpus_per_node"]),
            gpu_memory_gb=int(entry["gpu_memory_gb"]),
            cpus_per_task=int(entry["cpus_per_task"]),
            gpu_gres=entry["gpu_gres"],
            cpu_arch=entry["cpu_arch"],
            max_time=str(entry["max_time"]),
            max_nodes=int(entry["max_nodes"]),
            internet=bool(entry["internet"]),
            requeue=bool(entry["requeue"]),
            whole_nodes=bool(entry["whole_nodes"]),
            modules=tuple(entry["modules"] or ()),
            dotenv=entry["dotenv"],
            login_host=entry.get("login_host"),
            ray_port=int(entry.get("ray_port", 6379)),
            gpu_mode=entry.get("gpu_mode", GpuMode.SHARED),
            notes=str(entry.get("notes", "")),
        )
    except KeyError as missing:
        raise ValueError(f"{where}: missing field {missing}") from None
    if cluster.cpu_arch not in CPU_ARCHS:
        raise ValueError(f"{where}: cpu_arch {cluster.cpu_arch!r} not one of {CPU_ARCHS}")
    if cluster.gpu_mode not in CLUSTER_CHOICES:
        raise ValueError(f"{where}: gpu_mode {cluster.gpu_mode!r} not one of {CLUSTER_CHOICES}")
    if cluster.gpu_gres not in GPU_GRES_MODES:
        raise ValueError(f"{where}: gpu_gres {cluster.gpu_gres!r} not one of {GPU_GRES_MODES}")
    _ = cluster.max_minutes  # validates max_time (the property raises on a bad one)
    return cluster
