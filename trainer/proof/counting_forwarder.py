"""A forwarder that counts what a run asks: every HTTP request passed on to a served judge
unchanged, counted by path and the status it got (the proof's judge stage compares the count
with what the judge's own access log says it answered)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

from trainer.proof.loopback_openai import DoubleServer


class CountingForwarder:
    """Passes every HTTP request on to ``target`` (a served judge) unchanged and returns its answer
    unchanged, counting each request by path and the status it got: what a run asked, counted on
    the asking side (the judge's own access log counts what it answered). A context manager."""

    def __init__(self, target: str) -> None:

        self.target = target.rstrip("/")
        self.counts: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()
        self._server = DoubleServer(("127.0.0.1", 0), _forwarding_handler(self))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def asked(self, path: str = "/v1/chat/completions") -> Counter[int]:
        """The status of each request to ``path``."""
        with self._lock:
            return Counter({status: n for (where, status), n in self.counts.items() if where == path})

    def count(self, path: str, status: int) -> None:
        with self._lock:
            self.counts[(path, status)] += 1

    def __enter__(self) -> "CountingForwarder":
        self._server.start_in_thread("counting-forwarder")
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop serving and end every connection's handler, so that no kept-alive client's handler
        thread outlives the forwarder (a later test's thread check would count it)."""
        self._server.stop()

    def handlers_alive(self) -> int:
        return self._server.handlers_alive()


def _forwarding_handler(forwarder: CountingForwarder) -> type:
    from http.server import BaseHTTPRequestHandler

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _forward(self, body: bytes | None) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
            request = urllib.request.Request(forwarder.target + self.path, data=body, headers=headers,
                                             method="POST" if body is not None else "GET")
            try:
                with urllib.request.urlopen(request, timeout=900) as response:
                    status, payload, kind = response.status, response.read(), response.headers.get("Content-Type")
            except urllib.error.HTTPError as error:
                status, payload, kind = error.code, error.read(), error.headers.get("Content-Type")
            except OSError as error:
                status, payload, kind = 502, json.dumps({"error": {"message": str(error)}}).encode(), "application/json"
            forwarder.count(self.path.split("?")[0], status)
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Forward
