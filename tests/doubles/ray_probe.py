"""Test double of a multi-node workload: checks the job's Ray cluster.

Run by test jobs as `python -m tests.doubles.ray_probe --config X ...` on the
first node of a multi-node job (RAY_ADDRESS set by the job). It connects,
checks that PROBE_NODES (default: the job's node count) nodes are alive, runs
one task pinned to each node, and writes $HPC_RUN_DIR/ray_probe.<job>.<restart>.json:

    {"ray_address": ..., "driver_node": <SLURMD_NODENAME of this process>,
     "nodes": [{"node_id", "ip", "alive", "is_head", "cpus", "gpus"}...],
     "tasks": [{"node_id", "slurmd_nodename", "hostname", "pid"}...],
     "job_id": ..., "restart_count": ...}

PROBE_SLEEP=forever then keeps it running, deaf to USR1 and TERM, so that a
test can watch the job end by scancel or by its time limit. PROBE_STOP_FIRST=1
makes the first job of a run wait for its stop signal (USR1 before the time
limit, or TERM) and exit 75 like a trainer that saved its checkpoint (the run
continues): the Ray cluster must form again in the continuation. Otherwise the
probe marks the run done, as a trainer that finished.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME
from hpc.run.rundir import RunDir


def where_am_i() -> dict:
    """Runs as a Ray task: reports the Slurm node whose raylet started this worker."""
    return {
        "node_id": __import__("ray").get_runtime_context().get_node_id(),
        "slurmd_nodename": os.environ.get("SLURMD_NODENAME"),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
    }


def probe(expected: int) -> dict:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address="auto", log_to_driver=False)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    assert len(nodes) == expected, f"expected {expected} alive Ray nodes, found {len(nodes)}: {nodes}"
    remote = ray.remote(num_cpus=1)(where_am_i)
    refs = [
        remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote()
        for node in nodes
    ]
    tasks = ray.get(refs, timeout=120)
    return {
        "ray_address": os.environ.get("RAY_ADDRESS"),
        "driver_node": os.environ.get("SLURMD_NODENAME"),
        "nodes": [
            {
                "node_id": n["NodeID"],
                "ip": n["NodeManagerAddress"],
                "alive": n["Alive"],
                "is_head": "node:__internal_head__" in n.get("Resources", {}),
                "cpus": n.get("Resources", {}).get("CPU", 0),
                "gpus": n.get("Resources", {}).get("GPU", 0),
            }
            for n in nodes
        ],
        "tasks": tasks,
    }


STOP_SIGNALS: list[int] = []


def catch_stop_signals() -> None:
    """Note USR1 (the job's "stop before the limit") and TERM instead of dying of them."""
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: STOP_SIGNALS.append(signum))


def wait_for_stop_signal() -> None:
    while not STOP_SIGNALS:
        time.sleep(0.2)


def main() -> int:
    if os.environ.get("PROBE_STOP_FIRST") == "1":
        catch_stop_signals()  # from the start: a stop signal may come while Ray connects
    expected = int(os.environ.get("PROBE_NODES") or os.environ.get("SLURM_JOB_NUM_NODES") or 2)
    result = probe(expected)
    for task in result["tasks"]:
        print(f"ray_probe: task on {task['slurmd_nodename']} ({task['hostname']}, node {task['node_id'][:8]})")
    result["job_id"] = os.environ.get("SLURM_JOB_ID")
    result["restart_count"] = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    run_dir = Path(os.environ["HPC_RUN_DIR"])
    first = not list(run_dir.glob("ray_probe.*.json"))
    out = run_dir / f"ray_probe.{result['job_id']}.{result['restart_count']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(out)  # the test polls for this file: never show it half-written
    print(f"ray_probe: wrote {out}", flush=True)
    if os.environ.get("PROBE_STOP_FIRST") == "1" and first:
        wait_for_stop_signal()
        print("ray_probe: told to stop: exiting 75 (stopped for time)", flush=True)
        return EXIT_STOPPED_FOR_TIME  # continue the run
    RunDir(run_dir).mark_done(final_step=1, total_steps=1)  # as a trainer that finished
    if os.environ.get("PROBE_SLEEP") == "forever":
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        while True:
            time.sleep(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
