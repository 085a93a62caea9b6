"""trainer.serve's HTTP connections, bounded before a request reaches the application.

uvicorn's httptools protocol takes a request head of any size and any duration: ten clients
sending 20 MB of an unfinished header grew the service by 280 MB, and two hundred half-sent
requests held their connections for as long as the clients liked (slowloris). Here, on top of
it, a request head (request line and headers) over MAX_HEAD_BYTES is answered 431 and its
connection closed, and a connection whose next request head has not fully arrived within
``head_timeout`` seconds (from the connection's start, or the previous answer's end) is
answered 408 and closed. So each connection holds at most MAX_HEAD_BYTES (plus one read) of a
head, for at most ``head_timeout`` seconds; the body's own limits are the Guard's
(trainer/serving/guard.py). A request being answered is never cut: the timer only runs while
the connection waits for a head.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 16 * 1024  # a request line and headers; the service's own requests send a few hundred bytes
HEAD_TIMEOUT = 10.0  # seconds a request head may take to arrive


def limited_protocol(head_timeout: float = HEAD_TIMEOUT, max_head_bytes: int = MAX_HEAD_BYTES) -> type:
    """uvicorn's httptools protocol with the head's limits (uvicorn.Config(http=...) takes a class)."""
    return type("LimitedHttpTools", (LimitedHttpTools,), {"head_timeout": head_timeout,
                                                          "max_head_bytes": max_head_bytes})


class LimitedHttpTools(HttpToolsProtocol):
    """HttpToolsProtocol counting each request head's bytes and timing its arrival."""

    head_timeout = HEAD_TIMEOUT
    max_head_bytes = MAX_HEAD_BYTES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_bytes, self.in_head = 0, True
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.in_head:
            self.head_bytes += len(data)
        super().data_received(data)
        if self.in_head and self.head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self.refuse(431, f"request head over {self.max_head_bytes} bytes")

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.disarm_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head, self.head_bytes = True, 0  # what follows is the next request's head

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.in_head and not self.transport.is_closing():
            self.arm_head_timer()

    def arm_head_timer(self) -> None:
        self.disarm_head_timer()
        self.head_timer = self.loop.call_later(self.head_timeout, self.head_timed_out)

    def disarm_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_timed_out(self) -> None:
        self.head_timer = None
        answering = self.cycle is not None and not self.cycle.response_complete
        if self.in_head and not answering and not self.pipeline and not self.transport.is_closing():
            self.refuse(408, f"request head not received within {self.head_timeout:g} s")

    def refuse(self, status: int, message: str) -> None:
        """One line of JSON, as the service's other refusals, and the connection closed."""
        body = ('{"error": "%s"}' % message).encode()
        reason = {408: "Request Timeout", 431: "Request Header Fields Too Large"}[status]
        self.transport.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                             f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
        self.transport.close()
        self.in_head = False  # nothing more is parsed or counted
        self.disarm_head_timer()
