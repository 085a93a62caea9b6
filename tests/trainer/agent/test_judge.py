"""The answer judge and RULER, through litellm to the scripted OpenAI-compatible double."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from tests.doubles.openai_server import OpenAIServer, failure, text
from trainer.agent.judge import Judge, litellm_route, parse_verdict, score_group_with_ruler

pytestmark = pytest.mark.filterwarnings(  # litellm's own noise when each test runs its own event loop
    "ignore:coroutine 'Logging.async_success_handler' was never awaited:RuntimeWarning",
    "ignore:Pydantic serializer warnings:UserWarning",
)

QUESTION = "When is the budget meeting?"
REFERENCE = "Tuesday at 3pm"


def accept(thinking: str = "same time") -> str:
    return json.dumps({"thinking": thinking, "accept": True})


def reject(thinking: str = "other day") -> str:
    return json.dumps({"thinking": thinking, "accept": False})


def make_judge(server: OpenAIServer, cache_dir: Path | None = None, **kwargs) -> Judge:
    options = {"model": "openai/judge", "retries": 3, "base_delay": 0.001, "api_base": server.base_url,
               "api_key": "test"}
    options.update(kwargs)
    return Judge(cache_dir=cache_dir, **options)


def judge_once(judge: Judge, answer: str = "Tuesday, 3 pm"):
    return asyncio.run(judge.judge(question=QUESTION, reference=REFERENCE, answer=answer))


# --- parsing -----------------------------------------------------------------------------------


def test_parse_verdict_reads_plain_json():
    verdict = parse_verdict('{"thinking": "ok", "accept": true}')
    assert verdict.accept is True and verdict.thinking == "ok" and not verdict.failed


def test_parse_verdict_tolerates_fences_and_chatter():
    reply = 'Here is my verdict:\n```json\n{"thinking": "missing the time", "accept": false}\n```'
    assert parse_verdict(reply).accept is False


def test_parse_verdict_accepts_true_and_false_spelled_as_strings():
    assert parse_verdict('{"accept": "true"}').accept is True


@pytest.mark.parametrize("reply", ["", "no json here", '{"thinking": "hm"}', '{"accept": "maybe"}', "[true]"])
def test_parse_verdict_rejects_replies_without_a_boolean_accept(reply):
    with pytest.raises(ValueError):
        parse_verdict(reply)


# --- routing -----------------------------------------------------------------------------------


def test_route_prefixes_openai_for_a_bare_model_name_on_a_custom_base():
    model, params = litellm_route("Qwen/Qwen2.5-72B-Instruct", "http://judge:8000/v1", None)
    assert model == "openai/Qwen/Qwen2.5-72B-Instruct"
    assert params == {"api_base": "http://judge:8000/v1", "api_key": "EMPTY"}


def test_route_keeps_a_known_provider_prefix_on_a_custom_base():
    assert litellm_route("hosted_vllm/qwen", "http://judge:8000/v1", "k")[0] == "hosted_vllm/qwen"


def test_route_without_base_leaves_the_model_to_litellm():
    assert litellm_route("gemini/gemini-2.0-flash", None, None) == ("gemini/gemini-2.0-flash", {})


# --- calls -------------------------------------------------------------------------------------


def test_judge_accepts_and_sends_question_reference_and_answer_as_json_request():
    with OpenAIServer([text(accept())]) as server:
        verdict = judge_once(make_judge(server))
    assert verdict.accept and not verdict.failed and not verdict.cached
    (request,) = server.requests
    assert request.model == "judge"  # litellm strips the openai/ provider prefix
    prompt = request.messages[-1]["content"]
    assert QUESTION in prompt and REFERENCE in prompt and "Tuesday, 3 pm" in prompt
    assert request.body["response_format"] == {"type": "json_object"}
    assert request.headers["authorization"] == "Bearer test"


def test_judge_rejection_is_a_successful_verdict():
    with OpenAIServer([text(reject())]) as server:
        verdict = judge_once(make_judge(server))
    assert verdict.accept is False and verdict.failed is False


def test_bare_model_name_with_api_base_reaches_the_base_under_its_own_name():
    with OpenAIServer([text(accept())]) as server:
        judge_once(make_judge(server, model="Qwen/Qwen2.5-72B-Instruct"))
    assert server.requests[0].model == "Qwen/Qwen2.5-72B-Instruct"


def test_judge_retries_server_errors_then_succeeds():
    with OpenAIServer([failure(500), failure(503), text(accept())]) as server:
        verdict = judge_once(make_judge(server, retries=3))
    assert verdict.accept and not verdict.failed
    assert len(server.requests) == 3


def test_judge_retries_an_unparseable_reply():
    with OpenAIServer([text("I think it is fine"), text(accept())]) as server:
        verdict = judge_once(make_judge(server, retries=1))
    assert verdict.accept and len(server.requests) == 2


def test_judge_that_keeps_failing_returns_a_failed_verdict_without_raising(tmp_path):
    with OpenAIServer([failure(500)] * 3) as server:
        verdict = judge_once(make_judge(server, cache_dir=tmp_path, retries=2))
    assert verdict.failed and verdict.accept is False
    assert "500" in verdict.error or "scripted error" in verdict.error
    assert len(server.requests) == 3  # first attempt + 2 retries, no hidden litellm retries
    assert list(tmp_path.iterdir()) == []  # failures are not cached


def test_judge_backs_off_exponentially_between_attempts():
    with OpenAIServer([failure(500)] * 3 + [text(accept())]) as server:
        judge = make_judge(server, retries=3, base_delay=0.05)
        started = asyncio.run(_timed(judge))
    assert started >= 0.05 + 0.1 + 0.2


async def _timed(judge: Judge) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await judge.judge(question=QUESTION, reference=REFERENCE, answer="x")
    return loop.time() - start


def test_cache_hit_makes_no_request(tmp_path):
    with OpenAIServer([text(accept())]) as server:
        first = judge_once(make_judge(server, cache_dir=tmp_path / "judge_cache"))
        second = judge_once(make_judge(server, cache_dir=tmp_path / "judge_cache"))  # a new process, same run dir
    assert first.accept and not first.cached
    assert second.accept and second.cached
    assert len(server.requests) == 1
    assert [p.suffix for p in (tmp_path / "judge_cache").iterdir()] == [".json"]  # no temp file left behind


def test_cache_key_depends_on_model_and_every_text():
    judge = Judge(model="a")
    key = judge.cache_key("q", "r", "x")
    assert key == Judge(model="a").cache_key("q", "r", "x")
    assert len({key, Judge(model="b").cache_key("q", "r", "x"), judge.cache_key("q", "r", "y"),
                judge.cache_key("q2", "r", "x"), judge.cache_key("q", "r2", "x")}) == 5


def test_damaged_cache_entry_is_a_miss_and_gets_rewritten(tmp_path):
    with OpenAIServer([text(accept())]) as server:
        judge = make_judge(server, cache_dir=tmp_path)
        entry = tmp_path / f"{judge.cache_key(QUESTION, REFERENCE, 'x')}.json"
        entry.write_text("{half")
        verdict = judge_once(judge, answer="x")
    assert verdict.accept and not verdict.cached
    assert json.loads(entry.read_text())["accept"] is True


async def _judge_many(judge: Judge, count: int) -> list:
    return await asyncio.gather(
        *(judge.judge(question=QUESTION, reference=REFERENCE, answer=f"answer {i}") for i in range(count))
    )


def test_concurrency_limit_caps_requests_in_flight():
    with OpenAIServer(lambda body: text(accept(), delay=0.2)) as server:
        verdicts = asyncio.run(_judge_many(make_judge(server, concurrency=2), 6))
    assert all(v.accept for v in verdicts)
    assert len(server.requests) == 6
    assert server.max_in_flight == 2


def test_without_a_tight_limit_requests_do_overlap():
    """Guards the test above: the double does see parallel requests when they are allowed."""
    with OpenAIServer(lambda body: text(accept(), delay=0.2)) as server:
        asyncio.run(_judge_many(make_judge(server, concurrency=6), 6))
    assert server.max_in_flight > 2


def test_api_key_never_reaches_logs_or_the_verdict(caplog, capfd):
    secret = "sk-test-SECRET-0123456789"
    with OpenAIServer([failure(401, f"Incorrect API key provided: {secret}")] * 2) as server:
        with caplog.at_level(logging.DEBUG):
            judge = make_judge(server, api_key=secret, retries=1)
            verdict = judge_once(judge)
    assert verdict.failed
    assert server.requests[0].headers["authorization"] == f"Bearer {secret}"  # it was used...
    assert secret not in caplog.text  # ...but never logged, even by litellm at DEBUG
    assert secret not in capfd.readouterr().err
    assert secret not in (verdict.error or "")
    assert secret not in repr(judge)
    assert "judge attempt" in caplog.text  # the failure itself is logged


def test_from_env_reads_model_base_and_key_from_the_environment(tmp_path):
    env = {"JUDGE_MODEL": "Qwen/Qwen2.5-72B-Instruct", "JUDGE_API_BASE": "http://judge:8000/v1",
           "OPENAI_API_KEY": "sk-in-cluster"}
    judge = Judge.from_env(tmp_path, concurrency=4, retries=2, env=env)
    assert (judge.model, judge.api_base, judge.api_key) == (
        "Qwen/Qwen2.5-72B-Instruct", "http://judge:8000/v1", "sk-in-cluster")
    assert (judge.cache_dir, judge.concurrency, judge.retries) == (tmp_path, 4, 2)


def test_from_env_prefers_judge_api_key_for_the_in_cluster_judge(tmp_path):
    env = {"JUDGE_API_BASE": "http://judge:8000/v1", "JUDGE_API_KEY": "sk-judge-only", "OPENAI_API_KEY": "sk-openai"}
    assert Judge.from_env(tmp_path, 4, 2, env=env).api_key == "sk-judge-only"


def test_from_env_defaults_to_gemini_and_lets_litellm_find_its_key(tmp_path):
    judge = Judge.from_env(tmp_path, concurrency=8, retries=3, env={"OPENAI_API_KEY": "unrelated"})
    assert judge.model == "gemini/gemini-2.0-flash"
    assert judge.api_base is None and judge.api_key is None


def test_from_env_config_model_wins_over_judge_model(tmp_path):
    judge = Judge.from_env(tmp_path, 8, 3, model="openai/gpt-4.1", env={"JUDGE_MODEL": "gemini/x"})
    assert judge.model == "openai/gpt-4.1"


# --- RULER -------------------------------------------------------------------------------------


def _group():
    import art

    def trajectory(answer: str, reward: float) -> art.Trajectory:
        return art.Trajectory(
            messages_and_choices=[
                {"role": "system", "content": "You search email."},
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": answer},
            ],
            reward=reward,
            metrics={"answer_correct": 0},
        )

    return art.TrajectoryGroup([trajectory("Tuesday 3pm", 0.3), trajectory("I don't know", 0.1)])


def test_ruler_replaces_rewards_with_its_scores_and_keeps_the_provisional_ones():
    scores = {"scores": [
        {"trajectory_id": "1", "explanation": "found it", "score": 0.9},
        {"trajectory_id": "2", "explanation": "gave up", "score": 0.2},
    ]}
    with OpenAIServer([text(json.dumps(scores))]) as server:
        scored = asyncio.run(score_group_with_ruler(_group(), "ruler-judge", api_base=server.base_url, api_key="t"))
    assert [t.reward for t in scored.trajectories] == [0.9, 0.2]
    assert [t.metrics["independent_reward"] for t in scored.trajectories] == [0.3, 0.1]
    assert server.requests[0].model == "ruler-judge"
    assert "Tuesday 3pm" in server.requests[0].messages[-1]["content"]


def test_ruler_failure_drops_the_group_instead_of_raising():
    with OpenAIServer(lambda body: failure(400, "bad request")) as server:
        scored = asyncio.run(score_group_with_ruler(_group(), "ruler-judge", api_base=server.base_url, api_key="t"))
    assert scored is None
    assert len(server.requests) >= 1
