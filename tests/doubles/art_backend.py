"""Test double of ART's LocalBackend: same checkpoint layout on disk, no GPU.

Used by the trainer as ``backend=tests.doubles.art_backend:FakeBackend`` (the
config key that names a backend class). It implements the ``art.Backend``
methods the training loop uses, the way LocalBackend 0.5.23 does (checkpoints
under ``<path>/<project>/models/<run_name>/``):

- ``register``: points the model's ``base_path`` at ``path`` (so ``model.log``
  writes history next to the checkpoints, as with LocalBackend);
- ``_prepare_backend_for_training``: saves the untrained adapter as step 0 if
  there is no checkpoint yet, and returns the inference endpoint, which is the
  scripted OpenAI-compatible server at ``$ART_FAKE_INFERENCE_URL``
  (tests/doubles/openai_server.py) standing in for vLLM;
- ``_get_step``: the largest all-digit folder under ``checkpoints/`` (complete
  or not, exactly as ART counts);
- ``_model_inference_name``: ``<model>@<step>``, as vLLM serves LoRA adapters;
- ``train``: saves ``checkpoints/<step+1>/`` (adapter_config.json, then a small
  valid adapter_model.safetensors written in place, like PEFT) and returns a
  result with the new step; every call appends one JSON line to
  ``<path>/fake_backend_train.jsonl`` (``from_step``, ``step``, the group and
  trajectory counts, the trajectories' metadata and rewards, pid), so tests can check that
  each step was trained exactly once across stops and restarts;
- ``close``.

Its construction and every ``register`` call append a line to
``<path>/fake_backend_calls.jsonl`` (``call``: ``construct`` | ``register``, pid,
time), so a test can check that a backend was, or was not, started.

Knobs (environment, since the trainer builds the backend itself):
``ART_FAKE_REGISTER_SECONDS`` sleeps that long in ``register`` (LocalBackend's
start-up: the model loaded, vLLM up), ``ART_FAKE_TRAIN_SECONDS`` in each ``train`` call and
``ART_FAKE_SAVE_SECONDS`` half-way through writing the weights;
``ART_FAKE_SKIP_TRAINING=1`` does what LocalBackend does when nothing is
trainable (copies the checkpoint forward, reports zero trainable groups). While
training, ``<path>/fake_backend_training`` holds the step being trained, so a
test knows when to send SIGUSR1 "mid-step".
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from hpc.run.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, list_checkpoints, model_dir, step_dir
from tests.doubles.step_trainer import safetensors_bytes

TRAIN_LOG = "fake_backend_train.jsonl"
CALL_LOG = "fake_backend_calls.jsonl"
TRAINING_MARKER = "fake_backend_training"


@dataclass
class FakeTrainResult:
    """Shaped like ART's LocalTrainResult."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint_path: str | None = None


def save_adapter(folder: Path, step: int, save_seconds: float = 0.0) -> None:
    """Write a LoRA folder in place (no rename), so a kill mid-save leaves it incomplete."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "step": step}))
    blob = safetensors_bytes(step)
    with open(folder / ADAPTER_WEIGHTS, "wb") as handle:
        handle.write(blob[: len(blob) // 2])
        handle.flush()
        if save_seconds:
            time.sleep(save_seconds)  # blocking, like a real save; a signal does not cut it short (PEP 475)
        handle.write(blob[len(blob) // 2:])


class FakeBackend:
    """A LocalBackend stand-in that trains nothing but keeps ART's on-disk contract."""

    def __init__(self, *, path: str | None = None, **_: Any) -> None:
        self._path = Path(path or ".art")
        self._path.mkdir(parents=True, exist_ok=True)
        self.closed = False
        self._log_call("construct")

    # -- what the loop calls --------------------------------------------------------

    async def register(self, model: Any) -> None:
        await asyncio.sleep(float(os.environ.get("ART_FAKE_REGISTER_SECONDS") or 0))
        model.base_path = str(self._path)
        self._model_dir(model).mkdir(parents=True, exist_ok=True)
        self._log_call("register")

    async def _prepare_backend_for_training(self, model: Any, config: Any = None) -> tuple[str, str]:
        if not list_checkpoints(self._model_dir(model)):
            save_adapter(step_dir(self._model_dir(model), 0), 0)  # ART saves the untrained adapter
        base_url = os.environ.get("ART_FAKE_INFERENCE_URL")
        if not base_url:
            raise RuntimeError("FakeBackend needs ART_FAKE_INFERENCE_URL (the scripted policy endpoint)")
        return base_url, "fake-key"

    async def _get_step(self, model: Any) -> int:
        checkpoints = list_checkpoints(self._model_dir(model))
        return checkpoints[-1].step if checkpoints else 0

    def _model_inference_name(self, model: Any, step: int | None = None) -> str:
        if step is None:
            checkpoints = list_checkpoints(self._model_dir(model))
            step = checkpoints[-1].step if checkpoints else 0
        return f"{model.name}@{step}"

    async def train(self, model: Any, trajectory_groups: Iterable[Any], **kwargs: Any) -> FakeTrainResult:
        groups = list(trajectory_groups)
        current = await self._get_step(model)
        if os.environ.get("ART_FAKE_SKIP_TRAINING") == "1":
            return self._skip(model, current)
        marker = self._path / TRAINING_MARKER
        marker.write_text(str(current))
        try:
            await asyncio.sleep(float(os.environ.get("ART_FAKE_TRAIN_SECONDS") or 0))
            folder = step_dir(self._model_dir(model), current + 1)
            save_adapter(folder, current + 1, float(os.environ.get("ART_FAKE_SAVE_SECONDS") or 0))
        finally:
            marker.unlink(missing_ok=True)
        self._log_train(current, groups, kwargs)
        return FakeTrainResult(step=current + 1, metrics={"loss/train": 0.0}, checkpoint_path=str(folder))

    def _skip(self, model: Any, current: int) -> FakeTrainResult:
        """What LocalBackend does when nothing is trainable: copy the checkpoint forward
        and report zero trainable groups."""
        import shutil

        shutil.copytree(step_dir(self._model_dir(model), current), step_dir(self._model_dir(model), current + 1))
        return FakeTrainResult(step=current + 1, metrics={"data/step_num_groups_trainable": 0.0,
                                                         "data/step_num_gradient_steps": 0.0})

    async def close(self) -> None:
        self.closed = True

    # -- helpers ----------------------------------------------------------------------

    def _model_dir(self, model: Any) -> Path:
        return model_dir(self._path, model.project, model.run_name)

    def _log_train(self, current: int, groups: list[Any], kwargs: dict[str, Any]) -> None:
        record = {
            "from_step": current,
            "step": current + 1,
            "groups": len(groups),
            "trajectories": sum(len(group.trajectories) for group in groups),
            "metadata": [[dict(t.metadata) for t in group.trajectories] for group in groups],
            "rewards": [[t.reward for t in group.trajectories] for group in groups],
            "learning_rate": kwargs.get("learning_rate"),
            "objective": {k: v for k, v in kwargs.items() if k != "learning_rate"},
            "pid": os.getpid(),
            "time": time.time(),
        }
        self._append(TRAIN_LOG, record)

    def _log_call(self, call: str) -> None:
        self._append(CALL_LOG, {"call": call, "pid": os.getpid(), "time": time.time()})

    def _append(self, name: str, record: dict[str, Any]) -> None:
        fd = os.open(self._path / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record, default=str) + "\n").encode())
        finally:
            os.close(fd)


def read_train_log(art_path: Path) -> list[dict[str, Any]]:
    """Every ``train`` call recorded under ``art_path``, oldest first."""
    return _read(Path(art_path) / TRAIN_LOG)


def read_calls(art_path: Path) -> list[str]:
    """The backend's constructions and registrations under ``art_path``, in order."""
    return [record["call"] for record in _read(Path(art_path) / CALL_LOG)]


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
