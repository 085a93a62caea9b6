"""Serve a base model and LoRA checkpoints with vLLM's OpenAI-compatible server.

Evaluating a checkpoint, serving the trained agent and a judge inside an
offline job all need the same thing: vLLM on this node's GPU, answering the
OpenAI API, with the run's LoRA adapters loaded next to the base model. This
module starts that server as a child process (its own log file), waits until it
answers, and stops it (TERM, then KILL) however the caller ends.

Which vLLM: ``VLLM_BIN`` if set; else the ``vllm`` command in ART's runtime
environment (the one ``setup.sh --backend`` built, ``hpc.job.vllm_runtime``), so
what serves a checkpoint is what served its rollouts; else ``vllm`` on the PATH.
Qwen2.5's tool calls are parsed with vLLM's ``hermes`` parser.

    python -m trainer.serving.vllm_server --base_model Qwen/Qwen2.5-14B-Instruct \
        --adapter agent_008@630=<model dir>/checkpoints/0630 [--port 8000] [--address_file F]

runs in the foreground until TERM (for job scripts), writing ``host:port`` to
``--address_file`` once the server answers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from hpc.job.vllm_runtime import choose, with_runner_defaults
from hpc.run.safe_io import open_inside
from trainer.polling import poll_until
from trainer.serving import fast_start

DEFAULT_TOOL_PARSER = "hermes"  # Qwen2.5's <tool_call> format
BASE_NAME = "base"  # the name the base model is served under


class ServerError(RuntimeError):
    """vLLM could not be found, did not start, or died (one line; its log has the rest)."""


class ServerExited(ServerError):
    """vLLM ended before it answered: it refused to start (its log says why)."""


@dataclass(frozen=True)
class ServerSpec:
    """What to serve, and where."""

    base_model: str
    adapters: dict[str, Path] = field(default_factory=dict)  # served name -> LoRA folder
    port: int = 8000
    host: str = "127.0.0.1"
    gpu_memory_utilization: float = 0.9
    max_model_len: int = 32768
    tool_parser: str = DEFAULT_TOOL_PARSER
    served_name: str = BASE_NAME  # a judge is served under its model id (the judge's cache is keyed by it)
    tensor_parallel_size: int = 1  # GPUs one model spans (a judge too large for one GPU)
    fast_start: bool = False  # config vllm_fast_start: trainer/serving/fast_start.py
    max_output_tokens: int | None = None  # the longest reply to any request (a judge's cap); None: the window

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/v1"


def find_vllm(env: Mapping[str, str] = os.environ) -> Path:
    """VLLM_BIN, else ART's runtime environment's vllm, else vllm on the PATH."""
    if env.get("VLLM_BIN"):
        return Path(env["VLLM_BIN"])
    runtime = choose(env).server
    if runtime is not None and (runtime.parent / "vllm").is_file():
        return runtime.parent / "vllm"
    found = shutil.which("vllm")
    if found is None:
        raise ServerError("no vLLM found: build ART's runtime with `bash setup.sh --backend`, or set VLLM_BIN")
    return Path(found)


def lora_rank(adapter: Path) -> int:
    """The adapter's rank (adapter_config.json "r"); vLLM must be started with at least it."""
    try:
        return int(json.loads((adapter / "adapter_config.json").read_text()).get("r", 8))
    except (OSError, ValueError) as error:
        raise ServerError(f"{adapter} is not a LoRA adapter folder ({error})") from None


def command(spec: ServerSpec, vllm: Path) -> list[str]:
    """The ``vllm serve`` command line for ``spec``."""
    argv = [str(vllm), "serve", spec.base_model, "--host", spec.host, "--port", str(spec.port),
            "--served-model-name", spec.served_name, "--gpu-memory-utilization", str(spec.gpu_memory_utilization),
            "--max-model-len", str(spec.max_model_len), "--enable-auto-tool-choice",
            "--tool-call-parser", spec.tool_parser]
    if spec.fast_start:
        argv += list(fast_start.SERVER_FLAGS)
    if spec.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if spec.max_output_tokens is not None:  # vLLM's server-wide limit, requests that ask for more included
        argv += ["--override-generation-config", json.dumps({"max_new_tokens": spec.max_output_tokens})]
    if spec.adapters:
        argv += ["--enable-lora", "--max-lora-rank", str(max(lora_rank(p) for p in spec.adapters.values())),
                 "--max-loras", str(min(len(spec.adapters), 4)),
                 "--lora-modules", *(f"{name}={path}" for name, path in spec.adapters.items())]
    return argv


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class VLLMServer:
    """A vLLM server child process: ``with VLLMServer(spec, log) as server: server.base_url``."""

    def __init__(self, spec: ServerSpec, log_path: Path, *, vllm: Path | None = None,
                 env: Mapping[str, str] | None = None, ready_timeout: float = 1800.0,
                 log_root: Path | None = None, argv: list[str] | None = None) -> None:
        """``log_root``: the run directory the log is in (reached without following a link below it);
        default, the log's own folder (the log itself is never a link followed). ``argv``: the command
        that serves ``spec`` where it is not ``vllm serve`` (ART's runtime, as ART's service builds it)."""
        self.spec, self.log_path, self.ready_timeout, self._argv = spec, Path(log_path), ready_timeout, argv
        self.log_root = Path(log_root) if log_root is not None else self.log_path.parent
        given = with_runner_defaults(env if env is not None else os.environ)
        self._vllm, self._env = vllm, fast_start.environment(given) if spec.fast_start else given
        self._process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    def start(self) -> "VLLMServer":
        argv = self._argv or command(self.spec, self._vllm or find_vllm(self._env))
        with os.fdopen(open_inside(self.log_root, self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self._env,
                                             start_new_session=True)
        self.wait_ready()
        return self

    def wait_ready(self) -> None:
        """Until /health answers and /v1/models lists every served name (model loading takes minutes)."""
        if poll_until(lambda: not self.running() or self.ready(), self.ready_timeout):
            if not self.running():
                raise ServerExited(f"vLLM exited with {self.returncode} before it was ready; see {self.log_path}")
            return
        self.stop()
        raise ServerError(f"vLLM did not answer within {self.ready_timeout:.0f}s; see {self.log_path}")

    def ready(self) -> bool:
        """It serves every name of the spec; a command of its own (``argv``) once /health answers, as ART
        waits for its runtime (the names it serves are the command's)."""
        if self._argv is not None:
            return healthy(self.base_url)
        return {self.spec.served_name, *self.spec.adapters} <= served_models(self.base_url)

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.returncode

    def stop(self, grace: float = 30.0) -> None:
        """TERM the server's process group, KILL it after ``grace`` seconds."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> "VLLMServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def healthy(base_url: str) -> bool:
    """Whether the server's /health answers 200."""
    try:
        with urllib.request.urlopen(f"{base_url.removesuffix('/v1')}/health", timeout=5) as health:
            return health.status == 200
    except OSError:
        return False


def served_models(base_url: str) -> set[str]:
    """The model names the server lists, or an empty set while it is not answering."""
    if not healthy(base_url):
        return set()
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=5) as listing:
            return {m["id"] for m in json.loads(listing.read())["data"]}
    except (OSError, ValueError, KeyError):
        return set()


# -- command line (job scripts) ------------------------------------------------------


def parse_adapter(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.serving.vllm_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base_model", required=True)
    parser.add_argument("--adapter", action="append", default=[], type=parse_adapter, metavar="NAME=PATH")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.9)
    parser.add_argument("--max_model_len", type=int, default=32768)
    parser.add_argument("--log", type=Path, default=Path("vllm_server.log"))
    parser.add_argument("--address_file", type=Path, default=None, help="write host:port here once ready")
    parser.add_argument("--served_name", default=BASE_NAME, help="the name the base model answers to")
    parser.add_argument("--tensor_parallel_size", type=int, default=1, help="GPUs the model spans")
    parser.add_argument("--max_output_tokens", type=int, default=None, help="the longest reply (default: the window)")
    args = parser.parse_args(argv)
    spec = ServerSpec(args.base_model, dict(args.adapter), args.port or free_port(args.host), args.host,
                      args.gpu_memory_utilization, args.max_model_len, served_name=args.served_name,
                      tensor_parallel_size=args.tensor_parallel_size, max_output_tokens=args.max_output_tokens)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    try:
        with VLLMServer(spec, args.log) as server:
            if args.address_file:
                args.address_file.write_text(f"{spec.host}:{spec.port}\n")
            print(f"vllm_server: serving {sorted({spec.served_name, *spec.adapters})} at {server.base_url}", flush=True)
            while not stopping and server.running():
                time.sleep(1.0)
    except ServerError as error:
        print(f"vllm_server: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
