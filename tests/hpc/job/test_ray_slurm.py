"""Ray across two real Slurm nodes (scripts/local_slurm.sh up --nodes 2: n1 and n2
on this one machine), launched as a user would, with tests.doubles.ray_probe as
the workload: the cluster reports 2 nodes with the head and the workload on
the first node of the nodelist, runs a task on each node, re-forms in the job
that continues a stopped run, and fails clearly when its head cannot start.
Every test also checks that no Ray process of the job is left, whether the job
ended on its own, by scancel, or by its time limit. The time-limit job (over two
minutes) runs alongside the other tests: each job holds 1 of the 2 CPUs of a node."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines
from tests.hpc.slurm_helpers import cancel, launch, sacct_state, wait_for_final_state

pytestmark = pytest.mark.slurm

TIME_LIMITED_JOB_PORT = 6500
# What Ray's processes look like on the command line (workers rename themselves ray::...).
RAY_PROCESS_PATTERN = r"raylet|gcs_server|ray::|default_worker\.py|ray/dashboard|ray\.util\.client\.server|log_monitor\.py|ray start|hpc\.ray_cluster"


@pytest.fixture(scope="module")
def two_node_slurm(slurm):
    """Ray installed and at least two idle-able Slurm nodes; else skip (fail under CI=true)."""
    problems = []
    if importlib.util.find_spec("ray") is None:
        problems.append("Ray is not installed (bash setup.sh --ray, or pip install 'ray[default]')")
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=20).stdout.split()
    if len(set(nodes)) < 2:
        problems.append(f"needs 2 Slurm nodes, found {sorted(set(nodes))} (bash scripts/local_slurm.sh up --nodes 2)")
    if problems:
        message = "; ".join(problems)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def launch_probe(runs: Path, name: str, *extra: str) -> str:
    result = launch("--cluster", "local", "--job_name", name, "--runs_dir", str(runs), "--num_nodes", "2",
                    "--gpus_per_node", "1", "--entrypoint", "tests.doubles.ray_probe", "--max_resubmits", "0",
                    *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"submitted job (\d+)", result.stdout)
    assert match, result.stdout
    return match.group(1)


def wait_for_probe(run_dir: Path, job_id: str, timeout: float = 120) -> dict:
    """The probe's result for ``job_id``, once written (the job must still be running until then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(run_dir.glob(f"ray_probe.{job_id}.*.json"))
        if found:
            return json.loads(found[-1].read_text())
        state = sacct_state(job_id).get("State")
        assert state in (None, "PENDING", "RUNNING", "REQUEUED"), \
            f"job {job_id} ended ({state}) before the probe wrote its result\n{logs(run_dir, job_id)}"
        time.sleep(1)
    raise AssertionError(f"no probe result for job {job_id} within {timeout}s\n{logs(run_dir, job_id)}")


def ray_processes_of(job_id: str) -> list[str]:
    """Ray processes started by this job: by command line, or by SLURM_JOB_ID in their environment."""
    found = subprocess.run(["pgrep", "-a", "-f", RAY_PROCESS_PATTERN], capture_output=True, text=True).stdout
    found += subprocess.run(["pgrep", "-a", "-f", f"/tmp/ray_{job_id}_"], capture_output=True, text=True).stdout
    mine = set()
    for line in found.splitlines():
        pid, _, cmdline = line.partition(" ")
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # already gone
        if f"/tmp/ray_{job_id}_" in cmdline or f"SLURM_JOB_ID={job_id}".encode() in environ:
            mine.add(line)
    return sorted(mine)


def assert_no_ray_left(job_id: str, timeout: float = 30) -> None:
    """Slurm may still be reaping the steps right after the final state, and a node's stop
    removes its temp dir after its processes are gone: allow them a moment."""
    deadline = time.monotonic() + timeout
    while (left := ray_processes_of(job_id)) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, f"Ray processes of job {job_id} outlived it:\n" + "\n".join(left)
    while (dirs := list(Path("/tmp").glob(f"ray_{job_id}_*"))) and time.monotonic() < deadline:
        time.sleep(1)
    assert not dirs, f"the Ray temp dirs were not removed: {dirs}"


def outsider_connects(address: str) -> str:
    """What a process without the job's Ray token sees when it tries to join
    the job's cluster (Ray retries for ~20 s; a few seconds show the refusal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SLURM_"))}
    command = [sys.executable, "-c", "import ray, sys; ray.init(address=sys.argv[1]); print('connected')", address]
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=10)
        return result.stdout + result.stderr
    except subprocess.TimeoutExpired as err:
        return "".join(part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
                       for part in (err.stdout, err.stderr))


def logs(run_dir: Path, job_id: str) -> str:
    out, err = RunDir(run_dir).log_paths(job_id)
    return "".join(p.read_text(errors="replace") for p in (out, err) if p.exists())


def job_nodes(job_id: str) -> list[str]:
    """The job's nodes in nodelist order (`scontrol show hostnames`, as the job script reads them)."""
    text = subprocess.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "NodeList"],
                          capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[-1]
    return subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True,
                          timeout=30).stdout.split()


def check_probe(result: dict, job_id: str, port: int = 6379) -> None:
    """Two live Ray nodes with the job's CPUs and GPUs, one task on each of the job's
    nodes, and the head and the workload on the first node of the nodelist."""
    nodes, tasks = result["nodes"], result["tasks"]
    assert result["job_id"] == job_id
    assert len(nodes) == 2 and all(node["alive"] for node in nodes)
    assert all(node["cpus"] == 1 and node["gpus"] == 1 for node in nodes), nodes
    assert {task["node_id"] for task in tasks} == {node["node_id"] for node in nodes}
    hosts = job_nodes(job_id)
    assert sorted(task["slurmd_nodename"] for task in tasks) == sorted(hosts)
    (head,) = [node["node_id"] for node in nodes if node["is_head"]]
    head_host = next(task["slurmd_nodename"] for task in tasks if task["node_id"] == head)
    assert head_host == hosts[0] == result["driver_node"], (hosts, head_host, result["driver_node"])
    assert result["ray_address"].endswith(f":{port}")


def test_the_scheduler_accepts_the_two_node_script(slurm, tmp_path):
    result = launch("--cluster", "local", "--job_name", "ray_preview", "--time_limit", "10", "--num_nodes", "2",
                    "--runs_dir", str(tmp_path / "runs"), "--dry_run")
    assert result.returncode == 0, result.stderr
    assert re.search(r"sbatch --test-only: ok: .*to start at", result.stdout), result.stdout


@pytest.mark.usefixtures("time_limited_job")
def test_two_node_job_forms_a_ray_cluster_runs_a_task_on_each_node_and_cleans_up(two_node_slurm, tmp_path):
    run_dir = tmp_path / "runs" / "ray_ok"
    # A dead SOCKS proxy in upper case, as the offline block gives the workload: Ray must not use it.
    job_id = launch_probe(run_dir.parent, "ray_ok", "--time_limit", "5", "--signal_grace", "60",
                          "--env", "HTTPS_PROXY=socks5h://127.0.0.1:9",
                          "--env", "ALL_PROXY=socks5h://127.0.0.1:9")
    try:
        info = wait_for_final_state(job_id, timeout=180)
        text = logs(run_dir, job_id)
        assert info["State"] == "COMPLETED", f"{info}\n{text}"
        check_probe(wait_for_probe(run_dir, job_id), job_id)
        assert "[ray] 2 of 2 nodes joined" in text and "[ray] stopping the Ray cluster" in text
        # Each node's Ray step sees the GPU the job holds there (fake GRES), as srun --overlap steps do.
        assert set(job_nodes(job_id)) <= set(re.findall(r"\[ray\] (\w+): GPUs visible to this step: \d\n", text)), text
        assert RunDir(run_dir).read_done() is not None and "[continuation] job" in text
        assert_no_ray_left(job_id)
    finally:
        cancel([job_id])


def launch_hung_probe(run_dir: Path, *limit: str) -> str:
    """A 2-node job whose workload then hangs, deaf to USR1 and TERM, like a
    hung trainer (HPC_STOP_TIMEOUT=none: job control does not kill it either)."""
    return launch_probe(run_dir.parent, run_dir.name, *limit, "--env", "PROBE_SLEEP=forever",
                        "--env", "HPC_STOP_TIMEOUT=none")


@dataclass
class BackgroundJob:
    """A job followed by a thread, so that a slow job (one that must reach its
    time limit) runs alongside the module's other tests instead of after them."""

    run_dir: Path
    job_id: str = ""
    probe: dict | None = None
    ray_seen: list[str] = field(default_factory=list)
    final: dict | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def follow(self) -> None:
        try:
            self.probe = wait_for_probe(self.run_dir, self.job_id)
            self.ray_seen = ray_processes_of(self.job_id)
            self.final = wait_for_final_state(self.job_id, timeout=300)
        except BaseException as err:  # noqa: BLE001 - re-raised by the test that owns the job
            self.error = err

    def result(self) -> "BackgroundJob":
        self.thread.join(400)
        if self.error is not None:
            raise self.error
        return self


@pytest.fixture(scope="module")
def time_limited_job(two_node_slurm, tmp_path_factory):
    """Submitted by the module's first Ray test, checked by its last."""
    job = BackgroundJob(tmp_path_factory.mktemp("ray_timeout") / "runs" / "ray_time_limit")
    # Two minutes: Slurm sends USR1 up to grace + 30 s early (here at 80 s or
    # later), and it must come after the cluster formed, or the workload would
    # rightly not start. Its own head port: two Ray clusters share this one
    # machine meanwhile (as two jobs sharing a node would on a real cluster).
    job.job_id = launch_hung_probe(job.run_dir, "--time_limit", "2", "--signal_grace", "10",
                                   "--ray_port", str(TIME_LIMITED_JOB_PORT))
    job.thread = threading.Thread(target=job.follow, daemon=True)
    job.thread.start()
    yield job
    cancel([job.job_id])


@pytest.mark.usefixtures("time_limited_job")
def test_no_ray_process_outlives_a_cancelled_job(two_node_slurm, tmp_path):
    run_dir = tmp_path / "runs" / "ray_scancel"
    job_id = launch_hung_probe(run_dir, "--time_limit", "5", "--signal_grace", "60")
    try:
        probe = wait_for_probe(run_dir, job_id)
        check_probe(probe, job_id)
        assert ray_processes_of(job_id), "the probe saw Ray, so its processes must be visible here"
        assert "InvalidAuthToken" in outsider_connects(probe["ray_address"])
        cancel([job_id])
        info = wait_for_final_state(job_id, timeout=120)
        assert info["State"] == "CANCELLED", info
        assert_no_ray_left(job_id)
    finally:
        cancel([job_id])


@pytest.mark.usefixtures("time_limited_job")
def test_two_node_job_told_to_stop_continues_in_a_new_job_that_forms_the_cluster_again(two_node_slurm, tmp_path):
    """Resubmission with resume, multi-node: the same job control as one node.
    USR1 goes to the batch shell exactly as `#SBATCH --signal=B:USR1@grace`
    sends it (sent here by the test, because Slurm may send it up to 60 s early)."""
    run = RunDir(tmp_path / "runs" / "ray_cont")
    first = launch_probe(run.path.parent, run.name, "--time_limit", "5", "--signal_grace", "60",
                         "--continuation", "afterany", "--max_resubmits", "1", "--env", "PROBE_STOP_FIRST=1")
    jobs = [first]
    try:
        check_probe(wait_for_probe(run.path, first), first)
        subprocess.run(["scancel", "--batch", "--signal=USR1", first], check=True, timeout=30)
        info = wait_for_final_state(first, timeout=120)
        assert info["State"] == "COMPLETED", f"{info}\n{logs(run.path, first)}"
        resubmits = [r for r in ledger_lines(run) if r["event"] == "resubmit"]
        assert [r["after"] for r in resubmits] == [first], ledger_lines(run)
        second = str(resubmits[0]["job_id"])
        jobs.append(second)
        info = wait_for_final_state(second, timeout=180)
        assert info["State"] == "COMPLETED", f"{info}\n{logs(run.path, second)}"
        check_probe(wait_for_probe(run.path, second), second)
        ends = [(str(r["job_id"]), r["outcome"]) for r in ledger_lines(run) if r["event"] == "job_end"]
        assert ends == [(first, "stopped_for_time"), (second, "finished")], ledger_lines(run)
        assert run.read_done() is not None
        text = logs(run.path, first)
        assert "SIGUSR1" in text and "ray_probe: told to stop: exiting 75" in text
        continued = re.search(rf"\[continuation\] job {second}, queued when this job started, continues the run", text)
        assert continued and continued.start() < text.index("[ray] stopping the Ray cluster")  # hpc/job/successor.py
        for job_id in jobs:
            assert "[ray] 2 of 2 nodes joined" in logs(run.path, job_id)
            assert_no_ray_left(job_id)
    finally:
        cancel(jobs)


@pytest.mark.usefixtures("time_limited_job")
def test_a_ray_head_that_cannot_start_fails_the_job_with_a_clear_error(two_node_slurm, tmp_path):
    run_dir = tmp_path / "runs" / "ray_busy"
    # The head's port is bound (not listening: nothing answers there) on this
    # machine, so the head's GCS cannot start.
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        port = taken.getsockname()[1]
        # Ray waits 40-60 s for a GCS that already died; 5 s is plenty on one machine.
        job_id = launch_probe(run_dir.parent, run_dir.name, "--time_limit", "5", "--signal_grace", "60",
                              "--ray_port", str(port),
                              "--env", "RAY_gcs_server_port_wait_time_s=5", "--env", "RAY_py_gcs_connect_timeout_s=5")
        try:
            info = wait_for_final_state(job_id, timeout=180)
        finally:
            cancel([job_id])
    text = logs(run_dir, job_id)
    assert info["State"] == "FAILED", f"{info}\n{text}"
    assert "[ray] error: the Ray cluster did not form" in text
    assert not list(run_dir.glob("ray_probe.*.json")), "the workload must not start without its cluster"
    assert_no_ray_left(job_id)


def test_no_ray_process_outlives_a_job_that_reaches_its_time_limit(time_limited_job):
    """Last in the module: the job has been running alongside the tests above."""
    job = time_limited_job.result()
    check_probe(job.probe, job.job_id, port=TIME_LIMITED_JOB_PORT)
    assert job.ray_seen, "the probe saw Ray, so its processes must have been visible"
    assert job.final["State"] == "TIMEOUT", f"{job.final}\n{logs(job.run_dir, job.job_id)}"
    assert_no_ray_left(job.job_id)
