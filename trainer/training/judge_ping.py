"""The judge check's one request over plain HTTP: each provider's API as one row of data.

The preflight asks every judge the config uses one tiny request (trainer/training/preflight.py's
judge check). Through litellm that cost each launch ~3.5 s of litellm's import; the providers
users configure take one POST each, whose endpoint, key, auth header and body differ only as
data: :data:`PROVIDERS`. Each row is what litellm (the job's judge, trainer/agent/judge.py)
sends that provider (litellm 1.82: ``main.py``'s routes, ``llms/<provider>/``), with the same
variables that move its endpoint (a tunnel's or a test's server) and hold its key, in litellm's
order, so that the preflight asks as the job will. :func:`plan` picks the row for a judge
model, or None: litellm then asks (any other provider).

Stdlib at import: httpx only through a proxy variable.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

JUDGE_PING = "Reply with the word OK."  # the judge check's one tiny request (test doubles recognise it)


@dataclass(frozen=True)
class Provider:
    """How one provider's API takes the ping. ``{model}`` (the name without its prefix), ``{ping}``
    and ``{key}`` are filled into ``path``, ``headers`` and ``body``."""

    name: str  # litellm's prefix: gemini/gemini-2.0-flash
    keys: tuple[str, ...]  # the variables holding its key, in litellm's order
    bases: tuple[str, ...]  # the variables that move its endpoint, in litellm's order
    default_base: str
    path: str  # after the base; a base already ending in it is taken whole (litellm's Anthropic rule)
    headers: tuple[tuple[str, str], ...]
    body: dict[str, Any]
    answered: str  # the field a successful answer has
    bare: str = ""  # a regular expression of the names litellm gives it without a prefix
    key_refused: str = ""  # an error's text that means the key is refused, whatever its status
    env_headers: tuple[tuple[str, str], ...] = ()  # (header, variable): sent when the variable is set


CHAT = [{"role": "user", "content": "{ping}"}]

# An OpenAI-compatible server at JUDGE_API_BASE (its key JUDGE_API_KEY, else OPENAI_API_KEY:
# preflight.judge_targets), asked as litellm's openai/ route asks it.
COMPATIBLE = Provider("openai-compatible", keys=(), bases=(), default_base="", path="/chat/completions",
                      headers=(("Authorization", "Bearer {key}"),),
                      body={"model": "{model}", "messages": CHAT, "max_tokens": 8, "temperature": 0},
                      answered="choices")

PROVIDERS = (
    # Google AI Studio: litellm sends the key as x-goog-api-key to GEMINI_API_BASE, and answers a
    # 400 "API key not valid" as a rejected key (its exception mapping).
    Provider("gemini", keys=("GOOGLE_API_KEY", "GEMINI_API_KEY"), bases=("GEMINI_API_BASE",),
             default_base="https://generativelanguage.googleapis.com/v1beta", path="/models/{model}:generateContent",
             headers=(("x-goog-api-key", "{key}"),),
             body={"contents": [{"role": "user", "parts": [{"text": "{ping}"}]}],
                   "generationConfig": {"maxOutputTokens": 8, "temperature": 0}},
             answered="candidates", key_refused="API key not valid"),
    # OpenAI: max_completion_tokens and no temperature, which every chat model takes (o1/o3/o4/gpt-5
    # refuse max_tokens and a temperature of 0; litellm rewrites them for those).
    Provider("openai", keys=("OPENAI_API_KEY",), bases=("OPENAI_BASE_URL", "OPENAI_API_BASE"),
             default_base="https://api.openai.com/v1", path="/chat/completions",
             headers=(("Authorization", "Bearer {key}"),),
             body={"model": "{model}", "messages": CHAT, "max_completion_tokens": 8},
             answered="choices", bare=r"(gpt-|chatgpt-|o[1-9]-).+|o[1-9]",
             env_headers=(("OpenAI-Organization", "OPENAI_ORGANIZATION"),)),
    Provider("anthropic", keys=("ANTHROPIC_API_KEY",), bases=("ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"),
             default_base="https://api.anthropic.com", path="/v1/messages",
             headers=(("x-api-key", "{key}"), ("anthropic-version", "2023-06-01")),
             body={"model": "{model}", "messages": CHAT, "max_tokens": 8, "temperature": 0},
             answered="content", bare=r"claude-.+"),
)
BY_NAME = {provider.name: provider for provider in PROVIDERS}


def fill(template: Any, values: Mapping[str, str]) -> Any:
    """``template`` (a row's path, headers or body) with ``{model}``, ``{ping}``, ``{key}`` filled in."""
    if isinstance(template, str):
        return template.format_map(values)
    if isinstance(template, dict):
        return {name: fill(value, values) for name, value in template.items()}
    if isinstance(template, (list, tuple)):
        return [fill(value, values) for value in template]
    return template


@dataclass(frozen=True)
class Ping:
    """The one request for a judge: its provider's row, the model as that API names it, where,
    with which key (None: none of the row's variables is set)."""

    provider: Provider
    model: str
    base: str
    key: str | None
    extra_headers: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        path = fill(self.provider.path, {"model": self.model})
        base = self.base.rstrip("/")
        return base if base.endswith(path) else base + path

    @property
    def moved(self) -> bool:
        """The endpoint is not the provider's own (JUDGE_API_BASE, a *_API_BASE variable)."""
        return self.base != self.provider.default_base

    def headers(self) -> dict[str, str]:
        return {**dict(fill(self.provider.headers, {"key": self.key or ""})), **self.extra_headers}

    def body(self) -> dict[str, Any]:
        return fill(self.provider.body, {"model": self.model, "ping": JUDGE_PING})

    def answered(self, status: int, body: dict) -> bool:
        return 200 <= status < 300 and self.provider.answered in body

    def status(self, status: int, text: str) -> int:
        """The status as litellm reports it: a key refused under another status (Gemini's 400) is 401."""
        return 401 if self.provider.key_refused and self.provider.key_refused in text else status

    def litellm_may_route(self, status: int) -> bool:
        """JUDGE_API_BASE refused a ``prefix/name`` (400/404): the prefix may be a litellm provider
        this table lacks, whose protocol litellm would speak there."""
        return self.provider is COMPATIBLE and status in (400, 404) and "/" in self.model


def provider_of(model: str, at_base: bool) -> tuple[Provider, str] | None:
    """The row for ``model`` and its name in that API, as litellm routes it (trainer.agent.judge's
    litellm_route): at JUDGE_API_BASE a name without a known prefix is OpenAI-compatible; else
    a ``gemini/``, ``openai/``, ``anthropic/`` prefix or a bare OpenAI or Claude name. None: another
    provider."""
    prefix, slash, name = model.partition("/")
    named = BY_NAME.get(prefix) if slash else None
    if at_base:
        return (named, name) if named not in (None, BY_NAME["openai"]) else (COMPATIBLE, model.removeprefix("openai/"))
    if named is not None:
        return named, name
    bare = next((row for row in PROVIDERS if row.bare and re.fullmatch(row.bare, model)), None)
    return (bare, model) if bare is not None else None


def plan(model: str, api_base: str | None, api_key: str | None, env: Mapping[str, str]) -> Ping | None:
    """The ping for the judge ``model``; None when litellm must ask (another provider). With
    JUDGE_API_BASE, litellm speaks the provider's protocol there with the judge's key ("EMPTY" for
    a server that wants none); else at the provider's endpoint (or its variable's) with its key."""
    found = provider_of(model, api_base is not None)
    if found is None:
        return None
    provider, name = found
    if api_base is not None:
        return Ping(provider, name, api_base, api_key or "EMPTY")
    base = next((env[variable] for variable in provider.bases if env.get(variable)), provider.default_base)
    key = next((env[variable] for variable in provider.keys if env.get(variable)), None)
    extra = {header: env[variable] for header, variable in provider.env_headers if env.get(variable)}
    return Ping(provider, name, base, key, extra)


def post_json(url: str, body: dict, headers: dict[str, str], timeout: float, proxied: bool) -> tuple[int, str]:
    """One POST: its status and text (OSError when nothing answered). ``proxied`` (a proxy variable:
    the tunnel's socks5h://) with httpx, which speaks SOCKS as the judge's own client does; else with
    urllib, which costs no import (httpx's takes a noticeable part of a second)."""
    if proxied:
        import httpx

        try:
            answer = httpx.post(url, json=body, headers=headers, timeout=timeout)
        except httpx.HTTPError as error:
            raise OSError(f"{type(error).__name__}: {error}") from None
        return answer.status_code, answer.text
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except (OSError, ValueError) as error:  # URLError, timeouts, a malformed URL
        raise OSError(f"{type(error).__name__}: {getattr(error, 'reason', error)}") from None


def json_object(text: str) -> dict:
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def http_detail(body: dict, text: str) -> str:
    """The server's own error message (OpenAI's ``{"error": {"message": ...}}``), else its text."""
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return str(message or text.strip()[:300] or "no message")
