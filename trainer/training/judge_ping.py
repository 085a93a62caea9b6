"""The judge check's one request over plain HTTP (trainer/training/preflight.py's judge check).

Stdlib at import: httpx only through a proxy variable.
"""

from __future__ import annotations

import json

JUDGE_PING = "Reply with the word OK."  # the judge check's one tiny request (test doubles recognise it)


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
