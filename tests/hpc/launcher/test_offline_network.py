"""Clusters whose compute nodes have no internet: the network block of the job
script (sbatch/_offline_network.sh.j2) and its settings (hpc/launcher/network.py).

Without Slurm: what the dry run renders and refuses, and a real SOCKS tunnel
to an sshd of the test's own on 127.0.0.1 (its own keys, config and HOME; the
machine's ssh configuration is never read or written), carrying the
workload's HTTP traffic and the judge's litellm calls."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from hpc.launcher import launch
from hpc.launcher.clusters import load_registry
from hpc.launcher.network import Tunnel
from hpc.launcher.render import render
from tests.hpc.dry_run_helpers import dry_run, jsc_environment, no_sbatch, ok_script, runs  # fixtures
from tests.hpc.sshd_helpers import _free_port, local_sshd, require_openssh  # local_sshd: a fixture

# -- what the dry run renders ---------------------------------------------------------------


def test_offline_cluster_gets_the_tunnel_and_offline_variables(capsys, runs):
    script = ok_script(capsys, runs, "--gpus_per_node", "4", cluster="jureca", nodes=2)
    assert "export HF_HUB_OFFLINE=1\n" in script and "export WANDB_MODE=offline\n" in script
    assert "export WANDB_ERROR_REPORTING=false\n" in script  # W&B retried Sentry at exit on an offline node
    assert "HPC_TUNNEL_HOST=jureca.fz-juelich.de\n" in script and "HPC_TUNNEL_PORT=1080\n" in script
    assert "HPC_TUNNEL_TIMEOUT=30\n" in script
    assert ('ssh "${HPC_TUNNEL_SSH_OPTS[@]}" -N -D "127.0.0.1:$HPC_TUNNEL_PORT" -o BatchMode=yes '
            "-o ExitOnForwardFailure=yes") in script
    assert "ServerAliveInterval=30" in script and "StrictHostKeyChecking=accept-new" in script
    assert 'HPC_CLEANUP+=("kill $HPC_TUNNEL_PID' in script
    assert '"HTTPS_PROXY=socks5h://127.0.0.1:$HPC_TUNNEL_PORT"' in script
    assert '"ALL_PROXY=socks5h://127.0.0.1:$HPC_TUNNEL_PORT"' in script
    assert '"DISABLE_AIOHTTP_TRANSPORT=True"' in script
    # The proxy is for the workload only: never exported to the job (Ray, srun).
    assert "export HTTPS_PROXY" not in script and "export ALL_PROXY" not in script
    # Offline first, then the tunnel, then Ray, then the workload (which gets the proxy).
    order = ["export HF_HUB_OFFLINE=1", "ssh \"${HPC_TUNNEL_SSH_OPTS[@]}\"", "hpc.job.ray_cluster start --head",
             'env "${HPC_WORKLOAD_ENV[@]}"']
    positions = [script.index(fragment) for fragment in order]
    assert positions == sorted(positions), order


def test_tunnel_settings_come_from_the_dotenv_and_are_quoted(capsys, runs):
    script = ok_script(capsys, runs, "--config", "smoke", "--env", "TUNNEL_HOST=alice@gw.example.org",
                       "--env", "TUNNEL_PORT=2080", "--env", "TUNNEL_TIMEOUT=90",
                       "--env", "TUNNEL_SSH_OPTS=-i /home/alice/.ssh/k $(reboot)", cluster="juwels_booster")
    assert "HPC_TUNNEL_HOST=alice@gw.example.org\n" in script and "HPC_TUNNEL_PORT=2080\n" in script
    assert "HPC_TUNNEL_TIMEOUT=90\n" in script
    assert "read -r -a HPC_TUNNEL_SSH_OPTS <<< '-i /home/alice/.ssh/k $(reboot)'\n" in script


def test_every_jsc_cluster_tunnels_to_its_login_node(capsys, runs):
    for name in ("jureca", "jupiter", "juwels_booster"):
        cluster = load_registry().get(name)
        assert not cluster.internet and cluster.login_host
        script = ok_script(capsys, runs, "--config", "smoke", cluster=name)  # smoke fits every GPU
        assert f"HPC_TUNNEL_HOST={cluster.login_host}\n" in script


def test_judge_inside_the_cluster_skips_the_tunnel_but_stays_offline(capsys, runs):
    script = ok_script(capsys, runs, "--env", "JUDGE_API_BASE=http://judge.internal:8000/v1", cluster="jureca")
    assert "ssh " not in script and "HTTPS_PROXY" not in script
    assert "JUDGE_API_BASE is set (judge served inside the cluster): no SSH tunnel" in script
    assert "export HF_HUB_OFFLINE=1\n" in script and "export WANDB_MODE=offline\n" in script
    assert "export WANDB_ERROR_REPORTING=false\n" in script  # W&B retried Sentry at exit on an offline node


def test_cluster_with_internet_has_no_network_block(capsys, runs):
    script = ok_script(capsys, runs, nodes=2)
    assert "ssh " not in script and "HF_HUB_OFFLINE" not in script and "HPC_WORKLOAD_ENV+=" not in script


@pytest.mark.parametrize(
    "setting, fragment",
    [
        ("TUNNEL_PORT=socks", "invalid TUNNEL_PORT 'socks': accepted an integer 1024..65535 (default 1080)"),
        ("TUNNEL_PORT=80", "invalid TUNNEL_PORT '80': accepted an integer 1024..65535"),
        ("TUNNEL_TIMEOUT=0", "invalid TUNNEL_TIMEOUT '0': accepted an integer 1..3600 (default 30)"),
        ("TUNNEL_HOST=-oProxyCommand=reboot", "invalid TUNNEL_HOST '-oProxyCommand=reboot': expected a host name"),
        ("TUNNEL_HOST=login host", "invalid TUNNEL_HOST 'login host'"),
    ],
)
def test_bad_tunnel_settings_are_one_line_exit_2_and_nothing_written(capsys, runs, setting, fragment):
    code, out, err = dry_run(capsys, runs, "--env", setting, cluster="jureca")
    assert code == 2, out
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not runs.exists()


def test_offline_cluster_without_a_tunnel_host_is_refused_at_launch(capsys, runs, monkeypatch):
    registry = load_registry()
    registry.clusters["jureca"] = replace(registry.clusters["jureca"], login_host=None)
    monkeypatch.setattr(launch, "load_registry", lambda: registry)
    code, out, err = dry_run(capsys, runs, cluster="jureca")
    assert code == 2, out
    assert "jureca's compute nodes have no internet and no host to tunnel through: set TUNNEL_HOST" in err
    assert not runs.exists()
    # A judge inside the cluster needs no tunnel host.
    code, _, err = dry_run(capsys, runs, "--env", "JUDGE_API_BASE=http://judge.internal:8000/v1", cluster="jureca")
    assert code == 0, err


# -- a real tunnel over loopback ------------------------------------------------------------


def tunnel(port: int, key: Path, socks_port: int) -> Tunnel:
    """A tunnel to the test's sshd. -F none: the machine's ssh_config is not read."""
    return Tunnel(host="127.0.0.1", port=socks_port, timeout=10,
                  ssh_opts=f"-F none -p {port} -i {key} -o StrictHostKeyChecking=no "
                           "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR")


def run_network_block(tmp_path: Path, settings: Tunnel, workload: str) -> subprocess.CompletedProcess:
    """The rendered block inside the base template's hooks, then `workload`;
    HOME is the test's own, so no ~/.ssh of the machine is read or written."""
    block = render("_offline_network.sh.j2", {"cluster": load_registry().get("jureca"), "tunnel": settings})
    script = tmp_path / "net.sh"
    script.write_text(
        "set -euo pipefail\nHPC_WORKLOAD_ENV=()\nHPC_CLEANUP=()\n"
        'hpc_cleanup() { local i; for ((i = ${#HPC_CLEANUP[@]} - 1; i >= 0; i--)); do eval "${HPC_CLEANUP[i]}" || true; done; }\n'
        "trap hpc_cleanup EXIT\n" + block + workload + "\n"
    )
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY") and not k.startswith("SLURM_")}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
               LITELLM_LOCAL_MODEL_COST_MAP="True")
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, env=env)


def forwarded_targets(sshd_log: Path) -> list[str]:
    """'host port' of every connection the sshd opened for a SOCKS client."""
    marker = ", target "
    return [line.split(marker, 1)[1].strip() for line in sshd_log.read_text().splitlines()
            if "server_request_direct_tcpip" in line and marker in line]


def assert_tunnel_closed(socks_port: int) -> None:
    left = subprocess.run(["pgrep", "-f", f"-D 127.0.0.1:{socks_port}"], capture_output=True, text=True)
    assert left.stdout == "", "the tunnel outlived the job"


def test_real_tunnel_carries_the_workloads_http_and_is_closed_at_exit(tmp_path, local_sshd):
    port, key, log = local_sshd
    socks_port, http_port = _free_port(), _free_port()
    # The target listens on 127.0.0.2, which NO_PROXY does not list: only the proxy path goes there.
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(http_port), "--bind", "127.0.0.2"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fetch = f"import httpx; print('workload got', httpx.get('http://127.0.0.2:{http_port}/', timeout=10).status_code)"
    workload = (
        'echo "job sees proxy: ${HTTPS_PROXY:-none}"\n'
        'env "${HPC_WORKLOAD_ENV[@]}" sh -c \'echo "workload sees: $HTTPS_PROXY $ALL_PROXY"\'\n'
        f'env "${{HPC_WORKLOAD_ENV[@]}}" python -c "{fetch}"'
    )
    try:
        time.sleep(0.5)
        result = run_network_block(tmp_path, tunnel(port, key, socks_port), workload)
    finally:
        server.terminate()
        server.wait()
    assert result.returncode == 0, result.stdout + result.stderr
    proxy = f"socks5h://127.0.0.1:{socks_port}"
    assert "job sees proxy: none" in result.stdout
    assert f"workload sees: {proxy} {proxy}" in result.stdout
    assert "workload got 200" in result.stdout
    assert f"127.0.0.2 port {http_port}" in forwarded_targets(log)
    assert_tunnel_closed(socks_port)


def test_real_tunnel_carries_the_judges_litellm_calls_with_names_resolved_at_the_login_node(tmp_path, local_sshd):
    """The default judge (litellm, Gemini): its request leaves through the
    tunnel, the name resolved on the far side (socks5h), which matters where
    compute nodes have no DNS for the internet. There is no internet here, so
    the call itself fails; the sshd's log shows where it went."""
    pytest.importorskip("litellm", reason="the trainer's frontend is not installed (bash setup.sh)")
    port, key, log = local_sshd
    socks_port = _free_port()
    judge_call = (
        "import asyncio, litellm\n"
        "async def main():\n"
        "    try:\n"
        "        await litellm.acompletion(model='gemini/gemini-2.0-flash', api_key='not-a-real-key', timeout=20,\n"
        "                                  num_retries=0, messages=[{'role': 'user', 'content': 'hi'}])\n"
        "    except Exception as error:\n"
        "        print('judge call failed as expected:', type(error).__name__)\n"
        "asyncio.run(main())\n"
    )
    (tmp_path / "judge_call.py").write_text(judge_call)
    workload = f'env "${{HPC_WORKLOAD_ENV[@]}}" python {tmp_path / "judge_call.py"}'
    result = run_network_block(tmp_path, tunnel(port, key, socks_port), workload)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "judge call failed as expected" in result.stdout
    assert "generativelanguage.googleapis.com port 443" in forwarded_targets(log), log.read_text()[-2000:]
    assert_tunnel_closed(socks_port)


def test_tunnel_with_a_refused_key_fails_with_one_clear_line(tmp_path, local_sshd):
    port, _, _ = local_sshd
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    result = run_network_block(tmp_path, tunnel(port, stranger, _free_port()), "echo workload ran")
    assert result.returncode == 1 and "workload ran" not in result.stdout
    assert "[net] error: ssh to 127.0.0.1 exited before the tunnel was up" in result.stderr


def test_tunnel_that_never_opens_its_port_fails_after_its_timeout(tmp_path):
    """ssh that hangs (here: a host that never answers the handshake) must not hold the job."""
    require_openssh()
    with socket.socket() as silent:  # accepts TCP connections, never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        settings = Tunnel(host="127.0.0.1", port=_free_port(), timeout=2,
                          ssh_opts=f"-F none -p {silent.getsockname()[1]} -o ConnectTimeout=30")
        started = time.monotonic()
        result = run_network_block(tmp_path, settings, "echo workload ran")
    assert result.returncode == 1 and "workload ran" not in result.stdout
    assert f"[net] error: the tunnel to 127.0.0.1 did not open port {settings.port} within 2s" in result.stderr
    assert time.monotonic() - started < 15
    assert_tunnel_closed(settings.port)
