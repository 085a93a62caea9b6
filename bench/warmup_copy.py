"""Can a made model learn to copy the question's entity into its search? A proxy of the warm-up.

    .venv-backend/bin/python -m bench.warmup_copy MODEL --data_dir D [--learning_rate 5e-4] [--steps 400]
        [--context none|system|tools] [--device cpu|cuda] [--save DIR]

The learning-curve bench's warm-ups never copied the entity on the GPU (docs/training.md): their
first searches named entities they had seen, never the question's. This proxy trains the first
turn alone, the question then the good search's call (trainer/staging/first_calls.py), with
``--context`` before the question: nothing (default), the rollout's system prompt, or that and
the tools' schemas in the template (the warm-up's first turn). Every ``--every`` steps it prints,
on the first ``--questions`` held-out questions, the share whose call is predicted right,
teacher-forced, up to the entity's end. Measured with it (the learning-curve bench's `inbox` model on
its data with quoted questions, seed 0, 16 a step):
- context none, one CPU core: learning rate 2e-3 0.00, 0.00,
  0.00, 0.01, 0.00, 0.00, 0.00, 0.00 at steps 100 to 800; 5e-4: 0.00, 0.00, 1.00, 1.00 at 100-400;
- on an H200 at 5e-4: context none 0.01, 0.00, 0.77, 1.00, 1.00, 1.00 at 100-600; system 0.00 at
  250-1500, then 0.01-0.03 at 1750-3000; tools 0.00 at 100-700;
- context tools from the model that learned it with none (400 steps, CPU): 0.00 before a step,
  1.00 after 50. Hence ``trainer.warmup --copy_steps``.

MODEL is a made model (``python -m trainer.data make-model``); D the staged synthetic inboxes.
Needs torch and transformers (the backend's environment).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from trainer.agent.scenarios import load_scenarios
from trainer.staging.first_calls import CONTEXTS, FirstCall, first_calls
from trainer.staging.optimizer_step import PRECISIONS
from trainer.staging.warmup_steps import train as warmup_train


def calls(tokenizer: Any, data_dir: Path, split: str, limit: int | None, context: str = "none") -> list[FirstCall]:
    return first_calls(tokenizer, load_scenarios(data_dir, split, limit=None, shuffle=False), context, limit)


def copied_share(model: Any, held_out: list[FirstCall]) -> float:
    """The share of questions whose call is predicted right, teacher-forced, up to the entity's end."""
    import torch

    model.eval()
    right = 0
    with torch.no_grad():
        for row in held_out:
            predicted = model(input_ids=torch.tensor([row.input_ids], device=model.device)).logits[0].argmax(-1)
            span = range(row.prompt, row.prompt + row.copied)
            right += all(int(predicted[i - 1]) == row.input_ids[i] for i in span)
    model.train()
    return right / max(1, len(held_out))


def run(args: argparse.Namespace, say=print) -> list[float]:
    """The warm-up's own loop (trainer/staging/warmup_steps.py's ``train``) on the first calls, measured every ``--every`` steps."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(str(args.model))
    model = AutoModelForCausalLM.from_pretrained(str(args.model), dtype=torch.float32).to(args.device)
    train = calls(tokenizer, args.data_dir, "train", None, args.context)
    held_out = calls(tokenizer, args.data_dir, "test", args.questions, args.context)
    began, shares = time.monotonic(), []

    def measure(step: int, loss: float) -> None:
        if step % args.every == 0:
            shares.append(copied_share(model, held_out))
            say(f"step {step}: loss {loss:.3f}, held-out entity copied {shares[-1]:.2f} "
                f"({len(held_out)} questions, learning rate {args.learning_rate:g}, {time.monotonic() - began:.0f} s)")

    warmup_train(model, train, tokenizer.pad_token_id, steps=args.steps, batch_size=args.batch_size,
                 learning_rate=args.learning_rate, seed=args.seed, device=args.device, say=lambda _: None, after_step=measure,
                 precision=args.precision)
    if args.save is not None:
        model.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
    return shares


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a made model (python -m trainer.data make-model)")
    parser.add_argument("--data_dir", type=Path, required=True, help="the staged synthetic inboxes")
    parser.add_argument("--learning_rate", type=float, default=5e-4)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--every", type=int, default=100, help="measure every N steps (default 100)")
    parser.add_argument("--questions", type=int, default=200, help="held-out questions measured (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--context", choices=CONTEXTS, default="none",
                        help="what comes before the question: nothing (default), the rollout's system prompt, or "
                             "that and the tools' schemas (the warm-up's first turn)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu)")
    parser.add_argument("--precision", choices=PRECISIONS, default="float32",
                        help="the passes' precision, as trainer.warmup's --precision (default float32)")
    parser.add_argument("--save", type=Path, default=None, help="also write the trained model here")
    args = parser.parse_args(argv)
    if min(args.steps, args.batch_size, args.every, args.questions) < 1 or args.learning_rate < 0:
        parser.error(f"invalid --steps {args.steps} / --batch_size {args.batch_size} / --every {args.every} / "
                     f"--questions {args.questions} / --learning_rate {args.learning_rate:g}: accepted integers >= 1 "
                     "and a learning rate >= 0")
    if not (args.model / "config.json").is_file():
        parser.error(f"invalid model {str(args.model)!r}: accepted a model folder with config.json")
    return args


def main(argv: list[str] | None = None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
