"""A stop signal in the middle of a validation, and the resume after it, in real Slurm: the
real trainer (backend double) in a launched job, its scripted model and judge in this test."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path

import pytest

from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.openai_server import OpenAIServer, Reply, text
from tests.hpc.slurm_helpers import cancel, launch
from tests.scripts.slurm_util import wait_final
from tests.trainer.training.test_validation import PLANTED, planted_agent
from trainer.training.judge_ping import JUDGE_PING

pytestmark = pytest.mark.slurm
JUDGE = "judge-model"


def test_usr1_during_a_validation_loses_no_step_and_the_next_job_validates_once(slurm, tmp_path, art_e_data_dir):
    lines = (art_e_data_dir / "scenarios" / "test.jsonl").read_text().splitlines()
    questions = {q["question"]: q["answer"] for q in map(json.loads, lines)}
    agent = planted_agent(PLANTED, questions)
    validating, jobs = threading.Event(), []

    def respond(body: dict) -> Reply:
        if body["messages"][-1]["content"] == JUDGE_PING:  # the trainer's preflight asks the judge once
            return text("OK")
        reply = agent(body)
        if body.get("model") != JUDGE and body["messages"][-1]["content"] in questions and not validating.is_set():
            validating.set()  # the first validation question: hold it while the job is told to stop
            return Reply(tool_calls=reply.tool_calls, delay=4.0)
        return reply

    runs = tmp_path / "runs"
    with OpenAIServer(respond) as server:
        result = launch("--cluster", "local", "--job_name", "val_stop", "--time_limit", "10", "--runs_dir", str(runs),
                        "--config", "smoke", "--continuation", "afterany",
                        "--env", f"ART_FAKE_INFERENCE_URL={server.base_url}", "--env", f"JUDGE_API_BASE={server.base_url}",
                        "--env", f"JUDGE_MODEL={JUDGE}", "--env", f"DATA_DIR={art_e_data_dir}", "--env", "TQDM_DISABLE=1",
                        "--train_arg", "backend=tests.doubles.art_backend:FakeBackend", "--train_arg", "judge_retries=0",
                        "--train_arg", "val_set_size=4", "--train_arg", "eval_steps=2", "--train_arg", "eval_concurrency=4")
        assert result.returncode == 0, result.stderr
        jobs.append(re.search(r"submitted job (\d+)", result.stdout).group(1))
        try:
            assert validating.wait(120), "the job never began validating"
            subprocess.run(["scancel", "--signal=USR1", "--batch", jobs[0]], check=True, timeout=30)
            run = RunDir(runs / "val_stop")
            wait_final([jobs[0]], timeout=120)
            follower = [r["job_id"] for r in ledger_lines(run) if r["event"] == "resubmit"]
            assert follower, ledger_lines(run)
            jobs += follower
            wait_final(follower, timeout=240)
        finally:
            cancel(jobs)

    assert run.read_done() is not None
    assert [v["step"] for v in run.read_validations()] == [0, 2], "each validation exactly once"
    assert all(v["accuracy"] == 0.5 for v in run.read_validations())
    ends = [r for r in ledger_lines(run) if r["event"] == "job_end"]
    assert [(e["outcome"], e["step"]) for e in ends] == [("stopped_for_time", 0), ("finished", 2)]
    first_log = Path(run.log_paths(jobs[0])[0]).read_text()
    assert "validation at step 0 abandoned (stop requested)" in first_log
