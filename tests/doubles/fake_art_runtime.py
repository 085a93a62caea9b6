"""Test double of ART's vLLM runtime server (``art-vllm-runtime-server``), for ART_VLLM_RUNTIME_BIN.

    python -m tests.doubles.fake_art_runtime --model=M --port=P ... --engine-args-json=JSON ...

It does vLLM's memory arithmetic on a pretend card instead of loading anything: it asks for
``gpu_memory_utilization x FAKE_RUNTIME_TOTAL_GIB``, keeps ``FAKE_RUNTIME_NON_KV_GIB`` of that for
weights, activations and CUDA graphs, and needs ``FAKE_RUNTIME_KV_MIB_PER_TOKEN`` of KV cache for each
token of ``max_model_len`` (the engine arguments'). It logs vLLM 0.25.1's own memory lines; then,
as vLLM does, it refuses to start with vLLM's message when one sequence does not fit (exit 1), or
serves ``/health`` until TERM.
"""

from __future__ import annotations

import json
import signal
import sys
import time


def option(argv: list[str], name: str) -> str:
    return next(arg.split("=", 1)[1] for arg in argv if arg.startswith(f"--{name}="))


def main(argv: list[str]) -> int:
    import os

    engine = json.loads(option(argv, "engine-args-json"))
    total = float(os.environ.get("FAKE_RUNTIME_TOTAL_GIB", "140.4"))
    non_kv = float(os.environ.get("FAKE_RUNTIME_NON_KV_GIB", "30.4"))
    per_token = float(os.environ.get("FAKE_RUNTIME_KV_MIB_PER_TOKEN", "0.1875")) / 1024
    length = int(engine.get("max_model_len") or 32768)
    available = engine["gpu_memory_utilization"] * total - non_kv
    print(f"INFO [model.py:1776] Using max model len {length}", flush=True)
    print(f"INFO [gpu_worker.py:539] Available KV cache memory: {available:.2f} GiB", flush=True)
    if length * per_token > available:
        print(f"ValueError: To serve at least one request with the model's max seq len ({length}), "
              f"({length * per_token:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
              f"({available:.2f} GiB). Try increasing `gpu_memory_utilization`", flush=True)
        return 1
    print(f"INFO [kv_cache_utils.py:2146] GPU KV cache size: {int(available / per_token):,} tokens", flush=True)
    from tests.doubles.openai_server import OpenAIServer, text

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with OpenAIServer(lambda body: text("ok"), port=int(option(argv, "port"))):
        while not stop:
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
