"""The cards users have, emulated on the lent one: a cluster's GPU (hpc/launcher/clusters.yaml) as a
share of a larger card, and the launcher's decision for agent_008 there against what happens.

How a card of ``E`` GiB is emulated on one of ``P`` GiB (``E <= P``):
- vLLM asks for ``gpu_memory_utilization x total`` of the card it sees (vLLM 0.25.1,
  ``vllm/v1/worker/utils.py`` ``request_memory``: ``ceil(total_memory x utilization)``, the
  total being the physical card's), and fits its KV cache into that after profiling its
  weights, activations and CUDA graphs. The run's share ``u`` of an ``E`` GiB card is therefore
  ``u x E / P`` of this one: the trainer gets it as ``gpu_memory_utilization``.
- The training side (the trainer and ART's Unsloth service) gets
  trainer/proof/card_emulation/sitecustomize.py on PYTHONPATH: torch's allocator in each of its processes
  may take at most ``E / P`` of the card. ART's vLLM runtime is started without PYTHONPATH, so it
  is capped by its utilization alone.
- The card holds the run only if the GPU's total never passes ``E`` (nvidia-smi, each second):
  the proof checks that as well.
A card larger than the lent one cannot be emulated (a 96 GB GH200 on an 80 GB H100): the proof
says so and goes on.

The decision is the launcher's own (``hpc.launcher.gpus.plan_gpus`` on the cluster's record, for
agent_008 as its YAML has it): fits (shared or dedicated) or refused with the ways that fit.
What happens is ART's vLLM started as the trainer would start it for that plan (ART's own
command builder, the trainer's engine arguments): does it get a KV cache for one
``max_seq_length`` sequence, or refuse? The training half of a dedicated plan is the main run's
measured training peak against the card (one GPU here runs one side at a time).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, cast

from hpc.job.gpu_modes import AUTO, GpuMode
from hpc.job.workload_env import HPC_PROOF_GPU_FRACTION, HPC_PROOF_TORCH_PEAKS, REPO_DIR
from trainer.proof.gpus import MemorySampler
from trainer.proof.memory import VllmMemory, vllm_memory
from trainer.proof.processes import last_lines
from trainer.proof.workspace import ProofFailed, Work
from trainer.serving.vllm_server import ServerError, ServerExited, ServerSpec, VLLMServer, free_port

EMULATION_PATH = Path(__file__).resolve().parent / "card_emulation"
CONFIG = "agent_008"
VLLM_START_TIMEOUT = 600
_TRAIN_ARG = re.compile(r"--train_arg (\S+)=(\S+)")


@dataclass(frozen=True)
class Card:
    """A cluster's GPU as the launcher plans with it."""

    cluster: str
    gib: float  # clusters.yaml gpu_memory_gb, which the launcher takes as GiB
    gpu_mode: str  # the cluster's default for gpu_mode: auto
    gpus_per_node: int

    @classmethod
    def of(cls, cluster_name: str) -> "Card":
        from hpc.launcher.clusters import load_registry

        cluster = load_registry().clusters[cluster_name]
        return cls(cluster.name, float(cluster.gpu_memory_gb), cluster.gpu_mode, cluster.gpus_per_node)


def cluster_names() -> list[str]:
    from hpc.launcher.clusters import load_registry

    return list(load_registry().clusters)


@dataclass(frozen=True)
class Emulation:
    """``card`` on a physical card of ``physical_gib``."""

    card: Card
    physical_gib: float

    @property
    def fraction(self) -> float:
        return self.card.gib / self.physical_gib

    def problem(self) -> str | None:
        if self.card.gib > self.physical_gib:
            return (f"{self.card.cluster}'s {self.card.gib:.0f} GiB card cannot be emulated on this "
                    f"{self.physical_gib:.1f} GiB one (a share of a card is all a cap can give)")
        return None

    def utilization(self, share: float) -> float:
        """The gpu_memory_utilization that gives vLLM ``share`` of the emulated card on this one."""
        return round(share * self.fraction, 4)

    def env(self, peaks: Path) -> dict[str, str]:
        """What the training side's processes get: the cap, the peaks' folder, sitecustomize first on the path."""
        return {"PYTHONPATH": f"{EMULATION_PATH}{os.pathsep}{REPO_DIR}", HPC_PROOF_GPU_FRACTION: f"{self.fraction:.4f}",
                HPC_PROOF_TORCH_PEAKS: str(peaks)}

    def describe(self, share: float) -> str:
        return (f"emulating {self.card.cluster}'s {self.card.gib:.0f} GiB card on this {self.physical_gib:.1f} GiB one: "
                f"vLLM gets gpu_memory_utilization {self.utilization(share)} ({share} of {self.card.gib:.0f} GiB), "
                f"torch in each training process at most {self.fraction:.4f} of the card "
                f"(trainer/proof/card_emulation/sitecustomize.py)")


def peaks_env(peaks: Path) -> dict[str, str]:
    """Without emulation: only the training processes' torch peaks, no cap."""
    return {"PYTHONPATH": f"{EMULATION_PATH}{os.pathsep}{REPO_DIR}", HPC_PROOF_TORCH_PEAKS: str(peaks)}


# -- the launcher's decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What hpc.launch decides for agent_008 (with ``overrides``) on a card."""

    fits: bool
    gpu_mode: str
    line: str  # the estimate's line, or the refusal
    ways: tuple[str, ...] = ()  # the launcher's ways that fit, best first

    def first_way_overrides(self) -> list[str]:
        """The train args of the launcher's first way that fit (``--train_arg k=v ...``)."""
        if not self.ways:
            return []
        return [f"{key}={value}" for key, value in _TRAIN_ARG.findall(self.ways[0])]


def launcher_decision(card: Card, overrides: Sequence[str] = ()) -> Decision:
    """``plan_gpus`` on the card's cluster for agent_008: the launcher's decision, word for word."""
    from hpc.errors import UsageError
    from hpc.launcher.clusters import load_registry
    from hpc.launcher.gpus import plan_gpus
    from hpc.launcher.trainer_config import load_config

    cluster = load_registry().clusters[card.cluster]
    config = load_config(CONFIG, list(overrides))
    mode = cluster.gpu_mode if config.gpu_mode == AUTO else config.gpu_mode
    try:
        plan = plan_gpus(None, cluster, config)
    except UsageError as refused:
        text = str(refused)
        ways = tuple(text.split("ways that fit: ", 1)[1].split(" | ")) if "ways that fit: " in text else ()
        return Decision(False, mode, text, ways)
    return Decision(True, plan.gpu_mode or mode, plan.fit or "")


def physical_decision(gib: float, gpus: int, overrides: Sequence[str] = ()) -> Decision:
    """The launcher's estimate for agent_008 on this card itself, shared mode (no cluster record)."""
    from hpc.launcher.gpu_memory import Plan, check_fit
    from hpc.launcher.trainer_config import load_config, vllm_share

    config = load_config(CONFIG, list(overrides))
    fit = check_fit(config.base_model, Plan(gib, GpuMode.SHARED, vllm_share(config, GpuMode.SHARED), config.max_seq_length), gpus,
                    f"this {gib:.1f} GiB card")
    return Decision(fit.ok, GpuMode.SHARED, fit.line, fit.ways)


# -- ART's vLLM, started as the trainer starts it -------------------------------------------------------


@dataclass(frozen=True)
class VllmOutcome:
    """How a vLLM start ended: ``started`` (it answered /health) or not, its memory lines, its log."""

    started: bool
    seconds: float
    memory: VllmMemory
    log: Path
    why: str = ""  # when it did not start: its refusal, or its log's last lines


def served_name(config: Any) -> str:
    """The name ART's runtime serves the base model under (step 0 of the config's model)."""
    return f"{config.model_name}@0"


def art_vllm_command(config: Any, gpu_mode: str, port: int, output_dir: Path, gpu: str,
                     lora_path: Path | None) -> tuple[list[str], dict[str, str]]:
    """The runtime command and environment ART's Unsloth service uses for ``config``'s model
    (art/unsloth/service.py: ``_runtime_engine_args`` and ``_runtime_server_args`` are copied
    here in three lines, the rest is ART's own), with the trainer's engine arguments."""
    import art
    from art.dev.get_model_config import get_model_config
    from art.vllm_runtime import VllmRuntimeLaunchConfig, _vllm_runtime_subprocess_env, build_vllm_runtime_server_cmd

    from hpc.job.vllm_runtime import art_runtime_env
    from trainer.serving import fast_start
    from trainer.training.backend import gpu_placement
    from trainer.training.config import vllm_engine_args

    os.environ.update(art_runtime_env(os.environ))  # as trainer.train's configure_environment does
    if config.vllm_fast_start:
        fast_start.set_in(os.environ)
    engine_args = cast("art.dev.EngineArgs", vllm_engine_args(config, gpu_mode))
    internal = art.dev.InternalModelConfig(init_args=art.dev.InitArgs(max_seq_length=config.max_seq_length),
                                           engine_args=art.dev.EngineArgs(**engine_args),
                                           **gpu_placement(gpu_mode, {}))  # the card's GPUs 0 and 1
    engine = dict(get_model_config(config.base_model, str(output_dir), internal)["engine_args"])
    engine.setdefault("generation_config", "vllm")
    engine.update(enable_lora=True, max_loras=engine.get("max_loras", 2))
    for key in ("model", "served_model_name"):
        engine.pop(key, None)
    launch = VllmRuntimeLaunchConfig(
        base_model=config.base_model, port=port, host="127.0.0.1", cuda_visible_devices=gpu,
        lora_path=str(lora_path) if lora_path else None, served_model_name=served_name(config),
        engine_args=engine,
        server_args={"return_tokens_as_token_ids": True, "enable_auto_tool_choice": True, "tool_call_parser": "hermes"})
    command = build_vllm_runtime_server_cmd(launch)
    return command, {**_vllm_runtime_subprocess_env(command), "CUDA_VISIBLE_DEVICES": gpu}


def start_vllm(command: list[str], env: dict[str, str], spec: ServerSpec, log: Path,
               timeout: float = VLLM_START_TIMEOUT) -> VllmOutcome:
    """Start it (the package's vLLM server, with ART's runtime command), wait until it serves or
    exits, then stop it: how it ended. One that neither serves nor exits in time fails the proof."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    began = time.monotonic()
    server = VLLMServer(spec, log, env=env, ready_timeout=timeout, argv=command)
    try:
        server.start()
        started = True
    except ServerExited:
        started = False
    except ServerError as error:
        raise ProofFailed(str(error)) from None
    finally:
        server.stop(grace=60)
    text = log.read_text(errors="replace")
    memory = vllm_memory(text)
    why = "" if started else (memory.refused or memory.not_free or last_lines(text, 4))
    return VllmOutcome(started, time.monotonic() - began, memory, log, why)


def check_free(gpu: str, most_gib: float = 2.0) -> None:
    """The GPU holds next to nothing before a card's vLLM starts: an earlier process's memory would
    make vLLM refuse for a reason that is not the plan's."""
    used = MemorySampler().sample().get(gpu, 0) / 1024
    if used > most_gib:
        raise ProofFailed(f"GPU {gpu} holds {used:.1f} GiB before vLLM's start on an emulated card: not free "
                          "(a process of an earlier stage is still there)")


# -- one card: the decision against what happens --------------------------------------------------------


@dataclass(frozen=True)
class CardCheck:
    """One vLLM start on an emulated card: what the launcher expects of it, and what it did."""

    label: str
    expect_start: bool
    outcome: VllmOutcome

    @property
    def as_decided(self) -> bool:
        """Started where the launcher fits it; refused for want of KV cache where it refuses (a vLLM
        that failed for another reason says nothing about the plan)."""
        if self.expect_start:
            return self.outcome.started
        return not self.outcome.started and self.outcome.memory.refused is not None

    def line(self) -> str:
        did = "started" if self.outcome.started else f"refused ({self.outcome.why})"
        verdict = "as the launcher decided" if self.as_decided else "NOT as the launcher decided"
        return (f"{self.label}: vLLM {did} in {self.outcome.seconds:.0f} s: {verdict}; "
                f"vLLM's log: {self.outcome.memory.describe()}")


def check_card(work: Work, emulation: Emulation, model: Path, gpu: str, lora: Path | None,
               said: Callable[[str], None] = lambda line: None) -> tuple[Decision, list[CardCheck]]:
    """The launcher's decision on the emulated card and vLLM's start for each plan it implies:
    as decided when it fits; refused, then started with the launcher's first way, when refused.
    ``said`` gets the decision and each check's line as soon as it is known."""
    decision = launcher_decision(emulation.card)
    said(f"{emulation.card.cluster} ({emulation.card.gib:.0f} GiB, gpu_mode {decision.gpu_mode}): the launcher "
         f"{'fits it' if decision.fits else 'refuses it'}: {decision.line}")
    plans: list[tuple[str, list[str], bool]] = [(f"{emulation.card.cluster} as planned ({decision.gpu_mode})", [], decision.fits)]
    if not decision.fits and decision.ways:
        plans.append((f"{emulation.card.cluster} with the launcher's way ({' '.join(decision.first_way_overrides())})",
                      decision.first_way_overrides(), True))
    checks = []
    for label, overrides, expect in plans:
        outcome = start_on_card(work, emulation, decision, model, overrides, gpu, lora, label)
        checks.append(CardCheck(label, expect, outcome))
        said(f"  {checks[-1].line()}")
    return decision, checks


def start_on_card(work: Work, emulation: Emulation, decision: Decision, model: Path, overrides: list[str], gpu: str,
                  lora: Path | None, label: str) -> VllmOutcome:
    from trainer.training.config import load_config, vllm_share

    mode = next((o.split("=", 1)[1] for o in overrides if o.startswith("gpu_mode=")), decision.gpu_mode)
    plain = load_config(CONFIG, [f"base_model={model}", *overrides])
    config = load_config(CONFIG, [f"base_model={model}", *overrides,
                                  f"gpu_memory_utilization={emulation.utilization(vllm_share(plain, mode))}"])
    check_free(gpu)
    port = free_port()
    slug = re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")
    command, env = art_vllm_command(config, mode, port, work.root / "cards" / slug, gpu, lora)
    spec = ServerSpec(config.base_model, port=port, served_name=served_name(config))
    return start_vllm(command, env, spec, work.log(f"card-{slug}"))
