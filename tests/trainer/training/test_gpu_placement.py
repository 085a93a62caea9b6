"""Where ART puts training and vLLM in gpu_mode dedicated (trainer.training.backend.gpu_placement).

ART writes trainer_gpu_ids and inference_gpu_ids into CUDA_VISIBLE_DEVICES as they are
(art/local/backend.py for its trainer, art/unsloth/service.py for vLLM), so the ids must be
the run's own devices: positions [0] and [1] would send a pack's second run to the first
run's GPUs (seen on the lent GPU machine, trainer/proof/cli.py's dedicated stage).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.training.backend import gpu_placement
from trainer.training.exits import SetupError


def test_dedicated_mode_trains_on_the_runs_first_gpu_and_serves_from_its_second() -> None:
    assert gpu_placement("dedicated", {"CUDA_VISIBLE_DEVICES": "2,3"}) == {"trainer_gpu_ids": [2],
                                                                          "inference_gpu_ids": [3]}


def test_dedicated_mode_keeps_the_order_the_job_lists_its_gpus_in() -> None:
    assert gpu_placement("dedicated", {"CUDA_VISIBLE_DEVICES": "1,0"}) == {"trainer_gpu_ids": [1],
                                                                          "inference_gpu_ids": [0]}


def test_dedicated_mode_without_visible_devices_takes_the_nodes_first_two() -> None:
    assert gpu_placement("dedicated", {}) == {"trainer_gpu_ids": [0], "inference_gpu_ids": [1]}


def test_shared_mode_leaves_placement_to_art() -> None:
    assert gpu_placement("shared", {"CUDA_VISIBLE_DEVICES": "5"}) == {}


@pytest.mark.parametrize("visible", ["3", "GPU-0a1b,GPU-2c3d", "MIG-1,MIG-2"])
def test_dedicated_mode_without_two_gpu_indices_is_a_setup_error_naming_the_value(visible: str) -> None:
    with pytest.raises(SetupError, match=f"CUDA_VISIBLE_DEVICES, got '{visible}'.*gpu_mode=shared"):
        gpu_placement("dedicated", {"CUDA_VISIBLE_DEVICES": visible})


@given(st.lists(st.integers(0, 15), min_size=2, max_size=8, unique=True))
def test_dedicated_ids_are_always_two_of_the_runs_own_devices(devices: list[int]) -> None:
    placement = gpu_placement("dedicated", {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices))})
    assert placement["trainer_gpu_ids"] + placement["inference_gpu_ids"] == devices[:2]
