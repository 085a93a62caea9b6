"""The multi-node (Ray) block of the job script, without Slurm: what the dry
run renders for --num_nodes N, what it refuses, and the block's own checks of
the allocation, run in bash against a stand-in `scontrol`."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from hpc.launcher import launch
from hpc.launcher.clusters import load_registry
from hpc.launcher.render import render
from tests.hpc.dry_run_helpers import dry_run, jsc_environment, no_sbatch, ok_script, runs  # fixtures


def job_control_part(script: str) -> str:
    """The job-control block, with the launch id (time and pid) in its script path made equal."""
    part = script[script.index("# --- job control"):]
    return re.sub(r"\d{8}T\d{6}Z-\d+", "LAUNCH", part)


# -- what the dry run renders ---------------------------------------------------------------


def test_two_nodes_render_the_ray_block_between_environment_and_workload(capsys, runs):
    script = ok_script(capsys, runs, "--entrypoint", "tests.doubles.ray_probe", nodes=2)
    assert "HPC_RAY_NODES=2\n" in script and "HPC_RAY_PORT=6379\n" in script
    assert "python -m hpc.job.ray_cluster start --head" in script
    assert '--address "$HPC_RAY_ADDRESS" --first-index 1' in script
    assert "python -m hpc.job.ray_cluster wait" in script
    assert 'HPC_CLEANUP+=("hpc_ray_down")' in script
    assert 'export RAY_ADDRESS="$HPC_RAY_ADDRESS"' in script
    assert "--num-cpus 1 --num-gpus 1" in script  # local: 1 CPU per task, --gpus_per_node default 1
    environment = script.index("export HPC_RUN_DIR=")
    ray_block = script.index("# --- Ray cluster across the job's 2 nodes")
    workload = script.rindex("tests.doubles.ray_probe")
    assert environment < ray_block < script.index("export RAY_ADDRESS") < workload
    assert "ray stop" not in script  # it would kill every Ray on the node, other jobs' too


def test_the_ray_cluster_requires_a_token_made_at_run_time(capsys, runs):
    script = ok_script(capsys, runs, nodes=2)
    assert "RAY_AUTH_TOKEN=$(python -c 'import secrets; print(secrets.token_hex(32))')\n" in script
    assert "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN\n" in script
    assert script.index("export RAY_AUTH_MODE") < script.index("hpc.job.ray_cluster start --head")


def test_the_head_goes_on_the_first_node_of_the_nodelist_which_must_be_the_batch_host(capsys, runs):
    script = ok_script(capsys, runs, nodes=2)
    assert 'mapfile -t HPC_RAY_HOSTS < <(scontrol show hostnames "${SLURM_JOB_NODELIST:-}")' in script
    assert "HPC_RAY_HEAD=${HPC_RAY_HOSTS[0]:-}\n" in script
    assert '--nodelist="$HPC_RAY_HEAD"' in script and '--exclude="$HPC_RAY_HEAD"' in script


def test_one_node_has_no_ray_block(capsys, runs):
    script = ok_script(capsys, runs, nodes=1)
    assert "hpc.job.ray_cluster" not in script and "RAY_ADDRESS" not in script


def test_a_multinode_job_continues_through_the_same_job_control_as_one_node(capsys, runs):
    """USR1 grace, requeue, resume and continuation: the very same block, after Ray is up."""
    one = ok_script(capsys, runs, "--signal_grace", "120", nodes=1)
    two = ok_script(capsys, runs, "--signal_grace", "120", nodes=2)
    assert job_control_part(one) == job_control_part(two)
    for script in (one, two):
        assert "#SBATCH --signal=B:USR1@120\n" in script and "#SBATCH --requeue\n" in script
    control = job_control_part(two)
    assert "trap 'hpc_forward USR1' USR1" in control
    assert "python -m hpc.job.continuation begin" in control and "python -m hpc.job.continuation end" in control
    assert two.index('export RAY_ADDRESS="$HPC_RAY_ADDRESS"') < two.index("# --- job control")


def test_a_stop_signal_while_ray_comes_up_is_noted_for_job_control_not_fatal(capsys, runs, tmp_path):
    """Slurm may send USR1 up to 60 s early, while the Ray cluster still forms;
    bash's default action would end the job without a continuation."""
    script = ok_script(capsys, runs, nodes=2)
    setup = script[:script.index("# --- Ray cluster")]
    probe = 'kill -USR1 $$\nsleep 0.2\necho "setup went on; noted for job control: $HPC_STOP_SIGNAL"\n'
    (tmp_path / "job.sh").write_text(setup + probe)
    result = subprocess.run(["bash", str(tmp_path / "job.sh")], capture_output=True, text=True, timeout=30,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "setup went on; noted for job control: USR1" in result.stdout


def test_ray_port_comes_from_the_flag(capsys, runs):
    script = ok_script(capsys, runs, "--ray_port", "7100", nodes=2)
    assert "HPC_RAY_PORT=7100\n" in script


def test_ray_port_defaults_to_the_registry(capsys, runs, monkeypatch):
    registry = load_registry()
    registry.clusters["local"] = replace(registry.clusters["local"], ray_port=6500)
    monkeypatch.setattr(launch, "load_registry", lambda: registry)
    assert "HPC_RAY_PORT=6500\n" in ok_script(capsys, runs, nodes=2)


def test_join_timeout_comes_from_the_environment(capsys, runs):
    assert "HPC_RAY_JOIN_TIMEOUT=300\n" in ok_script(capsys, runs, nodes=2)
    script = ok_script(capsys, runs, "--env", "HPC_RAY_JOIN_TIMEOUT=900", nodes=2)
    assert "HPC_RAY_JOIN_TIMEOUT=900\n" in script and '--timeout "$HPC_RAY_JOIN_TIMEOUT"' in script


def test_gpus_and_cpus_reach_every_ray_node(capsys, runs):
    script = ok_script(capsys, runs, "--gpus_per_node", "4", "--cpus_per_task", "32", cluster="jureca", nodes=4)
    assert script.count("--num-cpus 32 --num-gpus 4") == 2  # head step and worker step
    assert script.count("--cpus-per-task=32") >= 2


@pytest.mark.parametrize(
    "cluster, extra, fragment",
    [
        ("local", ["--num_nodes", "5"], "invalid --num_nodes 5: accepted 1..4 on local"),
        ("local", ["--num_nodes", "0"], "invalid --num_nodes 0: accepted 1..4 on local"),
        ("jureca", ["--num_nodes", "17"], "invalid --num_nodes 17: accepted 1..16 on jureca"),
        ("jureca", ["--gpus_per_node", "5"], "invalid --gpus_per_node 5: accepted 0..4 (jureca has 4 GPUs per node)"),
        ("vista", ["--gpus_per_node", "2"], "(vista has 1 GPUs per node)"),
        ("local", ["--ray_port", "80"], "invalid --ray_port 80: accepted 1024..65518 (a 2-node Ray cluster"),
        ("local", ["--ray_port", "65530"], "invalid --ray_port 65530: accepted 1024..65518"),
        ("jureca", ["--ray_port", "65500", "--num_nodes", "16"], "invalid --ray_port 65500: accepted 1024..65462"),
        ("local", ["--env", "HPC_RAY_JOIN_TIMEOUT=soon"], "invalid HPC_RAY_JOIN_TIMEOUT 'soon': accepted an integer"),
    ],
)
def test_dry_run_refuses_multinode_requests_the_cluster_cannot_hold(capsys, runs, cluster, extra, fragment):
    code, out, err = dry_run(capsys, runs, *extra, cluster=cluster, nodes=2)
    assert code == 2, out
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not runs.exists()


def test_largest_request_a_cluster_holds_is_accepted(capsys, runs):
    script = ok_script(capsys, runs, "--gpus_per_node", "4", cluster="jureca", nodes=16)
    assert "#SBATCH --nodes=16\n" in script and "#SBATCH --gres=gpu:4\n" in script


@pytest.mark.parametrize("cluster, nodes", [("local", 2), ("local", 4), ("jureca", 2), ("jupiter", 1), ("vista", 3)])
def test_rendered_script_passes_bash_n(capsys, runs, cluster, nodes):
    script = ok_script(capsys, runs, "--gpus_per_node", "1", cluster=cluster, nodes=nodes)
    result = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("cluster", ["local", "jureca"])
def test_rendered_multinode_script_has_no_shellcheck_warnings(capsys, runs, cluster):
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    script = ok_script(capsys, runs, cluster=cluster, nodes=3)
    result = subprocess.run(["shellcheck", "-s", "bash", "-S", "warning", "-"], input=script,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


# -- the block's checks of the allocation, in bash ----------------------------------------


def run_ray_block(tmp_path: Path, nodes: int, nodelist: list[str], batch_host: str) -> subprocess.CompletedProcess:
    """The rendered Ray block with a stand-in `scontrol` that expands the nodelist;
    srun and python stand-ins record a call instead of starting anything."""
    block = render("_ray_cluster.sh.j2", {"num_nodes": nodes, "ray_port": 6379, "cpus_per_task": 1,
                                          "gpus_per_node": 0, "ray_join_timeout": 300})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "scontrol": "printf '%s\\n' " + " ".join(nodelist),
        "srun": f'echo "srun $*" >> {tmp_path / "calls"}',
        "python": f'echo "python $*" >> {tmp_path / "calls"}; echo 10.0.0.1',
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    script = "set -euo pipefail\nHPC_CLEANUP=()\n" + block + "wait\n"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-9]",
           "SLURMD_NODENAME": batch_host}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=30)


def test_a_batch_host_that_is_not_the_first_node_fails_before_any_ray_starts(tmp_path):
    result = run_ray_block(tmp_path, 2, ["n7", "n8"], batch_host="n8")
    assert result.returncode == 1
    assert "[ray] error: this batch host n8 is not the first node n7 of the job's nodelist" in result.stderr
    assert not (tmp_path / "calls").exists()


def test_a_nodelist_of_another_size_fails_before_any_ray_starts(tmp_path):
    result = run_ray_block(tmp_path, 3, ["n7", "n8"], batch_host="n7")
    assert result.returncode == 1
    assert "[ray] error: the job's nodelist 'n[1-9]' has 2 nodes, the launch asked for 3" in result.stderr
    assert not (tmp_path / "calls").exists()


def test_the_head_starts_on_the_first_node_and_workers_on_the_others(tmp_path):
    result = run_ray_block(tmp_path, 3, ["n7", "n8", "n9"], batch_host="n7")
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    head = next(c for c in calls if c.startswith("srun") and "--head" in c)
    workers = next(c for c in calls if c.startswith("srun") and "--address 10.0.0.1:6379" in c)
    assert any(c.startswith("python -m hpc.job.ray_cluster wait --address 10.0.0.1:6379 --nodes 3") for c in calls)
    assert "--nodelist=n7" in head and "--temp-root /tmp/ray_42" in head
    assert "--nodes=2 --ntasks=2" in workers and "--exclude=n7" in workers
    assert "[ray] head on n7 at 10.0.0.1:6379; workers on n8 n9" in result.stdout
