"""Serve the trained agent over HTTP: ``python -m trainer.serve``.

    python -m trainer.serve --model run:agent_008            # the run's latest checkpoint, vLLM on this GPU
    python -m trainer.serve --model_base http://host:8000/v1 --model_name m   # any OpenAI-compatible server
    python -m hpc.launch --job_name agent_008_serve --time_limit 8:00:00 --entrypoint trainer.serve \
        --train_arg model=run:agent_008                       # as a Slurm job

The agent is the one training ran and validation scored: the same loop
(``trainer.agent.rollout``), tools, email database and config; only the model behind it
is named here (``trainer.serving.policy``: a run's checkpoint or the base model served by
vLLM with the LoRA, ``url:...``, or a litellm model).

- ``POST /invoke`` ``{"question", "inbox", "query_date", "transcript": false}`` ->
  ``{"answer", "source_ids", "turns", "latency_s", "model_s"}`` (``model_s``: the
  part spent waiting for the model; + ``"transcript"``, the messages and tool calls,
  when asked). Every response says its time in the application (``Server-Timing``).
- ``GET /health``, ``GET /info`` (model, checkpoint step, data version).

A bad request is a 4xx with one line (``{"error": ...}``): a missing or
wrong-typed field 422, an unknown inbox 404, a date not exactly YYYY-MM-DD 422, a
body that is no JSON it can read 400, a body over 64 KiB 413 (counted as it arrives,
chunked or not), a body not sent within ``body_timeout`` seconds (10) 408, no or a
wrong token 401; the model failing mid-answer is a 502. At most ``max_in_flight``
questions run at once and ``max_queue`` wait; the next one is told 503 at once, never
left hanging.

A stop signal (the job's USR1 before its limit, TERM from scancel) stops taking
requests and exits 75, as the trainer does: a cancelled job ends the run, a job at
its time limit is continued by a new one that serves again.

It binds to 127.0.0.1 unless ``host`` says otherwise; bound beyond localhost it
requires ``Authorization: Bearer <token>``, a token generated into the run
directory's ``serve/token`` (mode 0600). Where it listens goes to
``serve/address.json``; ``scripts/status.sh`` prints the ``ssh -L`` line that
reaches it from a laptop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pydantic import BaseModel, Field

from hpc.job.exit_codes import EXIT_BAD_INPUT, EXIT_STOPPED_FOR_TIME
from hpc.job.workload_env import HPC_RUN_DIR
from hpc.run.rundir import RunDir, utc_now
from hpc.run.safe_io import OutsideRun, read_bytes
from trainer.agent.email_db import EmailDB
from trainer.agent.judge import use_bundled_price_table
from trainer.agent.rollout import AgentConfig, request_messages, rollout
from trainer.agent.scenarios import Scenario, date_problem
from trainer.evaluation.eval import EvalError, EvalPlan, checkpoint_steps, default_runs_dir, slug
from trainer.serving.guard import Guard
from trainer.serving.http_limits import limited_protocol
from trainer.serving.policy import PolicyError, PolicySpec, base_model_for, open_policy, parse_policy, served_name
from trainer.serving.settings import SERVE_KEYS, ServeError, ServeSettings, setting_pairs, settings_from
from trainer.serving.vllm_server import ServerSpec, VLLMServer, free_port
from trainer.staging.data import default_data_dir
from trainer.training.config import ConfigError, TrainerConfig, load_config

log = logging.getLogger("trainer.serve")


@dataclass
class Agent:
    """What answers a question: the model, the database, the agent's settings."""

    policy: Any
    db: Any
    config: TrainerConfig
    temperature: float
    info: dict[str, Any] = field(default_factory=dict)

    async def answer(self, question: str, inbox: str, query_date: str) -> Any:
        scenario = Scenario(id=0, question=question, answer="", message_ids=(), how_realistic=1.0,
                            inbox_address=inbox, query_date=query_date, split="test")
        agent = AgentConfig(max_turns=self.config.max_turns, max_tokens=self.config.max_tokens,
                            tool_calling=self.config.tool_calling, temperature=self.temperature)
        return await rollout(self.policy, scenario, db=self.db, judge=None, config=agent)


# -- the HTTP application ---------------------------------------------------------------


class Invoke(BaseModel):
    """The body of ``POST /invoke``."""

    question: str = Field(min_length=1, max_length=4000)
    inbox: str = Field(min_length=3, max_length=320)
    query_date: str = Field(min_length=10, max_length=10)  # YYYY-MM-DD, checked by request_problem
    transcript: bool = False


def create_app(agent: Agent, settings: ServeSettings) -> Any:
    from fastapi import FastAPI  # the web stack only in the service
    from fastapi.responses import JSONResponse

    app = FastAPI(title="ART-E email agent", version="1")
    slots = asyncio.Semaphore(settings.max_in_flight)
    waiting = {"count": 0}

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    one_line_errors(app)
    app.add_middleware(Guard, token=settings.token, body_timeout=settings.body_timeout)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict[str, Any]:
        return agent.info

    @app.post("/invoke")
    async def invoke(body: Invoke) -> Any:
        problem = request_problem(body.inbox, body.query_date, agent.db)
        if problem is not None:
            return error(*problem)
        if waiting["count"] >= settings.max_queue + settings.max_in_flight:
            return error(503, f"busy: {settings.max_in_flight} questions in flight and {settings.max_queue} waiting; "
                              "try again shortly")
        waiting["count"] += 1
        try:
            async with slots:
                began = time.monotonic()
                try:
                    trajectory = await agent.answer(body.question, body.inbox, body.query_date)
                except Exception as failure:  # noqa: BLE001 - the model failed mid-answer
                    return error(502, f"the model failed: {type(failure).__name__}: {' '.join(str(failure).split())[:300]}")
                return answer_of(trajectory, time.monotonic() - began, body.transcript)
        finally:
            waiting["count"] -= 1

    return app


def one_line_errors(app: Any) -> None:
    """Every refusal FastAPI makes itself (a field missing or of the wrong type, a body it cannot
    parse, an unknown path or method) as ``{"error": one line}``, like the service's own."""
    from fastapi.exceptions import RequestValidationError  # the web stack only in the service
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Any, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": one_line_validation_error(exc.errors())}, status_code=422)

    @app.exception_handler(HTTPException)
    async def refused(_request: Any, exc: HTTPException) -> JSONResponse:
        hint = f" {EXPECTED}" if exc.status_code == 400 else ""
        return JSONResponse({"error": f"{' '.join(str(exc.detail).split())}{hint}"}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))


EXPECTED = '(expected JSON {"question", "inbox", "query_date": YYYY-MM-DD})'


def one_line_validation_error(errors: Sequence[Any]) -> str:
    first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request"}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
    return f"{where}: {' '.join(str(first.get('msg', 'invalid')).split())} {EXPECTED}"


def request_problem(inbox: str, query_date: str, db: Any) -> tuple[int, str] | None:
    problem = date_problem(query_date)
    if problem is not None:
        return 422, problem
    if not db.has_inbox(inbox):
        return 404, f"unknown inbox {inbox!r}: no email in the database was sent by or to it"
    return None


def answer_of(trajectory: Any, latency: float, with_transcript: bool) -> dict[str, Any]:
    meta = trajectory.metadata
    reply: dict[str, Any] = {"answer": meta.get("final_answer"), "source_ids": json.loads(meta.get("final_sources") or "[]"),
                             "turns": int(trajectory.metrics.get("num_turns", 0)), "latency_s": round(latency, 3),
                             # of which waiting for the model (the rest is the service and the tools)
                             "model_s": round(float(trajectory.metrics.get("llm_completion_duration", 0.0)), 3)}
    if with_transcript:
        reply["transcript"] = request_messages(trajectory)
    return reply


# -- where it listens, and who may ask -----------------------------------------------------


def ensure_token(run: RunDir) -> str:
    """The run's serving token: read, or generated into serve/token with mode 0600 (never through a link)."""
    path = run.serve_dir / "token"
    if run.holds(path):
        return read_bytes(path, run.path).decode(errors="replace").strip()
    token = secrets.token_urlsafe(32)
    run.write_new(path, (token + "\n").encode(), 0o600)
    return token


def write_address(run: RunDir, settings: ServeSettings, model: str) -> Path:
    """serve/address.json: where the service listens, for status.sh and trainer.ask."""
    path = run.serve_dir / "address.json"
    run.write_json(path, {"node": socket.gethostname(), "host": settings.host, "port": settings.port,
                             "token_required": settings.token is not None, "model": model, "pid": os.getpid(),
                             "job_id": os.environ.get("SLURM_JOB_ID"), "started": utc_now()})
    return path


def announce(run: RunDir, settings: ServeSettings, model: str) -> None:
    address = write_address(run, settings, model)
    print(f"trainer.serve: {model} answering at http://{settings.host}:{settings.port}/invoke "
          f"({'token required' if settings.token else 'localhost only'}); address in {address}", flush=True)


def data_version(db_path: Path) -> str:
    """A short fingerprint of the email database (size and mtime): which data the agent searches."""
    stat = db_path.stat()
    return hashlib.sha1(f"{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:12]


# -- running it ----------------------------------------------------------------------------


@contextlib.contextmanager
def served_policy(spec: PolicySpec, config: TrainerConfig, run: RunDir,
                  runs_dir: Path) -> Iterator[tuple[Any, dict[str, Any]]]:
    """The policy to ask, with vLLM started on this node for a checkpoint or the base model."""
    info: dict[str, Any] = {"model": spec.label, "kind": spec.kind, "base_model": config.base_model, "checkpoint_step": None}
    if spec.kind in ("litellm", "url"):
        yield open_policy(spec), info
        return

    adapters = {}
    if spec.kind == "checkpoint":
        plan = EvalPlan(config_name="", config=config, models=[spec], runs_dir=runs_dir)
        ((step, path),) = checkpoint_steps(plan, spec)[-1:]
        spec = PolicySpec("checkpoint", spec.name, step=str(step))
        adapters[served_name(spec)] = path
        info["checkpoint_step"] = step
    base_model = base_model_for(config.base_model, list(adapters.values()))
    server = VLLMServer(ServerSpec(base_model, adapters, port=free_port(), max_model_len=config.max_seq_length,
                                   fast_start=config.vllm_fast_start), run.serve_dir / "vllm.log", log_root=run.path)
    with server:
        yield open_policy(spec, base_url=server.base_url), {**info, "model": spec.label, "base_model": base_model}


def listening_socket(settings: ServeSettings) -> socket.socket:
    """The service's socket, bound before the model starts (minutes of vLLM): a host that is no
    address of this node, or a port in use or not ours to take, is one line at once."""
    where = f"{settings.host}:{settings.port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(settings.host, settings.port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError) as error:
        raise ServeError(f"cannot listen on {where}: {getattr(error, 'strerror', None) or error} (expected an "
                         "address of this node, e.g. 127.0.0.1 or 0.0.0.0)") from None
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
    except OSError as error:
        listener.close()
        raise ServeError(f"cannot listen on {where}: {error.strerror or error} (another port: --port or port=)") from None
    return listener


def run_service(agent: Agent, settings: ServeSettings, listener: socket.socket, on_ready: Callable[[], None]) -> None:
    """uvicorn on ``listener`` until SIGTERM/SIGINT/SIGUSR1 (a job's end): then it stops taking
    requests and exits. ``on_ready`` runs once it listens (the address is written only then).
    Request heads are bounded in size and time (trainer/serving/http_limits.py)."""
    import uvicorn  # the web stack only in the service

    server = uvicorn.Server(uvicorn.Config(create_app(agent, settings), log_level="warning", access_log=False,
                                           http=limited_protocol(settings.head_timeout)))
    import_request_path()
    gc.freeze()  # start-up's objects out of every later full collection: those took 50-110 ms
    # USR1 (the time limit) stops it as TERM and INT do; uvicorn (>=0.29) takes TERM and INT itself while it
    # serves, to the same effect, and puts these handlers back after
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    event_loop_runner()(serve_until_stopped(server, listener, on_ready))


async def serve_until_stopped(server: Any, listener: socket.socket, on_ready: Callable[[], None]) -> None:
    serving = asyncio.ensure_future(server.serve(sockets=[listener]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.05)
    if server.started:
        on_ready()
    await serving


def event_loop_runner() -> Callable[[Any], Any]:
    """uvloop's where installed (uvicorn[standard]): several times less CPU per request than
    asyncio's own loop (bench/serve_load.py)."""
    try:
        import uvloop  # optional: the faster event loop where installed
    except ImportError:
        return asyncio.run
    return uvloop.run


def import_request_path() -> None:
    """What answering imports on first use (ART, the agent loop, the OpenAI types), imported
    now: before gc.freeze(), so that they never weigh on a collection during a request."""
    import art  # noqa: F401
    from openai.types.chat import ChatCompletion  # noqa: F401

    from trainer.agent import rollout, scenarios, tools  # noqa: F401


# -- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> tuple[str, TrainerConfig, PolicySpec, ServeSettings, RunDir]:
    parser = argparse.ArgumentParser(prog="python -m trainer.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="agent_008")
    parser.add_argument("--model", default=None, help="what answers (trainer.serving.policy): run:NAME[@STEP], base, url:..., openai/o3")
    parser.add_argument("--model_base", default=None, help="any OpenAI-compatible endpoint (instead of --model)")
    parser.add_argument("--model_name", default="base", help="the model name to ask --model_base for")
    parser.add_argument("--host", default=None, help="default 127.0.0.1; anything else requires the token")
    parser.add_argument("--port", default=None, help="1..65535, default 8080")
    parser.add_argument("--run_dir", type=Path, default=None, help="where serve/ goes (default: $HPC_RUN_DIR)")
    parser.add_argument("settings", nargs="*", metavar="key=value", help=f"{', '.join(SERVE_KEYS)} (as a job's --train_arg)")
    args = parser.parse_args(argv)
    values = setting_pairs(args.settings)
    settings = settings_from(values, args.host, args.port)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        raise ServeError(str(error)) from None
    model = args.model or values.get("model") or (f"url:{args.model_base}#{args.model_name}" if args.model_base else None)
    if not model:
        raise ServeError("no model to serve: give --model (run:NAME, base, url:..., openai/o3) or --model_base URL")
    spec = parse_policy(model, config.base_model)
    run_dir = args.run_dir or (Path(os.environ[HPC_RUN_DIR]) if os.environ.get(HPC_RUN_DIR)
                               else default_runs_dir() / f"serve-{slug(spec.label)}")
    return args.config, config, spec, settings, RunDir(run_dir)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s [%(name)s] %(message)s", datefmt="%H:%M:%S")
    use_bundled_price_table()
    try:
        _, config, spec, settings, run = parse_args(sys.argv[1:] if argv is None else argv)
        db_path = default_data_dir() / "enron_emails.db"
        if not db_path.exists():
            raise ServeError(f"no email database at {db_path}: stage it with python -m trainer.data prepare")
        settings.token = ensure_token(run) if settings.public else None
        with listening_socket(settings) as listener, EmailDB(db_path) as db, \
                served_policy(spec, config, run, default_runs_dir()) as (policy, info):
            agent = Agent(policy, db, config, settings.temperature,
                          {**info, "data_version": data_version(db_path), "config": config.model_name})
            run_service(agent, settings, listener, lambda: announce(run, settings, info["model"]))
    except (ServeError, PolicyError, EvalError) as error:  # EvalError: a run's checkpoint it cannot name
        print(f"trainer.serve: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OutsideRun as error:  # serve/ or one of its files is a link: the run's files stay inside it
        print(f"trainer.serve: error: {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print("trainer.serve: stopped", flush=True)
    return EXIT_STOPPED_FOR_TIME  # stopped on request: a cancel ends the run, a time limit continues it


if __name__ == "__main__":
    sys.exit(main())
