"""The warm-up's optimizer steps (trainer.warmup's ``warm_up``): on CUDA one CUDA graph replayed
(trainer/staging/warmup_graph.py), elsewhere, or where the capture fails, the eager loop; both on
DeviceBatches' batches, both AdamW with the gradients clipped to norm 1. Which ran is named
(``Training.steps_by``) and goes into the warm-up's report and its "warmup done" line, so the
learning bench's log says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.staging.optimizer_step import adamw, after, autocast
from trainer.staging.warmup_batches import DeviceBatches

if TYPE_CHECKING:
    from trainer.staging.warmup import Example


@dataclass(frozen=True)
class Training:
    losses: list[float]
    steps_by: str  # "graph" (one CUDA graph replayed: warmup_graph.py) or "eager (why)"


def train(model: Any, examples: list[Example], pad_id: int, **options: Any) -> list[float]:
    """``trained``'s losses (its options), for the callers that need only them."""
    return trained(model, examples, pad_id, **options).losses


def trained(model: Any, examples: list[Example], pad_id: int, *, steps: int, batch_size: int, learning_rate: float,
            seed: int, device: str, say=print, after_step=None, precision: str = "float32", graph: bool = True,
            capture=None) -> Training:
    """AdamW on batches drawn from ``examples`` (gathered on the device: DeviceBatches);
    ``after_step(step, loss)``, if given, runs after each step (bench/warmup_copy.py measures there).
    On CUDA (``graph``) the step is captured once as a CUDA graph and replayed (warmup_graph.py; a
    step of the small model is launch overhead, not arithmetic); where capture fails, the eager loop
    trains from the same start and says why. ``capture`` stands in for the CUDA graph (tests)."""
    table = DeviceBatches(examples, pad_id, device)
    common = dict(steps=steps, batch_size=batch_size, learning_rate=learning_rate, seed=seed, say=say,
                  after_step=after_step, precision=precision)
    why = eager_reason(graph, device, capture, steps)
    if why is None:
        from trainer.staging.warmup_graph import GraphFailed, cuda_graph, graph_losses

        try:
            return Training(graph_losses(model, table, capture=capture or cuda_graph, **common), "graph")
        except GraphFailed as failed:
            why = f"capture failed: {failed}"
            say(f"warmup: no CUDA graph, eager steps from the same start ({why})")
    return Training(eager_losses(model, table, **common), f"eager ({why})")


def eager_reason(graph: bool, device: str, capture: Any, steps: int) -> str | None:
    """Why the steps run eagerly, or None where the graph is tried."""
    from trainer.staging.warmup_graph import WARM_STEPS

    if not graph:
        return "asked"
    if device != "cuda" and capture is None:
        return "no CUDA"
    if steps <= WARM_STEPS:
        return f"{steps} steps: no more than the {WARM_STEPS} eager ones before a capture"
    return None


def eager_losses(model: Any, table: DeviceBatches, *, steps: int, batch_size: int, learning_rate: float, seed: int,
                 say=print, after_step=None, precision: str = "float32") -> list[float]:
    """The eager loop: each step's batch trimmed to its longest row. The losses stay on the device
    until printed or returned: reading one back each step made the CPU wait for the GPU's step
    before it could queue the next."""
    import torch  # torch only in the warm-up's steps, not at --help

    device = table.device
    optimizer = adamw(model, learning_rate, device)
    model.train()
    losses = []
    for step, batch in enumerate(table.batches(batch_size, steps, seed), start=1):
        with autocast(device, precision):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        after(step, steps, losses[-1], say, after_step)
    return torch.stack(losses).float().tolist() if losses else []
