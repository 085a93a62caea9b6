"""The baseline of bench/gpu_proof.py's last stage: a minimal RL loop that calls ART directly.

    .venv/bin/python bench/gpu_baseline_loop.py --model DIR --data_dir D --steps 3 --art_path P

The same model, agent (trainer.agent.rollout), scenarios and batches (the smoke config's
order and filter, ART's iterate_dataset: 3 groups a step, 4 epochs), group size (4),
rollouts in flight and judge concurrency as the proof's trainer.train run, without what the trainer adds around
them: no run directory, preflight, boundary checks, progress or step records, no stop
handling. It prints ``baseline rollouts/s X``: rollouts gathered per second of gathering over
steps 2 to --steps (the first pays for compiling the LoRA kernels), the figure the proof
compares trainer.train's with.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GROUP_SIZE, GROUPS_PER_STEP, EPOCHS, MAX_SEQ_LENGTH = 4, 3, 4, 4096  # bench/gpu_proof_kit.py's TRAIN_ARGS


async def loop(model_path: Path, data_dir: Path, steps: int, art_path: Path) -> float:
    import art
    from art.local import LocalBackend
    from art.utils import iterate_dataset

    from trainer.agent.email_db import EmailDB
    from trainer.agent.judge import Judge
    from trainer.agent.rollout import AgentConfig, rollout
    from trainer.agent.scenarios import load_scenarios
    from trainer.training.config import FAST_START_ENGINE_ARGS, VLLM_SHARE, load_config, shuffle_seed

    backend = LocalBackend(path=str(art_path))
    model = art.TrainableModel(
        name="baseline", project="baseline", run_name="baseline", base_model=str(model_path),
        _internal_config=art.dev.InternalModelConfig(
            init_args=art.dev.InitArgs(max_seq_length=MAX_SEQ_LENGTH),
            engine_args=art.dev.EngineArgs(gpu_memory_utilization=VLLM_SHARE["shared"], **FAST_START_ENGINE_ARGS)))
    await model.register(backend)
    config = load_config("smoke")  # its scenarios' order and filter, judge concurrency and retries
    seed = shuffle_seed(config)
    scenarios = load_scenarios(data_dir, "train", limit=None, max_messages=config.max_messages,
                               shuffle=seed is not None, seed=seed or 0)
    judge = Judge.from_env(None, config.judge_concurrency, config.judge_retries)
    agent = AgentConfig(max_turns=4, max_tokens=256)
    gathered, seconds = 0, 0.0  # from the second step on: the first pays for compiling the LoRA kernels
    # trainer.train's batches: GROUPS_PER_STEP scenarios a step, a short last batch each epoch
    batches = iterate_dataset(scenarios, GROUPS_PER_STEP, EPOCHS, initial_step=0, use_tqdm=False)
    try:
        with EmailDB(data_dir / "enron_emails.db") as db:
            for step, batch in zip(range(steps), batches):
                began = time.monotonic()
                groups = await art.gather_trajectory_groups(
                    art.TrajectoryGroup([rollout(model, s, db=db, judge=judge, config=agent) for _ in range(GROUP_SIZE)])
                    for s in batch.items)
                took, count = time.monotonic() - began, sum(len(group.trajectories) for group in groups)
                if step:
                    gathered, seconds = gathered + count, seconds + took
                await backend.train(model, groups, learning_rate=5e-5)
                print(f"baseline step {step + 1}: {count} rollouts in {took:.1f} s", flush=True)
    finally:
        await backend.close()
    return gathered / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data_dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--art_path", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from hpc.job.vllm_runtime import job_runtime_env, with_runner_defaults

    os.environ.update(job_runtime_env(os.environ))  # the vLLM runtime the trainer uses, found the same way
    os.environ.update(with_runner_defaults(os.environ))  # vLLM's runner as the trainer gives ART's runtime
    rate = asyncio.run(loop(args.model, args.data_dir, args.steps, args.art_path))
    print(f"baseline rollouts/s {rate:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
