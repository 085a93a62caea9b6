"""The trainer's own cost on CPU: trainer.train's gathering against a minimal loop calling ART, same work.

    .venv/bin/python -m bench.trainer_cost [--steps 15] [--rounds 4] [--turn_ms 40] [--judge_ms 20] [--work DIR]

What the GPU proof's baseline stage measures (trainer/proof/two_gpus.py), with the GPU's
noise taken out: both sides run on the same deterministic doubles, so what differs is only
what the trainer adds around the rollouts (its rollout tasks, judge cache, logs, records).

- the policy: the scripted OpenAI-compatible endpoint (tests/doubles/openai_server.py) answers
  every rollout with the same three turns, a search, a read of the first email found, then an
  answer (a new one each time, so the trainer's judge cache never answers for the judge), each
  turn after --turn_ms, standing in for generation;
- the judge: the same endpoint accepting every answer after --judge_ms;
- the backend: tests.doubles.art_backend:FakeBackend (its train is a checkpoint write);
- the data: the fixture corpus (trainer/proof/corpus) staged as ``trainer.data prepare`` does;
- the config: smoke with the GPU proof's TRAIN_ARGS (3 groups of 4 rollouts a step, 12 in flight,
  4 turns at most), then the fake backend, no preflight, validation or boundary stop, and 3
  scenarios repeated for --steps epochs, so both sides run exactly --steps steps.

Side one is ``python -m trainer.train --config smoke`` as a job runs it; its steps come from
its steps.jsonl (trajectories, rollout_seconds). Side two is trainer/proof/baseline_loop.py's loop
(``art.gather_trajectory_groups`` of ``trainer.agent.rollout.rollout``, then ``backend.train``)
on the same config, in a process of its own too. --rounds runs of each, one after the other,
taking turns at going first (a shared machine's load drifts). The backend's own record of every
step it trained (FakeBackend's train log) must show the same scenarios and the same number of
rollouts on both sides, or nothing is compared. The figure of each side: rollouts per second of
gathering over steps 2 to --steps of its runs (the first pays for first-use imports); then the
median step of each, which the steps a busy machine slowed do not move. Target: trainer.train at
>= 0.95 of the minimal loop; exit 0 when met. About 2 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.doubles.art_backend import read_train_log
from trainer.proof.corpus import CORPUS
from trainer.proof.loopback_openai import OpenAIServer, Reply, text, tool_call
from trainer.proof.processes import command, last_lines
from trainer.proof.workspace import ProofFailed, Work

REPO = Path(__file__).resolve().parent.parent

TARGET = 0.95
JUDGE = "judge"  # the model name the judge's requests carry (Work's JUDGE_MODEL openai/judge, through litellm)
SCENARIOS = 3  # one batch of the proof's 3 groups an epoch: --steps epochs are --steps steps
CPU_OVERRIDES = ("backend=tests.doubles.art_backend:FakeBackend", "preflight=false", "val_set_size=0",
                 "stop_at_boundary=false", f"training_dataset_size={SCENARIOS}")


@dataclass(frozen=True)
class Side:
    """One run of a side: what its backend trained on, and its seconds of gathering."""

    name: str
    rollouts: list[int]  # rollouts trained on, per step
    scenarios: list[list[int]]  # the scenario of each group, per step
    step_seconds: list[float]  # of gathering, per step
    objectives: tuple[str, ...] = ()  # what backend.train was told each step (loss, scaling, learning rate)

    @property
    def counted(self) -> int:
        """The rollouts of steps 2 to the last, those the figures count."""
        return sum(self.rollouts[1:])


def rollouts_per_second(runs: list[Side]) -> float:
    """Rollouts gathered per second of gathering over every run's steps 2 to the last."""
    return sum(run.counted for run in runs) / sum(sum(run.step_seconds[1:]) for run in runs)


def median_step(runs: list[Side]) -> float:
    """The median seconds of gathering a step, over every run's steps 2 to the last: a figure
    that a few steps slowed by something else on the machine do not move."""
    return statistics.median(seconds for run in runs for seconds in run.step_seconds[1:])


# -- the doubles -----------------------------------------------------------------------------------------


def policy_and_judge(turn_seconds: float, judge_seconds: float) -> Callable[[dict], Reply]:
    """The scripted endpoint's answers: the policy's three turns a rollout, the judge's verdict."""
    answers = itertools.count()

    def respond(body: dict) -> Reply:
        if body.get("model") == JUDGE:
            return text(json.dumps({"thinking": "bench", "accept": True}), delay=judge_seconds)
        return next_turn(body["messages"], next(answers), turn_seconds)

    return respond


def next_turn(messages: list[dict], number: int, delay: float) -> Reply:
    """Search the question's longest word, read the first email found, answer (``answer <number>``)."""
    turn = sum(1 for message in messages if message["role"] == "assistant")
    if turn == 0:
        question = next(m["content"] for m in messages if m["role"] == "user")
        return tool_call("search_emails", {"keywords": [max(re.findall(r"[A-Za-z]+", question), key=len)]},
                         delay=delay)
    found = first_email(messages)
    if turn == 1:
        return tool_call("read_email", {"message_id": found}, delay=delay)
    return tool_call("return_final_answer", {"answer": f"answer {number}", "sources": [found]}, delay=delay)


def first_email(messages: list[dict]) -> str:
    """The first message_id the search found (a made-up one when it found none: reading it is an
    error the agent recovers from, so the rollout still takes its three turns)."""
    results = json.loads(next(m["content"] for m in messages if m["role"] == "tool"))
    return results[0]["message_id"] if isinstance(results, list) and results else "<none found>"


# -- the two sides ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    """The settings both sides run with."""

    steps: int
    turn_seconds: float
    judge_seconds: float

    def overrides(self) -> list[str]:
        return [*CPU_OVERRIDES, f"num_epochs={self.steps}"]


def trainer_side(work: Work, bench: Bench, **env: str) -> Side:
    """``python -m trainer.train --config smoke`` to its end (exit 0 after the bench's steps)."""
    command(work, "trainer", ["-m", "trainer.train", "--config", "smoke", *work.train_args(*bench.overrides())], **env)
    return backend_work("trainer.train", work.art, [record["rollout_seconds"] for record in work.run.read_steps()])


def loop_side(work: Work, bench: Bench, **env: str) -> Side:
    """trainer/proof/baseline_loop.py on the same config, with the same ART folder layout."""
    output = command(work, "minimal-loop", ["-m", "trainer.proof.baseline_loop", "--model", str(work.model), "--data_dir",
                                            str(work.data), "--steps", str(bench.steps), "--art_path", str(work.art),
                                            *bench.overrides()], **env)
    seconds = [float(found) for found in re.findall(r"^baseline step \d+: \d+ rollouts in ([0-9.]+) s$", output, re.M)]
    if not seconds:
        raise ProofFailed(f"the minimal loop gave no steps: {last_lines(output)}")
    return backend_work("minimal loop", work.art, seconds)


def backend_work(name: str, art: Path, step_seconds: list[float]) -> Side:
    """What FakeBackend trained on, step by step (its train log), with the side's seconds."""
    trained = read_train_log(art)
    return Side(name, [record["trajectories"] for record in trained],
                [[group[0]["scenario_id"] for group in record["metadata"]] for record in trained], step_seconds,
                tuple(json.dumps({**record["objective"], "learning_rate": record["learning_rate"]}, sort_keys=True)
                      for record in trained))


SIDES = (trainer_side, loop_side)


def measure(root: Path, bench: Bench, rounds: int = 1) -> list[tuple[Side, Side]]:
    """``rounds`` runs of each side, one after the other against one scripted endpoint, trainer.train
    first in odd rounds and the minimal loop first in even ones (a drift in the machine's load
    then weighs on both); each run in a folder of its own. ProofFailed when their work differs."""
    results = []
    with OpenAIServer(policy_and_judge(bench.turn_seconds, bench.judge_seconds)) as server:
        env = {"ART_FAKE_INFERENCE_URL": server.base_url, "TQDM_DISABLE": "1"}  # no progress bars either side
        for number in range(1, rounds + 1):
            order = SIDES if number % 2 else SIDES[::-1]
            runs = {side: side(staged(Work(root / f"{side.__name__}-{number}", judge_url=server.base_url,
                                           run_name="trainer-cost")), bench, **env) for side in order}
            results.append(check_same_work(runs[trainer_side], runs[loop_side], bench.steps))
    return results


def staged(work: Work) -> Work:
    """``work`` with the fixture corpus staged in its data folder, as ``trainer.data prepare`` does."""
    from trainer.staging.data import prepare

    prepare(work.data, str(CORPUS / "emails.jsonl"), str(CORPUS / "questions.jsonl"), show_progress=False)
    return work


def check_same_work(ours: Side, theirs: Side, steps: int) -> tuple[Side, Side]:
    counts = {len(ours.rollouts), len(ours.step_seconds), len(theirs.step_seconds)}
    if (ours.rollouts, ours.scenarios) != (theirs.rollouts, theirs.scenarios) or counts != {steps}:
        raise ProofFailed(f"unequal work: trainer.train trained {ours.rollouts} rollouts on scenarios {ours.scenarios}, "
                          f"the minimal loop {theirs.rollouts} on {theirs.scenarios} (wanted {steps} steps each)")
    if ours.objectives != theirs.objectives:
        raise ProofFailed(f"unequal objectives: trainer.train trained with {sorted(set(ours.objectives))}, the minimal "
                          f"loop with {sorted(set(theirs.objectives))}")
    return ours, theirs


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=15, help="steps of each run; the figures leave the first out")
    parser.add_argument("--rounds", type=int, default=4, help="runs of each side, taking turns at going first")
    parser.add_argument("--turn_ms", type=float, default=40.0, help="the policy's delay per turn")
    parser.add_argument("--judge_ms", type=float, default=20.0, help="the judge's delay per verdict")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the runs' folders and logs here (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"argument --steps: {args.steps} is too few: the figures need steps 2 and on (use >= 2)")
    if args.rounds < 1:
        parser.error(f"argument --rounds: {args.rounds} is too few (use >= 1)")
    if args.work is not None and args.work.exists() and any(args.work.iterdir()):
        parser.error(f"argument --work: {args.work} is not empty (use a new or empty folder)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args.steps, args.turn_ms / 1000, args.judge_ms / 1000)
    with tempfile.TemporaryDirectory() as tmp:
        rounds = measure(args.work or Path(tmp), bench, args.rounds)
    print(f"work:   {args.rounds} runs a side of {args.steps} steps of {rounds[0][0].rollouts[0]} rollouts "
          f"({SCENARIOS} groups), each rollout 3 policy turns of {args.turn_ms:.0f} ms and a verdict of "
          f"{args.judge_ms:.0f} ms; figures over steps 2-{args.steps}")
    for number, (ours, theirs) in enumerate(rounds, 1):
        print(f"run {number}: trainer.train {rollouts_per_second([ours]):.2f}, minimal loop "
              f"{rollouts_per_second([theirs]):.2f} rollouts/s")
    ours, theirs = (rollouts_per_second([pair[side] for pair in rounds]) for side in (0, 1))
    print(f"trainer.train {ours:.2f} rollouts/s, minimal loop {theirs:.2f} rollouts/s: {ours / theirs:.3f} of the "
          f"minimal loop (target >= {TARGET})")
    median_ours, median_theirs = (median_step([pair[side] for pair in rounds]) for side in (0, 1))
    print(f"median step of gathering: trainer.train {median_ours:.3f} s, minimal loop {median_theirs:.3f} s: "
          f"{median_theirs / median_ours:.3f} (the ratio again, unmoved by steps a busy machine slowed)")
    print(f"target: {'met' if ours / theirs >= TARGET else 'MISSED'}")
    return 0 if ours / theirs >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
