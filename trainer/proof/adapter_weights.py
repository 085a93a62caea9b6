"""Whether two LoRA checkpoints hold the same weights, read from their safetensors files alone.

The benches ask "did this step change the LoRA?" (a seed's steps must, a learning-rate-0 control's
must not). Comparing the files' bytes answers a different question, and ART has two savers: step
0's LoRA is written when the run's vLLM starts, later ones by its trainer (in dedicated mode, another
process). On two H100s a learning-rate-0 control's files can differ in bytes (at one of 43 steps in one run)
while its held-out accuracy stays flat (47.3% at step 0, 45.0% at 40). So this
reads each tensor by name, ignores the header's ``__metadata__`` and the tensors' order, and compares
values; where the two files store a tensor in different float widths (float32 in one, bfloat16 or
float16 in the other) both are rounded to the narrower before comparing. Pure Python, so the CPU
tests and a bare GPU node need nothing installed.
"""

from __future__ import annotations

import json
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

FILE_NAME = "adapter_model.safetensors"
FLOATS = ("F32", "BF16", "F16")  # the widths that can be compared across: widest first


@dataclass(frozen=True)
class Tensor:
    """One tensor of a safetensors file: its dtype, shape and raw little-endian bytes."""

    dtype: str
    shape: tuple[int, ...]
    raw: bytes


def read_tensors(path: Path) -> dict[str, Tensor]:
    """Every tensor of a safetensors file by name (the format: an 8-byte header length, a JSON
    header of name -> dtype, shape, data_offsets, then the data)."""
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]
    return {name: Tensor(entry["dtype"], tuple(entry["shape"]), data[entry["data_offsets"][0]:entry["data_offsets"][1]])
            for name, entry in header.items() if name != "__metadata__"}


def float32_bits(tensor: Tensor) -> array:
    """The tensor's values as float32 bit patterns (bfloat16 is float32's upper half; float16 is
    widened exactly)."""
    if tensor.dtype == "F32":
        return array("I", tensor.raw)
    if tensor.dtype == "BF16":
        return array("I", (half << 16 for half in array("H", tensor.raw)))
    widened = array("f", (value for (value,) in struct.iter_unpack("<e", tensor.raw)))
    return array("I", widened.tobytes())


def rounded(bits: array, dtype: str) -> list[int]:
    """float32 bit patterns rounded to ``dtype`` the way torch casts (to nearest, ties to even)."""
    if dtype == "F32":
        return list(bits)
    if dtype == "BF16":
        return [(b + 0x7FFF + ((b >> 16) & 1)) >> 16 for b in bits]
    floats = array("f", bits.tobytes())
    return [struct.unpack("<H", struct.pack("<e", value))[0] for value in floats]


def same_tensor(a: Tensor, b: Tensor) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype:
        return a.raw == b.raw
    if a.dtype not in FLOATS or b.dtype not in FLOATS:
        return False
    narrower = max(a.dtype, b.dtype, key=FLOATS.index)
    try:
        return rounded(float32_bits(a), narrower) == rounded(float32_bits(b), narrower)
    except OverflowError:  # a float32 value beyond float16's range: no float16 holds it
        return False


def same_weights(a: Path, b: Path) -> bool:
    """Whether two checkpoint folders' LoRAs hold the same tensors with the same values."""
    first, second = read_tensors(a / FILE_NAME), read_tensors(b / FILE_NAME)
    return first.keys() == second.keys() and all(same_tensor(first[name], second[name]) for name in first)
