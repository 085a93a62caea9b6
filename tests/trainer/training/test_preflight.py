"""trainer.preflight: each check on real files and a real HTTP endpoint (the scripted
OpenAI-compatible server as the judge and as W&B's API, a closed port as "unreachable"),
the job's one-line errors and exit codes, and the login-side command line."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc.job.exit_codes import EXIT_CONFIG_ERROR, EXIT_UNAVAILABLE
from tests.doubles.openai_server import OpenAIServer, failure, text
from tests.trainer.staging.test_model_cache import BASE, QUANTIZED, cache_repo
from trainer.training import preflight as pf
from trainer.training import preflight_checks as checks
from trainer.training import preflight_services as services
from trainer.training.config import load_config

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

REPO = Path(__file__).resolve().parents[3]
JUDGE = "judge-model"
KEY = "sk-preflight-secret-0123456789"
LOCAL = ["backend=local"]
DOUBLE = ["backend=tests.doubles.art_backend:FakeBackend"]


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def context(tmp_path: Path, data_dir: Path, overrides: list[str] = (), env: dict | None = None,
            where: str = "job") -> checks.Context:
    config = load_config("smoke", [*DOUBLE, *overrides])
    targets = checks.Targets(run_dir=tmp_path / "run", model_dir=tmp_path / "art" / "email_agent" / "models" / "run",
                         data_dir=data_dir, wandb_dir=tmp_path / "run")
    return checks.Context(config, targets, {"JUDGE_MODEL": JUDGE, **(env or {})}, where)


@pytest.fixture
def judge():
    with OpenAIServer(lambda body: text("OK"), api_key=KEY) as server:
        yield server


def judge_env(server: OpenAIServer, key: str = KEY) -> dict[str, str]:
    return {"JUDGE_API_BASE": server.base_url, "JUDGE_API_KEY": key}


# -- data and scenarios --------------------------------------------------------------------


def test_staged_data_passes_with_its_email_count(tmp_path, art_e_data_dir):
    result = checks.check_data(context(tmp_path, art_e_data_dir))
    assert result.ok and "enron_emails.db" in result.message and "emails" in result.message


def test_a_missing_data_directory_is_permanent_and_names_the_prepare_command(tmp_path):
    result = checks.check_data(context(tmp_path, tmp_path / "no-data"))
    assert not result.ok and result.permanent
    assert "no-data does not exist" in result.message and "python -m trainer.data prepare" in result.fix


def test_a_data_directory_without_the_database_is_permanent(tmp_path):
    (tmp_path / "data").mkdir()
    result = checks.check_data(context(tmp_path, tmp_path / "data"))
    assert result.permanent and "email database not found" in result.message


@pytest.mark.parametrize("make,words", [
    (lambda db: db.write_bytes(b"not sqlite at all" * 100), "is not an SQLite database"),
    (lambda db: sqlite3.connect(db).execute("CREATE TABLE emails (id)").connection.commit(), "missing"),
])
def test_a_database_that_is_not_this_versions_is_permanent_and_says_rebuild(tmp_path, make, words):
    (tmp_path / "data").mkdir()
    make(tmp_path / "data" / "enron_emails.db")
    result = checks.check_data(context(tmp_path, tmp_path / "data"))
    assert result.permanent and words in result.message and "prepare --force" in result.fix


def test_an_empty_database_is_permanent(tmp_path):
    (tmp_path / "data").mkdir()
    conn = sqlite3.connect(tmp_path / "data" / "enron_emails.db")
    for table in ("emails", "recipients", "emails_fts", "emails_pos"):
        conn.execute(f"CREATE TABLE {table} (id)")
    conn.commit()
    result = checks.check_data(context(tmp_path, tmp_path / "data"))
    assert result.permanent and "holds no emails" in result.message


def copy_data(art_e_data_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(art_e_data_dir, tmp_path / "data"))


def test_the_scenarios_pass_with_their_counts(tmp_path, art_e_data_dir):
    result = checks.check_scenarios(context(tmp_path, art_e_data_dir, ["val_set_size=3"]))
    assert result.ok and result.message == "4 training scenarios, 3 validation questions"


def test_a_missing_training_file_is_permanent(tmp_path, art_e_data_dir):
    data = copy_data(art_e_data_dir, tmp_path)
    (data / "scenarios" / "train.jsonl").unlink()
    result = checks.check_scenarios(context(tmp_path, data))
    assert result.permanent and "scenario file not found" in result.message and "train.jsonl" in result.message


def test_the_test_split_is_needed_only_when_the_config_validates(tmp_path, art_e_data_dir):
    data = copy_data(art_e_data_dir, tmp_path)
    (data / "scenarios" / "test.jsonl").unlink()
    assert checks.check_scenarios(context(tmp_path, data, ["val_set_size=0"])).ok
    assert checks.check_scenarios(context(tmp_path, data, ["val_set_size=2"])).permanent


def test_a_line_that_does_not_parse_is_permanent_and_says_prepare_force(tmp_path, art_e_data_dir):
    data = copy_data(art_e_data_dir, tmp_path)
    with (data / "scenarios" / "train.jsonl").open("a") as handle:
        handle.write('{"id": 1, "question": \n')
    result = checks.check_scenarios(context(tmp_path, data))
    assert result.permanent and "train.jsonl:" in result.message and "prepare --force" in result.fix


def test_no_scenario_passing_the_filter_is_permanent(tmp_path, art_e_data_dir):
    data = copy_data(art_e_data_dir, tmp_path)
    row = json.loads((data / "scenarios" / "train.jsonl").read_text().splitlines()[0])
    (data / "scenarios" / "train.jsonl").write_text(json.dumps({**row, "message_ids": ["<a>", "<b>"]}) + "\n")
    result = checks.check_scenarios(context(tmp_path, data, ["max_messages=1"]))
    assert result.permanent and "max_messages=1" in result.message


# -- model cache and backend ----------------------------------------------------------------


def test_offline_with_the_models_missing_is_permanent_naming_each_and_stage_model(tmp_path):
    ctx = context(tmp_path, tmp_path, LOCAL, {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    result = checks.check_model_cache(ctx)
    assert result.permanent and BASE in result.message and QUANTIZED in result.message
    assert "trainer.data stage-model --base_model Qwen/Qwen2.5-14B-Instruct" in result.fix


def test_offline_with_the_models_cached_passes(tmp_path):
    for repo in (BASE, QUANTIZED):
        cache_repo(tmp_path / "hf" / "hub", repo)
    ctx = context(tmp_path, tmp_path, LOCAL, {"HPC_NO_INTERNET": "1", "HF_HOME": str(tmp_path / "hf")})
    assert checks.check_model_cache(ctx).ok


def test_an_online_node_or_another_backend_needs_no_cache(tmp_path):
    assert checks.check_model_cache(context(tmp_path, tmp_path, LOCAL, {"HF_HOME": str(tmp_path)})).ok
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    assert "not checked" in checks.check_model_cache(context(tmp_path, tmp_path, env=offline)).message


def test_a_backend_class_is_found_without_importing_it(tmp_path):
    assert checks.check_backend(context(tmp_path, tmp_path)).ok
    result = checks.check_backend(context(tmp_path, tmp_path, ["backend=no_such_package.sub:Backend"]))
    assert result.permanent and "'no_such_package.sub'" in result.message


def test_the_local_backend_needs_its_gpu_packages(tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "module_found", lambda name: name not in ("torch", "unsloth"))
    result = checks.check_backend(context(tmp_path, tmp_path, LOCAL))
    assert result.permanent and "needs torch, unsloth" in result.message and "setup.sh --backend" in result.fix


def test_offline_the_local_backend_needs_a_built_vllm_runtime(tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "module_found", lambda name: True)
    offline = {"HPC_NO_INTERNET": "1", "ART_VLLM_RUNTIME_CACHE_DIR": str(tmp_path / "runtimes")}
    result = checks.check_backend(context(tmp_path, tmp_path, LOCAL, offline))
    assert result.permanent and "cannot build it" in result.message
    server = tmp_path / "art-vllm-runtime-server"
    server.write_text("#!/bin/sh\n")
    assert checks.check_backend(context(tmp_path, tmp_path, LOCAL, {**offline, "ART_VLLM_RUNTIME_BIN": str(server)})).ok
    assert checks.check_backend(context(tmp_path, tmp_path, LOCAL, {"ART_VLLM_RUNTIME_CACHE_DIR": str(tmp_path)})).ok


# -- filesystems ------------------------------------------------------------------------------


def test_writable_output_folders_with_room_pass_even_before_they_exist(tmp_path):
    result = checks.check_filesystems(context(tmp_path, tmp_path, ["preflight_min_free_gb=0.001"]))
    assert result.ok and "run dir, model folder writable" in result.message
    assert not (tmp_path / "run").exists() and list(tmp_path.iterdir()) == []  # the test file is gone


def test_the_login_side_writes_nothing(tmp_path):
    before = tmp_path.stat().st_mtime_ns
    assert checks.check_filesystems(context(tmp_path, tmp_path, ["preflight_min_free_gb=0"], where="login")).ok
    assert tmp_path.stat().st_mtime_ns == before


@pytest.mark.parametrize("where", pf.WHERE)
def test_an_output_folder_under_a_file_is_permanent(tmp_path, where):
    (tmp_path / "art").write_text("ART_PATH points at a file")
    result = checks.check_filesystems(context(tmp_path, tmp_path, where=where))
    assert result.permanent and "cannot write the model folder" in result.message


def test_less_free_space_than_the_floor_is_transient(tmp_path):
    result = checks.check_filesystems(context(tmp_path, tmp_path, ["preflight_min_free_gb=1000000000"]))
    assert not result.ok and not result.permanent
    assert "below preflight_min_free_gb=1e+09" in result.message


@pytest.mark.parametrize("code,permanent", [
    (errno.EACCES, True), (errno.EPERM, True), (errno.ENOTDIR, True),
    (errno.ENOSPC, False), (errno.EROFS, False), (errno.EDQUOT, False), (errno.ESTALE, False), (errno.EIO, False),
])
def test_permission_errors_are_permanent_and_a_troubled_filesystem_transient(tmp_path, code, permanent):
    error = OSError(code, os.strerror(code), str(tmp_path))
    result = checks.filesystem_failure(context(tmp_path, tmp_path), "run dir", tmp_path / "run", error)
    assert not result.ok and result.permanent == permanent and os.strerror(code) in result.message


# -- W&B --------------------------------------------------------------------------------------


def wandb_context(tmp_path: Path, env: dict, monkeypatch) -> checks.Context:
    for module in (checks, services):  # wandb "installed"
        monkeypatch.setattr(module, "module_found", lambda name: True)
    return context(tmp_path, tmp_path, env={"WANDB_API_KEY": KEY, **env})


def test_without_a_key_or_the_wandb_package_nothing_is_logged_and_all_is_well(tmp_path, monkeypatch):
    assert "not set" in services.check_wandb(context(tmp_path, tmp_path)).message
    monkeypatch.setattr(services, "module_found", lambda name: name != "wandb")
    assert "not installed" in services.check_wandb(context(tmp_path, tmp_path, env={"WANDB_API_KEY": KEY})).message


def test_an_offline_node_must_log_offline(tmp_path, monkeypatch):
    assert services.check_wandb(wandb_context(tmp_path, {"HPC_NO_INTERNET": "1"}, monkeypatch)).ok  # the job sets offline
    result = services.check_wandb(wandb_context(tmp_path, {"HPC_NO_INTERNET": "1", "WANDB_MODE": "online"}, monkeypatch))
    assert result.permanent and "WANDB_MODE=online on a node without internet" in result.message
    assert "WANDB_MODE=offline" in result.fix


def test_online_mode_reaches_w_and_b_and_a_rejected_key_is_permanent(tmp_path, monkeypatch, judge):
    result = services.check_wandb(wandb_context(tmp_path, {"WANDB_BASE_URL": judge.url}, monkeypatch))
    assert result.permanent and "rejects WANDB_API_KEY (HTTP 401)" in result.message and KEY not in result.message
    with OpenAIServer([]) as open_server:  # answers 404 to /graphql: reachable, key not refused
        assert services.check_wandb(wandb_context(tmp_path, {"WANDB_BASE_URL": open_server.url}, monkeypatch)).ok


def test_online_mode_without_an_answer_is_transient(tmp_path, monkeypatch):
    env = {"WANDB_BASE_URL": f"http://127.0.0.1:{closed_port()}"}
    result = services.check_wandb(wandb_context(tmp_path, env, monkeypatch))
    assert not result.ok and not result.permanent and "did not answer" in result.message


# -- the judge --------------------------------------------------------------------------------


def test_the_judge_answers_one_tiny_request_with_the_key(tmp_path, judge):
    result = services.check_judge(context(tmp_path, tmp_path, env=judge_env(judge)))
    assert result.ok and "answered in" in result.message
    (request,) = judge.requests
    assert request.model == JUDGE and request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["max_tokens"] == 8 and len(request.messages) == 1


def test_a_judge_at_judge_api_base_is_asked_without_importing_litellm(tmp_path, judge):
    """litellm's import was most of every launch's preflight (bench/launch_latency.py): an
    OpenAI-compatible judge is asked with one HTTP POST (urllib: httpx only through a proxy)."""
    code = ("import sys, json\nfrom pathlib import Path\nfrom tests.trainer.training.test_preflight import context\n"
            "from trainer.training import preflight_services as services\n"
            f"env = json.loads({json.dumps(json.dumps(judge_env(judge)))})\n"
            f"result = services.check_judge(context(Path({str(tmp_path)!r}), Path({str(tmp_path)!r}), env=env))\n"
            "print(result.ok, 'litellm' in sys.modules, 'httpx' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.stdout.split() == ["True", "False", "False"], done.stderr
    (request,) = judge.requests
    assert request.model == JUDGE and request.headers["authorization"] == f"Bearer {KEY}"


def test_a_prefixed_model_name_the_server_refuses_is_left_to_litellms_routing(tmp_path):
    """``org/model`` refused over plain HTTP may be a litellm provider's name: litellm asks again, as
    the job would, and its answer (here the same 404) decides."""
    with OpenAIServer({"other-model": [text("OK")]}) as server:
        result = services.check_judge(context(tmp_path, tmp_path, env={**judge_env(server), "JUDGE_MODEL": "org/judge"}))
    assert result.permanent and "HTTP 404" in result.message
    assert [request.model for request in server.requests] == ["org/judge", "org/judge"]  # plain, then litellm


def test_a_key_the_judge_rejects_is_permanent_and_never_printed(tmp_path):
    wrong = "sk-wrong-key-9876543210"
    with OpenAIServer(lambda body: failure(401, f"Incorrect API key provided: {wrong}")) as server:
        result = services.check_judge(context(tmp_path, tmp_path, env=judge_env(server, wrong)))
    assert result.permanent and "rejects the key (HTTP 401" in result.message
    assert wrong not in result.message and "***" in result.message


def test_a_model_the_judge_does_not_serve_is_permanent(tmp_path):
    with OpenAIServer({"other-model": [text("OK")]}) as server:
        result = services.check_judge(context(tmp_path, tmp_path, env=judge_env(server)))
    assert result.permanent and "HTTP 404" in result.message and "JUDGE_MODEL" in result.fix


def test_an_unreachable_judge_is_transient_and_fails_at_once(tmp_path):
    env = {"JUDGE_API_BASE": f"http://127.0.0.1:{closed_port()}/v1"}
    began = time.monotonic()
    result = services.check_judge(context(tmp_path, tmp_path, env=env))
    assert not result.ok and not result.permanent and "did not answer" in result.message
    assert time.monotonic() - began < 10


def test_a_judge_that_hangs_fails_within_the_preflight_timeout(tmp_path):
    with OpenAIServer(lambda body: text("OK", delay=10)) as server:
        began = time.monotonic()
        result = services.check_judge(context(tmp_path, tmp_path, ["preflight_timeout=1"], judge_env(server)))
    assert not result.ok and not result.permanent and "timeout 1s" in result.message
    assert time.monotonic() - began < 5


def test_a_rate_limited_judge_passes(tmp_path):
    with OpenAIServer(lambda body: failure(429, "slow down")) as server:
        result = services.check_judge(context(tmp_path, tmp_path, env=judge_env(server)))
    assert result.ok and "rate-limited" in result.message


def test_the_judge_is_reached_through_the_tunnels_proxy_variables(tmp_path, judge, monkeypatch):
    proxy = f"socks5h://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("ALL_PROXY", proxy)  # as the job gives the trainer: httpx reads it from the process
    result = services.check_judge(context(tmp_path, tmp_path, env={**judge_env(judge), "ALL_PROXY": proxy}))
    assert not result.ok and not result.permanent and "through the tunnel (ALL_PROXY)" in result.message
    assert judge.requests == []  # it went to the (dead) proxy, not straight to the judge


def test_a_provider_model_without_its_key_is_permanent(tmp_path, monkeypatch):
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    result = services.check_judge(context(tmp_path, tmp_path, env={"JUDGE_MODEL": "gemini/gemini-2.0-flash"}))
    assert result.permanent and "GEMINI_API_KEY" in result.message and ".env" in result.fix


def test_ruler_asks_its_own_judge_and_validation_the_answer_judge(tmp_path):
    with OpenAIServer(lambda body: text("OK")) as server:
        overrides = ["reward=ruler", "ruler_judge_model=ruler-model", "val_set_size=2"]
        assert services.check_judge(context(tmp_path, tmp_path, overrides, judge_env(server))).ok
        assert sorted(r.model for r in server.requests) == [JUDGE, "ruler-model"]
        ruler_only = ["reward=ruler", "val_set_size=0"]
        targets = services.judge_targets(load_config("smoke", ruler_only), {"JUDGE_MODEL": JUDGE})
        assert [(t.purpose, t.model) for t in targets] == [("RULER judge", JUDGE)]


def test_preflight_judge_false_asks_nothing(tmp_path, judge):
    result = services.check_judge(context(tmp_path, tmp_path, ["preflight_judge=false"], judge_env(judge)))
    assert result.ok and "not asked" in result.message and judge.requests == []


# -- the job's preflight ----------------------------------------------------------------------


def job_targets(tmp_path: Path, data_dir: Path) -> checks.Targets:
    return context(tmp_path, data_dir).targets


def test_a_job_whose_checks_pass_continues(tmp_path, art_e_data_dir, judge, capsys, caplog):
    config = load_config("smoke", [*DOUBLE, "preflight_min_free_gb=0"])
    caplog.set_level("INFO", "trainer.preflight")
    assert pf.run_job(config, job_targets(tmp_path, art_e_data_dir), {"JUDGE_MODEL": JUDGE, **judge_env(judge)}) == 0
    assert capsys.readouterr().err == ""
    assert "preflight: 7 of 7 checks passed" in caplog.text and "preflight ok: judge:" in caplog.text


def test_failures_are_one_line_each_the_first_permanent_last_and_exit_78(tmp_path, capsys):
    env = {"JUDGE_MODEL": JUDGE, "JUDGE_API_BASE": f"http://127.0.0.1:{closed_port()}/v1"}
    code = pf.run_job(load_config("smoke", DOUBLE), job_targets(tmp_path, tmp_path / "no-data"), env)
    assert code == EXIT_CONFIG_ERROR == 78
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("'")[1] for line in lines] == ["scenarios", "judge", "data"]  # the first permanent last
    assert lines[1].startswith("preflight check 'judge' failed (transient): ")
    assert lines[-1].startswith("preflight check 'data' failed (permanent): ") and "; fix: " in lines[-1]


def test_only_transient_failures_exit_69(tmp_path, art_e_data_dir, capsys):
    env = {"JUDGE_MODEL": JUDGE, "JUDGE_API_BASE": f"http://127.0.0.1:{closed_port()}/v1"}
    config = load_config("smoke", [*DOUBLE, "preflight_min_free_gb=0"])
    assert pf.run_job(config, job_targets(tmp_path, art_e_data_dir), env) == EXIT_UNAVAILABLE == 69
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_preflight_false_runs_no_check(tmp_path, capsys):
    config = load_config("smoke", [*DOUBLE, "preflight=false"])
    assert pf.run_job(config, job_targets(tmp_path, tmp_path / "no-data"), {}) == 0
    assert capsys.readouterr().err == ""


def test_a_check_that_breaks_is_reported_not_raised(tmp_path, monkeypatch):
    def broken(ctx: checks.Context) -> checks.Check:
        raise RuntimeError(f"bug with {KEY}")

    monkeypatch.setattr(pf, "CHECKS", (broken,))
    (result,) = pf.run_checks(context(tmp_path, tmp_path, env={"JUDGE_API_KEY": KEY}))
    assert result.name == "broken" and not result.ok and not result.permanent
    assert "RuntimeError: bug with ***" in result.message


# -- command line (what the launcher's --dry_run --preflight runs) -----------------------------


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.preflight", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={"PATH": os.environ["PATH"], "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                                                       "PYTHONPATH": str(REPO), **env})


def test_the_login_side_lists_every_check_and_what_only_the_job_can_check(tmp_path, art_e_data_dir, judge):
    env = {"HPC_RUN_DIR": str(tmp_path / "run"), "DATA_DIR": str(art_e_data_dir), "JUDGE_MODEL": JUDGE,
           "HPC_NO_INTERNET": "1", "HF_HOME": str(tmp_path / "hf"), **judge_env(judge, "sk-wrong-0123456789")}
    result = run_cli("--config", "smoke", "--where", "login", *DOUBLE, "preflight_min_free_gb=0", env=env)
    assert result.returncode == EXIT_CONFIG_ERROR, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[1].rstrip(":") for line in lines[:7]] == [
        "data", "scenarios", "model_cache", "backend", "filesystems", "wandb", "judge"]
    assert lines[6].startswith("FAILED  judge (permanent): ") and "rejects the key" in lines[6]
    assert any("the node's offline mode" in line for line in lines[7:])
    assert all(line.startswith("job only: ") for line in lines[7:])
    assert "sk-wrong-0123456789" not in result.stdout + result.stderr
    assert not (tmp_path / "run").exists()


def test_a_bad_config_key_is_one_line_and_permanent(tmp_path):
    result = run_cli("--config", "smoke", "preflight_timeout=0", env={})
    assert result.returncode == EXIT_CONFIG_ERROR
    assert result.stderr.strip().splitlines() == [
        "trainer.preflight: error: invalid value 0.0 for config key 'preflight_timeout': expected a number of "
        "seconds > 0"]


def test_only_the_job_can_reach_the_judge_through_its_tunnel():
    def tunnel(env: dict) -> bool:
        return any("SSH tunnel" in line for line in pf.job_only(env))

    assert tunnel({"HPC_NO_INTERNET": "1"})
    assert not tunnel({"HPC_NO_INTERNET": "1", "JUDGE_API_BASE": "http://judge:8000/v1"})  # no tunnel then
    assert not tunnel({"HPC_NO_INTERNET": "0"})


def test_a_judge_served_inside_the_job_is_left_to_the_job(tmp_path):
    env = {"HPC_JUDGE_SERVED": "Qwen/Qwen2.5-7B-Instruct", "JUDGE_API_BASE": f"http://127.0.0.1:{closed_port()}/v1"}
    login = services.check_judge(context(tmp_path, tmp_path, env=env, where="login"))
    assert login.ok and "served inside the job" in login.message
    assert any("the judge served inside the job (Qwen/Qwen2.5-7B-Instruct)" in line for line in pf.job_only(env))
    assert not services.check_judge(context(tmp_path, tmp_path, env=env)).ok  # the job itself asks it
