"""trainer/proof/adapter_weights.py: two checkpoints are the same LoRA when their tensors' values are, whatever
the files' metadata, tensor order or float width; any changed value makes them differ."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.doubles.step_trainer import safetensors_of
from trainer.proof.adapter_weights import FILE_NAME, read_tensors, same_weights


def write_adapter(folder: Path, tensors: dict[str, tuple[str, list[float]]], metadata: dict | None = None) -> Path:
    """A checkpoint folder whose safetensors file holds ``tensors`` (name -> dtype, values; one row)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = {name: (dtype, [1, len(values)], values) for name, (dtype, values) in tensors.items()}
    (folder / FILE_NAME).write_bytes(safetensors_of(rows, metadata))
    return folder


def test_the_same_values_under_other_metadata_and_tensor_order_are_the_same_weights(tmp_path: Path) -> None:
    a = write_adapter(tmp_path / "a", {"lora_A": ("F32", [0.5, -1.25]), "lora_B": ("F32", [0.0, 3.0])},
                      {"format": "pt", "step": "0"})
    b = write_adapter(tmp_path / "b", {"lora_B": ("F32", [0.0, 3.0]), "lora_A": ("F32", [0.5, -1.25])})
    assert (a / FILE_NAME).read_bytes() != (b / FILE_NAME).read_bytes()
    assert same_weights(a, b)


def test_one_changed_value_another_name_or_another_shape_is_other_weights(tmp_path: Path) -> None:
    base = write_adapter(tmp_path / "base", {"lora_A": ("F32", [0.5, -1.25])})
    assert not same_weights(base, write_adapter(tmp_path / "value", {"lora_A": ("F32", [0.5, -1.2500001])}))
    assert not same_weights(base, write_adapter(tmp_path / "name", {"lora_a": ("F32", [0.5, -1.25])}))
    assert not same_weights(base, write_adapter(tmp_path / "more", {"lora_A": ("F32", [0.5, -1.25]),
                                                                    "lora_B": ("F32", [0.0])}))
    assert not same_weights(base, write_adapter(tmp_path / "shape", {"lora_A": ("F32", [0.5, -1.25, 0.0])}))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-60000, max_value=60000, width=32), min_size=1, max_size=16), st.data())
def test_a_tensor_kept_as_float32_and_as_float16_is_the_same_and_any_changed_value_is_not(
        tmp_path_factory, values: list[float], data: st.DataObject) -> None:
    folder = tmp_path_factory.mktemp("w")
    halves = [struct.unpack("<e", struct.pack("<e", v))[0] for v in values]  # what a float16 copy holds
    wide = write_adapter(folder / "f32", {"w": ("F32", halves)})
    narrow = write_adapter(folder / "f16", {"w": ("F16", halves)})
    assert same_weights(wide, narrow)
    index = data.draw(st.integers(0, len(values) - 1))
    changed = halves[:index] + [halves[index] + (1.0 if abs(halves[index]) < 1000 else 64.0)] + halves[index + 1:]
    assert not same_weights(wide, write_adapter(folder / "changed", {"w": ("F16", changed)}))


SAVE_WITH_TORCH = """
import sys, torch
from safetensors.torch import save_file
torch.manual_seed(0)
weights = {"lora_A": torch.randn(8, 64) * 0.02, "lora_B": torch.randn(64, 8)}
save_file(weights, sys.argv[1] + "/f32/adapter_model.safetensors", metadata={"format": "pt"})
save_file({k: v.to(torch.bfloat16) for k, v in weights.items()}, sys.argv[1] + "/bf16/adapter_model.safetensors")
nudged = {k: v.to(torch.bfloat16) for k, v in weights.items()}
nudged["lora_B"][3, 5] = torch.nextafter(nudged["lora_B"][3, 5].float(), torch.tensor(9.0)).to(torch.bfloat16) + 0.01
save_file(nudged, sys.argv[1] + "/nudged/adapter_model.safetensors")
"""


def test_torchs_bfloat16_cast_of_a_float32_lora_is_the_same_weights_and_a_nudged_value_is_not(
        tmp_path: Path, backend_python: Path) -> None:
    for name in ("f32", "bf16", "nudged"):
        (tmp_path / name).mkdir()
    subprocess.run([str(backend_python), "-c", SAVE_WITH_TORCH, str(tmp_path)], check=True, timeout=300)
    assert {t.dtype for t in read_tensors(tmp_path / "bf16" / FILE_NAME).values()} == {"BF16"}
    assert same_weights(tmp_path / "f32", tmp_path / "bf16")
    assert not same_weights(tmp_path / "f32", tmp_path / "nudged")
    assert not same_weights(tmp_path / "bf16", tmp_path / "nudged")
