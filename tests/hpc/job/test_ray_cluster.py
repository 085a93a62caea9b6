"""hpc.job.ray_cluster, the per-node helper of the multi-node job block, without
Slurm: ports and commands, the process sweep that stops exactly one node's
Ray, and (with Ray installed) a real head whose cluster never fills up."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc.job import ray_cluster as rc
from hpc.job.workload_env import HPC_RAY_TEMP_DIR

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ray_installed() -> None:
    """Skip without Ray, but fail under CI=true, where setup.sh --ray installs it."""
    if importlib.util.find_spec("ray") is None:
        message = "Ray is not installed (bash setup.sh --ray)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def test_node_ports_never_collide_up_to_64_nodes():
    head = 6379
    taken = [head, head + 1, head + 2]  # GCS, client server, dashboard
    for index in range(64):
        taken += rc.node_ports(head, index).values()
    assert len(taken) == len(set(taken)) and max(taken) <= 65535


def test_ray_start_commands_for_head_and_worker():
    args = rc.build_parser().parse_args(["start", "--head", "--port", "7000", "--temp-root", "/tmp/ray_9",
                                         "--num-cpus", "8", "--num-gpus", "4"])
    head = rc.ray_start_command(args, 0, "10.0.0.1", Path("/tmp/ray_9_n1"))
    assert Path(head[0]).name == "ray" and head[1:3] == ["start", "--block"]
    assert "--head" in head and "--port=7000" in head
    assert "--include-dashboard=false" in head and "--node-ip-address=10.0.0.1" in head
    assert "--num-cpus=8" in head and "--num-gpus=4" in head and "--temp-dir=/tmp/ray_9_n1" in head
    args = rc.build_parser().parse_args(["start", "--address", "10.0.0.1:7000", "--port", "7000",
                                         "--temp-root", "/tmp/ray_9", "--num-cpus", "8"])
    worker = rc.ray_start_command(args, 3, "10.0.0.4", Path("/tmp/ray_9_n4"))
    assert "--address=10.0.0.1:7000" in worker and "--head" not in worker
    assert f"--node-manager-port={rc.node_ports(7000, 3)['node-manager-port']}" in worker


def test_temp_dir_leaves_room_for_rays_socket_paths():
    tmp = rc.temp_dir("/tmp/ray_12345678", "jwb0123")
    socket_path = f"{tmp}/session_2026-11-22_16-07-21_012395_4194304/sockets/plasma_store"
    assert len(socket_path) < 107  # sun_path holds 108 bytes with the final NUL


def test_node_ip_is_an_ipv4_address_even_for_an_unknown_name():
    for ip in (rc.node_ip(), rc.node_ip("no-such-host.invalid", "")):
        socket.inet_aton(ip)


def _fake_ray(tmp: Path, title: str, new_session: bool, marked: bool) -> subprocess.Popen:
    """A process that looks like a Ray daemon: renamed (exec -a), maybe in its own session."""
    env = {**os.environ, HPC_RAY_TEMP_DIR: str(tmp)} if marked else dict(os.environ)
    return subprocess.Popen(["bash", "-c", f"exec -a {title} sleep 300"], env=env, start_new_session=new_session)


def _gone(proc: subprocess.Popen, timeout: float = 5) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_stop_kills_the_nodes_session_and_marked_processes_only(tmp_path):
    tmp = tmp_path / "ray_77_n1"
    tmp.mkdir()
    leader = _fake_ray(tmp, "ray::IDLE", new_session=True, marked=False)  # found through the session file
    (tmp / rc.SESSION_FILE).write_text(f"{leader.pid}\n")
    escaped = _fake_ray(tmp, "ray::DashboardAgent", new_session=True, marked=True)  # own session, has the marker
    neighbour = _fake_ray(tmp_path / "ray_77_n10", "ray::IDLE", new_session=True, marked=True)  # another node's
    try:
        time.sleep(0.3)
        assert set(rc.ray_pids(tmp)) == {leader.pid, escaped.pid}
        rc.stop_node(tmp)
        assert _gone(leader) and _gone(escaped)
        assert neighbour.poll() is None
        assert not tmp.exists()
    finally:
        for proc in (leader, escaped, neighbour):
            proc.kill()
            proc.wait()


def test_stop_kills_what_ignores_sigterm(tmp_path):
    tmp = tmp_path / "ray_78_n1"
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; exec -a gcs_server sleep 300"],
                                env={**os.environ, HPC_RAY_TEMP_DIR: str(tmp)}, start_new_session=True)
    try:
        time.sleep(0.3)
        started = time.monotonic()
        assert rc.kill_ray(tmp, grace=0.5) == 1
        assert _gone(stubborn) and stubborn.returncode == -signal.SIGKILL
        assert time.monotonic() - started < 5
    finally:
        stubborn.kill()
        stubborn.wait()


def test_node_ports_of_the_largest_cluster_stay_below_the_highest_port():
    assert rc.highest_port(6379, 1) == 6379 + 13
    assert rc.highest_port(6379, 64) == max(rc.node_ports(6379, 63).values())


def wait_command(address: str, nodes: int, timeout: float, *pids: int) -> list[str]:
    return [sys.executable, "-m", "hpc.job.ray_cluster", "wait", "--address", address, "--nodes", str(nodes),
            "--timeout", str(timeout), *[f"--pid={pid}" for pid in pids]]


def test_wait_fails_fast_with_one_line_when_the_head_is_not_there(ray_installed):
    port = _free_port()
    result = subprocess.run(wait_command(f"127.0.0.1:{port}", 2, 2), capture_output=True, text=True, cwd=REPO,
                            timeout=60)
    assert result.returncode == 1
    assert f"the Ray head 127.0.0.1:{port} did not come up within 2 s" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_wait_fails_at_once_when_a_watched_ray_step_ends(ray_installed):
    gone = subprocess.Popen(["true"])
    gone.wait()
    started = time.monotonic()
    result = subprocess.run(wait_command(f"127.0.0.1:{_free_port()}", 2, 60, gone.pid), capture_output=True,
                            text=True, cwd=REPO, timeout=60)
    assert result.returncode == 1
    assert f"a Ray srun step ended (pid {gone.pid}) with 0 of 2 nodes joined" in result.stderr
    assert time.monotonic() - started < 30


def test_a_real_head_alone_fails_the_wait_for_two_nodes_and_leaves_nothing_after_term(ray_installed, tmp_path):
    """The wrapper outside Slurm: `start --head` runs Ray, `wait` names the nodes
    that joined when the cluster does not fill up, and TERM (scancel, time
    limit) stops every process of that Ray and removes its temp dir."""
    port = _free_port()
    temp_root = f"/tmp/ray_t{os.getpid()}"
    env = {**os.environ, "SLURMD_NODENAME": "solo", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen([sys.executable, "-m", "hpc.job.ray_cluster", "start", "--head", "--port", str(port),
                             "--temp-root", temp_root, "--num-cpus", "1"], cwd=REPO, env=env,
                            stdout=open(tmp_path / "head.log", "w"), stderr=subprocess.STDOUT)
    tmp = rc.temp_dir(temp_root, "solo")
    address = f"{rc.node_ip()}:{port}"
    try:
        alone = subprocess.run(wait_command(address, 2, 10, head.pid), capture_output=True, text=True, cwd=REPO,
                               env=env, timeout=120)
        assert alone.returncode == 1, (tmp_path / "head.log").read_text()
        assert f"only 1 of 2 Ray nodes joined within 10 s (joined: {rc.node_ip()}:{port + 10})" in alone.stderr
        assert len(alone.stderr.strip().splitlines()) == 1
        assert rc.ray_pids(tmp), "Ray runs while the wrapper runs"
        head.send_signal(signal.SIGTERM)
        assert head.wait(timeout=30) == 128 + signal.SIGTERM
        assert rc.ray_pids(tmp) == [] and not tmp.exists()
        assert "SIGTERM: stopping Ray" in (tmp_path / "head.log").read_text()
    finally:
        head.kill()
        rc.stop_node(tmp)
