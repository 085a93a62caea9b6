"""The GPU proof at agent_008's real size (python -m trainer.proof runs these stages):

  model14b      make-model --size qwen2.5-14b: Qwen2.5-14B-Instruct's architecture, random weights
                (29.5 GB, written with torch on the GPU), the project's tokenizer
  agent008-14b  trainer.train --config agent_008 on it, with agent_008's own settings and the gpu_mode
                the launcher chooses for the card: register, steps in which the LoRA changes, a stop
                (SIGUSR1), a resume from the checkpoint with vLLM asked which adapters it serves, no
                step repeated; the figures the launcher plans with, measured
  cards         the launcher's decision for agent_008 on other clusters' cards, emulated on this one,
                against what ART's vLLM does there (trainer/proof/cards.py)

What differs from a real agent_008 run, each said in the stage's output:
- the model is random: it never calls a tool, every rollout ends after one turn of ``max_tokens``
  sampled tokens, and ART-E's reward would be the same for all; the rollouts are scored with the
  proof-only ``reward=proof_only_text_hash`` (trainer/agent/proof_reward.py), so the LoRA changes;
- the training rows are ``max_seq_length`` long (trainer/proof/full_length_backend.py), so the training peak
  is the one the launcher's plan must hold, not that of the random model's short rows;
- the fixture has fewer training questions than agent_008's 12 groups a step (the step has one
  group per question);
- ``--max_tokens`` and ``--fast_start``, when given, change agent_008's settings and are named.

The stage prints its predicted sampling time before it starts, each step as it ends, and at the
end: register time, seconds per step, rollouts per second, the checkpoint's size, the resume's
time, the boundary rule's predictions (hpc/job/deadline.py) against the measured step and
start-up, and GPU memory (training, vLLM, the GPU's total) against hpc.launcher.gpu_memory's
estimate for the same plan with its target (within 15%, never below). The figures are also
written to ``<work>/agent008-14b.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME
from hpc.job.gpu_modes import GpuMode
from hpc.run.checkpoints import list_checkpoints
from trainer.proof.cards import (
    CONFIG,
    Card,
    Decision,
    Emulation,
    check_card,
    peaks_env,
)
from trainer.proof.figures import (
    ServedWatch,
    check_consecutive,
    check_served,
    check_trained,
    folder_mib,
    rollouts_per_second,
    seconds_to_register,
    trained_steps,
)
from trainer.proof.full_size_plan import FULL_RUN, FullPlan, full_plan, plan_lines
from trainer.proof.gpus import gpu_total_gib, nvidia_smi
from trainer.proof.memory import LogPhase, ProcessMemory, TargetCheck, made_shape, trainer_torch_peaks, vllm_memory
from trainer.proof.processes import after_steps, last_lines, run_together, trainer_process
from trainer.proof.workspace import ProofFailed, RecordMark, Work, say

FIGURES_FILE = "agent008-14b.json"


# -- running and watching one trainer process ---------------------------------------------------------------


@dataclass
class Watched:
    """One trainer process of the stage: how it ended, its records, its GPU memory, vLLM's log."""

    code: int
    log: str
    seconds: float
    mark: RecordMark
    memory: ProcessMemory
    vllm_log: str


@dataclass
class StepPrinter:
    """An ``until`` that says each new step of the process as it ends (the stage runs for
    many minutes), then defers to ``then``."""

    run: Work
    mark: RecordMark
    then: Callable[[], bool]
    name: str = FULL_RUN
    said: int = 0
    registered: bool = False

    def __call__(self) -> bool:
        if not self.registered and "] registered: " in self.run.log(self.name).read_text(errors="replace"):
            self.registered = True
            say("  registered (Unsloth loaded, vLLM serving)")
        for record in self.mark.steps()[self.said:]:
            say(f"  step {record['step']} done: {record['seconds']:.0f} s, of it {record['rollout_seconds']:.0f} s "
                f"of rollouts ({record['trajectories']} rollouts), reward spread {record.get('reward_spread')}")
            self.said += 1
        return self.then()


def run_watched(run: Work, plan: FullPlan, name: str, until: Callable[[RecordMark], Callable[[], bool]],
                env: dict[str, str]) -> Watched:
    """trainer.train --config agent_008 with the plan's overrides, its memory sampled, until ``until``."""
    mark = RecordMark.take(run.run)
    printer = StepPrinter(run, mark, until(mark), name=name)
    process = trainer_process(run, name, plan.overrides(), printer, config=CONFIG, **env)
    with ProcessMemory(gpu=plan.gpu, phase=LogPhase(run.log(name))) as memory:
        code, log, seconds = run_together([process], plan.timeout)[0]
    vllm_log = run.model_dir / "logs" / "vllm-runtime.log"
    text = vllm_log.read_text(errors="replace") if vllm_log.is_file() else ""
    run.log(f"{name}-vllm").write_text(text)  # the resumed job's vLLM writes over ART's log
    return Watched(code, log, seconds, mark, memory, text)


# -- the stage ---------------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What the stage measured, for the docs (written to <work>/agent008-14b.json)."""

    card: str
    gpu: str
    gpu_mode: str
    register_seconds: float | None = None
    startup_seconds: float | None = None  # backend constructed to registered (startups.jsonl)
    step_seconds: list[float] = field(default_factory=list)
    rollout_seconds: list[float] = field(default_factory=list)
    rollouts_per_second: float | None = None
    checkpoint_mib: float | None = None
    resume_register_seconds: float | None = None
    resume_startup_seconds: float | None = None
    served_on_resume: list[str] = field(default_factory=list)
    predicted_step_seconds: float | None = None
    predicted_startup_seconds: float | None = None
    memory_gib: dict[str, float | None] = field(default_factory=dict)
    bundle: dict[str, Any] = field(default_factory=dict)  # a segment's bundle: MiB, parts, seconds to write or unpack
    targets: list[str] = field(default_factory=list)
    deviations: list[str] = field(default_factory=list)


def stage_agent008_14b(work: Work, args: argparse.Namespace) -> list[str]:
    """trainer.train --config agent_008 on the made 14B: train, stop, resume, with its figures."""
    plan = full_plan(work, args)
    return run_full_size(work, plan, gpu_name(plan.gpu))


def run_full_size(work: Work, plan: FullPlan, card_name: str) -> list[str]:
    """The stage's body, for any plan (the CPU tests give it a backend double)."""
    from trainer.agent.scenarios import load_scenarios

    config = plan.config()
    scenarios = len(load_scenarios(work.data, "train", limit=config.training_dataset_size,
                                   max_messages=config.max_messages, shuffle=False))
    for line in plan_lines(plan, scenarios, card_name):
        say(f"  {line}")
    if not plan.decision.fits:
        raise ProofFailed(f"the launcher refuses agent_008 on this card, so the stage does not run it: {plan.decision.line}")
    run = work.for_run(FULL_RUN, devices=plan.gpu)
    env = plan.emulation.env(work.root / "torch-peaks") if plan.emulation else peaks_env(work.root / "torch-peaks")
    figures = Figures(plan.emulation.card.cluster if plan.emulation else "this card", card_name, plan.decision.gpu_mode,
                      deviations=plan.what_differs())
    if plan.from_bundle is None:
        run.claim()
        first = run_watched(run, plan, FULL_RUN, lambda mark: after_steps(run, plan.steps), env)
        say_and_keep(work, figures, trained_lines(run, plan, first, figures) + memory_lines(work, plan, first, figures))
        check_card_held(plan, first.memory)
    else:
        say_and_keep(work, figures, arrived_lines(run, plan, figures))
    if plan.bundle_to is not None:
        say_and_keep(work, figures, bundled_lines(run, plan, figures))
        return [f"figures in {work.root / FIGURES_FILE}", *figures.targets]
    say_and_keep(work, figures, resumed_lines(run, plan, env, figures, config))
    return [f"figures in {work.root / FIGURES_FILE}", *figures.targets]


def bundled_lines(run: Work, plan: FullPlan, figures: Figures) -> list[str]:
    """Segment 1's end: the stopped run bundled (python -m hpc.run bundle) into parts that leave the machine."""
    from hpc.run.bundle import bundle

    assert plan.bundle_to is not None
    began = time.monotonic()
    made = bundle(run.run, plan.bundle_to, plan.part_mib, to=f"{plan.bundle_to} (GPU proof, segment 2)")
    sizes = [part["size"] for part in made.manifest["parts"]]
    (plan.bundle_to / WEIGHTS_FILE).write_text(json.dumps(weight_hashes(plan.model), indent=2) + "\n")
    figures.bundle = {"step": made.step, "mib": round(sum(sizes) / 2**20, 1), "parts": len(sizes),
                      "seconds": round(time.monotonic() - began, 1), "optimizer_mib": optimizer_mib(run.model_dir)}
    return [f"bundled at step {made.step} into {plan.bundle_to}: {figures.bundle['mib']} MiB in {len(sizes)} part(s) "
            f"of at most {plan.part_mib} MiB, {figures.bundle['seconds']} s; optimizer state on disk: "
            f"{figures.bundle['optimizer_mib']} MiB (ART's Unsloth keeps AdamW's moments in memory)",
            f"segment 2: python -m trainer.proof --only agent008-14b --from_bundle {plan.bundle_to} (docs/training.md)"]


def arrived_lines(run: Work, plan: FullPlan, figures: Figures) -> list[str]:
    """Segment 2's start: the model checked against segment 1's, the bundle checked and unbundled into
    this proof's runs and ART folders."""
    from hpc.run.unbundle import unbundle

    folder = plan.from_bundle
    assert folder is not None
    check_same_weights(folder, plan.model)
    began = time.monotonic()
    arrived = unbundle(folder, run.runs, str(run.art))
    if arrived.place.model_dir != run.model_dir:
        raise ProofFailed(f"the bundle's model folder went to {arrived.place.model_dir}, not {run.model_dir}")
    figures.bundle = {"step": arrived.bundle.step, "unbundle_seconds": round(time.monotonic() - began, 1)}
    return [f"unbundled {folder} at step {arrived.bundle.step} in {figures.bundle['unbundle_seconds']} s: "
            f"the resume continues at step {arrived.bundle.step + 1}"]


WEIGHTS_FILE = "weights.sha256.json"  # beside a segment's bundle: the made model's shards and their sha256


def weight_hashes(model: Path) -> dict[str, str]:
    """sha256 of each safetensors shard of the made model (29.5 GB at 14B: a minute or two)."""
    import hashlib

    found = {}
    for shard in sorted(model.glob("*.safetensors")):
        digest = hashlib.sha256()
        with open(shard, "rb") as handle:
            while chunk := handle.read(64 * 2**20):
                digest.update(chunk)
        found[shard.name] = digest.hexdigest()
    return found


def check_same_weights(folder: Path, model: Path) -> None:
    """Segment 2 trains the LoRA segment 1 trained: only on the same base weights (make-model is seeded)."""
    if not (folder / WEIGHTS_FILE).exists():
        raise ProofFailed(f"{folder} has no {WEIGHTS_FILE}: segment 1's model cannot be compared with this one")
    if json.loads((folder / WEIGHTS_FILE).read_text()) != weight_hashes(model):
        raise ProofFailed(f"the model made here ({model}) is not the one segment 1 trained on ({WEIGHTS_FILE} differs)")


def optimizer_mib(model_dir: Path) -> float:
    """What the model folder holds of optimizer state (files or folders named optimizer*), in MiB."""
    found = [path for path in model_dir.rglob("optimizer*")]
    return round(sum(folder_mib(p) if p.is_dir() else p.stat().st_size / 2**20 for p in found), 1)


def say_and_keep(work: Work, figures: Figures, lines: list[str]) -> None:
    """Say ``lines`` now and write the figures so far: a later part that fails loses neither."""
    for line in lines:
        say(f"  {line}")
    (work.root / FIGURES_FILE).write_text(json.dumps(asdict(figures), indent=2) + "\n")


def trained_lines(run: Work, plan: FullPlan, first: Watched, figures: Figures) -> list[str]:
    records = check_trained(run, first.mark, first.code, first.log, plan.steps)
    stop = first.mark.stops()
    if not stop or stop[-1]["reason"] != "signal" or stop[-1]["step"] != records[-1]["step"]:
        raise ProofFailed(f"{run.run_name}: the stop record is {stop[-1] if stop else None}, not a signal at step "
                          f"{records[-1]['step']}")
    checkpoints = list_checkpoints(run.model_dir)
    startups = first.mark.startups()
    figures.register_seconds = seconds_to_register(first.log)
    figures.startup_seconds = startups[0]["seconds"] if startups else None
    figures.step_seconds = [r["seconds"] for r in records]
    figures.rollout_seconds = [r["rollout_seconds"] for r in records]
    figures.rollouts_per_second = round(rollouts_per_second(records), 3)
    figures.checkpoint_mib = round(folder_mib(checkpoints[-1].path), 1)
    return [f"register (Unsloth loads the 4-bit model, vLLM starts): {figures.register_seconds} s "
            f"(backend start-up {figures.startup_seconds} s); whole process {first.seconds:.0f} s",
            f"steps {[r['step'] for r in records]}: {figures.step_seconds} s, of them {figures.rollout_seconds} s of "
            f"rollouts; {figures.rollouts_per_second} rollouts/s; reward spread {[r['reward_spread'] for r in records]}",
            f"LoRA changed at steps {trained_steps(run, records)}; checkpoints {[c.step for c in checkpoints]}, "
            f"{figures.checkpoint_mib} MiB each",
            f"stop: {stop[-1]}"]


def resumed_lines(run: Work, plan: FullPlan, env: dict[str, str], figures: Figures, config: Any) -> list[str]:
    """A second process resumes from the latest checkpoint; its vLLM is asked what it serves; it is
    stopped once its next step has started (or after --resume_steps steps)."""
    from hpc.job.deadline import BoundarySettings, predict

    last = check_consecutive(run)[-1]
    before_steps = [r["seconds"] for r in run.run.read_steps()]
    before_startups = [r["seconds"] for r in run.run.read_startups()]
    name = f"{FULL_RUN}-resume"
    log = run.log(name)
    watches: list[ServedWatch] = []

    def until(mark: RecordMark) -> Callable[[], bool]:
        started_next = lambda: f"] step {last + 1}/" in log.read_text(errors="replace")  # noqa: E731
        then = after_steps(run, plan.resume_steps) if plan.resume_steps else started_next
        watches.append(ServedWatch(run, name, then))
        return watches[-1]

    resumed = run_watched(run, plan, name, until, env)
    watch = watches[0]
    if resumed.code != EXIT_STOPPED_FOR_TIME:
        raise ProofFailed(f"the resumed job exited {resumed.code}, not 75 after SIGUSR1: {last_lines(resumed.log)}")
    check_served(watch, config.model_name, last)
    steps = [r["step"] for r in resumed.mark.steps()]
    if steps != list(range(last + 1, last + 1 + plan.resume_steps)):
        raise ProofFailed(f"the resumed job trained steps {steps}, not {list(range(last + 1, last + 1 + plan.resume_steps))}")
    numbers = check_consecutive(run)
    settings = BoundarySettings(config.boundary_recent_steps, config.boundary_safety_factor, config.boundary_margin_seconds)
    startups = resumed.mark.startups()
    figures.resume_register_seconds = seconds_to_register(resumed.log)
    figures.resume_startup_seconds = startups[0]["seconds"] if startups else None
    figures.served_on_resume = list(watch.served or [])
    figures.predicted_startup_seconds = predict(before_startups, settings)
    figures.predicted_step_seconds = predict(before_steps[:-1], settings)
    return [f"resumed from checkpoint {last}: register {figures.resume_register_seconds} s (start-up "
            f"{figures.resume_startup_seconds} s); its vLLM (/v1/models) serves {watch.served}",
            f"the resumed job's steps: {steps or 'none (stopped once step ' + str(last + 1) + ' had started)'}; the run's "
            f"steps {numbers}: none lost, none repeated; stop: {resumed.mark.stops()[-1] if resumed.mark.stops() else None}",
            f"boundary rule (hpc/job/deadline.py, x{settings.safety_factor} the longest of the last "
            f"{settings.recent_steps}): step {last} predicted from the steps before it "
            f"{_s(figures.predicted_step_seconds)}, measured {before_steps[-1]:.0f} s; the resumed job's start-up "
            f"predicted {_s(figures.predicted_startup_seconds)}, measured {_s(figures.resume_startup_seconds)}"]


def _s(seconds: float | None) -> str:
    return "none (no history)" if seconds is None else f"{seconds:.0f} s"


def memory_lines(work: Work, plan: FullPlan, first: Watched, figures: Figures) -> list[str]:
    """GPU memory of the first process against hpc.launcher.gpu_memory's estimate for the same plan."""
    from hpc.launcher.gpu_memory import Plan, estimate

    config = plan.config()
    found = estimate(made_shape(plan.model), Plan(plan.card_gib, plan.decision.gpu_mode, plan.share, config.max_seq_length))
    vllm = vllm_memory(first.vllm_log)
    requested = (plan.emulation.utilization(plan.share) if plan.emulation else plan.share) * plan.physical_gib
    memory = first.memory
    torch_peak = max(trainer_torch_peaks(work.root / "torch-peaks").values(), default=None)
    training = memory.kind_peak_gib("training", "training")
    measured = {"vllm_need": vllm.need_gib(requested), "vllm_process": memory.kind_peak_gib("vllm", "rollouts", "idle"),
                "vllm_asleep": memory.beside_training_peak_gib("vllm"), "training_peak": training,
                "training_torch_peak": torch_peak,
                "training_beside_vllm": memory.kind_peak_gib("training", "rollouts"), "gpu_total": memory.total_gib()}
    figures.memory_gib = {key: None if value is None else round(value, 2) for key, value in measured.items()}
    checks = [TargetCheck("vLLM, one max_seq_length sequence (weights, KV cache, overhead)", found.vllm_need,
                          measured["vllm_need"]),
              TargetCheck("training peak" + ("" if training is not None else " (torch's own peak, without the CUDA "
                                                                               "context: nvidia-smi listed no process)"),
                          found.train_peak, training if training is not None else torch_peak)]
    figures.targets = [check.line() for check in checks]
    lines = [f"vLLM's log: {vllm.describe()}; its share {requested:.1f} GiB, its process at most "
             f"{_g(measured['vllm_process'])} (it takes its share whole), {_g(measured['vllm_asleep'])} asleep while "
             "training peaked",
             f"training: its processes at most {_g(training)} while training, {_g(measured['training_beside_vllm'])} while "
             f"vLLM serves (estimated resident {found.train_resident:.1f} GiB); torch's own peak {_g(torch_peak)}",
             *figures.targets,
             f"the GPU at most {measured['gpu_total']:.1f} GiB of the card's {plan.card_gib:.1f} GiB"]
    if memory.processes_seen == 0:
        lines.append("nvidia-smi listed no compute process here (a container): per-process figures are missing")
    return lines


def check_card_held(plan: FullPlan, memory: ProcessMemory) -> None:
    """On an emulated card, the GPU's total never passed the card's size (each process was capped,
    but together they could have)."""
    if plan.emulation is not None and memory.total_gib() > plan.card_gib:
        raise ProofFailed(f"the GPU held {memory.total_gib():.1f} GiB at its peak, more than the emulated "
                          f"{plan.card_gib:.0f} GiB card: agent_008 does not fit {plan.emulation.card.cluster}'s card "
                          f"as the launcher planned it")


def _g(gib: float | None) -> str:
    return "not measured" if gib is None else f"{gib:.1f} GiB"


def gpu_name(index: str) -> str:
    return nvidia_smi("--query-gpu=name", "--format=csv,noheader", "-i", index).strip() or "unknown GPU"


# -- the cards -----------------------------------------------------------------------------------------------


def stage_cards(work: Work, args: argparse.Namespace) -> list[str]:
    """Each --emulate cluster's card: the launcher's decision for agent_008, against ART's vLLM there."""
    physical = gpu_total_gib(args.gpus[0])
    full = work.for_run(FULL_RUN)
    zero = [c.path for c in list_checkpoints(full.model_dir) if c.step == 0]
    measured = json.loads((work.root / FIGURES_FILE).read_text()) if (work.root / FIGURES_FILE).is_file() else {}
    summary, wrong = [], []
    for cluster in args.emulate:
        emulation = Emulation(Card.of(cluster), physical)
        if emulation.problem():
            summary.append(f"{cluster}: {emulation.problem()}: not checked")
            say(f"  {summary[-1]}")
            continue
        decision, checks = check_card(work, emulation, args.model14b, args.gpus[0], zero[0] if zero else None,
                                      said=lambda line: say(f"  {line}"))
        say(f"    {training_half(decision, emulation, measured)}")
        wrong += [check.label for check in checks if not check.as_decided]
        summary.append(f"{cluster}: vLLM did {'not ' if any(not c.as_decided for c in checks) else ''}do what the "
                       f"launcher decided ({'fits' if decision.fits else 'refused'})")
    if wrong:
        raise ProofFailed("vLLM did not do what the launcher decided: " + "; ".join(wrong))
    return summary


def training_half(decision: Decision, emulation: Emulation, measured: dict[str, Any]) -> str:
    """The training side on this card: the main run's measured training peak against what the card
    leaves it (all of it in dedicated mode; beside vLLM asleep in shared mode): one GPU here runs
    one side at a time."""
    memory = measured.get("memory_gib") or {}
    peak = memory.get("training_peak") or memory.get("training_torch_peak")
    if peak is None:
        return "training half: not measured (run agent008-14b in the same proof first)"
    asleep = memory.get("vllm_asleep") or 0.0
    room = emulation.card.gib - (0.0 if decision.gpu_mode == GpuMode.DEDICATED else asleep)
    where = "a card of its own" if decision.gpu_mode == GpuMode.DEDICATED else f"the card beside vLLM asleep ({asleep:.1f} GiB)"
    return (f"training half: the agent008-14b stage's measured training peak {peak:.1f} GiB on {where}: "
            f"{room:.1f} GiB left, {'fits' if peak <= room else 'does NOT fit'}")
