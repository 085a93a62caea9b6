"""Random weights on disk: a made model's tensors, initialised as transformers initialises Qwen2
and written in the safetensors format (trainer/staging/model_maker.py decides which tensors).

A model of agent_008's size is 29.5 GB of bf16 weights: it is written tensor by tensor, never whole
in memory, into shards of at most ``SHARD_BYTES`` with the ``model.safetensors.index.json`` that
transformers, Unsloth and vLLM read (one file, ``model.safetensors``, when it fits one shard). The
values come from torch where it imports (the backend's venv; on the GPU when there is one: 14.8
billion normal numbers in seconds) and from numpy otherwise (the frontend: small sizes in a second,
agent_008's size in many minutes).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

INIT_STD = 0.02
SHARD_BYTES = 5 * 10**9  # transformers' default max_shard_size ("5GB")
BYTES_PER_VALUE = 2  # bf16
INDEX_FILE = "model.safetensors.index.json"

Shape = tuple[int, ...]


def initial_value(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Norms start at one, biases at zero, matrices normal(0, 0.02) as transformers initialises Qwen2."""
    if name.endswith("norm.weight"):
        return np.ones(shape, np.float32)
    if name.endswith(".bias"):
        return np.zeros(shape, np.float32)
    return rng.normal(0.0, INIT_STD, shape).astype(np.float32)


def to_bfloat16(values: np.ndarray) -> bytes:
    """float32 to bfloat16 bytes, rounding to nearest even (numpy has no bfloat16 type)."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


# -- where the values come from -------------------------------------------------------------------------


class NumpyValues:
    """Values from one numpy generator, tensor after tensor (the frontend has no torch)."""

    name = "numpy"

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def __call__(self, name: str, shape: Shape) -> bytes:
        return to_bfloat16(initial_value(name, shape, self._rng))


class TorchValues:
    """Values from torch's generator on ``device`` (cuda where there is a GPU), as bf16 bytes."""

    def __init__(self, torch: Any, device: str, seed: int) -> None:
        self._torch, self._device = torch, device
        self._generator = torch.Generator(device=device).manual_seed(seed)
        self.name = f"torch on {device}"

    def __call__(self, name: str, shape: Shape) -> memoryview:
        torch = self._torch
        if name.endswith("norm.weight"):
            values = torch.ones(shape, dtype=torch.bfloat16)
        elif name.endswith(".bias"):
            values = torch.zeros(shape, dtype=torch.bfloat16)
        else:
            values = torch.empty(shape, dtype=torch.float32, device=self._device)
            values.normal_(0.0, INIT_STD, generator=self._generator)
            values = values.to(torch.bfloat16).cpu()
        return memoryview(values.contiguous().view(torch.int16).numpy()).cast("B")


def value_source(seed: int, prefer_torch: bool = True) -> NumpyValues | TorchValues:
    """torch's generator (on the GPU when there is one) where torch imports, else numpy's."""
    if prefer_torch:
        try:
            import torch
        except ImportError:
            pass
        else:
            return TorchValues(torch, "cuda" if torch.cuda.is_available() else "cpu", seed)
    return NumpyValues(seed)


# -- safetensors, sharded ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """One safetensors file of the model: its name and the tensors in it, in order."""

    file: str
    tensors: tuple[tuple[str, Shape], ...]

    @property
    def data_bytes(self) -> int:
        return sum(tensor_bytes(shape) for _, shape in self.tensors)


def tensor_bytes(shape: Shape) -> int:
    return math.prod(shape) * BYTES_PER_VALUE


def plan_shards(tensors: Iterable[tuple[str, Shape]], max_bytes: int = SHARD_BYTES) -> list[Shard]:
    """Tensors in order, a new shard whenever the next would pass ``max_bytes`` (a tensor larger
    than that gets a shard of its own); named as transformers names them."""
    groups: list[list[tuple[str, Shape]]] = [[]]
    size = 0
    for name, shape in tensors:
        if groups[-1] and size + tensor_bytes(shape) > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append((name, shape))
        size += tensor_bytes(shape)
    if len(groups) == 1:
        return [Shard("model.safetensors", tuple(groups[0]))]
    count = len(groups)
    return [Shard(f"model-{i:05d}-of-{count:05d}.safetensors", tuple(group)) for i, group in enumerate(groups, 1)]


def safetensors_header(tensors: Iterable[tuple[str, Shape]]) -> bytes:
    """The 8-byte little-endian length and the JSON header naming each tensor's dtype, shape and
    byte range (padded to 8 bytes): everything before the tensors' bytes."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + tensor_bytes(shape)]}
        offset += tensor_bytes(shape)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded


def write_shard(path: Path, shard: Shard, values: Callable[[str, Shape], bytes | memoryview]) -> int:
    """Write one shard, one tensor in memory at a time; the file's size."""
    with path.open("wb") as out:
        out.write(safetensors_header(shard.tensors))
        for name, shape in shard.tensors:
            data = values(name, shape)
            if len(data) != tensor_bytes(shape):
                raise ValueError(f"{name}: {len(data)} bytes for shape {shape}")
            out.write(data)
    return path.stat().st_size


def write_model_weights(out: Path, tensors: Iterable[tuple[str, Shape]], values: Callable[[str, Shape], bytes | memoryview],
                        max_shard_bytes: int = SHARD_BYTES) -> int:
    """Every shard into ``out`` and, with several, the index; the bytes written."""
    shards = plan_shards(tensors, max_shard_bytes)
    written = sum(write_shard(out / shard.file, shard, values) for shard in shards)
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(s.data_bytes for s in shards)},
                 "weight_map": {name: shard.file for shard in shards for name, _ in shard.tensors}}
        (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return written


def weight_files(model: Path) -> Iterator[Path]:
    """A model folder's safetensors files: the index's shards, else ``model.safetensors``."""
    index = model / INDEX_FILE
    if index.is_file():
        yield from (model / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values())))
    else:
        yield model / "model.safetensors"


def read_header(path: Path) -> dict[str, Any]:
    """A safetensors file's header (tensor name: dtype, shape, data_offsets; and __metadata__)."""
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        return json.loads(handle.read(size))


def parameter_count(model: Path) -> int:
    """The parameters in a model folder's safetensors files (one file or an index of shards)."""
    return sum(math.prod(info["shape"]) for path in weight_files(model)
               for name, info in read_header(path).items() if name != "__metadata__")
