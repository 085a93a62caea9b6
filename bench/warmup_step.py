"""A warm-up step's milliseconds: the per-step host batches, the device table, and the step as one
CUDA graph, in one run.

    .venv-backend/bin/python -m bench.warmup_step [MODEL --data_dir D] [--device cpu|cuda] [--steps N]
        [--batch_size 16] [--precision bf16] [--rounds 2]

``old``: each step draws Examples in Python, collates them on the CPU into new tensors and copies
them to the device (pinned on a GPU), AdamW unfused: the warm-up's loop before its batches were
gathered on the device. ``new``: the eager loop of trainer/staging/warmup_steps.py (DeviceBatches:
the examples one padded table on the device, each batch one gather there; fused AdamW on CUDA).
``graph``: the warm-up's default, the step captured once as a CUDA graph and replayed
(trainer/staging/warmup_graph.py); without CUDA it runs the eager loop, and says so. All train the
same model from the same weights on the same draws of the warm-up's conversations (``--policy
inbox-mix``, loss on the assistant turns). A step's cost is the slope: (seconds of 2N steps -
seconds of N) / N, so what a training pays once (the table, the optimizer's state, the capture) is
apart, and printed as the intercept. Each variant is measured ``--rounds`` times, alternating; the
median. First, the batches alone (no model, 5 N steps): the host work a step the device table
removes. Last, how far the graph's losses are from the eager loop's over the first N steps of the
first round (the same draws: equal up to float order, the graph's batches padded to full width).

Without MODEL it makes its own: synthetic inboxes (make-inboxes' generator, seed 3) staged in a
temporary folder and the learning-curve bench's model size (make-model --size inbox). Needs torch
and transformers (the backend's environment, or a GPU machine's Python with them: nothing here
imports datasets, litellm, art or vllm).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.staging.optimizer_step import PRECISIONS, autocast
from trainer.staging.warmup import Example, batches, collate, scripted_lessons, tokenised
from trainer.staging.warmup_steps import Training, trained

LEARNING_RATE = 5e-4  # the bench's recipes'
MAX_TURNS = 4  # the learning-curve config's


def old_train(model: Any, examples: list[Example], pad_id: int, *, steps: int, batch_size: int, seed: int,
              device: str, precision: str) -> Training:
    """The baseline: batches collated on the host each step and copied over; AdamW unfused."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    model.train()
    losses = []
    for batch in batches(examples, batch_size, steps, seed):
        with autocast(device, precision):
            loss = model(**collate(batch, pad_id, device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return Training(torch.stack(losses).float().tolist(), "eager (host batches)")


def new_train(model: Any, examples: list[Example], pad_id: int, **kwargs: Any) -> Training:
    """The eager loop on the device table."""
    return trained(model, examples, pad_id, learning_rate=LEARNING_RATE, say=lambda _: None, graph=False, **kwargs)


def graph_train(model: Any, examples: list[Example], pad_id: int, **kwargs: Any) -> Training:
    """The warm-up's default: the step as one CUDA graph where there is CUDA (a fallback says why)."""
    return trained(model, examples, pad_id, learning_rate=LEARNING_RATE, say=fallback_only, graph=True, **kwargs)


def fallback_only(line: str) -> None:
    """Of the warm-up's lines, the one that says a capture failed and why (not the steps' losses)."""
    if line.startswith("warmup: "):
        print(line)


VARIANTS: dict[str, Callable[..., Training]] = {"old": old_train, "new": new_train, "graph": graph_train}


def seconds(loop: Callable[..., Training], model: Any, steps: int, **kwargs: Any) -> tuple[float, Training]:
    """One training of ``steps`` on a copy of ``model``, to its losses read back (the device's queue
    done): its seconds and what it trained."""
    fresh = copy.deepcopy(model)
    began = time.perf_counter()
    done = loop(fresh, steps=steps, **kwargs)
    return time.perf_counter() - began, done


@dataclass(frozen=True)
class Slope:
    per_step: float  # seconds
    once: float  # seconds, the intercept
    short: Training  # the training of ``steps``


def slope(loop: Callable[..., Training], model: Any, steps: int, **kwargs: Any) -> Slope:
    """Seconds a step and seconds paid once, from trainings of ``steps`` and ``2 * steps``."""
    (short, done), (long, _) = seconds(loop, model, steps, **kwargs), seconds(loop, model, 2 * steps, **kwargs)
    per_step = (long - short) / steps
    return Slope(per_step, short - steps * per_step, done)


def batch_ms(examples: list[Example], pad_id: int, batch_size: int, steps: int, device: str) -> dict[str, float]:
    """Milliseconds a step of making the batches alone, no model: the host collate and copy against
    the device gather (its table built once, timed apart)."""
    import torch

    from trainer.staging.warmup_batches import DeviceBatches

    def timed(make: Callable[[], Any]) -> float:
        began = time.perf_counter()
        made = make()
        if device == "cuda":
            torch.cuda.synchronize()
        del made
        return time.perf_counter() - began

    old = timed(lambda: [collate(batch, pad_id, device) for batch in batches(examples, batch_size, steps, 0)])
    table: list[DeviceBatches] = []
    built = timed(lambda: table.append(DeviceBatches(examples, pad_id, device)))
    new = timed(lambda: list(table[0].batches(batch_size, steps, 0)))
    return {"old": 1000 * old / steps, "new": 1000 * new / steps, "table": built}


def made_inputs(folder: Path) -> tuple[Path, Path]:
    """Synthetic inboxes staged in ``folder`` and the bench's model size made on them."""
    from trainer.data import main as data_main
    from trainer.staging.data import prepare
    from trainer.staging.synthetic_inbox import generate, write

    emails, questions = write(generate(seed=3, train_inboxes=60, heldout_inboxes=10), folder / "source")
    prepare(folder / "data", str(emails), str(questions), show_progress=False)
    if data_main(["make-model", str(folder / "model"), "--size", "inbox", "--data_dir", str(folder / "data")]) != 0:
        raise SystemExit("warmup_step.py: make-model failed")
    return folder / "model", folder / "data"


def loaded(args: argparse.Namespace, model_dir: Path, data_dir: Path) -> tuple[Any, list[Example], int]:
    """The made model on the device, the warm-up's examples (inbox-mix, assistant turns) and the pad id."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    _, conversations = scripted_lessons(data_dir, "inbox-mix", MAX_TURNS, 0.5)
    examples = tokenised(tokenizer, conversations, "assistant")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).to(args.device)
    return model, examples, tokenizer.pad_token_id


def measure(args: argparse.Namespace, model_dir: Path, data_dir: Path, say=print) -> dict[str, float]:
    """Each variant's milliseconds a step (median of the rounds), printed with their ratios."""
    model, examples, pad_id = loaded(args, model_dir, data_dir)
    prep = batch_ms(examples, pad_id, args.batch_size, 5 * args.steps, args.device)
    say(f"batches alone ({5 * args.steps} steps, no model): old {prep['old']:.3f} ms a step, new {prep['new']:.3f} ms "
        f"a step (its table built once in {prep['table']:.1f} s): new/old {prep['new'] / prep['old']:.3f}")
    say(f"{len(examples)} conversations, batches of {args.batch_size} on {args.device} in {args.precision}; "
        f"slope of {args.steps} and {2 * args.steps} steps, {args.rounds} round(s)")
    common = dict(examples=examples, pad_id=pad_id, batch_size=args.batch_size, seed=0, device=args.device,
                  precision=args.precision)
    found: dict[str, list[Slope]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, loop in VARIANTS.items():
            found[name].append(slope(loop, model, args.steps, **common))
            say(f"  {name}: {1000 * found[name][-1].per_step:.2f} ms/step, {found[name][-1].once:.2f} s once "
                f"({found[name][-1].short.steps_by})")
    ms = {name: 1000 * statistics.median(one.per_step for one in rounds) for name, rounds in found.items()}
    say(f"warm-up step: old {ms['old']:.2f} ms, new {ms['new']:.2f} ms, graph {ms['graph']:.2f} ms (median of "
        f"{args.rounds}): new/old {ms['new'] / ms['old']:.2f}, graph/new {ms['graph'] / ms['new']:.2f}, "
        f"graph/old {ms['graph'] / ms['old']:.2f}")
    say(sameness(found["graph"][0].short, found["new"][0].short))
    return ms


def sameness(graph: Training, eager: Training) -> str:
    """How far the graph variant's losses are from the eager loop's (same weights, same draws)."""
    difference = max(abs(a - b) for a, b in zip(graph.losses, eager.losses))
    return (f"graph variant ran as: {graph.steps_by}; its losses against new's over the first {len(graph.losses)} "
            f"steps: max abs difference {difference:.2e} (new's loss {eager.losses[0]:.4f} -> {eager.losses[-1]:.4f})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, nargs="?", default=None, help="a made model (default: make one)")
    parser.add_argument("--data_dir", type=Path, default=None, help="MODEL's staged synthetic inboxes")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda where there is one")
    parser.add_argument("--steps", type=int, default=None, help="N (default 100 on cuda, 5 on cpu)")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--precision", choices=PRECISIONS, default="bf16")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if (args.model is None) != (args.data_dir is None):
        parser.error("MODEL and --data_dir come together (or neither: the bench makes both)")
    if min(1 if args.steps is None else args.steps, args.batch_size, args.rounds) < 1:
        parser.error(f"invalid --steps {args.steps} / --batch_size {args.batch_size} / --rounds {args.rounds}: "
                     "accepted integers >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.steps = args.steps or (100 if args.device == "cuda" else 5)
    if args.model is not None:
        measure(args, args.model, args.data_dir)
        return 0
    with tempfile.TemporaryDirectory(prefix="warmup-step-") as folder:
        measure(args, *made_inputs(Path(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
