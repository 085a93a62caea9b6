"""hpc/job/notify.py: the webhook told as JSON when a run is done, failed, stalled or collapsed,
over real HTTP to a local receiver (and through a real SSH SOCKS tunnel, as on a cluster
without internet); it never fails the caller and never shows the URL."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc.job import begin_hook, end_hook, notify
from hpc.launcher.render import render
from hpc.run.rundir import RunDir
from tests.doubles.webhook_receiver import WebhookReceiver
from tests.hpc.launcher.test_offline_network import _free_port, forwarded_targets, local_sshd, run_network_block, tunnel

REPO = Path(__file__).resolve().parents[3]
TOKEN = "T0KEN-b3e1-not-for-logs"


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "agent_008")
    run.write_progress({"step": 212, "total_steps": 628})
    return run


def env_for(hook: WebhookReceiver, **more: str) -> dict[str, str]:
    return {"HPC_WEBHOOK_URL": hook.url(f"/services/{TOKEN}"), "SLURM_JOB_ID": "4242", "HPC_CLUSTER": "jureca",
            **more}


def test_the_webhook_gets_one_json_notice_with_a_line_people_read(run, capsys):
    with WebhookReceiver() as hook:
        assert notify.tell(run, "stalled", "STALLED: no step for 31m", env_for(hook))
    (got,) = hook.received
    assert got.path == f"/services/{TOKEN}"
    assert got.body["text"] == "agent_008: stalled at step 212/628 (job 4242 on jureca): STALLED: no step for 31m"
    assert {k: got.body[k] for k in ("event", "run", "job_id", "cluster", "step", "total_steps")} == {
        "event": "stalled", "run": "agent_008", "job_id": "4242", "cluster": "jureca", "step": 212,
        "total_steps": 628}
    err = capsys.readouterr().err
    assert err == "[notify] told the webhook that agent_008 stalled (HTTP 200)\n" and TOKEN not in err


def test_the_url_stays_out_of_the_logs_of_a_process_that_logs_everything(run, caplog):
    caplog.set_level(logging.DEBUG)  # as the end hook does (INFO), and more
    with WebhookReceiver() as hook:
        assert notify.tell(run, "done", env=env_for(hook))
    assert hook.events() == ["done"] and TOKEN not in caplog.text


def test_without_a_webhook_url_nothing_is_sent(run, capsys):
    with WebhookReceiver() as hook:
        assert not notify.tell(run, "done", env={"SLURM_JOB_ID": "1"})
    assert hook.received == [] and capsys.readouterr().err == ""


@pytest.mark.parametrize("how", ["answers 500", "hangs", "is down"])
def test_a_webhook_that_fails_never_fails_the_caller_and_the_message_hides_its_url(run, capsys, how):
    with WebhookReceiver(status=500 if how == "answers 500" else 200, delay=3 if how == "hangs" else 0) as hook:
        url = hook.url(f"/services/{TOKEN}")
        if how == "is down":
            url = f"http://127.0.0.1:{_free_port()}/services/{TOKEN}"
        began = time.monotonic()
        assert notify.tell(run, "failed", "x", {"HPC_WEBHOOK_URL": url, "HPC_WEBHOOK_TIMEOUT": "1"}) is False
        assert time.monotonic() - began < 2.5
    err = capsys.readouterr().err
    assert err.startswith("[notify] ") and len(err.splitlines()) == 1
    assert TOKEN not in err and "services" not in err
    expected = {"answers 500": "answered HTTP 500", "hangs": "Timeout", "is down": "ConnectError"}[how]
    assert expected in err


def test_the_end_hook_tells_the_webhook_that_the_run_is_done_or_failed(tmp_path, monkeypatch):
    model = tmp_path / "art" / "p" / "models" / "m"
    with WebhookReceiver() as hook:
        monkeypatch.setenv("HPC_WEBHOOK_URL", hook.url(f"/services/{TOKEN}"))
        for name, exit_code in (("finishes", 0), ("crashes", 1)):
            run = RunDir(tmp_path / name)
            assert begin_hook.begin(run, model / name, "local", 0) == 0
            end_hook.end(end_hook.EndArgs(run=run, model_dir=model / name, job_id="local", exit_code=exit_code,
                                  mode="afterany", script=Path("/x.sbatch"), max_resubmits=5, max_failures=1,
                                  log_err=None))
    assert [(r.body["run"], r.body["event"]) for r in hook.received] == [("finishes", "done"), ("crashes", "failed")]
    assert "failed job(s) in a row without progress" in hook.received[1].body["detail"]


def test_the_job_passes_the_tunnel_to_the_notifier_and_the_notice_goes_through_it(tmp_path, local_sshd):
    """As on JURECA: the webhook at 127.0.0.2 (not in NO_PROXY) is reached through the job's
    SSH SOCKS tunnel, with the proxy the job script gives the notifier alone."""
    port, key, log = local_sshd
    socks_port = _free_port()
    watch_block = render("_watch.sh.j2", {"run_dir": str(tmp_path / "run")})
    run = RunDir(tmp_path / "run")
    run.write_progress({"step": 3, "total_steps": 9})
    with WebhookReceiver(host="127.0.0.2") as hook:
        url = hook.url(f"/services/{TOKEN}")
        workload = watch_block + (
            'echo "job sees: ${HTTPS_PROXY:-no proxy}; notifier gets: $HPC_NOTIFY_PROXY"\n'
            f"HPC_WEBHOOK_URL={url} {sys.executable} -c "
            f"\"import pathlib; from hpc.job import notify; from hpc.run import rundir; "
            f"notify.tell(rundir.RunDir(pathlib.Path('{run.path}')), 'done')\"")
        result = run_network_block(tmp_path, tunnel(port, key, socks_port), workload)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"job sees: no proxy; notifier gets: socks5h://127.0.0.1:{socks_port}" in result.stdout
    assert hook.events() == ["done"], result.stderr
    assert f"127.0.0.2 port {hook.port}" in forwarded_targets(log)
    assert TOKEN not in result.stdout + result.stderr


def test_a_job_script_starts_the_watcher_only_with_a_webhook_and_stops_it_at_exit(tmp_path):
    script = tmp_path / "job.sh"
    block = render("_watch.sh.j2", {"run_dir": str(tmp_path / "run")})
    script.write_text("set -euo pipefail\nHPC_WORKLOAD_ENV=()\nHPC_CLEANUP=()\n"
                      'hpc_cleanup() { local i; for ((i = ${#HPC_CLEANUP[@]} - 1; i >= 0; i--)); do '
                      'eval "${HPC_CLEANUP[i]}" || true; done; }\ntrap hpc_cleanup EXIT\n' + block +
                      'hpc_watch_start\necho "watcher: ${HPC_WATCH_PID:-none}"\n'
                      'if [[ -n ${HPC_WATCH_PID:-} ]]; then sleep 1; kill -0 "$HPC_WATCH_PID" && echo "it watches"; fi\n')
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HPC_WATCH_INTERVAL": "1"}
    quiet = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, env=env, cwd=REPO)
    assert quiet.returncode == 0 and "watcher: none" in quiet.stdout
    told = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, cwd=REPO,
                          env={**env, "HPC_WEBHOOK_URL": f"http://127.0.0.1:9/{TOKEN}"})
    assert "it watches" in told.stdout, told.stderr
    pid = int(told.stdout.split("watcher: ")[1].split()[0])
    time.sleep(0.5)
    assert told.returncode == 0 and not alive(pid), "the watcher outlived the job"


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (a container's init may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
