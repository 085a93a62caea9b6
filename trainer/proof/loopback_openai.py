"""A loopback OpenAI-compatible chat server (vLLM serving the policy, or the judge), answering from a script.

A real HTTP server on 127.0.0.1 (random port, stdlib ``ThreadingHTTPServer``
in a daemon thread), so the code under test goes through its real clients:
the OpenAI SDK inside ``art.Model.openai_client()`` and litellm's ``openai/``
provider. It implements ``POST /v1/chat/completions`` (and the same path
without ``/v1``) and answers from a script:

- a list of :class:`Reply`, one per request, in order (an exhausted script
  answers 500 "script exhausted", so a test that calls too often fails loudly);
- a function ``request_body -> Reply``;
- a dict ``{model_name: list | function}`` to serve several models (policy and
  judge) from one server.

Every request is recorded (``requests``), and ``max_in_flight`` tells the most
requests that were being served at once (with ``Reply.delay`` to hold them).
``GET /health`` and ``GET /v1/models`` answer as vLLM's server does (``served``
names the models; a dict script's keys by default), for readiness checks.
With ``api_key``, a request without ``Authorization: Bearer <api_key>`` gets 401,
as OpenAI's API and ``vllm serve --api-key`` answer (preflight's bad-key test).

Leaving the ``with`` block ends everything the server started: its kept-alive connections
are shut down, a reply held by ``Reply.delay`` is cut short, and the script is never called
again, so nothing of a test (a stop request the script makes, a trainer's client still
sending) outlives it: no handler thread on a kept-alive connection serves a late request at
interpreter exit.

    with OpenAIServer([tool_call("search_emails", {"keywords": ["x"]}), text("done")]) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union, cast

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # raw text, so tests can send malformed JSON


@dataclass(frozen=True)
class Reply:
    """One scripted answer. A ``status`` other than 200 sends an OpenAI-style error body."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None  # default: "tool_calls" when there are tool calls, else "stop"
    prompt_tokens: int = 11
    completion_tokens: int = 7
    status: int = 200
    error: str = "scripted error"
    delay: float = 0.0


def text(content: str, **kwargs: Any) -> Reply:
    """An assistant message with content only."""
    return Reply(content=content, **kwargs)


def tool_call(name: str, arguments: dict | str, **kwargs: Any) -> Reply:
    """An assistant message calling one tool; ``arguments`` as a dict (JSON-encoded) or raw text."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(tool_calls=(ToolCall(name, raw),), **kwargs)


def tool_calls(*calls: tuple[str, dict | str], **kwargs: Any) -> Reply:
    """An assistant message calling several tools in one turn."""
    return Reply(
        tool_calls=tuple(ToolCall(n, a if isinstance(a, str) else json.dumps(a)) for n, a in calls), **kwargs
    )


def failure(status: int = 500, error: str = "scripted error", **kwargs: Any) -> Reply:
    """An HTTP error reply."""
    return Reply(status=status, error=error, **kwargs)


Responder = Callable[[dict], Reply]
Script = Union[list[Reply], Responder, dict[str, Union[list[Reply], Responder]]]


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]  # names lower-cased
    body: dict

    @property
    def model(self) -> str:
        return self.body.get("model", "")

    @property
    def messages(self) -> list[dict]:
        return self.body.get("messages", [])


@dataclass
class _State:
    script: Script
    requests: list[RecordedRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    positions: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: Any = field(default_factory=itertools.count)
    served: tuple[str, ...] = ()  # what GET /v1/models lists
    api_key: str | None = None  # when set, requests without this bearer token get 401


class DoubleServer(ThreadingHTTPServer):
    """A listen backlog for many clients at once (the default 5 drops connects, which then
    wait a second for a SYN retry: a latency no model server has), and every connection
    known, so that closing the server ends them all."""

    request_queue_size = 256
    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        self._handlers: list[threading.Thread] = []

    def process_request(self, request: Any, client_address: Any) -> None:
        """Each connection's handler thread is kept, so that closing can wait for it to end
        (socketserver keeps none of its daemon threads: a handler could outlive its server)."""
        handler = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        with self._connections_lock:
            self._connections.add(request)
            self._handlers = [t for t in self._handlers if t.is_alive()] + [handler]
        handler.start()

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self, timeout: float = 5.0) -> None:
        """Refuse further requests, shut every open connection down and wait for their handlers."""
        self.closing.set()
        with self._connections_lock:
            open_now = list(self._connections)
        for connection in open_now:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        with self._connections_lock:
            handlers = list(self._handlers)
        for handler in handlers:
            handler.join(timeout=max(0.0, deadline - time.monotonic()))

    def handlers_alive(self) -> int:
        """Connections' handler threads still running."""
        with self._connections_lock:
            return sum(handler.is_alive() for handler in self._handlers)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"http://{host}:{port}"

    def start_in_thread(self, name: str) -> None:
        """Serve from a daemon thread, until :meth:`stop`."""
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.02}, name=name,
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop serving, close the socket and every connection, and wait for the thread."""
        self.shutdown()
        self.server_close()
        self.close_connections()
        self.thread.join(timeout=5)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a cancelled request, a closed server) is no error to print."""
        if self.closing.is_set() or isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class OpenAIServer:
    """A scripted OpenAI-compatible endpoint; use as a context manager (or start()/stop())."""

    def __init__(self, script: Script, port: int = 0, served: tuple[str, ...] = (), api_key: str | None = None) -> None:
        self._state = _State(script=script, served=served or (tuple(script) if isinstance(script, dict) else ()),
                             api_key=api_key)
        self._httpd = DoubleServer(("127.0.0.1", port), _handler_for(self._state))

    @property
    def url(self) -> str:
        return self._httpd.url

    @property
    def base_url(self) -> str:
        """What an OpenAI client or litellm's api_base wants: the URL with /v1."""
        return f"{self.url}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def max_in_flight(self) -> int:
        return self._state.max_in_flight

    def requests_for(self, model: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.model == model]

    def start(self) -> "OpenAIServer":
        self._httpd.start_in_thread("openai-double")
        return self

    def stop(self) -> None:
        self._httpd.stop()

    def __enter__(self) -> "OpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler_for(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as two writes: with Nagle's algorithm on, a kept-alive
        # client's delayed ACK holds the body back 40 ms, a latency no model server has.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            return

        def do_GET(self) -> None:  # vLLM's /health and /v1/models, for readiness checks
            path = self.path.split("?")[0]
            if path == "/health":
                return self._send(200, {})
            if not self._authorized():
                return self._unauthorized()
            if path in ("/v1/models", "/models"):
                return self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in state.served]})
            return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:  # http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if cast(DoubleServer, self.server).closing.is_set():  # the test is over: the script is not called again
                self.close_connection = True
                return self._send(503, {"error": {"message": "server closed", "type": "closed"}})
            if not self._authorized():
                return self._unauthorized()
            if self.path.split("?")[0] not in CHAT_PATHS:
                return self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                return self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply, completion_id = _take_reply(state, self.path, headers, body)
            try:
                if reply.delay and cast(DoubleServer, self.server).closing.wait(reply.delay):
                    self.close_connection = True  # closed while held: the scripted reply is never sent
                    return self._send(503, {"error": {"message": "server closed", "type": "closed"}})
                if reply.status != 200:
                    error = {"error": {"message": reply.error, "type": "scripted", "code": reply.status}}
                    return self._send(reply.status, error)
                self._send(200, _completion(reply, body, completion_id))
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _authorized(self) -> bool:
            return state.api_key is None or self.headers.get("Authorization") == f"Bearer {state.api_key}"

        def _unauthorized(self) -> None:
            error = {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}
            return self._send(401, {"error": error})

        def _send(self, status: int, payload: dict) -> None:
            send_json(self, status, payload)

    return Handler


def _take_reply(state: _State, path: str, headers: dict[str, str], body: dict) -> tuple[Reply, int]:
    """Record the request, count it in flight, and take its scripted reply and completion id."""
    with state.lock:
        state.requests.append(RecordedRequest(path, headers, body))
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        return _next_reply(state, body), next(state.ids)


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
    """Answer ``payload`` as JSON with ``status`` (a kept-alive connection: its length said)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _next_reply(state: _State, body: dict) -> Reply:
    """The scripted reply for this request (called under the state lock)."""
    script = state.script
    model = body.get("model", "")
    if isinstance(script, dict):
        if model not in script:
            return failure(404, f"model {model!r} is not served here (serving {sorted(script)})")
        script = script[model]
    if callable(script):
        return script(body)
    key = model if isinstance(state.script, dict) else ""
    position = state.positions.get(key, 0)
    state.positions[key] = position + 1
    if position >= len(script):
        return failure(500, f"script exhausted after {len(script)} replies")
    return script[position]


def _completion(reply: Reply, request: dict, completion_id: int) -> dict:
    """A chat.completion object as vLLM returns it (with per-token logprobs, as ART's vLLM does)."""
    tool_calls = [
        {"id": f"call_{completion_id}_{i}", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for i, c in enumerate(reply.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    generated = (reply.content or "") + "".join(c.arguments for c in reply.tool_calls)
    return {
        "id": f"chatcmpl-double-{completion_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", ""),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": {"content": _logprobs(generated, reply.completion_tokens)},
                "finish_reason": reply.finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def _logprobs(generated: str, count: int) -> list[dict]:
    """``count`` fake tokens (the usage's completion_tokens, as vLLM's counts agree; ART
    checks that they do): the reply's words, the last one taking the rest, or padded."""
    words = generated.split()
    if count == 0:
        return []
    pieces = words[: count - 1] + [" ".join(words[count - 1:])] if len(words) > count else words
    pieces += [""] * (count - len(pieces))
    return [{"token": piece, "logprob": -0.5, "bytes": list(piece.encode()), "top_logprobs": []} for piece in pieces]
