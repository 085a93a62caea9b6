"""Random weights on disk: a made model's tensors, initialised as transformers initialises Qwen2
and written in the safetensors format (trainer/staging/model_maker.py decides which tensors)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path

import numpy as np

INIT_STD = 0.02


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


def write_safetensors(path: Path, tensors: Iterable[tuple[str, tuple[int, ...], bytes]]) -> int:
    """The safetensors format: an 8-byte little-endian header length, a JSON header naming
    each tensor's dtype, shape and byte range, then the bytes. Returns the file's size."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(encoded)))
        out.write(encoded)
        for blob in blobs:
            out.write(blob)
    return path.stat().st_size
