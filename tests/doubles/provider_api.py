"""Test double of the judge providers' own APIs other than OpenAI's (tests/doubles/openai_server.py
is that one): Google AI Studio's ``generateContent`` (Gemini) and Anthropic's Messages API.

A real HTTP server on 127.0.0.1 (openai_server's ``DoubleServer`` in a daemon thread), so that
the preflight's plain HTTP request and litellm's own (the job's judge) both go through their real
clients, pointed here by the variable litellm reads (``GEMINI_API_BASE``, ``ANTHROPIC_API_BASE``:
``base_url``). Each answers as its provider does: its path and auth header, its error body
(Google's ``{"error": {"code", "message", "status"}}``, Anthropic's ``{"type": "error", "error":
{"type", "message"}}``), a model it does not serve with 404, a wrong key as that provider answers
one (Gemini: 400 ``API key not valid``, and 403 without a key; Anthropic: 401), and "OK" to a
request it takes. ``delay`` holds each reply (a judge that hangs; cut short when the server
closes); ``status`` answers every authorized request with that error (429: busy). Every request
is recorded (``requests``: path, lower-cased headers, JSON body).

    with ProviderAPI("gemini", models=("gemini-2.0-flash",), key="k") as api:
        env = {"GEMINI_API_BASE": api.base_url, "GEMINI_API_KEY": "k"}
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.doubles.openai_server import DoubleServer, RecordedRequest, send_json

GEMINI_PATH = re.compile(r"/v1beta/models/([^/:]+):generateContent")
ANTHROPIC_PATH = "/v1/messages"
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
                 500: "INTERNAL", 503: "UNAVAILABLE"}
ANTHROPIC_TYPE = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                  404: "not_found_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
Answer = tuple[int, dict[str, Any]]


class ProviderAPI:
    """A provider's API on 127.0.0.1 (``protocol``: "gemini" or "anthropic"); a context manager."""

    def __init__(self, protocol: str, models: tuple[str, ...] = ("judge-model",), key: str = "provider-key-0123456789",
                 delay: float = 0.0, status: int | None = None) -> None:
        if protocol not in ("gemini", "anthropic"):
            raise ValueError(f"protocol {protocol!r}: the double speaks 'gemini' or 'anthropic'")
        self.protocol, self.models, self.key, self.delay, self.status = protocol, models, key, delay, status
        self.lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._httpd = DoubleServer(("127.0.0.1", 0), self._handler())

    @property
    def base_url(self) -> str:
        """What the provider's base variable takes: Gemini's includes the API version, as Google's does."""
        return f"{self._httpd.url}/v1beta" if self.protocol == "gemini" else self._httpd.url

    @property
    def requests(self) -> list[RecordedRequest]:
        with self.lock:
            return list(self._requests)

    def __enter__(self) -> "ProviderAPI":
        self._httpd.start_in_thread(f"{self.protocol}-double")
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.stop()

    def answer(self, path: str, headers: dict[str, str], body: dict) -> Answer:
        return gemini_answer(self, path, headers, body) if self.protocol == "gemini" else \
            anthropic_answer(self, path, headers, body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as openai_server's: no delayed-ACK latency

            def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
                return

            def do_POST(self) -> None:  # http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.server.closing.is_set():  # the test is over
                    self.close_connection = True
                    return send_json(self, 503, {"error": {"message": "server closed"}})
                headers = {name.lower(): value for name, value in self.headers.items()}
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {}
                with api.lock:
                    api._requests.append(RecordedRequest(self.path, headers, body))
                status, payload = api.answer(self.path, headers, body)
                if api.delay:
                    self.server.closing.wait(api.delay)  # cut short when the server closes
                send_json(self, status, payload)

        return Handler


def google_error(code: int, message: str, reason: str = "") -> Answer:
    error: dict[str, Any] = {"code": code, "message": message, "status": GOOGLE_STATUS.get(code, "UNKNOWN")}
    if reason:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
                             "domain": "googleapis.com"}]
    return code, {"error": error}


def gemini_answer(api: ProviderAPI, path: str, headers: dict[str, str], body: dict) -> Answer:
    """generateContent: the key in x-goog-api-key (or ?key=), the model in the path."""
    parts = urlsplit(path)
    match = GEMINI_PATH.fullmatch(parts.path)
    if match is None:
        return google_error(404, f"no route {parts.path}")
    key = headers.get("x-goog-api-key") or parse_qs(parts.query).get("key", [""])[0]
    if not key:
        return google_error(403, "Method doesn't allow unregistered callers (callers without established identity). "
                            "Please use API Key or other form of API consumer identity to call this API.")
    if key != api.key:
        return google_error(400, "API key not valid. Please pass a valid API key.", "API_KEY_INVALID")
    if api.status:
        return google_error(api.status, "scripted error")
    model = match[1]
    if model not in api.models:
        return google_error(404, f"models/{model} is not found for API version v1beta, or is not supported for "
                            "generateContent. Call ListModels to see the list of available models and their "
                            "supported methods.")
    if not body.get("contents"):
        return google_error(400, "* GenerateContentRequest.contents: contents is not specified")
    return 200, {"candidates": [{"content": {"parts": [{"text": "OK"}], "role": "model"}, "finishReason": "STOP",
                                 "index": 0}],
                 "usageMetadata": {"promptTokenCount": 6, "candidatesTokenCount": 1, "totalTokenCount": 7},
                 "modelVersion": model}


def anthropic_error(status: int, message: str) -> Answer:
    return status, {"type": "error", "error": {"type": ANTHROPIC_TYPE.get(status, "api_error"), "message": message}}


def anthropic_answer(api: ProviderAPI, path: str, headers: dict[str, str], body: dict) -> Answer:
    """Messages: the key in x-api-key, anthropic-version required, the model and max_tokens in the body."""
    if urlsplit(path).path != ANTHROPIC_PATH:
        return anthropic_error(404, f"no route {path}")
    if headers.get("x-api-key") != api.key:
        return anthropic_error(401, "invalid x-api-key")
    if not headers.get("anthropic-version"):
        return anthropic_error(400, "anthropic-version: header is required")
    if api.status:
        return anthropic_error(api.status, "scripted error")
    model = body.get("model", "")
    if model not in api.models:
        return anthropic_error(404, f"model: {model}")
    if not body.get("max_tokens") or not body.get("messages"):
        return anthropic_error(400, "max_tokens, messages: Field required")
    return 200, {"id": "msg_double", "type": "message", "role": "assistant", "model": model,
                 "content": [{"type": "text", "text": "OK"}], "stop_reason": "end_turn", "stop_sequence": None,
                 "usage": {"input_tokens": 10, "output_tokens": 1}}
