"""The judge check's one plain HTTP request to each provider of judge_ping's table (Gemini, OpenAI,
Anthropic), against local servers speaking each provider's protocol (tests/doubles/provider_api.py,
openai_server.py) pointed at by the variables litellm reads: the request is the one litellm
sends the job's judge (path, auth header, model), each failure gives the check's one line, and
litellm is not imported for them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.doubles.openai_server import OpenAIServer, failure, text
from tests.doubles.provider_api import ProviderAPI
from tests.trainer.training.test_preflight import closed_port, context
from trainer.training import judge_ping
from trainer.training import preflight as pf

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

REPO = Path(__file__).resolve().parents[3]
KEY = "provider-secret-0123456789"
# Every variable that moves a provider or holds its key: the tests set only their own.
PROVIDER_VARIABLES = tuple(name for row in judge_ping.PROVIDERS for name in (*row.bases, *row.keys))


@dataclass(frozen=True)
class Case:
    provider: str
    judge_model: str  # JUDGE_MODEL as a user writes it
    served: str  # the name the provider's API knows
    base_variable: str
    key_variable: str


CASES = [
    Case("gemini", "gemini/gemini-2.0-flash", "gemini-2.0-flash", "GEMINI_API_BASE", "GEMINI_API_KEY"),
    Case("openai", "openai/gpt-4o-mini", "gpt-4o-mini", "OPENAI_BASE_URL", "OPENAI_API_KEY"),
    Case("openai", "o4-mini", "o4-mini", "OPENAI_API_BASE", "OPENAI_API_KEY"),
    Case("anthropic", "anthropic/claude-3-5-haiku-20241022", "claude-3-5-haiku-20241022", "ANTHROPIC_API_BASE",
         "ANTHROPIC_API_KEY"),
    Case("anthropic", "claude-sonnet-4-5", "claude-sonnet-4-5", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
]
ONE_EACH = [CASES[0], CASES[1], CASES[3]]


def case_id(case: Case) -> str:
    return case.judge_model


@contextmanager
def serving(case: Case, key: str = KEY, delay: float = 0.0, status: int | None = None,
            ) -> Iterator[tuple[OpenAIServer | ProviderAPI, dict[str, str]]]:
    """The provider's API on 127.0.0.1 and the environment that points the judge at it."""
    if case.provider == "openai":
        reply = failure(status, "scripted error") if status else text("OK", delay=delay)
        api: OpenAIServer | ProviderAPI = OpenAIServer({case.served: lambda body: reply}, api_key=key)
    else:
        api = ProviderAPI(case.provider, models=(case.served,), key=key, delay=delay, status=status)
    with api:
        yield api, {"JUDGE_MODEL": case.judge_model, case.base_variable: api.base_url, case.key_variable: KEY}


def check(tmp_path: Path, env: dict[str, str], overrides: list[str] = ()) -> pf.Check:
    return pf.check_judge(context(tmp_path, tmp_path, list(overrides), env))


@pytest.fixture(autouse=True)
def no_provider_variables(monkeypatch):
    """litellm reads the process's environment: only what a test sets points it anywhere."""
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# -- the request ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_each_provider_is_asked_once_at_its_path_with_its_auth_header_and_the_ping(tmp_path, case):
    with serving(case) as (api, env):
        result = check(tmp_path, env)
    assert result.ok and f"at {api.base_url}" in result.message and "answered in" in result.message
    (request,) = api.requests
    row = judge_ping.BY_NAME[case.provider]
    for name, value in row.headers:
        assert request.headers[name.lower()] == value.format(key=KEY)
    assert json.dumps(request.body).count(judge_ping.JUDGE_PING) == 1
    if case.provider == "gemini":
        assert request.path == f"/v1beta/models/{case.served}:generateContent"
        assert request.body["generationConfig"]["maxOutputTokens"] == 8
    else:
        assert request.path == ("/v1/chat/completions" if case.provider == "openai" else "/v1/messages")
        assert request.model == case.served
        assert request.body.get("max_tokens", request.body.get("max_completion_tokens")) == 8


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_ping_is_the_request_litellm_sends_the_jobs_judge(tmp_path, case, monkeypatch):
    """The job's judge asks through litellm: the preflight's request lands on the same path,
    with the same auth headers, for the same model, from the same variables."""
    import litellm

    with serving(case) as (api, env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        litellm.completion(model=case.judge_model, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                           max_retries=0, timeout=10)
        assert check(tmp_path, env).ok
        theirs, ours = api.requests
    assert ours.path == theirs.path and ours.model == theirs.model
    for name, _ in judge_ping.BY_NAME[case.provider].headers:
        assert ours.headers[name.lower()] == theirs.headers[name.lower()]


@pytest.mark.parametrize("first, second", [("OPENAI_BASE_URL", "OPENAI_API_BASE"),
                                           ("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL")])
def test_with_both_base_variables_set_the_ping_goes_where_litellm_goes(tmp_path, monkeypatch, first, second):
    import litellm

    case = next(c for c in CASES if c.base_variable in (first, second))
    with serving(case) as (chosen, env), serving(case) as (other, _):
        env = {**env, first: chosen.base_url, second: other.base_url}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        litellm.completion(model=case.judge_model, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                           max_retries=0, timeout=10)
        assert check(tmp_path, env).ok
        assert len(chosen.requests) == 2 and other.requests == []


def test_googles_key_goes_before_geminis_as_litellm_takes_them(tmp_path):
    case = CASES[0]
    with serving(case, key="google-key-0123456789") as (api, env):
        assert check(tmp_path, {**env, "GOOGLE_API_KEY": "google-key-0123456789"}).ok


def test_the_providers_are_asked_without_importing_litellm_or_httpx(tmp_path):
    """litellm's import was ~3.5 s of every launch (bench/launch_latency.py)."""
    with serving(CASES[0]) as (gemini, env_g), serving(CASES[1]) as (openai, env_o), \
            serving(CASES[4]) as (anthropic, env_a):
        results = []
        for env in (env_g, env_o, env_a):
            code = ("import sys, json\nfrom pathlib import Path\n"
                    "from tests.trainer.training.test_preflight import context\n"
                    "from trainer.training import preflight as pf\n"
                    f"env = json.loads({json.dumps(json.dumps(env))})\n"
                    f"result = pf.check_judge(context(Path({str(tmp_path)!r}), Path({str(tmp_path)!r}), env=env))\n"
                    "print(result.ok, 'litellm' in sys.modules, 'httpx' in sys.modules)\n")
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
            results.append((done.stdout.split(), done.stderr[-500:]))
        assert [len(api.requests) for api in (gemini, openai, anthropic)] == [1, 1, 1]
    assert [words for words, _ in results] == [["True", "False", "False"]] * 3, results


# -- each failure's one line ------------------------------------------------------------------


@pytest.mark.parametrize("case", ONE_EACH, ids=case_id)
def test_a_key_the_provider_refuses_is_permanent_and_never_printed(tmp_path, case):
    """Gemini answers a wrong key with 400 "API key not valid": a rejected key, as litellm reports it."""
    wrong = "wrong-provider-key-9876543210"
    with serving(case) as (api, env):
        result = check(tmp_path, {**env, case.key_variable: wrong})
    assert result.permanent and "rejects the key (HTTP 401" in result.message, result.message
    assert "JUDGE_API_KEY" in result.fix and wrong not in result.error_line()


@pytest.mark.parametrize("case", ONE_EACH, ids=case_id)
def test_a_model_the_provider_does_not_serve_is_permanent(tmp_path, case):
    with serving(case) as (api, env):
        result = check(tmp_path, {**env, "JUDGE_MODEL": case.judge_model + "-nonexistent"})
    assert result.permanent and "refuses the model or request (HTTP 404" in result.message
    assert "JUDGE_MODEL" in result.fix


@pytest.mark.parametrize("case", ONE_EACH, ids=case_id)
def test_an_unreachable_provider_is_transient_and_fails_at_once(tmp_path, case):
    env = {"JUDGE_MODEL": case.judge_model, case.base_variable: f"http://127.0.0.1:{closed_port()}",
           case.key_variable: KEY}
    began = time.monotonic()
    result = check(tmp_path, env)
    assert not result.ok and not result.permanent and "did not answer" in result.message
    assert result.error_line().startswith("preflight check 'judge' failed (transient): ")
    assert time.monotonic() - began < 10


@pytest.mark.parametrize("case", ONE_EACH, ids=case_id)
def test_a_provider_that_hangs_fails_within_the_preflight_timeout(tmp_path, case):
    with serving(case, delay=10) as (api, env):
        began = time.monotonic()
        result = check(tmp_path, env, ["preflight_timeout=1"])
    assert not result.ok and not result.permanent and "timeout 1s" in result.message
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("case", ONE_EACH, ids=case_id)
def test_a_rate_limited_provider_passes(tmp_path, case):
    with serving(case, status=429) as (api, env):
        result = check(tmp_path, env)
    assert result.ok and "rate-limited" in result.message


@pytest.mark.parametrize("case, names", [(CASES[0], "GOOGLE_API_KEY or GEMINI_API_KEY"), (CASES[2], "OPENAI_API_KEY"),
                                         (CASES[4], "ANTHROPIC_API_KEY")], ids=["gemini", "openai", "anthropic"])
def test_a_missing_key_is_permanent_and_names_the_variables_litellm_reads(tmp_path, case, names):
    result = check(tmp_path, {"JUDGE_MODEL": case.judge_model})
    assert result.permanent and result.message == f"no key for the answer judge {case.judge_model}: {names} is not set"
    assert ".env" in result.fix


def test_a_provider_is_reached_through_the_tunnels_proxy_variables(tmp_path, monkeypatch):
    proxy = f"socks5h://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("ALL_PROXY", proxy)  # as the job gives the trainer: httpx reads it from the process
    with serving(CASES[0]) as (api, env):
        result = check(tmp_path, {**env, "ALL_PROXY": proxy})
    assert not result.ok and not result.permanent and "through the tunnel (ALL_PROXY)" in result.message
    assert api.requests == []  # it went to the (dead) proxy, not straight to the provider


# -- which row asks which judge ---------------------------------------------------------------


@pytest.mark.parametrize("model, api_base, expected", [
    ("gemini/gemini-2.0-flash", None, ("gemini", "gemini-2.0-flash")),
    ("openai/gpt-4o", None, ("openai", "gpt-4o")),
    ("gpt-4o", None, ("openai", "gpt-4o")),
    ("o3", None, ("openai", "o3")),
    ("anthropic/claude-3-5-haiku-latest", None, ("anthropic", "claude-3-5-haiku-latest")),
    ("claude-opus-4-1", None, ("anthropic", "claude-opus-4-1")),
    ("gemini-2.0-flash", None, None),  # a bare Gemini name is Vertex AI's to litellm
    ("groq/llama-3.1-8b-instant", None, None),
    ("Qwen/Qwen2.5-7B-Instruct", None, None),
    ("Qwen/Qwen2.5-7B-Instruct", "http://judge:8000/v1", ("openai-compatible", "Qwen/Qwen2.5-7B-Instruct")),
    ("openai/judge", "http://judge:8000/v1", ("openai-compatible", "judge")),
    ("gpt-4o", "http://judge:8000/v1", ("openai-compatible", "gpt-4o")),
    ("gemini/gemini-2.0-flash", "http://proxy:4000", ("gemini", "gemini-2.0-flash")),
])
def test_each_judge_model_gets_the_row_litellm_routes_it_to(model, api_base, expected):
    import litellm

    ping = judge_ping.plan(model, api_base, None, {})
    assert (ping and (ping.provider.name, ping.model)) == expected
    if api_base is None:  # litellm's own routing agrees: the same provider, or one the table lacks
        try:
            name, provider, _, _ = litellm.get_llm_provider(model)
        except litellm.BadRequestError:  # no provider at all: litellm's call fails the same way
            name, provider = model, None
        assert (provider, name) == expected if expected else provider not in judge_ping.BY_NAME


def test_at_judge_api_base_the_providers_protocol_goes_there_with_the_judges_key():
    ping = judge_ping.plan("anthropic/claude-x", "http://proxy:4000", "judge-key", {"ANTHROPIC_API_KEY": "other"})
    assert ping.url == "http://proxy:4000/v1/messages" and ping.headers()["x-api-key"] == "judge-key"
    assert judge_ping.plan("gpt-4o", "http://judge/v1", None, {}).headers() == {"Authorization": "Bearer EMPTY"}


def test_a_base_that_already_ends_in_the_path_is_taken_whole_as_litellm_takes_anthropics():
    env = {"ANTHROPIC_API_BASE": "http://proxy:4000/v1/messages", "ANTHROPIC_API_KEY": KEY}
    assert judge_ping.plan("claude-opus-4-1", None, None, env).url == "http://proxy:4000/v1/messages"


def test_openais_organization_is_sent_when_set():
    ping = judge_ping.plan("gpt-4o", None, None, {"OPENAI_API_KEY": KEY, "OPENAI_ORGANIZATION": "org-1"})
    assert ping.headers() == {"Authorization": f"Bearer {KEY}", "OpenAI-Organization": "org-1"}
    assert ping.url == "https://api.openai.com/v1/chat/completions"


def test_docs_table_of_providers_says_what_the_table_in_code_holds():
    """docs/preflight.md#the-judges-one-request lists each row: its key and base variables, endpoint, auth headers."""
    lines = (REPO / "docs" / "preflight.md").read_text().splitlines()
    titles = {"gemini": "| Gemini", "openai": "| OpenAI |", "anthropic": "| Anthropic"}
    for row in judge_ping.PROVIDERS:
        (line,) = [line for line in lines if line.startswith(titles[row.name])]
        names = [*row.keys, *row.bases, row.default_base, row.path.replace("{model}", "MODEL"),
                 *(header for header, _ in (*row.headers, *row.env_headers)), *(variable for _, variable in row.env_headers)]
        assert all(f"`{name}" in line for name in names), (row.name, [name for name in names if f"`{name}" not in line])
