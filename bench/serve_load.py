"""Serving load: 500 requests at 32 concurrent against the real service, on loopback.

    .venv/bin/python -m bench.serve_load [--requests 500] [--concurrency 32] [--turn_ms 25]

The service is `python -m trainer.serve` (uvicorn, the agent loop, the fixture email
database) in a process of its own, answering with the scripted OpenAI-compatible endpoint
(tests/doubles/openai_server.py, another process) that takes --turn_ms per model turn, give or
take --jitter (a real model's latency varies, so requests do not all finish at once); each
question takes two turns (a search, then the answer). A client sends the requests with at
most --concurrency in flight. It prints errors, lost requests, the latency per request, and
the service's overhead: the time the request spent in the service (its ``Server-Timing``
header, from arrival at the application to the response) minus the time it waited for the
scripted model (``model_s``), p50 and p99; and, for reference, the latency over ``model_s``
as the client saw it, which adds the client's own lag on this shared 2-core machine.

Targets: zero errors, no request lost, service overhead p99 < 20 ms. Exit 0 when met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bench.eval_throughput import model_server, stage
from hpc.job.workload_env import HPC_RUN_DIR
from trainer.serving.vllm_server import free_port

REPO = Path(__file__).resolve().parent.parent

TURNS = 2
OVERHEAD_P99_TARGET_MS = 20.0
INBOX = "vince.kaminski@enron.com"


@contextlib.contextmanager
def service(model_url: str, data_dir: Path, concurrency: int) -> Iterator[str]:
    import httpx

    port = free_port()
    env = {**os.environ, "DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop(HPC_RUN_DIR, None)
    child = subprocess.Popen([sys.executable, "-m", "trainer.serve", "--config", "smoke", "--model_base", model_url,
                              "--model_name", "policy", "--port", str(port), "--run_dir", str(data_dir / "serve_run"),
                              f"max_in_flight={concurrency}", "max_queue=1000"],
                             cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url
    finally:
        child.terminate()
        child.wait(30)


@dataclass
class Measured:
    latencies: list[float] = field(default_factory=list)  # as the client saw them (s)
    client_overheads: list[float] = field(default_factory=list)  # latency - model_s
    service_overheads: list[float] = field(default_factory=list)  # Server-Timing app - model_s
    errors: list[str] = field(default_factory=list)
    answered: int = 0


async def load(url: str, requests: int, concurrency: int) -> Measured:
    """Every request's latency and overheads, the errors, and how many got any answer."""
    import httpx

    slots = asyncio.Semaphore(concurrency)
    measured = Measured()

    async def one(client: httpx.AsyncClient, index: int) -> None:
        body = {"question": f"load question {index}", "inbox": INBOX, "query_date": "2000-03-28"}
        async with slots:
            began = time.perf_counter()
            try:
                reply = await client.post(f"{url}/invoke", json=body, timeout=120)
            except httpx.HTTPError as error:
                measured.errors.append(f"{type(error).__name__}: {error}")
                return
            measured.answered += 1
            if reply.status_code != 200:
                measured.errors.append(f"{reply.status_code}: {reply.text[:200]}")
                return
            model = reply.json()["model_s"]
            measured.latencies.append(time.perf_counter() - began)
            measured.client_overheads.append(measured.latencies[-1] - model)
            measured.service_overheads.append(app_seconds(reply.headers["server-timing"]) - model)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:
        # warm-up, not measured: one wave of requests opens the connections every layer keeps
        await asyncio.gather(*(one(client, -1 - i) for i in range(concurrency)))
        measured = Measured()
        await asyncio.gather(*(one(client, i) for i in range(requests)))
    return measured


def app_seconds(header: str) -> float:
    """``app;dur=12.3`` (milliseconds) -> seconds."""
    return float(header.split("dur=")[1].split(",")[0]) / 1000


def run_client(coroutine: Any) -> Any:
    """The load client on uvloop where installed: a client that lags would show as the
    service's overhead."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--turn_ms", type=float, default=300.0)
    parser.add_argument("--jitter", type=float, default=0.5,
                        help="each turn takes turn_ms x uniform(1 - jitter, 1 + jitter): a model's latency varies")
    args = parser.parse_args()
    model_seconds = TURNS * args.turn_ms / 1000
    with tempfile.TemporaryDirectory() as tmp, model_server(args.turn_ms / 1000, args.jitter) as model_url:
        stage(Path(tmp), 10)
        with service(model_url, Path(tmp), args.concurrency) as url:
            began = time.perf_counter()
            measured = run_client(load(url, args.requests, args.concurrency))
            wall = time.perf_counter() - began
    latencies, errors = measured.latencies, measured.errors
    service_ms = [1000 * o for o in measured.service_overheads]
    client_ms = [1000 * o for o in measured.client_overheads]
    p50, p99 = (percentile(service_ms, 50), percentile(service_ms, 99)) if service_ms else (float("nan"),) * 2
    lost = args.requests - measured.answered
    print(f"requests:                 {args.requests} at {args.concurrency} concurrent, {wall:.1f} s "
          f"({args.requests / wall:.0f} requests/s)")
    print(f"errors, lost:             {len(errors)}, {lost}" + (f"  first: {errors[0]}" if errors else ""))
    print(f"model time per request:   {1000 * model_seconds:.0f} ms on average ({TURNS} turns of {args.turn_ms:.0f} ms "
          f"+- {100 * args.jitter:.0f}%)")
    print(f"latency p50 / p99:        {1000 * percentile(latencies, 50):.1f} / {1000 * percentile(latencies, 99):.1f} ms"
          if latencies else "latency: none")
    if client_ms:
        print(f"over the model, as the client saw it, p50/p99: {percentile(client_ms, 50):.1f} / "
              f"{percentile(client_ms, 99):.1f} ms (adds the client's and this shared machine's own scheduling)")
    print(f"service overhead p50/p99: {p50:.1f} / {p99:.1f} ms  (target p99 < {OVERHEAD_P99_TARGET_MS:.0f} ms; "
          "Server-Timing minus model_s)")
    met = not errors and lost == 0 and p99 < OVERHEAD_P99_TARGET_MS
    print(f"targets: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
