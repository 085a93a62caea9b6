"""What a warmed model's first turn is on held-out synthetic-inbox questions, sampled as rollouts
sample: the good search, the weak one, another search, another call, or no tool call.

    python -m trainer.staging.first_turns MODEL --data_dir D [--split test] [--questions 200] [--temperature 1.0]
                                          [--out F.json]

RL can only reinforce a good search the model sometimes makes: a group of rollouts in which no one
searches well gets the same reward for all and teaches nothing about searching. The learning-curve
bench (bench/learning_curve.py) measures this between the warm-up and the runs and starts no run
when the good search is too rare. Measured by that bench on an H100: a model
warmed up for 2000 steps on conversations of which a quarter searched well searched well in 0 of
100 held-out first turns at temperature 1 (77% weak), and its runs stayed at 0.0% held-out
accuracy for 36 steps; 3000 steps on half good searches gave 7 of 100. On two H200s, no warm-up
of 6000 or 8000 steps searched well once in 200, on training or held-out questions. The
scripted policy's share is not the model's: copying the question's entity into the search is a
skill of its own.

The questions are the split's first ``--questions`` in file order, the same every time: the
held-out ``test`` split (what the bench's gate reads), or ``train`` (how the bench chooses between
its two warm-ups without looking at held-out questions).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.agent.rollout import AgentConfig
from trainer.agent.scenarios import load_scenarios
from trainer.agent.tools import SEARCH_EMAILS, TOOL_SCHEMAS
from trainer.staging.scripted_moves import opening
from trainer.staging.synthetic_inbox import SearchPlan, search_plan
from trainer.staging.warmup import parsed_tool_call

if TYPE_CHECKING:
    from trainer.agent.scenarios import Scenario

KINDS = ("good", "weak", "other search", "other call", "no tool call")
MAX_NEW_TOKENS = 64  # a first turn is one tool call of 20-60 tokens
BATCH = 50  # prompts generated together (left-padded)


@dataclass(frozen=True)
class FirstTurns:
    """How many first turns were of each kind, out of ``questions``, at ``temperature``."""

    model: str
    questions: int
    temperature: float
    counts: dict[str, int]
    split: str = "test"

    def share(self, kind: str) -> float:
        return self.counts.get(kind, 0) / max(1, self.questions)

    def line(self) -> str:
        shares = ", ".join(f"{kind} {self.share(kind):.1%}" for kind in KINDS if self.counts.get(kind))
        questions = "held-out" if self.split == "test" else "training"
        return (f"first turns of {self.model} on {self.questions} {questions} questions at temperature "
                f"{self.temperature:g}: {shares or 'none'}")


def kind_of(call: dict[str, Any] | None, plan: SearchPlan) -> str:
    """Which of KINDS a parsed first turn is; keywords compare without case or order."""
    if call is None:
        return "no tool call"
    arguments = call.get("arguments")
    words = arguments.get("keywords") if isinstance(arguments, dict) else None
    if call.get("name") != SEARCH_EMAILS or not isinstance(words, list):
        return "other call"
    said = sorted(str(word).lower() for word in words)
    if said == sorted(word.lower() for word in plan.good):
        return "good"
    if said == sorted(word.lower() for word in plan.weak):
        return "weak"
    return "other search"


def held_out(data_dir: Path, questions: int, split: str = "test") -> list["Scenario"]:
    """The split's first ``questions`` that are the generator's, in file order."""
    scenarios = load_scenarios(data_dir, split, limit=None, shuffle=False)
    return [s for s in scenarios if search_plan(s.question) is not None][:questions]


def generated(model_dir: Path, prompts: list[list[dict[str, Any]]], temperature: float, seed: int) -> list[str]:
    """Each prompt's first turn as text, sampled at ``temperature`` (greedy at 0)."""
    import torch  # torch only here, not at --help
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).to(device).eval()
    sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 else \
        {"do_sample": False}
    tokenizer.padding_side = "left"  # a batch's prompts end where generation starts
    texts = []
    with torch.no_grad():
        for start in range(0, len(prompts), BATCH):
            chats = [tokenizer.apply_chat_template(messages, tools=TOOL_SCHEMAS, tokenize=False,
                                                   add_generation_prompt=True) for messages in prompts[start:start + BATCH]]
            batch = tokenizer(chats, return_tensors="pt", add_special_tokens=False, padding=True).to(device)
            out = model.generate(**batch, max_new_tokens=MAX_NEW_TOKENS, pad_token_id=tokenizer.pad_token_id, **sampling)
            width = batch["input_ids"].shape[1]
            texts += [tokenizer.decode(row[width:], skip_special_tokens=False) for row in out]
    return texts


def first_turns(model_dir: Path, data_dir: Path, *, questions: int = 200, temperature: float = 1.0,
                max_turns: int = 4, seed: int = 0, split: str = "test") -> FirstTurns:
    scenarios = held_out(data_dir, questions, split)
    agent = AgentConfig(max_turns=max_turns)
    texts = generated(model_dir, [opening(s, agent) for s in scenarios], temperature, seed)
    counts: dict[str, int] = {}
    for scenario, text in zip(scenarios, texts):
        plan = search_plan(scenario.question)
        assert plan is not None  # held_out keeps the generator's questions only
        kind = kind_of(parsed_tool_call(text), plan)
        counts[kind] = counts.get(kind, 0) + 1
    return FirstTurns(model_dir.name, len(scenarios), temperature, counts, split)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainer.staging.first_turns", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="the warmed model's folder")
    parser.add_argument("--data_dir", type=Path, required=True, help="the staged synthetic inboxes")
    parser.add_argument("--split", choices=("test", "train"), default="test",
                        help="the held-out questions (default) or the training ones")
    parser.add_argument("--questions", type=int, default=200, help="the split's first N questions (default 200)")
    parser.add_argument("--temperature", type=float, default=1.0, help="as rollouts sample (default 1.0; 0: greedy)")
    parser.add_argument("--max_turns", type=int, default=4, help="as the RL run's config (the system prompt says it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="also write the counts here as JSON")
    args = parser.parse_args(argv)
    if args.questions < 1 or args.temperature < 0:
        parser.error(f"invalid --questions {args.questions} / --temperature {args.temperature:g}: accepted "
                     "--questions >= 1 and --temperature >= 0")
    if not (args.model / "config.json").is_file():
        parser.error(f"invalid model {str(args.model)!r}: accepted a model folder with config.json "
                     "(python -m trainer.warmup writes one)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    found = first_turns(args.model, args.data_dir, questions=args.questions, temperature=args.temperature,
                        max_turns=args.max_turns, seed=args.seed, split=args.split)
    print(found.line())
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(found.__dict__) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
