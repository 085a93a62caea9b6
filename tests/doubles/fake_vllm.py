"""Test double of the `vllm serve` command: same command line, the scripted endpoint behind it.

    python -m tests.doubles.fake_vllm serve BASE --port P [--served-model-name N]
        [--lora-modules NAME=PATH ...] [other vllm options, recorded and ignored]

Serves ``/health``, ``/v1/models`` (the base's served name and every LoRA name) and
chat completions on 127.0.0.1:P until TERM. Every request is answered at once with a
final answer naming the model asked (``answer from <model>``), so a test sees which
adapter answered. ``FAKE_VLLM_ARGV`` (a path) records the command line;
``FAKE_VLLM_START_SECONDS`` delays readiness, as loading a model does; ``FAKE_VLLM_GPUS``
(a path) records its CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from tests.doubles.openai_server import OpenAIServer, tool_call

REPO = Path(__file__).resolve().parents[2]


def write_executable(path: Path) -> Path:
    """A `vllm` command at ``path`` that runs this double, for VLLM_BIN or a PATH entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m tests.doubles.fake_vllm \"$@\"\n")
    path.chmod(0o755)
    return path


def option(argv: list[str], name: str, default: str | None = None) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else default


def lora_names(argv: list[str]) -> list[str]:
    if "--lora-modules" not in argv:
        return []
    names = []
    for item in argv[argv.index("--lora-modules") + 1:]:
        if item.startswith("--"):
            break
        names.append(item.split("=", 1)[0])
    return names


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_VLLM_ARGV"):
        with open(os.environ["FAKE_VLLM_ARGV"], "w") as out:
            json.dump(argv, out)
    if os.environ.get("FAKE_VLLM_GPUS"):  # the GPUs it was given, as a job pins them
        with open(os.environ["FAKE_VLLM_GPUS"], "w") as out:
            out.write(os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    time.sleep(float(os.environ.get("FAKE_VLLM_START_SECONDS", "0")))
    served = (option(argv, "--served-model-name", argv[1]), *lora_names(argv))
    answer = lambda body: tool_call("return_final_answer",  # noqa: E731
                                    {"answer": f"answer from {body.get('model')}", "sources": []})
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    with OpenAIServer(answer, port=int(option(argv, "--port", "8000")), served=served):
        print(f"fake_vllm: serving {served}", flush=True)
        while not stop:
            time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
