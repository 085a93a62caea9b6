"""A supervised warm-up that teaches a made model the agent's tool format:
``python -m trainer.warmup BASE OUT [--data_dir D] [--steps N]``.

A model with random weights (``trainer.data make-model``) never emits a tool call,
so every rollout of a group earns the same reward and GRPO has nothing to learn
from: the RL loop would run, but train nothing. A short warm-up on scripted
trajectories gives it the format and sometimes the right moves, which is what
makes rewards differ inside a group. Each trajectory is what a good agent does on
a training scenario, played through the real tools (``trainer.agent.tools``) on the real
email database: search with the question's words that the answer's email holds,
read that email, answer with the reference answer citing it. The conversation is
rendered with the model's own chat template and the real system prompt
(``trainer.agent.rollout.system_prompt``); the loss counts the assistant turns only, or with
``--targets conversation`` everything after the system prompt. With ``--copy_steps N`` the
warm-up first trains N steps on the first calls alone (the question, then its good search;
trainer/staging/first_calls.py): a small made model learns to copy the question's entity
there, and never in whole conversations.

Needs torch and transformers (the backend's environment, on a GPU node); the
scripted trajectories themselves need neither. Writes an ordinary model folder:
the warmed weights, the base model's tokenizer files, and ``made_by.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpc.job.exit_codes import EXIT_BAD_INPUT
from trainer.agent.email_db import EmailDB
from trainer.agent.reward import Rubric
from trainer.agent.rollout import AgentConfig
from trainer.agent.scenarios import PREPARE_HINT, load_scenarios
from trainer.agent.tools import READ_EMAIL, RETURN_FINAL_ANSWER, SEARCH_EMAILS, TOOL_SCHEMAS, EmailTools
from trainer.staging.data import data_paths, default_data_dir
from trainer.staging.first_calls import first_calls
from trainer.staging.inbox_policy import GOOD_SHARE, mixed
from trainer.staging.optimizer_step import PRECISIONS
from trainer.staging.scripted_moves import opening, play
from trainer.staging.warmup_steps import train, trained

if TYPE_CHECKING:
    from trainer.agent.scenarios import Scenario

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                   "generation_config.json")
KEYWORDS_PER_SEARCH = 2
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]{3,}")
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


class WarmupError(ValueError):
    """Bad input to the warm-up: one line naming the value and what is accepted."""


# -- scripted trajectories (no torch) ------------------------------------------------------------------


def keywords(question: str, email_text: str, limit: int = KEYWORDS_PER_SEARCH) -> list[str]:
    """The question's longest words that the answer's email also holds: a search that finds it."""
    text = email_text.lower()
    words = dict.fromkeys(word.lower() for word in _WORD.findall(question))
    found = sorted((word for word in words if word in text), key=len, reverse=True)
    return found[:limit]


def scripted_conversation(scenario: "Scenario", db: "EmailDB", agent: AgentConfig) -> list[dict[str, Any]] | None:
    """A good agent's conversation on ``scenario`` through the real tools, or None when the
    answer's email is missing or no word of the question finds it."""
    email = db.read(scenario.message_ids[0])
    if email is None:
        return None
    words = keywords(scenario.question, f"{email.subject}\n{email.body}")
    if not words:
        return None
    tools, messages = EmailTools(scenario, db, Rubric()), opening(scenario, agent)
    moves: list[tuple[str, dict[str, Any]]] = [
        (SEARCH_EMAILS, {"keywords": words}), (READ_EMAIL, {"message_id": email.message_id}),
        (RETURN_FINAL_ANSWER, {"answer": scenario.answer, "sources": [email.message_id]})]
    for name, arguments in moves:
        if play(messages, tools, name, arguments).format_error:
            return None
    return messages if email.message_id in messages[3]["content"] else None


def scripted_conversations(scenarios: list["Scenario"], db: "EmailDB", agent: AgentConfig) -> list[list[dict[str, Any]]]:
    conversations = [scripted_conversation(scenario, db, agent) for scenario in scenarios]
    return [conversation for conversation in conversations if conversation is not None]


def parsed_tool_call(text: str) -> dict[str, Any] | None:
    """The first ``<tool_call>`` JSON of a generated turn with a name and arguments, as vLLM's
    hermes parser reads it; None when there is none."""
    match = _TOOL_CALL.search(text)
    if not match:
        return None
    try:
        call = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    return call if isinstance(call, dict) and "name" in call and "arguments" in call else None


# -- tokenising with the assistant turns as targets --------------------------------------------------------


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]  # -100 outside the assistant turns


def assistant_spans(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character spans of its assistant turns (each from the
    end of its generation prompt to the end of its ``<|im_end|>``)."""
    render = lambda upto, prompt: tokenizer.apply_chat_template(  # noqa: E731
        messages[:upto], tools=TOOL_SCHEMAS, tokenize=False, add_generation_prompt=prompt)
    spans = [(len(render(index, True)), len(render(index + 1, False)))
             for index, message in enumerate(messages) if message["role"] == "assistant"]
    return render(len(messages), False), spans


def conversation_span(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and one span: everything after the system message (the question,
    the calls and the tools' results). The results repeat what came before (the snippet the
    entity, the email the snippet, the number): more copying to learn from than the calls alone."""
    text = tokenizer.apply_chat_template(messages, tools=TOOL_SCHEMAS, tokenize=False)
    system = tokenizer.apply_chat_template(messages[:1], tools=TOOL_SCHEMAS, tokenize=False)
    return text, [(len(system), len(text))]


SPANS = {"assistant": assistant_spans, "conversation": conversation_span}  # --targets: what the loss counts
TARGETS = tuple(SPANS)


def to_example(tokenizer: Any, messages: list[dict[str, Any]], targets: str = "assistant") -> Example:
    """The conversation's tokens, the loss on ``targets``: the assistant turns (what the agent
    writes), or the whole conversation after the system prompt."""
    return examples_of(tokenizer, [messages], targets)[0]


def examples_of(tokenizer: Any, conversations: list[list[dict[str, Any]]], targets: str) -> list[Example]:
    """Each conversation rendered, then all tokenised in one call (the fast tokenizer spreads a
    batch over the CPU's cores), each labelled in one pass over its tokens."""
    rendered = [SPANS[targets](tokenizer, messages) for messages in conversations]
    encoded = tokenizer([text for text, _ in rendered], return_offsets_mapping=True, add_special_tokens=False)
    return [Example(list(ids), labelled(ids, offsets, spans))
            for ids, offsets, (_, spans) in zip(encoded["input_ids"], encoded["offset_mapping"], rendered)]


def labelled(ids: list[int], offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """Each token's id where it begins inside one of ``spans`` (in order, apart), else -100."""
    labels, span = [], 0
    for token, (begin, _) in zip(ids, offsets):
        while span < len(spans) and begin >= spans[span][1]:
            span += 1
        inside = span < len(spans) and spans[span][0] <= begin
        labels.append(token if inside else -100)
    return labels


# -- training (torch) ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmupReport:
    conversations: int
    steps: int
    first_loss: float
    last_loss: float
    seconds: float
    tool_call_rate: float  # first turns (greedy) that parse as a tool call after the warm-up
    targets: str = "assistant"  # what the loss counted (TARGETS)
    copy_steps: int = 0  # steps on the first calls alone before the conversations (copy_lessons)
    precision: str = "float32"  # the passes' (PRECISIONS)
    train_seconds: float = 0.0  # of ``seconds``, the optimizer steps alone (copy lesson and conversations)
    steps_by: str = "eager (no CUDA)"  # the conversations' steps: "graph" or "eager (why)" (Training.steps_by)


def tokenised(tokenizer: Any, conversations: list[list[dict[str, Any]]], targets: str = "assistant") -> list[Example]:
    """Each conversation as an Example; one that repeats (the same list object) is tokenised once."""
    unique = distinct(conversations)
    done = {id(messages): example for messages, example in zip(unique, examples_of(tokenizer, unique, targets))}
    return [done[id(messages)] for messages in conversations]


def distinct(conversations: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The conversations without their repeats, in order."""
    return list({id(messages): messages for messages in conversations}.values())


def batches(examples: list[Example], size: int, steps: int, seed: int):  # -> Iterator[list[Example]]
    """``steps`` batches of ``size`` examples drawn with ``seed`` (the draws DeviceBatches repeats)."""
    rng = random.Random(seed)
    for _ in range(steps):
        yield [rng.choice(examples) for _ in range(size)]


def collate(batch: list[Example], pad_id: int, device: str):  # -> dict of tensors
    """The batch right-padded, without an attention mask: each pad comes after every real token of
    its row, so causal attention never lets a real token see one, and its label is -100; the loss
    is the masked batch's (a CPU test compares them). Without a mask, attention runs as plain causal
    attention, the flash kernel in bf16, where a padding mask forces a slower one."""
    import torch  # torch only in the warm-up's steps, not at --help

    width = max(len(example.input_ids) for example in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, example in enumerate(batch):
        n = len(example.input_ids)
        ids[row, :n], labels[row, :n] = torch.tensor(example.input_ids), torch.tensor(example.labels)
    return {"input_ids": to_device(ids, device), "labels": to_device(labels, device)}


def to_device(tensor: Any, device: str) -> Any:
    """On a GPU, copied from pinned memory without waiting: the copy queues behind the step before."""
    return tensor.pin_memory().to(device, non_blocking=True) if device == "cuda" else tensor


def tool_call_rate(model: Any, tokenizer: Any, conversations: list[list[dict[str, Any]]], device: str) -> float:
    """The share of first turns, generated greedily after the system and user messages, that parse as a tool call."""
    import torch  # torch only in the warm-up's steps, not at --help

    model.eval()
    parsed = 0
    with torch.no_grad():
        for messages in conversations:
            prompt = tokenizer.apply_chat_template(messages[:2], tools=TOOL_SCHEMAS, tokenize=False,
                                                   add_generation_prompt=True)
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(device)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
            parsed += parsed_tool_call(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=False)) is not None
    return parsed / max(1, len(conversations))


def save(model: Any, base: Path, out: Path, report: WarmupReport) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copy2(base / name, out / name)
    made = json.loads((base / "made_by.json").read_text()) if (base / "made_by.json").is_file() else {}
    (out / "made_by.json").write_text(json.dumps({**made, "path": str(out), "warmup": report.__dict__}, indent=2) + "\n")


def reference_policy(scenarios: list["Scenario"], db: "EmailDB", agent: AgentConfig, **_: Any) -> list[list[dict[str, Any]]]:
    """A good agent on every scenario (the question's words that its email holds)."""
    return scripted_conversations(scenarios, db, agent)


def inbox_mix_policy(scenarios: list["Scenario"], db: "EmailDB", agent: AgentConfig, *,
                     good_share: float) -> list[list[dict[str, Any]]]:
    """The synthetic inboxes' imperfect mix (trainer.staging.inbox_policy): each question both ways,
    the good search in a ``good_share`` of the copies."""
    return [played.messages for played in mixed(scenarios, db, agent, good_share)]


POLICIES = {"reference": reference_policy, "inbox-mix": inbox_mix_policy}


def copy_lessons(tokenizer: Any, scenarios: list["Scenario"]) -> list[Any]:
    """The first calls alone, the question then its good search and nothing before the question
    (trainer/staging/first_calls.py): there the made model learns to copy the question's entity in a
    few hundred steps, which whole conversations never taught it. Made before the model loads, so
    data without the synthetic inboxes' questions is refused at once."""
    lessons = first_calls(tokenizer, scenarios)
    if not lessons:
        raise WarmupError("--copy_steps needs the synthetic inboxes' questions (python -m trainer.data make-inboxes): "
                          "no training question has a planned search")
    return lessons


def scripted_lessons(data_dir: Path, policy: str, max_turns: int,
                     good_share: float) -> tuple[list["Scenario"], list[list[dict[str, Any]]]]:
    """The training scenarios and ``policy``'s conversations on them; WarmupError (one line, exit 2)
    when ``data_dir`` is not staged or gives no conversation, before any model is loaded."""
    try:
        scenarios = load_scenarios(data_dir, "train", limit=None)
        with EmailDB(data_paths(data_dir).db) as db:
            conversations = POLICIES[policy](scenarios, db, AgentConfig(max_turns=max_turns), good_share=good_share)
    except (FileNotFoundError, ValueError) as error:
        raise WarmupError(f"--data_dir {data_dir}: {error}") from None
    if not conversations:
        raise WarmupError(f"no training scenario of {data_dir} gives a scripted conversation (no question word found "
                          f"its email); {PREPARE_HINT}")
    return scenarios, conversations


def warm_up(base: Path, out: Path, data_dir: Path, *, steps: int, batch_size: int, learning_rate: float,
            max_turns: int, seed: int = 0, check: int = 16, policy: str = "reference", good_share: float = 1.0,
            targets: str = "assistant", copy_steps: int = 0, precision: str = "float32", say=print) -> WarmupReport:
    """Warm ``base`` up into ``out`` on ``policy``'s conversations, after ``copy_steps`` of the copy
    lesson; ``check`` conversations' first turns are generated after it."""
    scenarios, conversations = scripted_lessons(data_dir, policy, max_turns, good_share)
    import torch  # torch only in the warm-up's steps: bad data is refused without it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    lessons = copy_lessons(tokenizer, scenarios) if copy_steps else []
    # float32 weights on any device: in bf16 weights Adam's small updates round away; saved as bf16 below
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    model.to(device)
    began = time.monotonic()
    steps_of = dict(pad_id=tokenizer.pad_token_id, batch_size=batch_size, learning_rate=learning_rate, seed=seed,
                    device=device, say=say, precision=precision)
    training = 0.0
    if lessons:
        say(f"copy lesson: {len(lessons)} first calls without the system prompt, {copy_steps} steps of {batch_size}")
        training += timed(lambda: train(model, lessons, steps=copy_steps, **steps_of))[1]
    examples = tokenised(tokenizer, conversations, targets)
    unique = distinct(conversations)
    say(f"warmup: {len(unique)} scripted conversations from {data_dir} ({len(examples)} with repeats), {steps} steps "
        f"of {batch_size} on {device} in {precision}, loss on the {targets}")
    done, seconds = timed(lambda: trained(model, examples, steps=steps, **steps_of))
    first_turns = tool_call_rate(model, tokenizer, unique[::max(1, len(unique) // check)][:check], device)
    report = WarmupReport(len(unique), steps, round(done.losses[0], 4), round(done.losses[-1], 4),
                          round(time.monotonic() - began, 1), round(first_turns, 3), targets, copy_steps, precision,
                          round(training + seconds, 1), done.steps_by)
    save(model.to(torch.bfloat16), base, out, report)
    return report


def timed(work: Any) -> tuple[Any, float]:
    """``work()``'s result and its seconds (the GPU's queued steps included: the result is read back)."""
    began = time.monotonic()
    result = work()
    return result, time.monotonic() - began


def good_share(args: argparse.Namespace) -> float:
    """--good_share, checked: only the inbox mix has one (1.0, every conversation good, otherwise)."""
    if args.good_share is None:
        return GOOD_SHARE if args.policy == "inbox-mix" else 1.0
    if args.policy != "inbox-mix" or not 0 <= args.good_share <= 1:
        raise WarmupError(f"--good_share {args.good_share}: accepted: a number from 0 to 1, with --policy inbox-mix")
    return args.good_share


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.warmup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="the model folder to start from (trainer.data make-model)")
    parser.add_argument("out", type=Path, help="where the warmed model goes")
    parser.add_argument("--data_dir", type=Path, default=None, help="the staged data (default: $DATA_DIR, else <repo>/data)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--max_turns", type=int, default=10, help="as the RL run's config (the system prompt says it)")
    parser.add_argument("--policy", choices=sorted(POLICIES), default="reference",
                        help="reference: a good agent on every training scenario; inbox-mix: the synthetic inboxes' "
                             "scripted mix of a good and a weak search (trainer/staging/inbox_policy.py)")
    parser.add_argument("--good_share", type=float, default=None,
                        help="inbox-mix: the share of conversations with the good search (default 0.25)")
    parser.add_argument("--targets", choices=TARGETS, default="assistant",
                        help="what the loss counts: the assistant turns (default), or the whole conversation after "
                             "the system prompt (the tools' results too: more copying to learn from)")
    parser.add_argument("--copy_steps", type=int, default=0,
                        help="first, this many steps on the first calls alone (the question, then its good search; "
                             "synthetic inboxes only): where the made model learns to copy the question's entity "
                             "(trainer/staging/first_calls.py; default 0)")
    parser.add_argument("--seed", type=int, default=0, help="the batches' order and the mix's choices")
    parser.add_argument("--precision", choices=PRECISIONS, default="float32",
                        help="the forward and backward passes' precision: float32 (default), or bf16 (autocast on "
                             "the tensor cores; the weights and Adam's state stay float32)")
    args = parser.parse_args(argv)

    try:
        if args.steps < 1 or args.batch_size < 1:
            raise WarmupError(f"--steps {args.steps} / --batch_size {args.batch_size}: both must be integers >= 1")
        if args.copy_steps < 0:
            raise WarmupError(f"--copy_steps {args.copy_steps}: accepted: an integer >= 0")
        if not (args.base / "config.json").is_file():
            raise WarmupError(f"{args.base} is not a model folder (no config.json); make one with "
                              "`python -m trainer.data make-model DIR`")
        report = warm_up(args.base, args.out, args.data_dir or default_data_dir(), steps=args.steps,
                         batch_size=args.batch_size, learning_rate=args.learning_rate, max_turns=args.max_turns,
                         seed=args.seed, policy=args.policy, good_share=good_share(args), targets=args.targets,
                         copy_steps=args.copy_steps, precision=args.precision)
    except WarmupError as error:
        print(f"trainer.warmup: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    lesson = f"{report.copy_steps} copy-lesson steps and " if report.copy_steps else ""
    print(f"warmup done: {report.conversations} conversations, {lesson}{report.steps} steps in {report.seconds} s "
          f"({report.train_seconds} s of optimizer steps, {report.precision}, {report.steps_by}), loss "
          f"{report.first_loss} -> {report.last_loss}, first turns parsing as a tool call: {report.tool_call_rate:.0%}; "
          f"model: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
