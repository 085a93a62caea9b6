"""The baseline of the GPU proof's baseline stage (trainer/proof/two_gpus.py): a minimal RL loop that calls ART directly.

    .venv/bin/python -m trainer.proof.baseline_loop --model DIR --data_dir D --steps 3 --art_path P [key=value ...]

The same model, agent (trainer.agent.rollout), scenarios and batches (the smoke config's
order and filter, ART's iterate_dataset), group size, rollouts in flight, judge (the same
``Judge`` with its verdict cache, in ``<art_path>/judge_cache``) and judge concurrency, and the
same objective (the config's loss function, reward scaling and importance sampling, passed to
``backend.train`` as trainer.train passes them: ART's own default loss is cispo, the config's
ppo) as the proof's trainer.train run: the smoke config with trainer/proof/workspace.py's
TRAIN_ARGS (3 groups of 4 a step, 4 epochs) and then the ``key=value`` overrides, which
trainer.train would take alike. It prints the objective it trains with (``baseline objective``). What the trainer adds around them is left out: no run
directory, preflight, boundary checks, progress or step records, no stop handling. It prints
``baseline rollouts/s X``: rollouts gathered per second of gathering over steps 2 to --steps
(the first pays for compiling the LoRA kernels), the figure the proof compares trainer.train's with.

The backend is the config's (key ``backend``): ``local`` is ART's LocalBackend on the GPU with
the proof's memory settings; an import path ``package.module:ClassName`` plugs in another class,
with --model only a name (bench/trainer_cost.py: tests.doubles.art_backend:FakeBackend on CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hpc.job.gpu_modes import GpuMode
from trainer.proof.workspace import TRAIN_ARGS
from trainer.training.config import TrainerConfig, load_config

if TYPE_CHECKING:
    import art


@dataclass(frozen=True)
class Gathered:
    """One step's gathering: rollouts gathered and the seconds it took."""

    rollouts: int
    seconds: float


def proof_config(model: str, overrides: list[str]) -> TrainerConfig:
    """The proof's trainer.train config (smoke with TRAIN_ARGS for ``model``), then ``overrides``."""
    return load_config("smoke", [arg.format(model=model) for arg in TRAIN_ARGS] + overrides)


def start(config: TrainerConfig, art_path: Path) -> tuple[Any, "art.TrainableModel"]:
    """The backend the config names and the model to register with it: LocalBackend with the
    proof's GPU memory settings, or a plugged-in class taking ``path=`` with a plain model."""
    import art

    if config.backend != "local":
        module, _, name = config.backend.partition(":")
        backend = getattr(importlib.import_module(module), name)(path=str(art_path))
        return backend, art.TrainableModel(name="baseline", project="baseline", run_name="baseline",
                                           base_model=config.base_model)
    from art.local import LocalBackend

    from trainer.serving import fast_start
    from trainer.training.config import VLLM_SHARE

    engine_args = cast("art.dev.EngineArgs", fast_start.ENGINE_ARGS)
    fast_start.set_in(os.environ)  # the other half of a fast start: ART's runtime inherits this environment
    model: art.TrainableModel = art.TrainableModel(
        name="baseline", project="baseline", run_name="baseline", base_model=config.base_model,
        _internal_config=art.dev.InternalModelConfig(
            init_args=art.dev.InitArgs(max_seq_length=config.max_seq_length),
            engine_args=art.dev.EngineArgs(gpu_memory_utilization=VLLM_SHARE[GpuMode.SHARED], **engine_args)))
    return LocalBackend(path=str(art_path)), model


async def loop(backend: Any, model: "art.TrainableModel", config: TrainerConfig, data_dir: Path,
               steps: int, judge_cache: Path | None = None) -> list[Gathered]:
    """``steps`` steps of gathering with ``art.gather_trajectory_groups`` and ``backend.train``,
    trainer.train's batches of the config's scenarios; the backend is closed at the end."""
    import art
    from art.utils import iterate_dataset

    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.rollout import AgentConfig, rollout
    from trainer.agent.scenarios import load_scenarios
    from trainer.training.config import shuffle_seed
    from trainer.training.training_step import Objective

    seed = shuffle_seed(config)
    scenarios = load_scenarios(data_dir, "train", limit=config.training_dataset_size, max_messages=config.max_messages,
                               shuffle=seed is not None, seed=seed or 0)
    judge = Judge.from_env(judge_cache, config.judge_concurrency, config.judge_retries)
    objective = Objective.from_config(config)
    print(f"baseline objective: {json.dumps(objective.train_kwargs(), sort_keys=True)}", flush=True)
    agent = AgentConfig(max_turns=config.max_turns, max_tokens=config.max_tokens, tool_calling=config.tool_calling,
                        temperature=config.temperature)
    # trainer.train's batches: groups_per_step scenarios a step, a short last batch each epoch
    batches = iterate_dataset(scenarios, config.groups_per_step, config.num_epochs, initial_step=0, use_tqdm=False)
    gathered: list[Gathered] = []
    try:
        await model.register(backend)
        with EmailDB(data_dir / "enron_emails.db") as db:
            for step, batch in zip(range(steps), batches):
                began = time.monotonic()
                groups = await art.gather_trajectory_groups(
                    art.TrajectoryGroup([rollout(model, s, db=db, judge=judge, config=agent)  # type: ignore[misc]
                                         for _ in range(config.trajectories_per_group)])  # (awaitables: awaited)
                    for s in batch.items)
                gathered.append(Gathered(sum(len(group.trajectories) for group in groups), time.monotonic() - began))
                await backend.train(model, groups, **objective.train_kwargs())
                print(f"baseline step {step + 1}: {gathered[-1].rollouts} rollouts in {gathered[-1].seconds:.3f} s",
                      flush=True)
    finally:
        await backend.close()
    return gathered


def rollouts_per_second(gathered: list[Gathered]) -> float:
    """From the second step on: the first pays for compiling the LoRA kernels."""
    later = gathered[1:]
    return sum(step.rollouts for step in later) / sum(step.seconds for step in later)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the model folder (LocalBackend), or any name a plugged-in "
                                                        "backend takes")
    parser.add_argument("--data_dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--art_path", type=Path, required=True)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config keys over the proof's TRAIN_ARGS")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from hpc.job.vllm_runtime import art_runtime_env

    os.environ.update(art_runtime_env(os.environ))  # the vLLM runtime and runner the trainer gives ART
    config = proof_config(args.model, args.overrides)
    gathered = asyncio.run(loop(*start(config, args.art_path), config, args.data_dir, args.steps,
                                args.art_path / "judge_cache"))
    print(f"baseline rollouts/s {rollouts_per_second(gathered):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
