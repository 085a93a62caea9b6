"""Where a training backend's start-up goes: the phases ``startups.jsonl`` records beside its total.

ART's LocalBackend registers a model in two parts the trainer cannot time from outside one by one:
its service loads the model with Unsloth (import, patches, weights, the LoRA, the step-0 adapter
written), then starts vLLM as a process of its own whose output goes to
``<model dir>/logs/vllm-runtime.log`` (art/vllm_runtime.py, opened anew at each start). So the
trainer times: the backend's construction; registration up to that log's (re)creation, Unsloth's
part; from there to registered, vLLM's (its process's imports, the engine: weights, compilation,
CUDA graphs, the KV cache; the server; the LoRA loaded). And it keeps the durations vLLM prints
itself ("Model loading took ... and 0.45 seconds", "init engine (...) took 3.41 seconds",
"torch.compile takes 10.5 s in total", "Graph capturing finished in 5 secs"): read by their
shape, not their wording, so another vLLM version's lines are kept too.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VLLM_LOG = Path("logs") / "vllm-runtime.log"  # under the model's folder (art.utils.output_dirs.get_model_dir)
POLL_SECONDS = 0.5
MOST_REPORTED = 24  # vLLM's own duration lines kept (each process of the engine prints some)
_DURATION = re.compile(r"(?:took|takes|in|time:|and)\s+([0-9]+(?:\.[0-9]+)?)\s*(?:s|sec|secs|seconds)\b")
_PREFIX = re.compile(r"^.*?\]\s+")  # vLLM's "(EngineCore pid=1) INFO 11-28 13:36:01 [file.py:12] "


@dataclass
class LogWatch:
    """When the vLLM log at ``path`` was (re)written after ``since`` (time.time): vLLM's start.
    Polled while registration runs, since the file of an earlier start is already there."""

    path: Path
    since: float
    seen: float | None = None  # time.monotonic() when first seen fresh
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> "LogWatch":
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    async def _poll(self) -> None:
        while self.seen is None:
            if fresh(self.path, self.since):
                self.seen = time.monotonic()
                return
            await asyncio.sleep(POLL_SECONDS)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


def fresh(path: Path, since: float) -> bool:
    try:
        return path.stat().st_mtime >= since
    except OSError:
        return False


def reported(text: str, limit: int = MOST_REPORTED) -> list[dict[str, Any]]:
    """vLLM's own lines that give a duration, in order: the message (its log prefix off) and seconds."""
    found: list[dict[str, Any]] = []
    for line in text.splitlines():
        match = _DURATION.search(line)
        if match and len(found) < limit:
            found.append({"line": _PREFIX.sub("", line.strip(), count=1)[:160], "seconds": float(match.group(1))})
    return found


def phases(began: float, constructed: float, registering: float, registered: float, watch: LogWatch | None,
           log_text: str | None) -> dict[str, Any]:
    """The start-up's phases in seconds (all times time.monotonic()); the vLLM split only where
    its log was seen."""
    split: dict[str, Any] = {"construct": round(constructed - began, 3), "model": round(registering - constructed, 3)}
    if watch is not None and watch.seen is not None:
        split["unsloth"] = round(watch.seen - registering, 3)  # Unsloth's load, the LoRA, the step-0 adapter
        split["vllm"] = round(registered - watch.seen, 3)  # vLLM's process to the model served
    else:
        split["register"] = round(registered - registering, 3)
    if log_text:
        split["vllm_reported"] = reported(log_text)
    return split


def read_log(path: Path, most: int = 2**20) -> str | None:
    """The vLLM log's first ``most`` bytes (decoded, bad bytes replaced), or None: its start-up is at
    its start (a run's whole log grows to 125 MB)."""
    try:
        with path.open("rb") as log:
            return log.read(most).decode(errors="replace")
    except OSError:
        return None
