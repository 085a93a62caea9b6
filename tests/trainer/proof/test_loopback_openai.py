"""The OpenAI-compatible test double ends with its ``with`` block: nothing a test started
through it outlives the test (a kept-alive connection left open would serve a late request at
interpreter exit, and a trainer's stop message would print after pytest's summary)."""

from __future__ import annotations

import http.client
import json
import threading
import time

from trainer.proof.loopback_openai import OpenAIServer, text


def post(connection: http.client.HTTPConnection) -> int:
    connection.request("POST", "/v1/chat/completions", json.dumps({"model": "m", "messages": []}),
                       {"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    return response.status


def test_leaving_the_server_ends_its_connections_and_the_script_is_not_called_again():
    calls = []
    before = set(threading.enumerate())  # an earlier test's server may have left its own handlers
    with OpenAIServer(lambda body: calls.append(body) or text("ok")) as server:
        connection = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=5)
        assert post(connection) == 200  # the connection is kept alive
    try:
        status = post(connection)  # a late request on the kept-alive connection
    except (ConnectionError, http.client.HTTPException, OSError):
        status = None
    assert status != 200 and len(calls) == 1
    handlers = [t for t in set(threading.enumerate()) - before
                if "process_request_thread" in repr(getattr(t, "_target", ""))]
    assert not handlers


def test_a_reply_held_by_a_delay_is_cut_short_when_the_server_closes():
    server = OpenAIServer(lambda body: text("late", delay=30.0)).start()
    connection = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=30)
    answered: list[object] = []

    def send() -> None:
        try:
            answered.append(post(connection))
        except (ConnectionError, http.client.HTTPException, OSError) as err:
            answered.append(type(err).__name__)

    sender = threading.Thread(target=send, daemon=True)
    began = time.monotonic()
    sender.start()
    while not server.requests:
        time.sleep(0.01)
    server.stop()
    sender.join(10)
    assert time.monotonic() - began < 10 and not sender.is_alive() and answered and answered[0] != 200
