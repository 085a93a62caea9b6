"""A serve job on the real local Slurm: launched like any run, it writes where it listens,
answers a request, status.sh prints the ssh line that reaches it, and it stops cleanly
at scancel (the run is not continued)."""

from __future__ import annotations

import json
import re
import subprocess
import time

import httpx
import pytest

from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.openai_server import OpenAIServer
from tests.hpc.slurm_helpers import cancel, launch
from tests.scripts.slurm_util import run_script, wait_final
from tests.trainer.serving.test_serve import INBOX, SOURCE, scripted

pytestmark = pytest.mark.slurm


def test_a_serve_job_answers_is_reachable_and_stops_at_scancel(slurm, tmp_path, art_e_data_dir):
    runs = tmp_path / "runs"
    with OpenAIServer(scripted) as model:
        result = launch("--cluster", "local", "--job_name", "agent_serve", "--time_limit", "10", "--runs_dir", str(runs),
                        "--entrypoint", "trainer.serve", "--config", "smoke", "--gpus_per_node", "0",
                        "--env", f"DATA_DIR={art_e_data_dir}",
                        "--train_arg", f"model=url:{model.base_url}#policy", "--train_arg", "port=18473")
        assert result.returncode == 0, result.stderr
        job = re.search(r"submitted job (\d+)", result.stdout).group(1)
        run = RunDir(runs / "agent_serve")
        try:
            address_file = run.serve_dir / "address.json"
            deadline = time.monotonic() + 120
            while not address_file.exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            address = json.loads(address_file.read_text())
            assert address["host"] == "127.0.0.1" and address["port"] == 18473 and address["job_id"] == job
            reply = httpx.post(f"http://127.0.0.1:{address['port']}/invoke", timeout=60,
                               json={"question": "Where?", "inbox": INBOX, "query_date": "2000-03-28"})
            assert reply.status_code == 200 and reply.json()["source_ids"] == [SOURCE]
            status = run_script("status.sh", "--runs_dir", str(runs), "--run", "agent_serve")
            assert "ssh -L 8080:127.0.0.1:18473 -J " in status.stdout, status.stdout
            subprocess.run(["scancel", job], check=True, timeout=30)
            info = wait_final([job], timeout=120)[job]
            deadline = time.monotonic() + 30  # the end hook writes the ledger as the job finishes
            while not any(r["event"] == "cancelled" for r in ledger_lines(run)) and time.monotonic() < deadline:
                time.sleep(0.3)
        finally:
            cancel([job])
    assert info["State"] == "CANCELLED"
    (end,) = [r for r in ledger_lines(run) if r["event"] == "job_end"]
    assert end["exit_code"] == 75, "the service stopped on its own at TERM, not killed"
    assert any(r["event"] == "cancelled" for r in ledger_lines(run)), "a cancelled serve job is not continued"
    assert not [r for r in ledger_lines(run) if r["event"] in ("requeue", "resubmit")]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{address['port']}/health", timeout=2)
