"""python -m trainer.eval: baselines through litellm and any OpenAI-compatible URL, a run's
checkpoints through vLLM (the stand-in tests/doubles/fake_vllm.py), planted answers so the
accuracy is known exactly, results cached per model, split and judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc.run import checkpoints as ck
from hpc.run import ownership
from hpc.run.rundir import RunDir
from tests.doubles.art_backend import save_adapter
from tests.doubles.fake_vllm import write_executable
from tests.doubles.openai_server import OpenAIServer, failure
from tests.trainer.training.test_validation import PLANTED, planted_agent
from trainer.agent.scenarios import Scenario, load_scenarios
from trainer.evaluation.engine import inbox_domain
from trainer.evaluation.eval import main as eval_main

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
JUDGE = "judge-model"


@pytest.fixture
def questions(art_e_data_dir: Path) -> dict[str, str]:
    lines = (art_e_data_dir / "scenarios" / "test.jsonl").read_text().splitlines()
    return {q["question"]: q["answer"] for q in map(json.loads, lines)}


@pytest.fixture
def endpoint(questions, art_e_data_dir: Path, tmp_path: Path, monkeypatch):
    """The scripted policy and judge; the environment a login node would have."""
    with OpenAIServer(planted_agent(PLANTED, questions)) as server:
        for name, value in {"JUDGE_MODEL": JUDGE, "JUDGE_API_BASE": server.base_url, "DATA_DIR": str(art_e_data_dir),
                            "RUNS_DIR": str(tmp_path / "runs"), "OPENAI_API_BASE": server.base_url,
                            "OPENAI_API_KEY": "test-key"}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("HPC_RUN_DIR", raising=False)
        yield server


def summary_of(tmp_path: Path, owner: str | None, label: str) -> dict:
    base = tmp_path / "runs" / (owner or "") / "evaluations"
    (found,) = list(base.glob(f"test-4-*/{label}/summary.json"))
    return json.loads(found.read_text())


def test_a_litellm_baseline_gets_exactly_the_planted_accuracy(endpoint, tmp_path, capsys) -> None:
    assert eval_main(["--model", "openai/policy", "--config", "smoke", "--run", "agent_008"]) == 0
    summary = summary_of(tmp_path, "agent_008", "openai_policy")
    assert (summary["questions"], summary["accuracy"], summary["i_dont_know_rate"], summary["wrong_answer_rate"]) == (
        4, 0.5, 0.25, 0.25)
    assert summary["judge_model"] == JUDGE and summary["kind"] == "litellm"
    records_file = next((tmp_path / "runs" / "agent_008" / "evaluations").glob("test-4-*/openai_policy/records.jsonl"))
    records = [json.loads(line) for line in records_file.read_text().splitlines()]
    assert {r["expected"]: (r["answer"], r["correct"]) for r in records}["$43 billion"] == ("$43 billion", True)
    assert {"question", "expected", "answer", "correct", "found_source", "read_source", "turns", "latency_s",
            "prompt_tokens", "completion_tokens"} <= set(records[0])
    assert "openai/policy" in capsys.readouterr().out


def test_a_model_evaluated_on_the_same_questions_and_judge_is_not_run_again(endpoint, tmp_path) -> None:
    url = f"url:{endpoint.base_url}#policy"
    assert eval_main(["--model", url, "--config", "smoke"]) == 0
    asked = len(endpoint.requests)
    assert eval_main(["--model", url, "--config", "smoke"]) == 0
    assert len(endpoint.requests) == asked, "cached: nothing asked"
    assert eval_main(["--model", url, "--config", "smoke", "--force"]) == 0
    assert len(endpoint.requests) > asked
    assert summary_of(tmp_path, None, "policy")["accuracy"] == 0.5


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch) -> Path:
    script = write_executable(tmp_path / "bin" / "vllm")
    monkeypatch.setenv("VLLM_BIN", str(script))
    return script


def test_every_complete_checkpoint_of_a_run_is_served_by_vllm_and_evaluated(endpoint, fake_vllm, tmp_path) -> None:
    run = RunDir(tmp_path / "runs" / "agent_008")
    model = tmp_path / "art" / "email_agent" / "models" / "agent_008"
    run.path.mkdir(parents=True)
    ownership.claim(run, model)
    for step in (0, 30, 60):
        save_adapter(ck.step_dir(model, step), step)
    (ck.step_dir(model, 90) / "adapter_config.json").parent.mkdir()  # torn: never evaluated
    assert eval_main(["--model", "run:agent_008@all", "--model", "openai/policy", "--config", "smoke"]) == 0
    for step in (0, 30, 60):
        summary = summary_of(tmp_path, "agent_008", f"agent_008@{step}")
        assert summary["accuracy"] == 0.0 and summary["kind"] == "checkpoint"  # fake vLLM answers "answer from ..."
    records = next(run.evaluations_dir.glob("test-4-*/agent_008@30/records.jsonl")).read_text()
    assert "answer from agent_008@30" in records
    assert not list(run.evaluations_dir.glob("*/agent_008@90"))


@pytest.mark.parametrize("argv, fragment", [
    (["--model", "o3"], "invalid model 'o3': expected a litellm model (openai/o3)"),
    (["--model", "run:nobody@all"], "run nobody has no model.json"),
    ([], "no model to evaluate"),
    (["--model", "openai/x", "limit=zero"], "invalid limit='zero'"),
])
def test_bad_input_is_one_line_exit_2(endpoint, capsys, argv, fragment) -> None:
    assert eval_main(["--config", "smoke", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, fragment", [
    (["--limit", "-1"], "invalid --limit -1"),
    (["--limit", "0"], "invalid --limit 0"),
    (["limit=-1"], "invalid limit='-1'"),
    (["--concurrency", "0"], "invalid --concurrency 0"),
    (["--split", "../x"], "invalid split '../x': accepted train or test"),
    (["split=/etc"], "invalid split '/etc'"),
    (["--split", "TEST"], "invalid split 'TEST'"),
    (["--run", "../x"], "invalid --run '../x'"),
    (["run=.."], "invalid --run '..'"),
    (["--run", "a/b"], "invalid --run 'a/b'"),
])
def test_a_bad_limit_split_or_run_is_one_line_exit_2_and_nothing_is_asked(endpoint, tmp_path, capsys, argv,
                                                                          fragment) -> None:
    assert eval_main(["--config", "smoke", "--model", "openai/policy", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not endpoint.requests and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("unset, environment, model, fragment", [
    (["JUDGE_API_BASE"], {"JUDGE_MODEL": "gemini/gemini-2.0-flash"}, "openai/policy",
     "no key for the judge gemini/gemini-2.0-flash: GOOGLE_API_KEY or GEMINI_API_KEY is not set"),
    (["JUDGE_API_BASE", "OPENAI_API_KEY"], {"JUDGE_MODEL": "openai/gpt-4.1-mini"}, "url:{base}#policy",
     "no key for the judge openai/gpt-4.1-mini: OPENAI_API_KEY is not set"),
    (["OPENAI_API_KEY"], {}, "openai/policy", "no key for openai/policy: OPENAI_API_KEY is not set"),
    ([], {}, "anthropic/claude-3-5-sonnet-20240620", "no key for anthropic/claude-3-5-sonnet-20240620: ANTHROPIC_API_KEY"),
])
def test_a_missing_key_is_one_line_exit_2_before_any_question(endpoint, tmp_path, capsys, monkeypatch, unset,
                                                             environment, model, fragment) -> None:
    for name in (*unset, "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert eval_main(["--config", "smoke", "--model", model.format(base=endpoint.base_url), "--run", "r"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not endpoint.requests, "no question was asked"
    assert not list(tmp_path.glob("runs/r/evaluations/*/*/summary.json")), "no result was kept"


@pytest.fixture
def flaky(questions, art_e_data_dir: Path, tmp_path: Path, monkeypatch):
    """The planted policy and judge, but the policy fails (HTTP 500) on the questions in ``failing``."""
    failing: set[str] = set()
    planted = planted_agent(PLANTED, questions)

    def respond(body: dict):
        if body.get("model") != JUDGE and body["messages"][1]["content"] in failing:
            return failure(500, "the GPU fell off the bus")
        return planted(body)

    with OpenAIServer(respond) as server:
        for name, value in {"JUDGE_MODEL": JUDGE, "JUDGE_API_BASE": server.base_url, "DATA_DIR": str(art_e_data_dir),
                            "RUNS_DIR": str(tmp_path / "runs")}.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("HPC_RUN_DIR", raising=False)
        yield server, failing


def evaluated(questions: dict[str, str]) -> list[str]:
    """The questions the smoke config evaluates (those with a planted answer)."""
    return [question for question, reference in questions.items() if reference in PLANTED]


def asked_questions(server: OpenAIServer, since: int = 0) -> set[str]:
    return {r.messages[1]["content"] for r in server.requests[since:] if r.model != JUDGE}


@pytest.mark.parametrize("how_many", [1, 3])
def test_failed_questions_are_not_kept_and_the_next_run_asks_them_and_only_them(flaky, questions, capsys,
                                                                                how_many) -> None:
    server, failing = flaky
    failing.update(evaluated(questions)[:how_many])
    url = f"url:{server.base_url}#policy"
    assert eval_main(["--model", url, "--config", "smoke"]) == 0
    assert f"{how_many} question(s) failed" in capsys.readouterr().err
    before, failed = len(server.requests), set(failing)
    failing.clear()  # the model answers again
    assert eval_main(["--model", url, "--config", "smoke"]) == 0
    assert asked_questions(server, before) == failed, "only the failed questions were asked again"
    asked = len(server.requests)
    assert eval_main(["--model", url, "--config", "smoke"]) == 0
    assert len(server.requests) == asked, "every question answered: nothing asked again"


def test_a_model_that_fails_every_question_exits_1_and_keeps_no_result(flaky, questions, tmp_path, capsys) -> None:
    server, failing = flaky
    failing.update(evaluated(questions))
    url = f"url:{server.base_url}#policy"
    assert eval_main(["--model", url, "--config", "smoke"]) == 1
    assert "4 question(s) failed" in capsys.readouterr().err
    failing.clear()
    before = len(server.requests)
    assert eval_main(["--model", url, "--config", "smoke"]) == 0
    assert len(asked_questions(server, before)) == 4, "the next run asks every question again"
    assert summary_of(tmp_path, None, "policy")["accuracy"] == 0.5


def test_a_question_set_names_its_inboxes_domain_only_when_they_share_one(art_e_data_dir: Path, tmp_path: Path) -> None:
    from trainer.staging import synthetic_inbox

    enron = load_scenarios(art_e_data_dir, "test", limit=None)
    synthetic_inbox.write(synthetic_inbox.generate(seed=1, train_inboxes=2, heldout_inboxes=2), tmp_path)
    synth = [Scenario.from_row(row, "test") for row in map(json.loads, (tmp_path / "questions.jsonl").read_text()
                                                          .splitlines())]
    assert inbox_domain(enron) == "enron.com" and inbox_domain(synth) == synthetic_inbox.DOMAIN == "mail.synth"
    assert inbox_domain(enron[:1] + synth[:1]) is None


def launched_run(tmp_path: Path, steps: tuple[int, ...], validations: tuple[tuple[int, float], ...]) -> RunDir:
    run = RunDir(tmp_path / "runs" / "agent_008")
    model = tmp_path / "art" / "email_agent" / "models" / "agent_008"
    run.path.mkdir(parents=True)
    ownership.claim(run, model)
    for step in steps:
        save_adapter(ck.step_dir(model, step), step)
    for step, accuracy in validations:
        run.record_validation({"step": step, "accuracy": accuracy}, [])
    return run


def test_at_best_evaluates_the_runs_best_validated_checkpoint_alone(endpoint, fake_vllm, tmp_path) -> None:
    run = launched_run(tmp_path, (0, 30, 60), ((0, 0.4), (30, 0.9), (60, 0.5)))
    assert eval_main(["--model", "run:agent_008@best", "--config", "smoke"]) == 0
    assert [p.name for p in run.evaluations_dir.glob("test-4-*/*")] == ["agent_008@30"]


@pytest.mark.parametrize("steps, validations, fragment", [
    ((0, 30), (), "run agent_008 has no validation, so it has no best checkpoint"),
    ((0, 60), ((0, 0.4), (30, 0.9), (60, 0.5)), "run agent_008's best checkpoint, step 30 (90.0%), is gone"),
])
def test_at_best_without_validation_or_with_the_best_pruned_is_one_line_exit_2(
        endpoint, fake_vllm, tmp_path, capsys, steps, validations, fragment) -> None:
    launched_run(tmp_path, steps, validations)
    assert eval_main(["--model", "run:agent_008@best", "--config", "smoke"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not endpoint.requests
