"""Validation during training (trainer/training/validation.py) and evaluation's engine
(trainer/evaluation/engine.py), through the scripted endpoint with planted answers: the
expected accuracy is known exactly. Also the step contract with a stop request, and
which checkpoints pruning keeps."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import pytest

from hpc.run import checkpoints as ck
from hpc.run import ownership
from hpc.run.rundir import RunDir
from tests.doubles.art_backend import save_adapter
from tests.doubles.openai_server import OpenAIServer, Reply, failure, text, tool_call
from tests.trainer.training.test_train import JUDGE_MODEL, OVERRIDES, Run, run, server, train_in_process  # fixtures
from trainer.evaluation.engine import summarize
from trainer.training.stop_request import StopRequest
from trainer.training.validation import best_step, is_due

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

# The fixture's validation questions (test split, single-email, dataset order) and what the
# scripted agent answers to each: two right, one "I don't know", one wrong.
PLANTED = {
    "$450,000 for 2001": "$450,000 for 2001",
    "$43 billion": "$43 billion",
    "Fuel-supply interruptions": "I don't know",
    "New York law": "Delaware law",
}
VALIDATION = [*OVERRIDES[:-1], "val_set_size=4", "eval_steps=2", "eval_concurrency=2"]


def planted_agent(answers_by_reference: dict[str, str], questions: dict[str, str]):
    """Policy: answers each question with its planted answer at once; judge: accepts an answer
    equal to the reference. Training rollouts (questions not planted) get a fixed answer."""

    def respond(body: dict) -> Reply:
        last = body["messages"][-1]["content"]
        if body.get("model") == JUDGE_MODEL:
            reference = re.search(r"Reference answer: (.*)\nAI answer: (.*)", last, re.S)
            return text(json.dumps({"thinking": "planted", "accept": reference[1] == reference[2]}))
        answer = answers_by_reference.get(questions.get(last, ""), "a training answer")
        return tool_call("return_final_answer", {"answer": answer, "sources": []})

    return respond


@pytest.fixture
def questions(art_e_data_dir: Path) -> dict[str, str]:
    """Question text -> reference answer, for the test split."""
    lines = (art_e_data_dir / "scenarios" / "test.jsonl").read_text().splitlines()
    return {q["question"]: q["answer"] for q in map(json.loads, lines)}


@pytest.fixture
def planted(run: Run, questions, monkeypatch) -> OpenAIServer:
    with OpenAIServer(planted_agent(PLANTED, questions)) as server:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", server.base_url)
        monkeypatch.setenv("JUDGE_API_BASE", server.base_url)
        yield server


def test_validation_at_steps_0_2_and_the_last_records_the_planted_accuracy(run: Run, planted) -> None:
    assert train_in_process(overrides=VALIDATION) == 0
    validations = run.run_dir.read_validations()
    assert [v["step"] for v in validations] == [0, 2, 3]  # every 2 steps, and after the last (3)
    for v in validations:
        assert (v["questions"], v["accuracy"], v["i_dont_know_rate"], v["wrong_answer_rate"]) == (4, 0.5, 0.25, 0.25)
        assert (v["mean_turns"], v["tool_error_rate"], v["failed"]) == (1, 0.0, 0)
    details = [json.loads(line) for line in run.run_dir.validation_details(2).read_text().splitlines()]
    assert sorted(d["expected"] for d in details) == sorted(PLANTED)
    assert {d["expected"]: d["answer"] for d in details} == PLANTED
    assert all(d["latency_s"] >= 0 and d["turns"] == 1 for d in details)


def test_validation_reaches_arts_log_with_split_val(run: Run, planted) -> None:
    assert train_in_process(overrides=VALIDATION) == 0
    history = [json.loads(line) for line in (run.model_dir / "history.jsonl").read_text().splitlines()]
    val = [h for h in history if any(k.startswith("val/") for k in h)]
    assert {h["step"] for h in val} == {0, 2, 3}
    assert all(h["val/accuracy"] == 0.5 for h in val)


def test_validation_uses_only_held_out_questions(run: Run, planted, questions) -> None:
    assert train_in_process(overrides=VALIDATION) == 0
    asked = {r.messages[1]["content"] for r in planted.requests if r.model != JUDGE_MODEL}
    validated = {d["question"] for d in map(json.loads, run.run_dir.validation_details(0).read_text().splitlines())}
    assert validated <= set(questions) and validated <= asked
    assert not validated & trained_questions(run), "no training question is validated on"


def trained_questions(run: Run) -> set[str]:
    train = (Path(run.env["DATA_DIR"]) / "scenarios" / "train.jsonl").read_text().splitlines()
    return {json.loads(line)["question"] for line in train}


def test_a_stop_during_validation_loses_no_step_and_the_resumed_job_runs_it_once(run: Run, questions,
                                                                                  monkeypatch) -> None:
    stop = StopRequest()
    asked = threading.Event()

    def slow_planted(body: dict) -> Reply:
        reply = planted_agent(PLANTED, questions)(body)
        if body["messages"][-1]["content"] in questions and body.get("model") != JUDGE_MODEL:
            asked.set()
            return Reply(tool_calls=reply.tool_calls, delay=5.0)  # long enough to be interrupted
        return reply

    with OpenAIServer(slow_planted) as server:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", server.base_url)
        monkeypatch.setenv("JUDGE_API_BASE", server.base_url)
        threading.Thread(target=lambda: asked.wait(30) and stop.request("SIGUSR1"), daemon=True).start()
        assert train_in_process(stop, overrides=VALIDATION) == 75
        assert run.run_dir.read_validations() == [] and run.steps_on_disk() == [0], "nothing half-recorded"
    with OpenAIServer(planted_agent(PLANTED, questions)) as server:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", server.base_url)
        monkeypatch.setenv("JUDGE_API_BASE", server.base_url)
        assert train_in_process(overrides=VALIDATION) == 0
    assert [v["step"] for v in run.run_dir.read_validations()] == [0, 2, 3], "each validation once"


def test_a_failing_question_is_recorded_as_failed_not_fatal(run: Run, questions, monkeypatch) -> None:
    agent = planted_agent(PLANTED, questions)

    def one_broken(body: dict) -> Reply:
        if body["messages"][-1]["content"] in questions and questions[body["messages"][-1]["content"]] == "$43 billion":
            return failure(500, "model server fell over")
        return agent(body)

    with OpenAIServer(one_broken) as server:
        monkeypatch.setenv("ART_FAKE_INFERENCE_URL", server.base_url)
        monkeypatch.setenv("JUDGE_API_BASE", server.base_url)
        assert train_in_process(overrides=[*VALIDATION, "num_epochs=1"]) == 0
    first = run.run_dir.read_validations()[0]
    assert (first["accuracy"], first["failed"]) == (0.25, 1)
    details = [json.loads(line) for line in run.run_dir.validation_details(0).read_text().splitlines()]
    (broken,) = [d for d in details if d["error"]]
    assert broken["expected"] == "$43 billion" and "model server fell over" in broken["error"]


def test_pruning_keeps_the_latest_the_best_and_every_nth_in_its_own_folder(tmp_path: Path) -> None:
    from trainer.training.validation import Validator

    run = RunDir(tmp_path / "run")
    model = tmp_path / "art" / "p" / "models" / "run"
    run.path.mkdir(parents=True)
    ownership.claim(run, model)
    for step in range(0, 9):
        save_adapter(ck.step_dir(model, step), step)
    for step, accuracy in ((0, 0.4), (3, 0.8), (6, 0.6)):
        run.record_validation({"step": step, "accuracy": accuracy, "reward_mean": 0.0}, [])
    validator = Validator(run, model, [], None, None, None, 3, 1, keep_every=4, prune=True)  # type: ignore[arg-type]
    removed = validator.prune_checkpoints()
    assert [c.step for c in ck.list_checkpoints(model)] == [0, 3, 4, 8]  # every 4th (0, 4, 8), best 3, latest 8
    assert removed == [1, 2, 5, 6, 7]


def test_pruning_never_deletes_in_a_folder_another_run_owns(tmp_path: Path) -> None:
    from trainer.training.validation import Validator

    mine, other = RunDir(tmp_path / "mine"), RunDir(tmp_path / "other")
    model = tmp_path / "art" / "p" / "models" / "x"
    other.path.mkdir(parents=True)
    ownership.claim(other, model)
    for step in range(0, 4):
        save_adapter(ck.step_dir(model, step), step)
    validator = Validator(mine, model, [], None, None, None, 3, 1, keep_every=0, prune=True)  # type: ignore[arg-type]
    assert validator.prune_checkpoints() == [] and len(ck.list_checkpoints(model)) == 4


def test_due_steps_and_the_best_step() -> None:
    assert [s for s in range(0, 8) if is_due(s, 3, 7)] == [0, 3, 6, 7]
    assert best_step([{"step": 3, "accuracy": 0.8}, {"step": 6, "accuracy": 0.8, "reward_mean": 1.0},
                      {"step": 9, "accuracy": 0.7}]) == 6
    assert best_step([]) is None


def test_summaries_count_rates_over_all_questions() -> None:
    from trainer.evaluation.engine import QuestionResult

    def result(**kw) -> QuestionResult:
        base = dict(id=1, question="q", expected="e", answer="a", correct=False, i_dont_know=False, sources=[],
                    found_source=False, read_source=False, turns=2, latency_s=1.0, prompt_tokens=1,
                    completion_tokens=3, reward=0.5, tool_error=False, judge_failed=False)
        return QuestionResult(**{**base, **kw})

    summary = summarize([result(correct=True), result(i_dont_know=True, answer="I don't know"),
                         result(answer=None, tool_error=True), result(error="boom", answer=None, turns=0)])
    assert (summary["accuracy"], summary["i_dont_know_rate"], summary["wrong_answer_rate"]) == (0.25, 0.25, 0.0)
    assert (summary["tool_error_rate"], summary["failed"], summary["mean_turns"]) == (0.25, 1, 1.5)


def test_a_stopped_evaluation_returns_none_and_cancels_its_questions(art_e_data_dir: Path) -> None:
    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.rollout import AgentConfig
    from trainer.agent.scenarios import load_scenarios
    from trainer.evaluation.engine import evaluate
    from trainer.serving.policy import EndpointPolicy

    scenarios = load_scenarios(art_e_data_dir, "test", shuffle=False)

    async def go(server: OpenAIServer):
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.5, stop.set)
        with EmailDB(art_e_data_dir / "enron_emails.db") as db:
            return await evaluate(EndpointPolicy(server.base_url, "policy"), scenarios, db=db,
                                  judge=Judge(model="j", api_base=server.base_url, retries=0),
                                  agent=AgentConfig(), concurrency=2, stop=stop)

    with OpenAIServer(lambda body: tool_call("return_final_answer", {"answer": "x", "sources": []}, delay=3)) as server:
        assert asyncio.run(go(server)) is None
