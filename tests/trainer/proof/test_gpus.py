"""The node's GPUs as nvidia-smi reports them (trainer/proof/gpus.py)."""

from __future__ import annotations

import pytest

from trainer.proof.gpus import parse_gpu_memory

# litellm noise in the forwarder's test (as tests/trainer/training/test_train.py)
pytestmark = pytest.mark.filterwarnings(
    "ignore:Pydantic serializer warnings:UserWarning", "ignore:There is no current event loop:DeprecationWarning")


# -- readings --------------------------------------------------------------------------------------------


def test_gpu_memory_is_read_by_index_and_junk_lines_are_left_out() -> None:
    assert parse_gpu_memory("0, 71234\n1, 2048\nNo devices were found\n") == {"0": 71234, "1": 2048}
