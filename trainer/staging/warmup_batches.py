"""The warm-up's batches on the device: every example once in one padded table there, each step's
batch one gather from it (trainer/staging/warmup_steps.py's ``train``).

A warm-up step of the learning bench's 4.3M-parameter model is overhead, not arithmetic: drawing
Examples in Python, collating them on the CPU into new tensors and copying those over each step
(trainer.warmup's ``trainer.warmup.batches`` and ``collate``, which these batches equal: a CPU test compares).
bench/warmup_step.py measures the two in one run.
"""

from __future__ import annotations

import random
from typing import Any


def draws(count: int, size: int, steps: int, seed: int) -> list[list[int]]:
    """The indices ``trainer.warmup.batches`` draws from ``count`` examples: ``rng.choice(range(count))`` reads the
    generator as ``rng.choice(examples)`` does, so the same seed picks the same examples."""
    rng, picks = random.Random(seed), range(count)
    return [[rng.choice(picks) for _ in range(size)] for _ in range(steps)]


class DeviceBatches:
    """Every distinct example once, as one right-padded table on the device (ids, labels), and all
    of a training's draws as one index tensor there: a step's batch is one gather on the device and
    a slice to its longest row (whose length the host knows), so no step builds tensors on the CPU
    or copies one to the GPU. The batches equal ``collate``'s of ``trainer.warmup.batches``' (a CPU test compares)."""

    def __init__(self, examples: list[Any], pad_id: int, device: str) -> None:
        import torch

        unique = list({id(example): example for example in examples}.values())
        row = {id(example): index for index, example in enumerate(unique)}
        self.rows = [row[id(example)] for example in examples]
        self.lengths = [len(example.input_ids) for example in unique]
        width = max(self.lengths)
        self.ids = torch.full((len(unique), width), pad_id, dtype=torch.long)
        self.labels = torch.full((len(unique), width), -100, dtype=torch.long)
        for index, example in enumerate(unique):
            n = len(example.input_ids)
            self.ids[index, :n], self.labels[index, :n] = torch.tensor(example.input_ids), torch.tensor(example.labels)
        self.ids, self.labels, self.device = self.ids.to(device), self.labels.to(device), device

    def picks(self, size: int, steps: int, seed: int) -> list[list[int]]:
        """The table's rows of each step's draws (``draws``: ``trainer.warmup.batches``' examples)."""
        return [[self.rows[index] for index in step] for step in draws(len(self.rows), size, steps, seed)]

    def batches(self, size: int, steps: int, seed: int):  # -> Iterator[dict of tensors]
        """``trainer.warmup.batches``' draws, each a dict as ``collate`` gives: the rows gathered on the device."""
        import torch

        picks = self.picks(size, steps, seed)
        if not picks:
            return
        on_device = torch.tensor(picks, dtype=torch.long).to(self.device)
        for step, rows in enumerate(picks):
            width = max(self.lengths[row] for row in rows)
            rows_here = on_device[step]  # the narrowed table's rows picked: one index_select (advanced
            # indexing with the slice was ten times slower on CPU, 0.40 against 0.045 ms a batch)
            yield {"input_ids": self.ids[:, :width].index_select(0, rows_here),
                   "labels": self.labels[:, :width].index_select(0, rows_here)}
