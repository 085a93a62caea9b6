"""Ray across a Slurm job's nodes: start one Ray node, wait for all, stop them.

Used by sbatch/_ray_cluster.sh.j2 inside the job, never by the launcher (which
must stay import-light: ray is imported only inside the functions that need it).

    python -m hpc.job.ray_cluster node-ip
    python -m hpc.job.ray_cluster start --head --port 6379 --temp-root /tmp/ray_123 --num-cpus 8 --num-gpus 4
    python -m hpc.job.ray_cluster start --address 10.0.0.1:6379 --first-index 1 --temp-root /tmp/ray_123 ...
    python -m hpc.job.ray_cluster wait --address 10.0.0.1:6379 --nodes 2 --timeout 300 --pid 4242
    python -m hpc.job.ray_cluster stop --temp-root /tmp/ray_123

Why a wrapper around `ray start --block` rather than `ray start` alone: plain
`ray start` daemonizes (gcs_server and raylet end up children of init), so
Slurm's process tracking (proctrack/linuxproc follows parent links) loses them
and they outlive the job. `--block` keeps them under the srun step, and this
wrapper runs Ray in a session of its own (setsid), recorded in the temp dir and
marked by an inherited variable, so that on any exit - a signal from srun,
scancel, the time limit, or Ray dying - it kills exactly that Ray, even
processes that were re-parented or renamed themselves (workers show up as
`ray::IDLE`). `ray stop` is not
used: it kills every Ray process of the user on the node, other jobs' too
(and, on the test Slurm, the other node's Ray on the same machine).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from hpc.job.workload_env import HPC_RAY_HOST_SUFFIX, HPC_RAY_TEMP_DIR

SESSION_FILE = "hpc_ray_session"  # inside the node's temp dir: the sid of its Ray processes
TERM_GRACE_SECONDS = 3.0  # gcs_server answers TERM slowly; all must fit in KillWait (30 s, Slurm's default and the local Slurm's)
# Ports of node k, relative to the head port P: P+1 client server, P+2 dashboard;
# P+10+4k .. P+13+4k node manager, object manager, dashboard agent (http, grpc).
# Distinct per node because the test Slurm runs every node on one machine.
PORTS_PER_NODE = 4
FIRST_NODE_PORT_OFFSET = 10


def log(message: str) -> None:
    print(f"[ray] {message}", flush=True)


def fail(message: str) -> int:
    print(f"hpc.job.ray_cluster: error: {message}", file=sys.stderr, flush=True)
    return 1


# -- addresses, ports, directories ------------------------------------------------


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def temp_dir(temp_root: str, node: str | None = None) -> Path:
    """One directory per node and job, short: Ray puts unix sockets below it (108-byte limit)."""
    return Path(f"{temp_root}_{node or node_name()}")


def node_ip(hostname: str | None = None, suffix: str | None = None) -> str:
    """The IPv4 address other nodes reach this one at.

    The hostname (plus HPC_RAY_HOST_SUFFIX, e.g. "i" for the InfiniBand name at
    JSC) is resolved first; a loopback answer falls back to the address of the
    default route, without sending anything."""
    if suffix is None:
        suffix = os.environ.get(HPC_RAY_HOST_SUFFIX, "")
    host = (hostname or socket.gethostname()) + suffix
    try:
        addresses = [str(info[4][0]) for info in socket.getaddrinfo(host, None, socket.AF_INET)]
    except socket.gaierror:
        addresses = []
    for address in addresses:
        if not address.startswith("127."):
            return address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET: only picks the route, sends nothing
            return str(probe.getsockname()[0])
    except OSError:
        return addresses[0] if addresses else "127.0.0.1"


def node_ports(head_port: int, index: int) -> dict[str, int]:
    """The fixed ports of node ``index`` (0 = head): distinct on every node, so
    that a firewall can be opened for them and nodes sharing a host never clash."""
    base = head_port + FIRST_NODE_PORT_OFFSET + PORTS_PER_NODE * index
    return {
        "node-manager-port": base,
        "object-manager-port": base + 1,
        "dashboard-agent-listen-port": base + 2,
        "dashboard-agent-grpc-port": base + 3,
    }


def highest_port(head_port: int, nodes: int) -> int:
    """The highest port a cluster of ``nodes`` nodes uses (the launcher checks it is valid)."""
    return max(node_ports(head_port, nodes - 1).values())


def ray_executable() -> str:
    """The `ray` command of this interpreter's environment (the job's venv), on the PATH or not."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else "ray"


def ray_start_command(args: argparse.Namespace, index: int, ip: str, tmp: Path) -> list[str]:
    """`ray start --block` for node ``index`` (0 = head)."""
    command = [
        ray_executable(), "start", "--block", "--disable-usage-stats", "--log-color=false",
        f"--node-ip-address={ip}", f"--temp-dir={tmp}",
        f"--num-cpus={args.num_cpus}", f"--num-gpus={args.num_gpus}",
    ]
    if args.head:
        command += [
            "--head", f"--port={args.port}", f"--ray-client-server-port={args.port + 1}",
            "--include-dashboard=false", f"--dashboard-port={args.port + 2}",
        ]
    else:
        command += [f"--address={args.address}"]
    command += [f"--{name}={port}" for name, port in node_ports(args.port, index).items()]
    return command


# -- processes --------------------------------------------------------------------


def _processes() -> list[tuple[int, int, int, str, bytes]]:
    """(pid, session id, uid, command line, environment) of every live process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            uid = entry.stat().st_uid
            environ = (entry / "environ").read_bytes() if uid == os.getuid() else b""
        except OSError:
            continue  # gone meanwhile, or not ours to read
        # Fields after the ")" that ends the command name: state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            continue  # already dead, waiting for its parent to reap it
        found.append((int(entry.name), int(fields[3]), uid, cmdline, environ))
    return found


def ray_pids(tmp: Path) -> list[int]:
    """Our processes of this node's Ray: in its recorded session, carrying its
    marker variable (inherited by every descendant, whatever it renames itself
    to), or naming its temp dir on the command line."""
    session = _recorded_session(tmp)
    me, uid = os.getpid(), os.getuid()
    marker = f"\0{HPC_RAY_TEMP_DIR}={tmp}\0".encode()
    return [
        pid for pid, sid, owner, cmdline, environ in _processes()
        if pid != me and owner == uid
        and ((session and sid == session) or marker in b"\0" + environ + b"\0" or f"{tmp}/" in cmdline)
    ]


def _recorded_session(tmp: Path) -> int | None:
    try:
        return int((tmp / SESSION_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError as err:
            if err.errno != errno.ESRCH:
                raise


def kill_ray(tmp: Path, grace: float = TERM_GRACE_SECONDS) -> int:
    """TERM the node's Ray processes, KILL what is left after ``grace``; returns how many there were."""
    pids = ray_pids(tmp)
    if not pids:
        return 0
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and ray_pids(tmp):
        time.sleep(0.2)
    left = ray_pids(tmp)
    _signal_all(left, signal.SIGKILL)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and ray_pids(tmp):
        time.sleep(0.1)
    return len(set(pids) | set(left))


def stop_node(tmp: Path, keep_dir: bool = False) -> None:
    count = kill_ray(tmp)
    still = ray_pids(tmp)
    if still:
        log(f"{node_name()}: could not stop Ray processes {still}")
    elif count:
        log(f"{node_name()}: stopped {count} Ray process(es) of {tmp}")
    if not keep_dir and not still:
        shutil.rmtree(tmp, ignore_errors=True)


# -- commands ---------------------------------------------------------------------


def become_subreaper() -> None:
    """Adopt Ray processes whose parent dies (raylet's workers, gcs_server when
    `ray start` goes first): they stay below this srun task, where Slurm's
    process tracking (parent links) still finds them, instead of under init."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass  # not Linux: the session and marker sweep still find them


def wait_for_port(address: str, timeout: float) -> bool:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return True
        except OSError:
            time.sleep(0.5)
    return False


def cmd_start(args: argparse.Namespace) -> int:
    """Run this node's Ray in the foreground until a signal or Ray's end, then stop all of it."""
    index = args.first_index + int(os.environ.get("SLURM_PROCID", "0"))
    tmp = temp_dir(args.temp_root)
    stop_node(tmp)  # leftovers of an earlier run of this job (requeue keeps the job id)
    if not args.head and not wait_for_port(args.address, args.timeout):
        return fail(f"{node_name()}: the Ray head {args.address} did not accept connections within {args.timeout:.0f} s")
    tmp.mkdir(parents=True, exist_ok=True)
    become_subreaper()
    stop_signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR2)

    def on_signal(signum: int, _frame: object) -> None:
        # Slurm and srun often signal twice (scancel, time limit): a second
        # signal must not cut the cleanup short, or `ray start` and gcs_server
        # (both slow to honour TERM) are orphaned, out of Slurm's reach.
        for sig in stop_signals:
            signal.signal(sig, signal.SIG_IGN)
        log(f"{node_name()}: {signal.Signals(signum).name}: stopping Ray")
        stop_node(tmp)
        sys.exit(128 + signum)

    # TERM: scancel and the time limit; USR2: the job's own cleanup (srun
    # forwards it; TERM sent to srun would SIGKILL us instead). USR1 is the
    # workload's "save and stop" signal and means nothing to Ray.
    for sig in stop_signals:
        signal.signal(sig, on_signal)
    command = ray_start_command(args, index, node_ip(), tmp)
    gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "all (CUDA_VISIBLE_DEVICES unset)")
    log(f"{node_name()}: GPUs visible to this step: {gpus}")
    log(f"{node_name()}: {' '.join(command)}")
    try:
        child = subprocess.Popen(command, start_new_session=True, env={**os.environ, HPC_RAY_TEMP_DIR: str(tmp)})
    except OSError as err:
        return fail(f"{node_name()}: cannot run {command[0]}: {err.strerror} (bash setup.sh --ray installs Ray)")
    (tmp / SESSION_FILE).write_text(f"{child.pid}\n")  # start_new_session: sid == pid
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # after Popen: an ignored signal stays ignored across exec
    code = child.wait()
    log(f"{node_name()}: ray start exited with {code}; stopping what is left")
    stop_node(tmp)
    return code or 1  # Ray ending on its own is never the plan: the job stops it


def alive_nodes() -> list[dict]:
    import ray

    return [node for node in ray.nodes() if node.get("Alive")]


def cmd_wait(args: argparse.Namespace) -> int:
    """Until ``--nodes`` Ray nodes are alive. A watchdog thread ends the wait
    (exit 1, one line) at the deadline or as soon as a watched srun step ends,
    even while ray.init() is stuck on a head that never came up."""
    import ray

    joined: list[dict] = []
    head_up: list[bool] = []
    _start_watchdog(args, joined, head_up)
    wait_for_port(args.address, float("inf"))  # the watchdog bounds every wait here
    head_up.append(True)
    ray.init(address=args.address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
    while True:
        joined[:] = alive_nodes()
        if len(joined) >= args.nodes:
            log(f"{len(joined)} of {args.nodes} nodes joined: " + ", ".join(_describe(n) for n in joined))
            ray.shutdown()
            return 0
        time.sleep(1)


def _start_watchdog(args: argparse.Namespace, joined: list[dict], head_up: list[bool]) -> None:
    import threading

    deadline = time.monotonic() + args.timeout

    def watch() -> None:
        while True:
            time.sleep(0.5)
            dead = [pid for pid in args.pid if not _pid_alive(pid)]
            if dead:
                message = f"a Ray srun step ended (pid {dead[0]}) with {len(joined)} of {args.nodes} nodes joined"
            elif time.monotonic() > deadline and not head_up:
                message = f"the Ray head {args.address} did not come up within {args.timeout:.0f} s"
            elif time.monotonic() > deadline:
                message = (f"only {len(joined)} of {args.nodes} Ray nodes joined within {args.timeout:.0f} s "
                           f"(joined: {', '.join(_describe(n) for n in joined) or 'none'})")
            else:
                continue
            fail(f"{message}; see the job's .err log")
            os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _describe(node: dict) -> str:
    return f"{node.get('NodeManagerAddress')}:{node.get('NodeManagerPort')}"


def _pid_alive(pid: int) -> bool:
    """Exists and is not a zombie (the srun steps are children of the job's shell, not ours)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def cmd_stop(args: argparse.Namespace) -> int:
    tmp = temp_dir(args.temp_root)
    stop_node(tmp)
    left = ray_pids(tmp)
    log(f"{node_name()}: sweep done, {len(left)} Ray process(es) of {tmp} left")
    return 1 if left else 0


def cmd_node_ip(_args: argparse.Namespace) -> int:
    print(node_ip())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpc.job.ray_cluster", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    start = sub.add_parser("start", help="run this node's Ray until signalled (inside an srun step)")
    role = start.add_mutually_exclusive_group(required=True)
    role.add_argument("--head", action="store_true", help="start the head (GCS) here")
    role.add_argument("--address", help="head address ip:port to join as a worker")
    start.add_argument("--port", type=int, required=True, help="the head's port; node ports are derived from it")
    start.add_argument("--first-index", type=int, default=0, help="node index of this step's task 0 (ports)")
    start.add_argument("--temp-root", required=True, help="Ray temp dir prefix; _<node> is appended")
    start.add_argument("--num-cpus", type=int, required=True)
    start.add_argument("--num-gpus", type=int, default=0)
    start.add_argument("--timeout", type=float, default=300, help="seconds a worker waits for the head")
    start.set_defaults(func=cmd_start)

    wait = sub.add_parser("wait", help="wait until N Ray nodes are alive")
    wait.add_argument("--address", required=True)
    wait.add_argument("--nodes", type=int, required=True)
    wait.add_argument("--timeout", type=float, default=300)
    wait.add_argument("--pid", type=int, action="append", default=[], help="srun step to watch (repeatable)")
    wait.set_defaults(func=cmd_wait)

    stop = sub.add_parser("stop", help="kill this node's Ray processes of the job")
    stop.add_argument("--temp-root", required=True)
    stop.set_defaults(func=cmd_stop)

    ip = sub.add_parser("node-ip", help="print the address other nodes reach this one at")
    ip.set_defaults(func=cmd_node_ip)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
