"""The full-size stages' model and plan: make-model --size qwen2.5-14b (or the one --model14b
names), and how agent008-14b runs ``trainer.train --config agent_008`` on it: the card (this one, or
--card's cluster emulated), the launcher's decision there, the deviations named, the segment
(``--bundle_to``, ``--from_bundle``), and the sampling time predicted before any step is measured."""

from __future__ import annotations

import argparse
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.proof.cards import CONFIG, Card, Decision, Emulation, launcher_decision, physical_decision
from trainer.proof.gpus import gpu_total_gib
from trainer.proof.processes import command
from trainer.proof.workspace import ProofFailed, Work

FULL_RUN = "agent008-14b"
SIZE = "qwen2.5-14b"
FULL_BACKEND = "trainer.proof.full_length_backend:FullLengthLocalBackend"
FULL_TIMEOUT = 3600  # seconds a trainer process of this stage may take
# predicted sampling: every token reads the bf16 weights once; this much slower than the memory's
# bandwidth allows (the KV cache, LoRA, sampling, the scheduler), a guess the first step replaces
TOKEN_OVERHEAD = 1.6
BANDWIDTH_TB_S = {"H200": 4.8, "GH200": 4.0, "H100": 3.35, "A100": 1.9}


# -- the model -------------------------------------------------------------------------------------------


def stage_model14b(work: Work, args: argparse.Namespace) -> list[str]:
    """make-model --size qwen2.5-14b into <work>/model-14b, or check the one --model14b names."""
    if args.model14b is not None:
        return check_made_14b(args.model14b)
    out = work.root / "model-14b"
    made = command(work, "make-model-14b", ["-m", "trainer.data", "make-model", str(out), "--size", SIZE, "--data_dir",
                                            str(work.data)], timeout=1800)
    args.model14b = out
    return [line.strip() for line in made.splitlines() if line.startswith("model:")] + check_made_14b(out)


def check_made_14b(model: Path) -> list[str]:
    made = json.loads((model / "made_by.json").read_text()) if (model / "made_by.json").is_file() else {}
    if made.get("size") != SIZE:
        raise ProofFailed(f"{model} is not a model make-model made at size {SIZE} (made_by.json: {made or 'none'})")
    config = json.loads((model / "config.json").read_text())
    return [f"{config['num_hidden_layers']} layers, hidden {config['hidden_size']}, intermediate "
            f"{config['intermediate_size']}, {config['num_attention_heads']} attention heads, "
            f"{config['num_key_value_heads']} KV heads, embedding {config['vocab_size']} rows, context "
            f"{config['max_position_embeddings']}: {made['parameters'] / 1e9:.2f}B parameters",
            f"tokenizer: {made['tokenizer_tokens']} tokens (Qwen2.5's: 151,665); a sampled id from "
            f"{made['tokenizer_tokens']} to {config['vocab_size'] - 1} decodes to nothing",
            f"disk: {shutil.disk_usage(model).free / 2**30:.1f} GiB free beside it"]


# -- the plan of the full-size run -------------------------------------------------------------------------


@dataclass(frozen=True)
class FullPlan:
    """How the stage runs ``trainer.train --config agent_008`` on the made 14B."""

    model: Path
    gpu: str
    physical_gib: float
    decision: Decision
    emulation: Emulation | None = None
    backend: str = FULL_BACKEND
    deviations: tuple[str, ...] = ()  # key=value the lead chose against agent_008 (max_tokens, vllm_fast_start)
    settings: tuple[str, ...] = ()  # key=value of the CPU tests' doubles (never the lead's)
    steps: int = 2
    resume_steps: int = 0
    timeout: float = FULL_TIMEOUT
    bundle_to: Path | None = None  # segment 1: after the first process, bundle the run here and stop
    from_bundle: Path | None = None  # segment 2: the run unbundled from here, then only the resume
    part_mib: int = 1024

    def overrides(self) -> list[str]:
        """agent_008's config as the stage runs it: the made model, the proof's reward and backend,
        the launcher's gpu_mode, the emulated card's vLLM share, then the named deviations."""
        from trainer.agent.proof_reward import PROOF_REWARD

        base = [f"base_model={self.model}", f"reward={PROOF_REWARD}", f"backend={self.backend}",
                f"gpu_mode={self.decision.gpu_mode}"]
        if self.emulation is not None:
            base.append(f"gpu_memory_utilization={self.emulation.utilization(self.share)}")
        return base + list(self.deviations) + list(self.settings)

    @property
    def share(self) -> float:
        """vLLM's share of the card the launcher planned with (agent_008's, before emulation)."""
        from trainer.training.config import vllm_share

        return vllm_share(self.plain_config(), self.decision.gpu_mode)

    def plain_config(self) -> Any:
        """agent_008 with the deviations, as the launcher plans it (no emulated share)."""
        from trainer.training.config import load_config

        return load_config(CONFIG, [f"base_model={self.model}", *self.deviations, *self.settings])

    def config(self) -> Any:
        from trainer.training.config import load_config

        return load_config(CONFIG, self.overrides())

    @property
    def card_gib(self) -> float:
        return self.emulation.card.gib if self.emulation is not None else self.physical_gib

    def what_differs(self) -> list[str]:
        from trainer.agent.proof_reward import PROOF_REWARD

        return [f"reward={PROOF_REWARD} (PROOF ONLY: a hash of each rollout's text; random weights score every "
                "rollout alike under ART-E's reward)",
                *([f"backend={self.backend} (ART's LocalBackend, training rows of max_seq_length tokens)"]
                  if self.backend == FULL_BACKEND else []),
                *(f"{item} (against agent_008's setting)" for item in self.deviations)]


def full_plan(work: Work, args: argparse.Namespace) -> FullPlan:
    """The card (this one, or --card's cluster emulated), the launcher's decision for it, the deviations,
    and the segment (``--bundle_to``: the first, ``--from_bundle``: the second)."""
    physical = gpu_total_gib(args.gpus[0])
    deviations = tuple(([f"max_tokens={args.max_tokens}"] if args.max_tokens else [])
                       + (["vllm_fast_start=true"] if args.fast_start else []))
    launcher_overrides = list(deviations)
    segment = {"resume_steps": args.resume_steps, "steps": args.full_steps, "bundle_to": args.bundle_to,
               "from_bundle": args.from_bundle, "part_mib": args.part_mib}
    if args.card is None:
        return FullPlan(args.model14b, args.gpus[0], physical, physical_decision(physical, 1, launcher_overrides),
                        deviations=deviations, **segment)
    emulation = Emulation(Card.of(args.card), physical)
    if emulation.problem():
        raise ProofFailed(emulation.problem())
    return FullPlan(args.model14b, args.gpus[0], physical, launcher_decision(emulation.card, launcher_overrides),
                    emulation, deviations=deviations, **segment)


def plan_lines(plan: FullPlan, scenarios: int, gpu_name: str) -> list[str]:
    """What the stage is about to run, and its predicted sampling time."""
    config = plan.config()
    card = (f"{plan.emulation.card.cluster}'s {plan.card_gib:.0f} GiB card" if plan.emulation
            else f"this {plan.physical_gib:.1f} GiB card")
    lines = [f"agent_008 on {card}: the launcher decides gpu_mode {plan.decision.gpu_mode}, "
             f"{'fits' if plan.decision.fits else 'REFUSED'}: {plan.decision.line}"]
    if plan.emulation is not None:
        lines.append(plan.emulation.describe(plan.share))
    groups = min(config.groups_per_step, scenarios)
    lines.append(f"settings: agent_008's: LoRA rank 8 (ART's default), max_seq_length {config.max_seq_length}, "
                 f"{config.trajectories_per_group} rollouts x {config.groups_per_step} groups a step "
                 f"({groups} here: the fixture has {scenarios} training questions), {config.rollout_concurrency} in "
                 f"flight, max_tokens {config.max_tokens}, max_turns {config.max_turns}, loss {config.loss_fn}, "
                 f"learning rate {config.learning_rate}, vllm_fast_start {config.vllm_fast_start}")
    lines.append("differs: " + "; ".join(plan.what_differs()))
    lines.append(predicted_sampling(config, groups, gpu_name, plan.model))
    return lines


def predicted_sampling(config: Any, groups: int, gpu_name: str, model: Path) -> str:
    """The rollouts' time a step, before any is measured: a random model samples until max_tokens."""
    from trainer.staging.random_weights import parameter_count

    rollouts = groups * config.trajectories_per_group
    waves = math.ceil(rollouts / config.rollout_concurrency)
    bandwidth = next((tb for name, tb in BANDWIDTH_TB_S.items() if name in gpu_name), 3.0)
    token_seconds = parameter_count(model) * 2 / (bandwidth * 1e12) * TOKEN_OVERHEAD
    seconds = waves * config.max_tokens * token_seconds
    return (f"predicted: a step's {rollouts} rollouts sample {config.max_tokens} tokens each (a random model never "
            f"stops early), {waves} waves of {config.rollout_concurrency}: about {seconds:.0f} s at {token_seconds * 1000:.1f} ms "
            f"a token ({bandwidth} TB/s, x{TOKEN_OVERHEAD}); training and vLLM's sleep and wake come on top")
