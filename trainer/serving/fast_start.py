"""What ``vllm_fast_start`` changes in a vLLM, defined once for the three that start one: ART's
runtime in training (engine arguments and environment), ``vllm serve`` in trainer.serve and
trainer.eval (flags and environment), and the GPU proof's baseline loop.

Each item is start-up work that pays off only over hours of generation, which a small model
(the learning bench's 4.3M parameters, the smoke proof's) never has:

- ``enforce_eager``: no torch.compile/Inductor and no CUDA-graph capture;
- FlashInfer's kernel autotuning off;
- vLLM's own top-k/top-p sampler instead of FlashInfer's (``VLLM_USE_FLASHINFER_SAMPLER=0``):
  FlashInfer builds its sampling kernels on their first use on a machine (ART gives its runtime
  a FlashInfer workspace of its own). The first two starts of the learning bench on a fresh
  H200 spent 82 s in vLLM's "init engine" after logging "Using FlashInfer for top-p & top-k
  sampling"; a third, started once they had registered, spent 1.6 s there.

Stdlib only: trainer.serve and the launcher's import-light paths may read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, MutableMapping

KERNEL_CONFIG = {"enable_flashinfer_autotune": False}
ENGINE_ARGS = {"enforce_eager": True, "kernel_config": KERNEL_CONFIG}  # ART's EngineArgs
SERVER_FLAGS = ("--enforce-eager", "--kernel-config", json.dumps(KERNEL_CONFIG))  # ``vllm serve``
ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}  # read by vLLM's processes, which inherit it


def environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ENV where it sets none of those names: a value the user chose wins."""
    return {**ENV, **env}


def set_in(env: MutableMapping[str, str]) -> None:
    """ENV into ``env`` (``os.environ`` before ART starts its runtime, which copies it) where unset."""
    for name, value in ENV.items():
        env.setdefault(name, value)
