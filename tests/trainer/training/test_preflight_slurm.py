"""Preflight in real Slurm: a job that cannot work fails in seconds, with the reason in its
log, in failed.json and in status.sh; a configuration error ends the run at once, a
transient failure is retried until --max_failures, and a new launch starts a fresh count.

Every run is launched by the real launcher with the real job template. The workload is
the real trainer (the issue's own case: `--config smoke` where neither the data nor the
GPU backend exists) or the step double with ``preflight=smoke``, which runs the trainer's
own checks with the job's environment before its steps. The judge is the scripted
OpenAI-compatible endpoint in this process (it checks a key), "unreachable" a closed
port. All runs go at once (afterany continuation: no requeue hold); the module takes
about as long as its slowest run, the transient one launched twice (~1-2 minutes).
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpc.run.rundir import RunDir
from tests.doubles.ledger_lines import ledger_lines
from tests.doubles.openai_server import OpenAIServer, text
from tests.hpc.slurm_helpers import cancel, launch
from tests.scripts.slurm_util import run_script, sacct_row, wait_final

pytestmark = pytest.mark.slurm

KEY = "sk-preflight-slurm-0123456789"
WRONG_KEY = "sk-preflight-wrong-9876543210"
JUDGE = "judge-model"
FAST_FAIL_SECONDS = 30  # a failed preflight job, from its start to its end (model load would be minutes)
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"}
DOUBLE = ("--entrypoint", "tests.doubles.step_trainer", "--gpus_per_node", "0",
          "--train_arg", "steps=2", "--train_arg", "step_seconds=1", "--train_arg", "preflight=smoke")
FAKE_BACKEND = "backend=tests.doubles.art_backend:FakeBackend"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Case:
    """One run: its launch arguments, and the check and kind its preflight must fail with."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    check: str | None = None  # None: the preflight passes and the run trains
    kind: str = "permanent"
    run: RunDir | None = None
    notes: dict = field(default_factory=dict)

    def launch(self, runs: Path, base_env: dict[str, str]) -> subprocess.CompletedProcess:
        env = [f"--env={name}={value}" for name, value in {**base_env, **self.env}.items()]
        result = launch("--cluster", "local", "--job_name", self.name, "--time_limit", "2", "--runs_dir", str(runs),
                        "--cpus_per_task", "1", "--continuation", "afterany", "--signal_grace", "30", *env, *self.args,
                        "--no_preflight")  # the job's own preflight is under test (the login side: test_queue_preflight)
        assert result.returncode == 0, result.stdout + result.stderr
        self.run = RunDir(runs / self.name)
        return result

    @property
    def headline(self) -> str:
        return f"preflight check '{self.check}' failed ({self.kind}): "


def double(overrides: str = FAKE_BACKEND + ",val_set_size=0", *extra: str) -> tuple[str, ...]:
    return (*DOUBLE, "--train_arg", f"preflight_overrides={overrides}", *extra)


def job_ids(run: RunDir) -> list[str]:
    return list(dict.fromkeys(str(r["job_id"]) for r in ledger_lines(run) if r["event"] in ("submit", "resubmit")))


def events(run: RunDir, name: str) -> list[dict]:
    return [r for r in ledger_lines(run) if r["event"] == name]


def settled(run: RunDir) -> bool:
    """Done or failed, and no job of the run still queued or running."""
    if not (run.done_file.exists() or run.failed_file.exists()):
        return False
    ids = job_ids(run)
    out = subprocess.run(["squeue", "-h", "-o", "%T", "-j", ",".join(ids)], capture_output=True, text=True,
                         timeout=30).stdout
    return not ACTIVE & set(out.split())


def wait_settled(cases: list[Case], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(settled(case.run) for case in cases):
            return
        time.sleep(0.5)
    raise AssertionError("runs did not settle: " + "; ".join(
        f"{c.name}: {ledger_lines(c.run)}" for c in cases if not settled(c.run)))


@pytest.fixture(scope="module")
def judge():
    with OpenAIServer(lambda body: text("OK"), api_key=KEY) as server:
        yield server


@pytest.fixture(scope="module")
def cases(slurm, judge, art_e_data_dir, tmp_path_factory):
    """Every run launched at once, followed until each is done or given up; then the
    transient one is launched again and followed once more."""
    tmp = tmp_path_factory.mktemp("preflight_slurm")
    no_train = Path(shutil.copytree(art_e_data_dir, tmp / "data-without-train"))
    (no_train / "scenarios" / "train.jsonl").unlink()
    down = f"http://127.0.0.1:{closed_port()}/v1"
    all_cases = {
        # The issue's own case: the real trainer, --config smoke, no data and no GPU backend here.
        "smoke": Case("pf_smoke", ("--config", "smoke", "--gpus_per_node", "1", "--max_failures", "3"),
                      {"DATA_DIR": str(tmp / "no-data")}, "data"),
        "scenarios": Case("pf_scenarios", double(), {"DATA_DIR": str(no_train)}, "scenarios"),
        "cache": Case("pf_cache", double("backend=local,val_set_size=0"),
                      {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "empty-hf")}, "model_cache"),
        "backend": Case("pf_backend", double("backend=local,val_set_size=0"), {}, "backend"),
        "key": Case("pf_key", double(), {"JUDGE_API_KEY": WRONG_KEY}, "judge"),
        "disk": Case("pf_disk", double(FAKE_BACKEND + ",val_set_size=0,preflight_min_free_gb=1e9", "--max_failures", "1"),
                     {}, "filesystems", "transient"),
        "down": Case("pf_judge_down", double(FAKE_BACKEND + ",val_set_size=0", "--max_failures", "2"),
                     {"JUDGE_API_BASE": down}, "judge", "transient"),
        "ok": Case("pf_ok", double(FAKE_BACKEND + ",val_set_size=2")),
    }
    runs = tmp / "runs"
    # HF_HUB_OFFLINE: the jobs inherit the submitting shell's (CI exports 1), and an offline node
    # adds the HF-cache check to every case; only the cache case is offline.
    base_env = {"DATA_DIR": str(art_e_data_dir), "JUDGE_API_BASE": judge.base_url, "JUDGE_API_KEY": KEY,
                "JUDGE_MODEL": JUDGE, "HF_HUB_OFFLINE": "0"}
    try:
        for case in all_cases.values():
            case.launch(runs, base_env)
        wait_settled(list(all_cases.values()), timeout=240)
        down_case = all_cases["down"]
        down_case.notes = {"first_launch": ledger_lines(down_case.run)}
        down_case.launch(runs, base_env)
        wait_settled([down_case], timeout=120)
        yield all_cases
    finally:
        cancel([job for case in all_cases.values() if case.run for job in job_ids(case.run)])


def accounting(jobs: list[str]) -> list[dict[str, str]]:
    wait_final(jobs, timeout=60)
    return [sacct_row(job, "State,ExitCode,ElapsedRaw,JobName") for job in jobs]


def assert_failed_fast_with_its_line(case: Case, code: int) -> str:
    """Each job failed within seconds with the exit code of its kind; its .err log holds the
    headline as its last preflight line; failed.json and the ledger quote it. The line."""
    jobs = job_ids(case.run)
    for row in accounting(jobs):
        assert row["State"] == "FAILED" and row["ExitCode"] == f"{code}:0", row
        assert int(row["ElapsedRaw"]) <= FAST_FAIL_SECONDS, row
    err = case.run.log_paths(jobs[-1])[1].read_text()
    lines = [line for line in err.splitlines() if line.startswith("preflight check ")]
    assert lines and lines[-1].startswith(case.headline) and "; fix: " in lines[-1], err
    failed = case.run.read_failed()
    assert failed["error"] == lines[-1] and failed["reason"].endswith(lines[-1])
    assert failed["log_tail"] == str(case.run.log_paths(jobs[-1])[1])
    (record,) = events(case.run, "failed")[-1:]
    assert record["error"] == lines[-1]
    return lines[-1]


@pytest.mark.parametrize("name", ["smoke", "scenarios", "cache", "backend", "key"])
def test_a_configuration_error_fails_the_job_in_seconds_and_ends_the_run_at_once(cases, name):
    case = cases[name]
    line = assert_failed_fast_with_its_line(case, 78)
    assert len(job_ids(case.run)) == 1 and not events(case.run, "resubmit")  # not retried
    assert case.run.read_failed()["reason"] == f"configuration error (exit 78), not retried: {line}"
    [job_end] = events(case.run, "job_end")
    assert job_end["exit_code"] == 78 and job_end["error"] == line


def test_the_issues_smoke_run_names_the_missing_data_and_the_missing_backend(cases):
    case = cases["smoke"]
    err = case.run.log_paths(job_ids(case.run)[0])[1].read_text()
    assert "preflight check 'backend' failed (permanent): backend 'local' (ART's LocalBackend) needs torch" in err
    assert "python -m trainer.data prepare" in case.run.read_failed()["error"]
    out = case.run.log_paths(job_ids(case.run)[0])[0].read_text()
    assert "preflight ok: filesystems" in out and "registering with the backend" not in out


def test_a_rejected_key_is_never_written_anywhere(cases):
    case = cases["key"]
    assert "rejects the key (HTTP 401" in case.run.read_failed()["error"]
    for path in case.run.path.rglob("*"):
        if path.is_file() and path.name != "secrets.env":
            assert WRONG_KEY not in path.read_text(errors="replace"), path


def test_a_transient_failure_is_retried_until_max_failures_then_the_run_stops(cases):
    case = cases["down"]
    first = case.notes["first_launch"]
    ends = [r for r in first if r["event"] == "job_end"]
    assert [(e["outcome"], e["exit_code"]) for e in ends] == [("failed", 69), ("failed", 69)]
    assert [r["event"] for r in first].count("resubmit") == 1  # the first failure was retried
    failed = [r for r in first if r["event"] == "failed"][0]
    assert failed["reason"].startswith("2 failed job(s) in a row without progress (--max_failures 2); "
                                       "last exit code 69: preflight check 'judge' failed (transient): ")
    assert "did not answer" in failed["error"]


def test_a_relaunch_gets_a_fresh_failure_count(cases):
    case = cases["down"]
    ledger = ledger_lines(case.run)
    relaunch = max(k for k, r in enumerate(ledger) if r["event"] == "submit")
    ends = [r for r in ledger[relaunch:] if r["event"] == "job_end"]
    assert len(ends) == 2, ledger[relaunch:]  # --max_failures 2 again, not the 1 left over from before
    assert_failed_fast_with_its_line(case, 69)
    assert len(job_ids(case.run)) == 4


def test_a_full_filesystem_is_transient_and_max_failures_1_stops_after_one_job(cases):
    case = cases["disk"]
    line = assert_failed_fast_with_its_line(case, 69)
    assert "below preflight_min_free_gb=1e+09" in line and len(job_ids(case.run)) == 1
    assert case.run.read_failed()["reason"].startswith("1 failed job(s) in a row without progress")


def test_a_passing_preflight_lets_the_job_train(cases, judge):
    case = cases["ok"]
    assert case.run.read_done()["final_step"] == 2 and not case.run.failed_file.exists()
    out = case.run.log_paths(job_ids(case.run)[0])[0].read_text()
    assert "preflight: 7 of 7 checks passed" in out and "step_trainer: finished at step 2" in out
    asked = [r for r in judge.requests if r.headers.get("authorization") == f"Bearer {KEY}"]
    assert asked, "the preflight asked the judge with the run's key"


def test_status_shows_each_failed_runs_error_line(cases):
    runs = cases["smoke"].run.path.parent
    result = run_script("status.sh", "--runs_dir", str(runs))
    assert result.returncode == 0, result.stderr
    for case in cases.values():
        if case.check is None:
            continue
        row = next(line for line in result.stdout.splitlines() if line.startswith(case.name + " "))
        assert re.search(re.escape(case.headline), row), row
