"""The node's GPUs as nvidia-smi reports them (trainer/proof/gpus.py)."""

from __future__ import annotations

import argparse

import pytest

from trainer.proof.gpus import gpu_list, parse_gpu_memory


def test_gpu_memory_is_read_by_index_and_junk_lines_are_left_out() -> None:
    assert parse_gpu_memory("0, 71234\n1, 2048\nNo devices were found\n") == {"0": 71234, "1": 2048}


@pytest.mark.parametrize("text, most, gpus", [("0,1", None, ["0", "1"]), (" 2 , 0 ", 2, ["2", "0"]), ("3", 2, ["3"])])
def test_a_gpu_list_is_distinct_indices_as_nvidia_smi_numbers_them(text: str, most: int | None, gpus: list[str]) -> None:
    assert gpu_list(text, most) == gpus


@pytest.mark.parametrize("text, most, accepted", [("0,1,2", 2, "1 to 2 distinct GPU indices"),
                                                  ("0,0", None, "distinct GPU indices"), ("x", None, "such as 0,1")])
def test_a_bad_gpu_list_names_the_value_and_what_is_accepted(text: str, most: int | None, accepted: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"invalid --gpus '{text}': accepted") as refused:
        gpu_list(text, most)
    assert accepted in str(refused.value)
