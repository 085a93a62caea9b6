"""Where a serve job listens, and the command that reaches it from a laptop.

``python -m trainer.serve`` (in a job) writes ``<run>/serve/address.json``; the
login-node side reads it here: ``scripts/status.sh`` and ``trainer.ask`` print or use
it. Stdlib only.
"""

from __future__ import annotations

from typing import Any

from hpc.run.fields import ADDRESS
from hpc.run.rundir import RunDir

LOCALHOSTS = ("127.0.0.1", "localhost", "::1")


def address_of(run: RunDir) -> dict[str, Any] | None:
    """Where the serve job listens (host, port, node), or None: none yet, or unreadable (skipped, named)."""
    return run.read_object(run.serve_dir / "address.json", ADDRESS)


def ssh_line(address: dict[str, Any], login_host: str, local_port: int = 8080) -> str:
    """The ssh command that forwards ``local_port`` on a laptop to the service, through the
    login node: to the node's loopback (a jump to the node, where Slurm lets a job's owner
    log in) when the service listens on localhost, else to the node's port (token required)."""
    if address["host"] in LOCALHOSTS:
        return (f"ssh -L {local_port}:127.0.0.1:{address['port']} -J {login_host} {address['node']}  "
                f"# then http://localhost:{local_port}/invoke")
    return (f"ssh -L {local_port}:{address['node']}:{address['port']} {login_host}  "
            f"# then http://localhost:{local_port}/invoke with the token in the run's serve/token")
