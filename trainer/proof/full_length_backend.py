"""The GPU proof's training backend at full size: ART's LocalBackend, packing every step into rows
of the run's ``max_seq_length`` tokens (``--train_arg backend=trainer.proof.full_length_backend:FullLengthLocalBackend``).

ART packs a step's trajectories into rows as long as its longest trajectory rounded up to 2048
tokens (at most ``max_seq_length``). A real agent_008 run meets rows of 32768 tokens whenever a
conversation grows that long, and the launcher's memory plan must hold them
(hpc/launcher/gpu_memory.py: activations of one ``max_seq_length`` sequence; ART's Unsloth
training also builds a ``seq x seq`` attention mask per row). The proof's random 14B answers in
one turn of 2048 tokens, so its rows would be 4096 long and its peak would say nothing about
32768. This class asks ART for rows of ``max_seq_length`` (``packed_sequence_length``, a
LocalBackend.train argument), so the measured training peak is the one the plan promises;
everything else is LocalBackend's. The proof names it as a deviation wherever it uses it.
"""

from __future__ import annotations

from typing import Any

from art.local import LocalBackend


class FullLengthLocalBackend(LocalBackend):
    """LocalBackend whose training rows are always ``max_seq_length`` tokens long."""

    async def train(self, model: Any, trajectory_groups: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("packed_sequence_length", full_length(model))
        return await super().train(model, trajectory_groups, **kwargs)


def full_length(model: Any) -> int:
    """The model's ``max_seq_length`` (ART's InternalModelConfig, as trainer.train sets it)."""
    return int(model._internal_config["init_args"]["max_seq_length"])
