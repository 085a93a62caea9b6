"""The warm-up's training step captured once as a CUDA graph and replayed (warmup_steps.py's ``trained``).

A step of the learning bench's 4.3M-parameter model is overhead, not arithmetic: transformers'
forward in Python and some hundreds of kernel launches, each queued by the host. Captured once, a
step is one ``replay()``: the GPU runs the recorded kernels with no Python between them.
``python -m bench.warmup_step --device cuda`` measures it against the eager steps, and how far the
losses of the two apart.

A graph replays fixed shapes at fixed addresses, so all that the step reads or writes is static:

- the batch is gathered inside the graph from DeviceBatches' table at its full width: right padding,
  labels -100 and no attention mask, as the eager batches, so the losses are theirs up to float
  order (causal attention never lets a real token see a pad after it; a CPU test compares). One
  width, one graph: a batch of 16 is as wide as its longest row, on average 99.4% of the table's
  width on the bench's inboxes, so width buckets would save under 1% of the tokens for a graph each;
- the draws are DeviceBatches.picks' (``trainer.warmup.batches``' examples, same seed) as one index
  tensor on the device, and the step's number a counter there that the graph advances: a replay
  needs nothing from the host;
- each step's loss goes into a preallocated tensor at its step, read back only where printed;
- AdamW fused and capturable (its step count on the device; the constant learning rate a float
  baked into the capture), clip_grad_norm_'s foreach path (torch 2.11 clamps the coefficient where
  an ``if`` would read it back), autocast without its weight cache;
- the causal masks handed to the model prepared, as None: during a capture transformers cannot
  test a batch for packed sequences (the test reads the device) and would build an explicit mask,
  which SDPA's flash kernel does not take; prepared, SDPA runs its causal kernel as the eager steps do;
- no KV cache (``use_cache=False``): a training step reads none, and transformers' DynamicCache
  would make a tensor from a Python list on the device inside the capture.

Where the warm-up or the capture raises (a host read inside the forward: "operation not permitted
when stream is capturing"), the weights go back to where they started and GraphFailed says why in
one line: the caller trains eagerly from the same start.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.staging.optimizer_step import adamw, after, autocast

if TYPE_CHECKING:
    from trainer.staging.warmup_batches import DeviceBatches

WARM_STEPS = 3  # eager steps before the capture (PyTorch's recipe): what they initialise lazily is not captured
Step = Callable[[], None]
Capture = Callable[[Step], Step]  # a step -> its replay (cuda_graph; a test passes its own)


class GraphFailed(RuntimeError):
    """The graph path failed before its first replay (one line: why); the weights are back at their start."""


@dataclass
class StaticStep:
    """What a captured step reads and writes, each at a fixed address (the module's docstring)."""

    model: Any
    optimizer: Any
    table: "DeviceBatches"
    draws: Any  # (steps, batch size): each step's table rows, on the device
    index: Any  # (1,): the next step's number from 0, on the device
    losses: Any  # (steps,) float32, on the device
    precision: str
    masks: dict[str, None] | None  # prepared_masks

    def batch(self) -> tuple[Any, Any]:
        """The step's ids and labels, gathered from the table at its full width by the counter."""
        rows = self.draws.index_select(0, self.index).view(-1)
        return self.table.ids.index_select(0, rows), self.table.labels.index_select(0, rows)

    def __call__(self) -> None:
        """One step: the batch gathered, forward, backward, clip, AdamW, the loss kept, the counter on."""
        import torch

        self.optimizer.zero_grad(set_to_none=True)  # backward allocates the grads: in the graph's pool when captured
        ids, labels = self.batch()
        with autocast(self.table.device, self.precision, cache=False):
            loss = self.model(input_ids=ids, labels=labels, attention_mask=self.masks, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.losses.index_copy_(0, self.index, loss.detach().float().view(1))
        self.index.add_(1)


def prepared_masks(model: Any) -> dict[str, None] | None:
    """The causal masks as transformers' forward takes them prepared (a dict by layer kind, as
    ``generate`` passes them): None for full attention, so SDPA runs its causal kernel. None where a
    layer attends through a sliding window, which needs a real mask: transformers builds it."""
    kinds = set(getattr(model.config, "layer_types", None) or ())
    return {kind: None for kind in kinds} if kinds == {"full_attention"} else None


def static_step(model: Any, table: "DeviceBatches", picks: list[list[int]], learning_rate: float,
                precision: str) -> StaticStep:
    """The step's static tensors on the table's device, and its AdamW (capturable on CUDA)."""
    import torch

    device = table.device
    return StaticStep(model, adamw(model, learning_rate, device, capturable=device == "cuda"), table,
                      torch.tensor(picks, dtype=torch.long, device=device), torch.zeros(1, dtype=torch.long, device=device),
                      torch.zeros(len(picks), dtype=torch.float32, device=device), precision, prepared_masks(model))


def cuda_graph(step: Step) -> Step:
    """``step`` captured as a CUDA graph: its replay (the graph lives as long as the replay)."""
    import torch

    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.current_stream()
    try:
        with torch.cuda.graph(graph):
            step()
    finally:  # where the capture's end raises, torch leaves its capture stream current: the eager loop's is this
        torch.cuda.set_stream(stream)
    return graph.replay


@contextmanager
def side_stream(device: str) -> Iterator[None]:
    """The eager warm-up steps on a stream of their own (PyTorch's recipe for a whole-network
    capture): what they make lazily (cuBLAS's workspaces, AdamW's state) is made off the captured
    stream, and the current stream waits for them before the capture."""
    import torch

    if device != "cuda":
        yield
        return
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            yield
    finally:  # a failed step too: the weights are restored on the current stream, after the side's work
        torch.cuda.current_stream().wait_stream(side)


def warmed_and_captured(step: StaticStep, steps: int, capture: Capture, say: Callable[[str], Any],
                        after_step: Any) -> Step:
    """The first WARM_STEPS steps run eagerly (each printed and ``after_step``'d as it ends), then
    ``capture(step)``: the replay of the steps after them."""
    step.model.train()
    with side_stream(step.table.device), warnings.catch_warnings():
        # a capturable AdamW warns when it steps uncaptured: these steps are meant to
        warnings.filterwarnings("ignore", message=".*capturable=True.*")
        for number in range(1, WARM_STEPS + 1):
            step()
            after(number, steps, step.losses[number - 1], say, after_step)
    return capture(step)


def graph_losses(model: Any, table: "DeviceBatches", *, steps: int, batch_size: int, learning_rate: float,
                 seed: int, say: Callable[[str], Any] = print, after_step: Any = None, precision: str = "float32",
                 capture: Capture = cuda_graph) -> list[float]:
    """``steps`` AdamW steps on DeviceBatches' draws: WARM_STEPS eager, the rest ``capture``'s
    replays. GraphFailed, the weights back at their start, where anything before the first replay
    raises; the losses stay on the device until printed or returned."""
    start = snapshot(model)
    try:
        step = static_step(model, table, table.picks(batch_size, steps, seed), learning_rate, precision)
        replay = warmed_and_captured(step, steps, capture, say, after_step)
    except Exception as error:  # whatever the capture met: the eager loop takes over from the same start
        restore(model, start)
        raise GraphFailed(capture_failure(error)) from error
    for number in range(WARM_STEPS + 1, steps + 1):
        replay()
        after(number, steps, step.losses[number - 1], say, after_step)
    step.optimizer.zero_grad(set_to_none=True)  # the grads in the graph's pool go with it
    return step.losses.tolist()


def snapshot(model: Any) -> list[Any]:
    """The parameters' values on their device, to train from again where the graph fails (the
    warm-up's models are small: 17 MB for the bench's)."""
    return [parameter.detach().clone() for parameter in model.parameters()]


def restore(model: Any, values: list[Any]) -> None:
    """The parameters back to ``values``, without grads: as before the graph path began."""
    import torch

    with torch.no_grad():
        for parameter, value in zip(model.parameters(), values):
            parameter.copy_(value)
            parameter.grad = None


def capture_failure(error: BaseException) -> str:
    """The error's type and the first line of its message, and of the first error it was raised
    over (a capture that meets a host read ends with CUDA's "capture invalidated", over the read's
    own error, which names the cause); at most 300 characters: a log line."""
    first = error
    while (under := raised_over(first)) is not None:
        first = under
    said = headline(error) if first is error else f"{headline(error)} (raised over {headline(first)})"
    return said[:300]


def raised_over(error: BaseException) -> BaseException | None:
    """The error ``error`` was raised from or while handling, as a traceback shows it (none after ``from None``)."""
    return error.__cause__ if error.__cause__ is not None or error.__suppress_context__ else error.__context__


def headline(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"
