"""Outbound network of jobs on clusters whose compute nodes have no internet.

Such clusters (``internet: false`` in hpc/launcher/clusters.yaml) reach the judge API
through an SSH SOCKS tunnel from the job's first node to a login node
(sbatch/_offline_network.sh.j2). Its settings come from the merged dotenv
(TUNNEL_HOST, TUNNEL_PORT, TUNNEL_SSH_OPTS, TUNNEL_TIMEOUT) and are checked
here, at launch, so that a typo costs one line and exit code 2 rather than a
job that waits in the queue for a day and then fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpc.errors import UsageError
from hpc.launcher.clusters import Cluster
from hpc.launcher.envfiles import MergedEnv

DEFAULT_PORT = 1080
DEFAULT_TIMEOUT = 30
# [user@]host: a DNS name or an IPv4 address; no options, spaces or shell words.
HOST_RE = re.compile(r"([A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*")


@dataclass(frozen=True)
class Tunnel:
    """The SOCKS tunnel a job opens on its first node for the workload's HTTP traffic."""

    host: str  # [user@]host to ssh to (a login node)
    port: int  # SOCKS port on the compute node's loopback
    ssh_opts: str  # extra ssh options, split on whitespace by the job
    timeout: int  # seconds the job waits for the tunnel before it fails


def tunnel_for(cluster: Cluster, env: MergedEnv) -> Tunnel | None:
    """The tunnel a job on ``cluster`` needs, or None: compute nodes with
    internet need none, and neither does a judge served inside the cluster
    (JUDGE_API_BASE), the only outbound traffic of a job with HF and W&B offline."""
    if cluster.internet or env.get("JUDGE_API_BASE"):
        return None
    host = env.get("TUNNEL_HOST") or cluster.login_host or ""
    if not host:
        raise UsageError(
            f"{cluster.name}'s compute nodes have no internet and no host to tunnel through: set TUNNEL_HOST "
            f"in dotenv/{cluster.dotenv} (or login_host in hpc/launcher/clusters.yaml), or JUDGE_API_BASE for a judge "
            "served inside the cluster"
        )
    if not HOST_RE.fullmatch(host):
        raise UsageError(f"invalid TUNNEL_HOST {host!r}: expected a host name or [user@]host (letters, digits, . _ -)")
    return Tunnel(
        host=host,
        port=env.int_setting("TUNNEL_PORT", DEFAULT_PORT, 1024, 65535),
        ssh_opts=env.get("TUNNEL_SSH_OPTS") or "",
        timeout=env.int_setting("TUNNEL_TIMEOUT", DEFAULT_TIMEOUT, 1, 3600),
    )

