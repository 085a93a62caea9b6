"""The real service (`python -m trainer.serve`) against the scripted endpoint, called with a
real HTTP client: answers and source ids, every class of bad request, the model failing,
a full queue, the token beyond localhost, and trainer.ask."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.doubles.openai_server import OpenAIServer, Reply, failure, tool_call
from trainer.serving.ask import main as ask_main
from trainer.serving.vllm_server import free_port

REPO = Path(__file__).resolve().parents[3]
BODY_TIMEOUT = 2  # seconds the module's service waits for a request's body
HEAD_TIMEOUT = 2  # and for a request's head
INBOX = "vince.kaminski@enron.com"
SOURCE = "<10067.1075840530573.JavaMail.evans@thyme>"


def scripted(body: dict) -> Reply:
    """Search once, then answer; "slow" questions take 2 s, "break" ones fail the model."""
    question = body["messages"][1]["content"]
    if "break" in question:
        return failure(500, "the GPU fell off the bus")
    delay = 2.0 if "slow" in question else 0.0
    if body["messages"][-1]["role"] == "user":
        return tool_call("search_emails", {"keywords": ["offsite"]}, delay=delay)
    return tool_call("return_final_answer", {"answer": f"answer to: {question}", "sources": [SOURCE]})


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAIServer]:
    with OpenAIServer(scripted) as server:
        yield server


def start(model: OpenAIServer, data_dir: Path, run_dir: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO)}
    env.pop("HPC_RUN_DIR", None)
    child = subprocess.Popen([sys.executable, "-m", "trainer.serve", "--config", "smoke", "--model_base", model.base_url,
                              "--model_name", "policy", "--port", str(port), "--run_dir", str(run_dir), *extra],
                             cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return child, url
        except httpx.HTTPError:
            time.sleep(0.2)
    child.kill()
    raise AssertionError(child.stdout.read())


@pytest.fixture(scope="module")
def served(model, tmp_path_factory, art_e_data_dir) -> Iterator[tuple[subprocess.Popen, str]]:
    run_dir = tmp_path_factory.mktemp("serve_run")
    child, url = start(model, art_e_data_dir, run_dir, "max_in_flight=1", "max_queue=1", f"body_timeout={BODY_TIMEOUT}",
                       f"head_timeout={HEAD_TIMEOUT}")
    yield child, url
    child.terminate()
    assert child.wait(30) == 75, "stopped cleanly at TERM (75: stopped on request)"


@pytest.fixture(scope="module")
def service(served) -> str:
    return served[1]


def invoke(url: str, body: object, **kw) -> httpx.Response:
    """POST /invoke with ``body`` as JSON (bytes: as they are)."""
    sent = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) else {"json": body}
    return httpx.post(f"{url}/invoke", **sent, timeout=60, **kw)


def test_an_answer_carries_the_agents_answer_sources_turns_and_latency(service: str) -> None:
    reply = invoke(service, {"question": "Where is the offsite?", "inbox": INBOX, "query_date": "2000-03-28"})
    assert reply.status_code == 200, reply.text
    data = reply.json()
    assert data["answer"] == "answer to: Where is the offsite?" and data["source_ids"] == [SOURCE]
    assert data["turns"] == 2 and data["latency_s"] >= 0 and "transcript" not in data


def test_the_transcript_is_the_conversation_with_its_tool_calls(service: str) -> None:
    data = invoke(service, {"question": "q", "inbox": INBOX, "query_date": "2000-03-28", "transcript": True}).json()
    roles = [m["role"] for m in data["transcript"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert data["transcript"][2]["tool_calls"][0]["function"]["name"] == "search_emails"


def test_health_and_info_say_what_is_served(service: str) -> None:
    assert httpx.get(f"{service}/health").json() == {"status": "ok"}
    info = httpx.get(f"{service}/info").json()
    assert info["model"] == "policy" and info["kind"] == "url" and len(info["data_version"]) == 12


@pytest.mark.parametrize("body, status, fragment", [
    ({"inbox": INBOX, "query_date": "2000-03-28"}, 422, "question: Field required"),
    ({"question": 5, "inbox": INBOX, "query_date": "2000-03-28"}, 422, "question: Input should be a valid string"),
    ({"question": "q", "inbox": "nobody@nowhere.org", "query_date": "2000-03-28"}, 404, "unknown inbox 'nobody@nowhere.org'"),
    ({"question": "q", "inbox": INBOX, "query_date": "2000-13-45"}, 422, "query_date '2000-13-45' is not a date"),
    ("not an object", 422, "expected JSON"),
    (b"[" * 60_000, 400, "expected JSON"),  # nested too deeply for the parser: still one line in "error"
    (b'{"question": ' * 5000, 400, "expected JSON"),
    (b"\xff\xfe{}", 422, "expected JSON"),
    ({"question": "q", "inbox": INBOX, "query_date": {"a": [[[[[[1]]]]]]}}, 422, "query_date"),
])
def test_a_bad_request_gets_a_4xx_with_one_line(service: str, body: object, status: int, fragment: str) -> None:
    reply = invoke(service, body)
    assert reply.status_code == status and fragment in reply.json()["error"]
    assert "\n" not in reply.json()["error"]


@pytest.mark.parametrize("query_date", [
    "20000328xx", "2000032800", "2000-W13-2", "2000-088-1", "2000-03-2\uff18", "\u0662\u0660\u0660\u0660-03-28",
    "2000/03/28", "2000-3-28 ", " 2000-3-28", "2000-02-30", "0000-01-01", "2000-03-28T00:00", "+2000-03-2",
])
def test_a_query_date_other_than_exactly_yyyy_mm_dd_is_refused(service: str, query_date: str) -> None:
    reply = invoke(service, {"question": "q", "inbox": INBOX, "query_date": query_date})
    assert reply.status_code == 422, (query_date, reply.text)
    assert "query_date" in reply.json()["error"] and "\n" not in reply.json()["error"]


def test_an_unknown_path_or_method_says_so_in_the_same_error_form(service: str) -> None:
    assert httpx.get(f"{service}/nowhere").json() == {"error": "Not Found"}
    assert httpx.get(f"{service}/invoke").json() == {"error": "Method Not Allowed"}


def test_an_oversized_body_is_413_and_not_read(service: str) -> None:
    reply = invoke(service, {"question": "x" * 70_000, "inbox": INBOX, "query_date": "2000-03-28"})
    assert reply.status_code == 413 and "over 65536 bytes" in reply.json()["error"]


# -- the body limit on the bytes that arrive, with raw sockets -----------------------------------------


def exchange(url: str, head: str, parts: Iterable[bytes] = (), gap: float = 0.0) -> tuple[int, bytes, float]:
    """Send a request's head, then its body ``parts`` (``gap`` seconds apart) as a client would, up to
    where the service stops reading; (status, the reply, seconds until the service closed)."""
    where = urlsplit(url)
    began = time.monotonic()
    with socket.create_connection((where.hostname, where.port), timeout=30) as connection:
        connection.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        try:
            for part in parts:
                connection.sendall(part)
                time.sleep(gap)
        except OSError:  # the service refused and closed: its reply is read below
            pass
        reply = b""
        try:
            while chunk := connection.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0, reply, time.monotonic() - began


def chunked(size: int, piece: int, extension: str = "") -> list[bytes]:
    """``size`` bytes of a JSON-ish body in chunks of ``piece`` bytes (chunked transfer coding), ended."""
    chunks = [b"x" * min(piece, size - start) for start in range(0, size, piece)]
    return [f"{len(c):x}{extension}\r\n".encode() + c + b"\r\n" for c in chunks] + [b"0\r\n\r\n"]


HEAD = "POST /invoke HTTP/1.1\nHost: x\nContent-Type: application/json\n"


@pytest.mark.parametrize("head, parts", [
    (HEAD + "Transfer-Encoding: chunked\n", chunked(70_000, 4096)),  # no Content-Length at all
    (HEAD + "Transfer-Encoding: chunked\n", chunked(70_000, 70_000)),  # one big chunk
    (HEAD + "Transfer-Encoding: chunked\n", chunked(66_000, 97, ";ext=1")),  # small chunks with extensions
    (HEAD + "Transfer-Encoding: chunked\nContent-Length: 10\n", chunked(70_000, 8192)),  # a Content-Length that lies
    (HEAD + "Content-Length: 70000\n", [b"x" * 70_000]),
    (HEAD + "Content-Length: 0070000\n", [b"x" * 10]),  # refused by its length before a byte is read
], ids=["chunked", "one-big-chunk", "chunk-extensions", "chunked-and-lying-length", "length", "length-zero-padded"])
def test_a_body_over_64_kib_is_refused_whatever_its_transfer_encoding(service: str, head: str, parts) -> None:
    status, reply, _ = exchange(service, head, parts)
    assert status in (400, 413), reply[:300]  # 400: a parser that refuses the mixed framing itself
    if status == 413:
        assert b"over 65536 bytes" in reply and b"connection: close" in reply.lower()


def test_a_body_of_exactly_64_kib_is_read(service: str) -> None:
    body = json.dumps({"question": "q", "inbox": INBOX, "query_date": "2000-03-28", "pad": ""}).encode()
    body = body[:-2] + b" " * (65536 - len(body)) + body[-2:]
    status, reply, _ = exchange(service, HEAD + "Transfer-Encoding: chunked\n", chunked_bytes(body, 1000))
    assert status == 200, reply[:300]


def chunked_bytes(body: bytes, piece: int) -> list[bytes]:
    parts = [body[i:i + piece] for i in range(0, len(body), piece)]
    return [f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts] + [b"0\r\n\r\n"]


@pytest.mark.parametrize("head, parts, gap", [
    (HEAD + "Content-Length: 200\n", [b'{"question": '], 0.0),  # stops sending
    (HEAD + "Content-Length: 200\n", [b"x"] * 40, 0.25),  # a trickle: each byte in time, the whole too late
    (HEAD + "Transfer-Encoding: chunked\n", [b"5\r\nxxxxx\r\n"], 0.0),  # a chunked body never ended
], ids=["stops", "trickle", "chunked-unended"])
def test_a_client_that_sends_its_body_slowly_is_cut_off(service: str, head: str, parts, gap: float) -> None:
    status, reply, seconds = exchange(service, head, parts, gap)
    assert status == 408 and b"not received within 2 s" in reply, reply[:300]
    assert seconds < BODY_TIMEOUT + 5


def test_the_model_failing_mid_answer_is_a_502_with_the_reason(service: str) -> None:
    reply = invoke(service, {"question": "please break", "inbox": INBOX, "query_date": "2000-03-28"})
    assert reply.status_code == 502 and "the GPU fell off the bus" in reply.json()["error"]


def test_a_full_queue_answers_503_at_once_and_loses_nothing_else(service: str) -> None:
    import concurrent.futures

    body = {"question": "slow one", "inbox": INBOX, "query_date": "2000-03-28"}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda _: invoke(service, body), range(4)))
    codes = sorted(r.status_code for r in replies)
    assert codes.count(200) == 2 and codes.count(503) == 2, codes  # 1 in flight + 1 waiting
    assert all("busy" in r.json()["error"] for r in replies if r.status_code == 503)


def test_beyond_localhost_a_token_is_required_and_stored_0600(model, tmp_path, art_e_data_dir) -> None:
    child, url = start(model, art_e_data_dir, tmp_path / "public", "--host", "0.0.0.0")
    try:
        token_file = tmp_path / "public" / "serve" / "token"
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        body = {"question": "q", "inbox": INBOX, "query_date": "2000-03-28"}
        assert invoke(url, body).status_code == 401
        assert invoke(url, body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        token = token_file.read_text().strip()
        assert invoke(url, body, headers={"Authorization": f"Bearer {token}"}).status_code == 200
        address = json.loads((tmp_path / "public" / "serve" / "address.json").read_text())
        assert address["token_required"] and token not in json.dumps(address)
        log = child.stdout
    finally:
        child.terminate()
        child.wait(30)
    assert token not in log.read(), "the token is never printed"


def test_ask_reaches_a_running_service_by_its_run_directory(model, tmp_path, art_e_data_dir, capsys) -> None:
    child, _ = start(model, art_e_data_dir, tmp_path / "asked")
    address = tmp_path / "asked" / "serve" / "address.json"
    deadline = time.monotonic() + 10  # written just after the service starts answering
    while not address.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert ask_main(["When?", "--inbox", INBOX, "--date", "2000-03-28", "--run", str(tmp_path / "asked")]) == 0
    finally:
        child.terminate()
        child.wait(30)
    out = capsys.readouterr().out
    assert "answer:  answer to: When?" in out and f"sources: {SOURCE}" in out


def test_ask_says_why_a_service_refused(service: str, capsys) -> None:
    assert ask_main(["q", "--inbox", "nobody@x.org", "--date", "2000-03-28", "--url", service]) == 2
    assert "404: unknown inbox 'nobody@x.org'" in capsys.readouterr().err


def test_serving_at_best_of_a_run_without_validation_is_one_line_exit_2(art_e_data_dir: Path, tmp_path: Path) -> None:
    from hpc.run import ownership
    from hpc.run.rundir import RunDir

    run = RunDir(tmp_path / "runs" / "trained")
    run.path.mkdir(parents=True)
    ownership.claim(run, tmp_path / "art" / "models" / "trained")
    env = {**os.environ, "DATA_DIR": str(art_e_data_dir), "PYTHONPATH": str(REPO), "RUNS_DIR": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-m", "trainer.serve", "--config", "smoke", "--model", "run:trained@best",
                           "--run_dir", str(tmp_path / "serving")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "run trained has no validation, so it has no best checkpoint" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# -- request heads: bounded in size and in time (trainer/serving/http_limits.py) ------------------


def rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def send_unfinished_head(url: str, head: bytes, filler: bytes, total: int) -> tuple[int, bytes]:
    """Send ``head`` then up to ``total`` bytes of ``filler`` without ever ending the head; (bytes
    the service took before it closed, its reply)."""
    where = urlsplit(url)
    sent = 0
    with socket.create_connection((where.hostname, where.port), timeout=30) as connection:
        try:
            connection.sendall(head)
            while sent < total:
                connection.sendall(filler)
                sent += len(filler)
        except OSError:  # refused and closed
            pass
        reply = b""
        try:
            while chunk := connection.recv(65536):
                reply += chunk
        except OSError:
            pass
    return sent, reply


@pytest.mark.parametrize("head, filler", [
    (b"POST /invoke HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"a" * 65536),  # one endless header
    (b"POST /invoke HTTP/1.1\r\nHost: x\r\n", b"X-A: b\r\n" * 8192),  # endless small headers
    (b"GET /health?", b"q" * 65536),  # an endless request line
    (b"POST /invoke HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"a" * 100),  # in small pieces
], ids=["one-header", "many-headers", "request-line", "small-pieces"])
def test_a_request_head_over_16_kib_is_431_and_the_connection_closed(service: str, head: bytes, filler: bytes) -> None:
    sent, reply = send_unfinished_head(service, head, filler, 20 * 2**20)
    assert reply.startswith(b"HTTP/1.1 431 ") and b"request head over 16384 bytes" in reply, reply[:200]
    assert sent < 4 * 2**20, "refused long before the 20 MB were taken"


def test_ten_clients_sending_20_mb_heads_leave_the_services_memory_bounded(served) -> None:
    import concurrent.futures

    child, url = served
    before = rss_kib(child.pid)
    head, filler = b"POST /invoke HTTP/1.1\r\nHost: x\r\nX-Pad: ", b"a" * 65536
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        replies = list(pool.map(lambda _: send_unfinished_head(url, head, filler, 20 * 2**20), range(10)))
    assert all(reply.startswith(b"HTTP/1.1 431 ") for _, reply in replies)
    assert rss_kib(child.pid) - before < 30 * 1024, "at most a head's limit and a read per connection"
    assert httpx.get(f"{url}/health").status_code == 200


@pytest.mark.parametrize("parts, gap", [
    ([], 0.0),  # connects and sends nothing
    ([b"POST /invoke HTTP/1.1\r\n"], 0.0),  # half a head, then silence
    ([b"GET /health HTTP/1.1\r\nX-A: "] + [b"b"] * 40, 0.25),  # a trickle: each byte in time, the head never done
], ids=["silent", "half-head", "trickle"])
def test_a_request_head_that_does_not_arrive_in_time_is_408_and_closed(service: str, parts, gap: float) -> None:
    where = urlsplit(service)
    began = time.monotonic()
    with socket.create_connection((where.hostname, where.port), timeout=30) as connection:
        try:
            for part in parts:
                connection.sendall(part)
                time.sleep(gap)
        except OSError:
            pass
        reply = b""
        try:
            while chunk := connection.recv(65536):
                reply += chunk
        except OSError:
            pass
    assert reply.startswith(b"HTTP/1.1 408 ") and b"request head not received within 2 s" in reply, reply[:200]
    assert time.monotonic() - began < HEAD_TIMEOUT + 3


def test_two_hundred_half_sent_requests_are_all_closed_within_the_head_timeout(service: str) -> None:
    where = urlsplit(service)
    connections = [socket.create_connection((where.hostname, where.port), timeout=30) for _ in range(200)]
    began = time.monotonic()
    try:
        for connection in connections:
            connection.sendall(b"POST /invoke HTTP/1.1\r\nHost: x\r\nContent-")
        closed = 0
        for connection in connections:  # each read returns once the service has answered and closed
            connection.settimeout(max(0.1, began + HEAD_TIMEOUT + 10 - time.monotonic()))
            reply = b""
            with contextlib.suppress(OSError):
                while chunk := connection.recv(65536):
                    reply += chunk
            closed += reply.startswith(b"HTTP/1.1 408 ")
    finally:
        for connection in connections:
            connection.close()
    assert closed == 200 and time.monotonic() - began < HEAD_TIMEOUT + 10
    assert httpx.get(f"{service}/health").status_code == 200


def test_a_slow_answer_is_not_cut_by_the_head_timeout(service: str) -> None:
    """The head timer runs only while a connection waits for a head: a 2 s answer over a
    keep-alive connection, then a second request on it, both answered."""
    body = {"question": "slow one", "inbox": INBOX, "query_date": "2000-03-28"}
    with httpx.Client(timeout=60) as client:
        first = client.post(f"{service}/invoke", json=body)
        second = client.get(f"{service}/health")
    assert first.status_code == 200 and second.status_code == 200


# -- settings and where it listens: one line, exit 2, before the model starts -----------------------


@pytest.mark.parametrize("argv, fragment", [
    (["--port", "99999"], "invalid port '99999': expected a whole number from 1 to 65535"),
    (["--port", "65536"], "invalid port '65536'"),
    (["--port", "0"], "invalid port '0'"),
    (["--port=-5"], "invalid port '-5'"),
    (["--port", "\u0663"], "invalid port"),
    (["port=99999"], "invalid port '99999'"),
    (["port=0"], "invalid port '0'"),
    (["--host", "a b"], "invalid host 'a b'"),
    (["--host", "192.0.2.1"], "cannot listen on 192.0.2.1:"),  # an address of no interface here
    (["learning_rate=nan"], "unknown setting 'learning_rate'"),
])
def test_a_bad_port_host_or_setting_is_one_line_exit_2(model, tmp_path, art_e_data_dir, monkeypatch, capsys,
                                                       argv, fragment) -> None:
    from trainer.serving.serve import main as serve_main

    monkeypatch.setenv("DATA_DIR", str(art_e_data_dir))
    monkeypatch.delenv("HPC_RUN_DIR", raising=False)
    code = serve_main(["--config", "smoke", "--model_base", model.base_url, "--model_name", "policy",
                       "--run_dir", str(tmp_path / "run"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("trainer.serve: error: ") and err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "run" / "serve" / "address.json").exists()


def test_a_port_in_use_is_one_line_before_the_model_starts(model, tmp_path, art_e_data_dir, monkeypatch, capsys) -> None:
    from trainer.serving.serve import main as serve_main

    monkeypatch.setenv("DATA_DIR", str(art_e_data_dir))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = serve_main(["--config", "smoke", "--model_base", model.base_url, "--model_name", "policy",
                           "--run_dir", str(tmp_path / "run"), "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot listen on 127.0.0.1:{port}: Address already in use" in err and err.count("\n") == 1


def test_a_non_ascii_authorization_is_401_not_500(model, tmp_path, art_e_data_dir) -> None:
    child, url = start(model, art_e_data_dir, tmp_path / "public", "--host", "0.0.0.0")
    try:
        for value in (b"Bearer \xe9", b"Bearer \xc3\xa9\xc3\xa9", b"\xe9\xe9", b"Bearer \xff" * 100):
            status, reply, _ = exchange(url, "GET /info HTTP/1.1\nHost: x\nConnection: close\n"
                                        + "Authorization: " + value.decode("latin-1") + "\n")
            assert status == 401, reply[:300]
    finally:
        child.terminate()
        child.wait(30)
    assert "Traceback" not in child.stdout.read()


@pytest.mark.parametrize("url", ["http://[::1", "http://x:99999", "http://[::1]:0", "ftp://x", "", "http://a b",
                                 "http://\u00e9.example:8080", "localhost:8080"])
def test_ask_refuses_a_url_it_cannot_use_in_one_line(capsys, url: str) -> None:
    assert ask_main(["q", "--inbox", INBOX, "--date", "2000-03-28", "--url", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainer.ask: error: bad --url") and err.count("\n") == 1, err


def test_ask_never_shows_a_url_password_or_a_bad_token(capsys) -> None:
    assert ask_main(["q", "--inbox", INBOX, "--date", "2000-03-28", "--url", "http://u:hunter2@[::1"]) == 2
    assert ask_main(["q", "--inbox", INBOX, "--date", "2000-03-28", "--url", "http://127.0.0.1:1",
                     "--token", "s\u00e9cret"]) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err and "s\u00e9cret" not in err and err.count("\n") == 2, err
