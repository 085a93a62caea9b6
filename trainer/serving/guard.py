"""What reaches trainer.serve's application: the guard in front of it (plain ASGI).

It refuses before the application sees a request: a missing or wrong token (401), a body over
MAX_BODY_BYTES (413) counted on the bytes that arrive whatever the transfer encoding, a body that
has not arrived within the service's ``body_timeout`` (408); a refusal closes the connection. It
times every answer (``Server-Timing``). trainer/serving/serve.py builds the application behind it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

MAX_BODY_BYTES = 64 * 1024


class Guard:
    """Refuses before the application sees a request: a missing or wrong token (401; /health stays
    open); a body over MAX_BODY_BYTES (413), by its Content-Length at once and by the bytes that
    actually arrive, whatever the transfer encoding (chunked, a Content-Length that lies); a body
    that has not arrived within ``body_timeout`` seconds (408: a slow client holds no slot). A
    refusal closes the connection. The application gets the body already read. Times every answer
    (a ``Server-Timing: app;dur=`` header, milliseconds from the request's arrival to its response).
    Plain ASGI."""

    def __init__(self, app: Any, token: str | None, body_timeout: float = 10.0) -> None:
        self.app, self.token, self.body_timeout = app, token, body_timeout

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.monotonic()
        refusal = self.refusal(scope["path"], dict(scope["headers"]))
        body: bytes | None = b""
        if refusal is None:
            body, refusal = await read_body(receive, self.body_timeout)
        if refusal is not None:
            await refuse(refusal, scope, receive, send)
        elif body is not None:  # None: the client went away while sending it
            await self.app(scope, replay(body, receive), timed(send, began))

    def refusal(self, path: str, headers: dict[bytes, bytes]) -> tuple[int, str] | None:
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if self.token and path != "/health" and not token_ok(authorization, self.token):
            return 401, "missing or wrong token: send 'Authorization: Bearer <token>' (serve/token in the run directory)"
        length = headers.get(b"content-length", b"0").decode("latin-1")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return 413, f"request body over {MAX_BODY_BYTES} bytes"
        return None


async def read_body(receive: Any, timeout: float) -> tuple[bytes | None, tuple[int, str] | None]:
    """The request's body, counted as it arrives: (body, None), or (None, the refusal) past
    MAX_BODY_BYTES or ``timeout`` seconds for all of it, or (None, None) when the client left."""
    loop = asyncio.get_running_loop()
    deadline, chunks, size = loop.time() + timeout, [], 0
    while True:
        try:
            message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            return None, (408, f"request body not received within {timeout:g} s")
        if message["type"] != "http.request":
            return None, None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None, (413, f"request body over {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None


def replay(body: bytes, receive: Any) -> Any:
    """``receive`` for the application: the body read already, then the connection's own messages."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def again() -> dict[str, Any]:
        return pending.pop() if pending else await receive()

    return again


async def refuse(refusal: tuple[int, str], scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The refusal in one line, and the connection closed (what is left of a body is never read)."""
    from fastapi.responses import JSONResponse  # the web stack only in the service

    status, message = refusal
    await JSONResponse({"error": message}, status_code=status, headers={"connection": "close"})(scope, receive, send)


def timed(send: Any, began: float) -> Any:
    """``send``, adding the Server-Timing header to the response's start."""
    async def send_timed(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            elapsed = f"app;dur={1000 * (time.monotonic() - began):.1f}".encode()
            message = {**message, "headers": [*message.get("headers", []), (b"server-timing", elapsed)]}
        await send(message)

    return send_timed


def token_ok(header: str | None, token: str) -> bool:
    """Compared as bytes: compare_digest refuses str holding non-ASCII (``Bearer \xe9``, a header
    read as latin-1), which would answer 500 before the 401."""
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode("utf-8", "surrogateescape"),
                                                                 token.encode("utf-8", "surrogateescape"))
