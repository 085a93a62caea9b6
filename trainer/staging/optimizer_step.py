"""What one warm-up optimizer step uses, eager or captured as a CUDA graph (trainer/staging/warmup_steps.py,
trainer/staging/warmup_graph.py): the precision's autocast, AdamW, and the loss read back only where printed.
"""

from __future__ import annotations

from typing import Any

PRECISIONS = ("float32", "bf16")  # --precision: the forward and backward passes' (the weights stay float32)


def autocast(device: str, precision: str, cache: bool = True):  # -> a context manager
    """bf16 autocast for ``precision`` bf16: the matrix products and attention in bf16 on the
    tensor cores, the weights and Adam's state still float32 (so small updates do not round away);
    float32: no autocast. ``cache=False`` for a CUDA graph's capture: autocast's cache of the
    weights' bf16 copies would outlive the captured step (trainer/staging/warmup_graph.py)."""
    import torch

    return torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16", cache_enabled=cache)


def reported(step: int, steps: int) -> bool:
    """The steps whose loss is printed: the first, every tenth of the way, the last."""
    return step == 1 or step % max(1, steps // 10) == 0 or step == steps


def after(step: int, steps: int, loss: Any, say, after_step) -> None:
    """A step's loss printed where ``reported``, and ``after_step`` called: each reads the loss back."""
    if reported(step, steps):
        say(f"warmup step {step}/{steps}: loss {loss.item():.4f}")
    if after_step is not None:
        after_step(step, loss.item())


def adamw(model: Any, learning_rate: float, device: str, capturable: bool = False) -> Any:
    """AdamW; on CUDA its fused kernel (one launch a step for all parameters, where the default
    launches several per parameter group): the same update up to float order. ``capturable`` keeps
    its step count on the device for a CUDA graph (the constant learning rate may stay a float: the
    fused kernel takes it as an argument, baked into the capture)."""
    import torch

    return torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0, fused=device == "cuda",
                             capturable=capturable)
