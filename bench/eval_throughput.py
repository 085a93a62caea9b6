"""Evaluation throughput: 100 questions at the default concurrency against one at a time.

    .venv/bin/python -m bench.eval_throughput [--questions 100] [--turn_ms 300] [--concurrency N]

The questions are the fixture corpus' (trainer/proof/corpus), repeated under new ids
to make --questions. The model is the scripted OpenAI-compatible endpoint
(tests/doubles/openai_server.py, in a process of its own, as a model server is) taking
--turn_ms per model turn; each question takes
two turns (a search, then the answer), and the judge answers at once. The same
evaluation engine as validation and `python -m trainer.eval` (trainer.evaluation.engine)
runs it twice in the same process, after one question to warm up (first-use imports):
at the config's default ``eval_concurrency``, and one question at a time. It prints both wall times, their ratio, and the ideal
concurrent time (waves of `concurrency` questions x turns x turn time).

Targets: concurrent >= 20x faster than sequential, and within 1.5x of the ideal.
Exit code 0 when both are met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from trainer.proof.corpus import CORPUS
from trainer.proof.loopback_openai import OpenAIServer, Reply, text, tool_call
from trainer.training.config import load_config

REPO = Path(__file__).resolve().parent.parent

TURNS = 2
SPEEDUP_TARGET = 20.0
IDEAL_TARGET = 1.5


def stage(data_dir: Path, questions: int) -> None:
    """The fixture emails, and ``questions`` test questions made from its test questions."""
    from trainer.staging.data import prepare

    rows = [json.loads(line) for line in (CORPUS / "questions.jsonl").read_text().splitlines()]
    usable = [r for r in rows if r["split"] == "test" and len(r["message_ids"]) == 1 and r["id"] not in (129, 171)]
    made = [{**usable[i % len(usable)], "id": 10_000 + i} for i in range(questions)]
    made += [r for r in rows if r["split"] == "train"]
    path = data_dir / "questions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in made))
    prepare(data_dir, str(CORPUS / "emails.jsonl"), str(path), show_progress=False)


def agent(turn_seconds: float, jitter: float = 0.0):
    """Search first, answer second, each model turn taking ``turn_seconds`` (times a uniform
    factor in 1 +- ``jitter``, seeded); the judge accepts at once."""
    draw = random.Random(0)

    def respond(body: dict) -> Reply:
        if body.get("model") == "judge":
            return text(json.dumps({"thinking": "bench", "accept": True}))
        delay = turn_seconds * draw.uniform(1 - jitter, 1 + jitter)
        if body["messages"][-1]["role"] == "user":
            return tool_call("search_emails", {"keywords": ["meeting"]}, delay=delay)
        return tool_call("return_final_answer", {"answer": "bench", "sources": []}, delay=delay)

    return respond


async def timed(base_url: str, data_dir: Path, concurrency: int, limit: int | None = None) -> tuple[float, dict]:
    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.rollout import AgentConfig
    from trainer.agent.scenarios import load_scenarios
    from trainer.evaluation.engine import evaluate, summarize
    from trainer.serving.policy import EndpointPolicy

    scenarios = load_scenarios(data_dir, "test", shuffle=False, limit=limit)
    judge = Judge(model="judge", api_base=base_url, concurrency=max(concurrency, 8), retries=0)
    with EmailDB(data_dir / "enron_emails.db") as db:
        began = time.perf_counter()
        results = await evaluate(EndpointPolicy(base_url, "policy"), scenarios, db=db, judge=judge,
                                 agent=AgentConfig(), concurrency=concurrency)
        elapsed = time.perf_counter() - began
    return elapsed, summarize(results or [])


def serve(port: int, turn_seconds: float, jitter: float) -> None:
    """The scripted model and judge, in a process of their own (as a model server is)."""
    with OpenAIServer(agent(turn_seconds, jitter), port=port):
        print("ready", flush=True)
        time.sleep(3600)


@contextlib.contextmanager
def model_server(turn_seconds: float, jitter: float = 0.0) -> Iterator[str]:
    from trainer.serving.vllm_server import free_port

    port = free_port()
    child = subprocess.Popen([sys.executable, "-m", "bench.eval_throughput", "--serve", str(port),
                              "--turn_ms", str(turn_seconds * 1000), "--jitter", str(jitter)],
                             stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        child.kill()
        child.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--turn_ms", type=float, default=300.0)
    parser.add_argument("--concurrency", type=int, default=load_config("agent_008").eval_concurrency,
                        help="default: agent_008's eval_concurrency")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--jitter", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    turn = args.turn_ms / 1000
    if args.serve is not None:
        serve(args.serve, turn, args.jitter)
        return 0
    with tempfile.TemporaryDirectory() as tmp, model_server(turn) as base_url:
        stage(Path(tmp), args.questions)
        asyncio.run(timed(base_url, Path(tmp), 1, limit=1))  # warm-up: litellm's and ART's first-use imports
        concurrent, summary = asyncio.run(timed(base_url, Path(tmp), args.concurrency))
        sequential, _ = asyncio.run(timed(base_url, Path(tmp), 1))
    assert summary["questions"] == args.questions and summary["failed"] == 0, summary
    ideal = math.ceil(args.questions / args.concurrency) * TURNS * turn
    speedup, over_ideal = sequential / concurrent, concurrent / ideal
    print(f"questions:               {args.questions} ({TURNS} model turns of {args.turn_ms:.0f} ms each)")
    print(f"concurrent ({args.concurrency:>3} at once): {concurrent:7.2f} s")
    print(f"sequential (1 at once):  {sequential:7.2f} s")
    print(f"speed-up:                {speedup:7.1f}x  (target >= {SPEEDUP_TARGET:.0f}x)")
    print(f"ideal concurrent time:   {ideal:7.2f} s; measured / ideal = {over_ideal:.2f} (target <= {IDEAL_TARGET})")
    met = speedup >= SPEEDUP_TARGET and over_ideal <= IDEAL_TARGET
    print(f"targets: {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
