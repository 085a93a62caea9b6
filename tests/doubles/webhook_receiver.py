"""Test double of a webhook (a chat service's incoming webhook, a pager): records every POST.

A real HTTP server (stdlib ``ThreadingHTTPServer`` in a daemon thread), so the
notifier goes through its real client, proxies included. ``status`` is what it
answers, ``delay`` how long it takes (for timeouts); ``received`` holds each
request's path and JSON body.

    with WebhookReceiver() as hook:
        notify.tell(run, "done", env={"HPC_WEBHOOK_URL": hook.url("/T0/B0/secret-token")})
        assert hook.events() == ["done"]
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    body: dict[str, Any]


class WebhookReceiver:
    def __init__(self, host: str = "127.0.0.1", status: int = 200, delay: float = 0.0):
        self.host, self.status, self.delay = host, status, delay
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, 0), self.handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                time.sleep(receiver.delay)
                with receiver.lock:
                    receiver.received.append(Received(self.path, body))
                try:
                    self.send_response(receiver.status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting (a timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def events(self) -> list[str]:
        with self.lock:
            return [r.body.get("event") for r in self.received]

    def wait_for(self, count: int, timeout: float = 30) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.1)
        raise AssertionError(f"the webhook got {len(self.received)} of {count} notices in {timeout}s: {self.received}")

    def __enter__(self) -> WebhookReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
