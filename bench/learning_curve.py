"""The learning curve: agent_008's loop makes an agent better at questions it has never seen.

    .venv/bin/python -m bench.learning_curve plan   [--gpus 0] [--minutes 20]     # what it will do, and how long
    .venv/bin/python -m bench.learning_curve start  [--gpus 0] [--minutes 20]     # run it in the background
    .venv/bin/python -m bench.learning_curve status                              # where it is (poll this)
    .venv/bin/python -m bench.learning_curve run    [--gpus 0] [--minutes 20]     # the same in the foreground
    .venv/bin/python -m bench.learning_curve collect [--out DIR]                 # the JSON and picture, now
    .venv/bin/python -m bench.learning_curve plot JSON [--png PNG]               # redraw the picture from the JSON
    .venv/bin/python -m bench.learning_curve resume [--move DIR] [--steps 10]    # seed 1 continued from start's bundle

On a GPU node after ``bash setup.sh`` (or ``--from-wheelhouse``), with no download:

1. data: ``trainer.data make-inboxes`` (synthetic inboxes, split by inbox: no held-out inbox,
   question or answer in the train split; the warm-up's inboxes apart from both, so RL trains
   on entities the warm-up never saw) staged by ``trainer.data prepare``, the warm-up's into
   WORK/warmup-data;
2. model: ``trainer.data make-model --size inbox`` warmed up by ``trainer.warmup --policy
   inbox-mix``: the tool format from scripted conversations of which only half search well
   (trainer/staging/inbox_policy.py), the room RL has to improve, after the copy lesson (the
   first turns alone: trainer/staging/first_calls.py). Two warm-ups (RECIPES) side by side; the
   runs take the one that searches well more often on the runs' training questions;
3. first turns: what the warmed model's first turn is on held-out questions, sampled as rollouts
   sample (trainer/staging/first_turns.py); no run starts on a model that rarely searches well;
4. scripted: that policy on the validation questions with the real tools (its accuracy is
   the scripted starting point);
5. runs: ``trainer.train --config learning_curve`` with ART's LocalBackend, side by side: seeds
   1 and 2 started at once, and a control identical to seed 1 but for learning_rate 0 started once
   both registered (each vLLM's KV cache is fixed, so none profiles the GPU's memory while another
   sleeps or wakes). Each validates on the
   held-out questions at step 0 and every ``eval_steps`` steps. The judge is the GPU proof's
   string match (every word of the reference in the answer) served on loopback by
   tests/doubles/openai_server.py: the trainer's own judge code path (litellm, cache, retries)
   asks it. One GPU: shared mode (vLLM sleeps while Unsloth trains), all three on it, each
   vLLM with a 2 GiB KV cache. Two GPUs: dedicated mode, the runs' training and vLLM
   crossed over the two (a run trains on one and samples from the other);
6. collect: ``docs/results/learning_curve.json`` from the runs' validation records and
   ``learning_curve.png`` from the JSON, and the targets, met or not: every seed rises at
   least 20 points from its first to its last point with 95% (Wilson) intervals apart, the
   control less than 5;
7. move: seed 1's run bundled (``hpc.run.bundle``) into WORK/move with the base model and its
   sha256s, for ``resume`` to continue it on another machine (bench/learning_curve_move.py).

``--minutes`` bounds the whole: the runs get the job end time that makes the trainer stop at a
step boundary before it (exit 75), then whatever is still running gets SIGUSR1; the results
are written from what was measured. ``start`` runs it under setsid (it survives the shell that
started it), its log in WORK/bench.log. ``status`` and ``collect`` print each part's predicted seconds
(WORK/plan.json) beside the measured ones (WORK/stages.jsonl, the runs' records). Seeds and questions are fixed here and in the config,
before any run.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from bench.learning_curve_results import plot, redraw, results, verdicts, write_json
from hpc.digits import ascii_float
from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.job.workload_env import HPC_JOB_END_TIME, HPC_SIGNAL_GRACE, HPC_VLLM_PORT, REPO_DIR
from hpc.run.records import read_jsonl
from hpc.run.rundir import RunDir
from trainer.proof.background import start_detached
from trainer.proof.cli import positive
from trainer.proof.figures import trained_steps
from trainer.proof.gpus import gpu_list, node_gpus
from trainer.proof.processes import Process, command, last_lines, run_when_ready
from trainer.proof.string_match_judge import string_match_verdict
from trainer.proof.workspace import PYTHON, ProofFailed, Work, say
from trainer.staging.synthetic_inbox import warmup_questions

if TYPE_CHECKING:
    from trainer.staging.first_turns import FirstTurns

CONFIG = "learning_curve"
SEEDS = (1, 2)  # fixed before any run: never picked after the fact
CONTROL = "control"
DATA_SEED = 0
# Three sets of inboxes, in the generator's order: the warm-up's, the runs' training ones (900
# questions: the config's 800 and more), the held-out ones. The held-out 100 are the same inboxes
# (and questions) as when the warm-up had all 600 training inboxes, the first GPU curve's.
WARMUP_INBOXES, TRAIN_INBOXES, HELDOUT_INBOXES = 450, 150, 100
# The warm-up: half its conversations search well. The questions quote their entity
# (trainer/staging/synthetic_inbox.py says why). The first-turns stages measure what the model
# actually does before any run starts.
WARMUP = {"batch_size": 16, "good_share": 0.5, "precision": "bf16"}
# Two warm-ups side by side (one a GPU), each with its own settings (trainer.warmup's flags). The
# runs start from the one whose first turns on TRAINING questions search well more often (a tie: the
# first); the held-out questions play no part in the choice. Both models are kept, with their counts,
# in WORK/recipes.json. Why these (docs/training.md): at learning rate 2e-3 or 5e-3 no warm-up of up
# to 8000 steps ever copied the question's entity (two H200s, 2026-11-27: 0 good searches in 200),
# nor at 5e-4 (6000 steps: 0.5%; 3000 with every search good: 0%). The same model learns the copy in
# 300-400 steps on the first calls alone with nothing before the question, at 5e-4, never at 2e-3,
# and after the system prompt not in 3000 (bench/warmup_copy.py, on CPU and an H200); learned there
# first, it carries over to the whole first turn in 50 steps. So each warm-up starts with the copy
# lesson (--copy_steps). The loss on the assistant turns, or on the whole conversation after the
# system prompt (the tools' results repeat what came before: more copying to learn from).
RECIPES = {"assistant": {"targets": "assistant", "learning_rate": 5e-4, "copy_steps": 600},
           "conversation": {"targets": "conversation", "learning_rate": 5e-4, "copy_steps": 600}}
WARMUP_STEPS = 6000  # --warmup_steps: 96,000 draws from 5,400 conversations (2,700 questions, both ways)
FIRST_TURN_QUESTIONS = 200  # questions the first-turns stages sample, of each split (trainer.staging.first_turns)
MIN_GOOD_SEARCHES = 0.02  # below this share of good first searches RL has nothing to reinforce: no run starts
RESULTS = REPO_DIR / "docs" / "results"
# Planning figures in seconds, each measured unless marked an ESTIMATE; `status` and `collect` print each
# beside what this bench measured (timing_lines). Two H200s, 2026-11-28, the second run (`start --gpus 0,1
# --minutes 22`; docs/results/learning_curve_runs/2026-11-28-2xH200-100steps): data 6.2 s; the model stage
# 180 s, of which each warm-up's 6,600 optimizer steps at 20.1 and 19.4 ms (bf16, one a GPU, the batches
# gathered on the device) and the rest (make-model, the warm-ups' loading and tokenising, both recipes'
# first turns) 47 s; first turns 16.4 s; scripted 0.6 s; the two seeds registering at once, the first starts
# on the machine, 176-177 s (the control after them: 80 s); a dedicated step 4.7 s (median of the three
# runs' steps); a validation of 300 questions 14.4 s; collect 2.2 s. One H200, 2026-11-28: two float32
# warm-ups on one GPU 72 ms a step each (43 ms alone). The warm-up step as one CUDA graph, alone on an
# H200: 7.98 ms (`bench.warmup_step --device cuda --steps 200 --rounds 3`, docs/results/warmup_step).
# ESTIMATES: two graph warm-ups on one GPU 1.8 times alone each (as two float32 eager ones); a shared step
# of three runs on one GPU 12 s; collect 10 s (a margin).
ESTIMATE = {"data": 6.2, "model_fixed": 47, "warmup_step_alone": 0.008, "warmup_step_two": 0.0144,
            "first_turns": 16.4, "scripted": 0.6, "register": 177, "validation": 14.4, "step_shared": 12.0,
            "step_dedicated": 4.7, "collect": 10}
CURVE_STEPS = 100  # the target: steps of each run within one lease
MIN_POINTS = 2  # a curve needs a first and a last held-out point
SIGNAL_WAIT = 60  # after the deadline: SIGUSR1, then this long for the step being trained to be saved (5-12 s a step)
BOUNDARY_MARGIN = 30  # the config's boundary_margin_seconds: the trainer's last step ends this long before


@dataclass(frozen=True)
class RunSpec:
    """One trainer.train process of the bench."""

    name: str
    seed: int
    learning_rate: float | None  # None: the config's
    devices: str
    port: int

    @property
    def vllm_gpu(self) -> str:
        """The GPU its vLLM uses: the second of two (dedicated mode trains on the first), else its one."""
        return self.devices.split(",")[-1]

    def overrides(self, model: Path, gpu_mode: str) -> list[str]:
        lr = [] if self.learning_rate is None else [f"learning_rate={self.learning_rate}"]
        return [f"base_model={model}", f"seed={self.seed}", f"gpu_mode={gpu_mode}", *lr]


def run_specs(gpus: list[str]) -> list[RunSpec]:
    """The seeds and the control; on two GPUs each trains on one and samples from the other,
    alternating, so both GPUs carry one side of every run."""
    names = [(f"seed{seed}", seed, None) for seed in SEEDS] + [(CONTROL, SEEDS[0], 0.0)]
    if len(gpus) == 1:
        return [RunSpec(name, seed, lr, gpus[0], 8100 + 100 * i) for i, (name, seed, lr) in enumerate(names)]
    pairs = [f"{gpus[0]},{gpus[1]}", f"{gpus[1]},{gpus[0]}"]
    return [RunSpec(name, seed, lr, pairs[i % 2], 8100 + 100 * i) for i, (name, seed, lr) in enumerate(names)]


def gpu_mode(gpus: list[str]) -> str:
    return "shared" if len(gpus) == 1 else "dedicated"


# -- the plan ------------------------------------------------------------------------------------------


def config_values() -> dict:
    from trainer.training.config import load_config

    return load_config(CONFIG).__dict__


@dataclass(frozen=True)
class Plan:
    """What the bench expects to fit in ``minutes``, at the ESTIMATE figures."""

    gpus: list[str]
    minutes: float
    step: float  # seconds a step, in this GPU mode
    before: float  # seconds before the runs' first validation can start
    per_block: float  # eval_steps steps and the validation after them
    total_steps: int  # what the config would train with no deadline
    eval_steps: int
    model: float = ESTIMATE["model_fixed"]  # seconds of the model stage (model_seconds)

    @property
    def budget(self) -> float:
        """Seconds the runs get once registered (as run_all's deadline leaves them)."""
        return self.minutes * 60 - ESTIMATE["collect"] - SIGNAL_WAIT - BOUNDARY_MARGIN - self.before

    def seconds_for(self, steps: int) -> float:
        """Seconds the runs need for ``steps`` steps and the validations due by then (step 0's and
        every ``eval_steps``')."""
        return steps * self.step + (steps // self.eval_steps + 1) * ESTIMATE["validation"]

    @property
    def steps(self) -> int:
        """The steps trained before the deadline: a run steps on after its last validation until the
        deadline stops it, so not only whole blocks of ``eval_steps`` count; the config's total at most."""
        fit = 0
        while fit < self.total_steps and self.seconds_for(fit + 1) <= self.budget:
            fit += 1
        return fit

    @property
    def validations(self) -> list[int]:
        """The steps validated before the deadline: step 0 only where its validation fits."""
        return list(range(0, self.steps + 1, self.eval_steps)) if self.budget >= ESTIMATE["validation"] else []

    def step_needed(self, steps: int = CURVE_STEPS) -> float:
        """The longest a step may take (its share of the validations aside) for ``steps`` to fit."""
        validations = steps // self.eval_steps + 1
        return (self.budget - validations * ESTIMATE["validation"]) / steps

    def predicted(self) -> dict[str, float]:
        """Each stage's predicted seconds, as WORK/plan.json keeps them for timing_lines."""
        return {"data": ESTIMATE["data"], "model": self.model, "warmup step": warmup_step_seconds(self.gpus) * 1000,
                "first turns": ESTIMATE["first_turns"],
                "scripted": ESTIMATE["scripted"], "register": ESTIMATE["register"], "step": self.step,
                "validation": ESTIMATE["validation"], "steps": self.steps}

    def minutes_for(self, points: int) -> float:
        """The least ``--minutes`` in which ``points`` validations fit."""
        need = self.before + ESTIMATE["collect"] + SIGNAL_WAIT + BOUNDARY_MARGIN + ESTIMATE["validation"]
        return (need + (points - 1) * self.per_block) / 60


def plan_of(gpus: list[str], minutes: float, warmup_steps: int = WARMUP_STEPS) -> Plan:
    config = config_values()
    step = ESTIMATE["step_shared" if gpu_mode(gpus) == "shared" else "step_dedicated"]
    model = model_seconds(gpus, warmup_steps)
    before = sum(ESTIMATE[part] for part in ("data", "first_turns", "scripted", "register")) + model
    total = config["training_dataset_size"] // config["groups_per_step"] * config["num_epochs"]
    return Plan(gpus, minutes, step, before, config["eval_steps"] * step + ESTIMATE["validation"], total,
                config["eval_steps"], model)


def model_seconds(gpus: list[str], warmup_steps: int) -> float:
    """The model stage: its fixed part, then the warm-ups' steps (the copy lesson's counted as whole
    ones), side by side, each step slower where two warm-ups share a GPU."""
    copy_steps = max(int(recipe.get("copy_steps", 0)) for recipe in RECIPES.values())
    return ESTIMATE["model_fixed"] + (warmup_steps + copy_steps) * warmup_step_seconds(gpus)


def warmup_step_seconds(gpus: list[str]) -> float:
    """A warm-up step's seconds: alone on its GPU, or beside the other recipe's on one GPU."""
    return ESTIMATE["warmup_step_alone" if len(RECIPES) <= len(gpus) else "warmup_step_two"]


def too_short(plan: Plan) -> str | None:
    """Why ``--minutes`` can draw no curve, or None: a run with fewer than MIN_POINTS held-out points
    measures nothing the issue asks (seen: --minutes 9 on an H100 ended before any validation)."""
    if len(plan.validations) >= MIN_POINTS:
        return None
    return (f"--minutes {plan.minutes:g} leaves room for {len(plan.validations)} held-out validation(s) at the "
            f"planned speeds (python -m bench.learning_curve plan); a curve needs {MIN_POINTS}: give --minutes "
            f"{math.ceil(plan.minutes_for(MIN_POINTS))} or more")


def plan_lines(gpus: list[str], minutes: float, warmup_steps: int = WARMUP_STEPS) -> list[str]:
    """What the bench will do and how long each part is expected to take (``plan``, and the log's head)."""
    config = config_values()
    plan = plan_of(gpus, minutes, warmup_steps)
    runs = run_specs(gpus)
    return [
        f"plan: {len(gpus)} GPU(s) ({','.join(gpus)}), gpu_mode {gpu_mode(gpus)}, budget {minutes:g} min",
        f"  data      make-inboxes ({WARMUP_INBOXES} warm-up, {TRAIN_INBOXES} train, {HELDOUT_INBOXES} held-out inboxes, "
        f"seed {DATA_SEED}) "
        f"+ prepare: ~{ESTIMATE['data']} s",
        f"  model     make-model --size inbox, warm-up {warmup_steps} steps of {WARMUP['batch_size']} in "
        f"{WARMUP['precision']} ({WARMUP['good_share']:.0%} good searches), {len(RECIPES)} side by side ("
        + "; ".join(f"{name}: {recipe_flags(name)}" for name in RECIPES)
        + f"); the runs take the one whose first turns on {FIRST_TURN_QUESTIONS} training questions search well "
        f"more often: ~{plan.model:.0f} s",
        f"  first     its first turns on {FIRST_TURN_QUESTIONS} held-out questions at temperature "
        f"{config['temperature']:g}: no run starts below {MIN_GOOD_SEARCHES:.0%} good searches: "
        f"~{ESTIMATE['first_turns']} s",
        f"  scripted  the warm-up's policy on the {config['val_set_size']} validation questions: ~{ESTIMATE['scripted']} s",
        "  runs      " + "; ".join(f"{r.name} (seed {r.seed}{', lr 0' if r.learning_rate == 0 else ''}, "
                                    f"CUDA_VISIBLE_DEVICES={r.devices})" for r in runs),
        "            side by side: "
        + ("the seeds at once, the control once they registered; each vLLM's KV cache is fixed "
           "(vllm_kv_cache_gb), so none profiles the GPU's memory"
           if config["vllm_kv_cache_gb"] else "runs whose vLLMs share a GPU register one after the other"),
        f"            config {CONFIG}: lr {config['learning_rate']:g}, {config['groups_per_step']} groups x "
        f"{config['trajectories_per_group']} rollouts a step, {plan.total_steps} steps, validation on "
        f"{config['val_set_size']} held-out questions at step 0 and every {config['eval_steps']}",
        f"            register ~{ESTIMATE['register']} s (the seeds; the control after them), a step ~{plan.step:g} s, a validation "
        f"~{ESTIMATE['validation']} s",
        f"            expected before the deadline: ~{plan.steps} steps, validations at {plan.validations}",
        f"            {CURVE_STEPS} steps need a step every {plan.step_needed():.1f} s or less (the "
        f"{CURVE_STEPS // plan.eval_steps + 1} validations aside); planned {plan.step:g} s",
        f"  collect   {RESULTS.relative_to(REPO_DIR)}/learning_curve.json and .png: ~{ESTIMATE['collect']} s",
        f"expected total ~{(plan.before + plan.seconds_for(plan.steps) + ESTIMATE['collect']) / 60:.1f} "
        f"min of {minutes:g}",
    ]


# -- the stages ----------------------------------------------------------------------------------------


STAGES_FILE = "stages.jsonl"  # in WORK: each stage and when it began, for timing_lines
PLAN_FILE = "plan.json"  # in WORK: the plan's predicted seconds, written as the bench starts


def stage(work: Work, name: str) -> None:
    began = {"stage": name, "time": time.time()}
    (work.root / "stage.json").write_text(json.dumps(began) + "\n")
    with (work.root / STAGES_FILE).open("a") as stages:
        stages.write(json.dumps(began) + "\n")
    say(f"== {name} ({time.strftime('%H:%M:%S')})")


def make_data(work: Work) -> list[str]:
    inboxes = work.root / "inboxes"
    made = command(work, "make-inboxes", ["-m", "trainer.data", "make-inboxes", str(inboxes), "--seed", str(DATA_SEED),
                                          "--train_inboxes", str(TRAIN_INBOXES), "--heldout_inboxes",
                                          str(HELDOUT_INBOXES), "--warmup_inboxes", str(WARMUP_INBOXES)])
    staged = [prepare(work, name, data, inboxes, questions) for name, data, questions in (
        ("prepare", work.data, inboxes / "questions.jsonl"),
        ("prepare-warmup", warmup_data(work), warmup_questions(inboxes)))]
    return [line for line in "\n".join([made, *staged]).splitlines()
            if line.startswith(("inboxes:", "split:", "warm-up:", "database:", "scenarios:"))]


def prepare(work: Work, name: str, data: Path, inboxes: Path, questions: Path) -> str:
    """One data dir staged from the inboxes' emails and one of their question files."""
    return command(work, name, ["-m", "trainer.data", "prepare", "--data_dir", str(data), "--emails",
                                str(inboxes / "emails.jsonl"), "--questions", str(questions), "--quiet"])


def warmup_data(work: Work) -> Path:
    """The warm-up's data dir: its own inboxes as the train split (trainer.warmup reads no other)."""
    return work.root / "warmup-data"


def make_model(work: Work, warmup_steps: int = WARMUP_STEPS, gpus: list[str] | None = None) -> list[str]:
    """The random model, warmed up by each of RECIPES side by side (round-robin over ``gpus``); the
    one chosen (``chosen_recipe``) becomes WORK/model."""
    random = work.root / "model-random"
    made = command(work, "make-model", ["-m", "trainer.data", "make-model", str(random), "--size", "inbox",
                                        "--data_dir", str(work.data)])
    gpus = gpus or [""]
    jobs = [(recipe, gpus[i % len(gpus)]) for i, recipe in enumerate(RECIPES)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        outputs = list(pool.map(lambda job: warm_and_try(work, random, *job, warmup_steps), jobs))
    found = {recipe: turns for recipe, (_, turns) in zip(RECIPES, outputs)}
    chosen = chosen_recipe(found)
    (work.root / "recipes.json").write_text(json.dumps({"chosen": chosen, "first_turns_on_training_questions": {
        recipe: turns.__dict__ for recipe, turns in found.items()}}, indent=1) + "\n")
    recipe_model(work, chosen).rename(work.model)
    lines = [line for line in made.splitlines() if line.startswith("model:")]
    said = ("copy lesson", "warmup done", "warmup:")
    lines += [line for output, _ in outputs for line in output.splitlines() if line.startswith(said)]
    return lines + [f"{recipe}: {turns.line()}" for recipe, turns in found.items()] + [
        f"chosen: {chosen} ({recipe_flags(chosen)}; good searches on training questions "
        f"{found[chosen].share('good'):.1%})"]


def recipe_flags(recipe: str) -> str:
    return " ".join(f"--{k} {v:g}" if isinstance(v, float) else f"--{k} {v}" for k, v in RECIPES[recipe].items())


def recipe_model(work: Work, recipe: str) -> Path:
    return work.root / f"model-{recipe}"


def warm_and_try(work: Work, random: Path, recipe: str, gpu: str, warmup_steps: int) -> tuple[str, "FirstTurns"]:
    """One recipe's warm-up on ``gpu``, then its first turns on training questions: its output and counts."""
    from trainer.staging.first_turns import FirstTurns

    env = {"CUDA_VISIBLE_DEVICES": gpu} if gpu else {}
    config, out, counts = config_values(), recipe_model(work, recipe), work.root / f"first_turns-{recipe}.json"
    warmed = command(work, f"warmup-{recipe}", [
        "-m", "trainer.warmup", str(random), str(out), "--data_dir", str(warmup_data(work)), "--policy", "inbox-mix",
        "--max_turns", str(config["max_turns"]), f"--steps={warmup_steps}",
        *(f"--{k}={v}" for k, v in {**WARMUP, **RECIPES[recipe]}.items())], timeout=1800, **env)
    command(work, f"first-turns-{recipe}", first_turns_args(out, work.data, counts, "train"), **env)
    return warmed, FirstTurns(**json.loads(counts.read_text()))


def chosen_recipe(found: dict[str, "FirstTurns"]) -> str:
    """The recipe whose first turns searched well most often (on training questions); a tie: the first
    (``max`` keeps the first of equals)."""
    return max(found, key=lambda recipe: found[recipe].counts.get("good", 0))


def first_turns_args(model: Path, data: Path, out: Path, split: str) -> list[str]:
    config = config_values()
    return ["-m", "trainer.staging.first_turns", str(model), "--data_dir", str(data), "--split", split,
            "--questions", str(FIRST_TURN_QUESTIONS), "--temperature", str(config["temperature"]),
            "--max_turns", str(config["max_turns"]), "--out", str(out)]


def scripted(work: Work) -> list[str]:
    output = command(work, "scripted", ["-m", "trainer.staging.inbox_policy", "--data_dir", str(work.data), "--split",
                                        "test", "--limit", str(config_values()["val_set_size"]),
                                        "--good_share", str(WARMUP["good_share"])])
    return output.strip().splitlines()[-1:]


def first_turns(work: Work) -> list[str]:
    """The warmed model's first turns on held-out questions, sampled as its rollouts will be; raises
    ProofFailed when it too rarely searches well for RL to have anything to reinforce."""
    out = work.root / "first_turns.json"
    output = command(work, "first-turns", first_turns_args(work.model, work.data, out, "test"))
    line = output.strip().splitlines()[-1]
    problem = too_few_good_searches(json.loads(out.read_text()))
    if problem:
        raise ProofFailed(f"{line}; {problem}")
    return [line]


def too_few_good_searches(found: dict) -> str | None:
    """Why no run should start on this model, or None."""
    good = found["counts"].get("good", 0) / max(1, found["questions"])
    if good >= MIN_GOOD_SEARCHES:
        return None
    return (f"good searches {good:.1%} < {MIN_GOOD_SEARCHES:.0%}: groups whose rollouts all search alike teach "
            f"nothing about searching, so no run starts (a longer warm-up: --warmup_steps)")


def trainers(work: Work, gpus: list[str], deadline: float, extra: tuple[str, ...] = (),
             **env: str) -> list[Process]:
    """The three trainer.train processes, each told the job ends at ``deadline`` (so it stops at a
    step boundary before it) and SIGUSR1 once it is past; ``extra`` overrides and ``env`` are the
    CPU tests' (a backend double and its scripted policy)."""
    mode = gpu_mode(gpus)
    processes = []
    for spec in run_specs(gpus):
        run = work.for_run(spec.name, spec.devices)
        run.claim()
        argv = ["-m", "trainer.train", "--config", CONFIG, *spec.overrides(work.model, mode), *extra]
        job = {HPC_JOB_END_TIME: str(int(deadline)), HPC_SIGNAL_GRACE: "0", HPC_VLLM_PORT: str(spec.port)}
        processes.append(Process(run, spec.name, argv, until=lambda: time.time() > deadline, env={**job, **env}))
    return processes


def registered_or_ended(work: Work, name: str, process: Process) -> Callable[[], bool]:
    return lambda: process.ended() or bool(work.for_run(name).run.read_startups())


def start_conditions(work: Work, gpus: list[str], processes: list[Process],
                     fixed_cache: bool | None = None) -> list[Callable[[], bool]]:
    """When each run may start. With each vLLM's KV cache fixed (``vllm_kv_cache_gb``; None: as the
    config says) the seeds at once: no vLLM profiles the GPU's memory, so none can see another run's
    vLLM sleep or wake during it (on one H200, 2026-11-28, the control's vLLM refused to start so:
    "Initial free memory 114.29 GiB, current free memory 134.64 GiB"); the control once both seeds
    registered (or ended): the seeds' registrations are not slowed by a third (three at once took 206 s
    on two H200s, one alone 90-105 s on an H100), and the control needs only its validations. Otherwise
    each run starts once every earlier run whose vLLM shares its GPU has registered (or ended)."""
    specs = run_specs(gpus)
    if (config_values()["vllm_kv_cache_gb"] is not None) if fixed_cache is None else fixed_cache:
        seeds = [registered_or_ended(work, spec.name, process) for spec, process in zip(specs, processes)
                 if spec.name != CONTROL]
        return [(lambda: all(seed() for seed in seeds)) if spec.name == CONTROL else (lambda: True) for spec in specs]
    conditions = []
    for index, spec in enumerate(specs):
        earlier = [registered_or_ended(work, other.name, process) for other, process in
                   zip(specs[:index], processes[:index]) if other.vllm_gpu == spec.vllm_gpu]
        conditions.append(lambda earlier=earlier: all(condition() for condition in earlier))
    return conditions


STARTS_FILE = "run_starts.json"  # in WORK: when each run's process was started, for its registration's seconds


def noting_start(work: Work, name: str, condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition``, and the time it first holds (the run is started then) kept in WORK/run_starts.json."""
    def ready() -> bool:
        if not condition():
            return False
        path = work.root / STARTS_FILE
        starts = json.loads(path.read_text()) if path.is_file() else {}
        if name not in starts:
            path.write_text(json.dumps({**starts, name: time.time()}) + "\n")
        return True
    return ready


def run_starts(work: Work) -> dict[str, float]:
    path = work.root / STARTS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def train_runs(work: Work, gpus: list[str], deadline: float, extra: tuple[str, ...] = (), **env: str) -> list[str]:
    processes = trainers(work, gpus, deadline, extra, **env)
    (work.root / STARTS_FILE).unlink(missing_ok=True)
    conditions = [noting_start(work, spec.name, condition)
                  for spec, condition in zip(run_specs(gpus), start_conditions(work, gpus, processes))]
    try:
        ended = run_when_ready(processes, conditions,
                               timeout=deadline - time.time() + SIGNAL_WAIT)
    except ProofFailed as error:  # still running past the deadline and the wait: killed; what was saved stays
        return [f"stopped: {error}"]
    return [f"{spec.name}: exit {code} after {seconds:.0f} s; {last_lines(log, 1)}"
            for spec, (code, log, seconds) in zip(run_specs(gpus), ended)]


# -- results -------------------------------------------------------------------------------------------


DEVICE_FILE = "device.json"  # in WORK: the GPUs the runs had, written before they start


def record_device(work: Work, gpus: list[str]) -> None:
    """The runs' GPUs by name, kept with their records: ``collect`` run later, or on another
    machine from a copy of WORK, still names the card that measured them."""
    (work.root / DEVICE_FILE).write_text(json.dumps({"device": device_name(gpus), "gpus": gpus}) + "\n")


def recorded_device(work: Work, gpus: list[str]) -> str:
    path = work.root / DEVICE_FILE
    return json.loads(path.read_text())["device"] if path.is_file() else device_name(gpus)


def device_name(gpus: list[str]) -> str:
    try:
        found = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no nvidia-smi)"
    names = dict(line.split(", ", 1) for line in found.stdout.strip().splitlines() if ", " in line)
    used = [names.get(gpu, "?") for gpu in gpus] or ["unknown"]
    return f"{len(used)} x {used[0]}" if len(set(used)) == 1 else " + ".join(used)


def model_description(work: Work) -> str:
    made = json.loads((work.model / "made_by.json").read_text()) if (work.model / "made_by.json").is_file() else {}
    warm = made.get("warmup", {})
    return (f"made Qwen2 model, size {made.get('size', '?')}: {made.get('parameters', 0) / 1e6:.1f}M parameters, "
            f"warmed up on {warm.get('conversations', '?')} scripted conversations")


def collect(work: Work, out: Path | None, gpus: list[str]) -> tuple[list[str], bool]:
    """The JSON (from the run directories) and the picture (from the JSON), in WORK/results and ``out``;
    its lines, and whether every target was met."""
    runs = {spec.seed: work.for_run(spec.name).run for spec in run_specs(gpus) if spec.name != CONTROL}
    data = results(recorded_device(work, gpus), model_description(work), time.strftime("%Y-%m-%d", time.gmtime()),
                   runs, work.for_run(CONTROL).run)
    lines = []
    for folder in [work.root / "results"] + ([out] if out else []):
        written = write_json(data, folder / "learning_curve.json")  # first: a picture that fails keeps the figures
        lines.append(f"wrote {written} and {plot(data, folder / 'learning_curve.png')}")
    checked = verdicts(data)
    return (lines + lora_lines(work) + [verdict.line() for verdict in checked] + timing_lines(work, gpus),
            all(v.met for v in checked))


# -- status ----------------------------------------------------------------------------------------------


def status_lines(work: Work, gpus: list[str]) -> list[str]:
    """The bench's stage, then each run's steps and validations so far."""
    stage_file = work.root / "stage.json"
    if not stage_file.is_file():
        return [f"no bench in {work.root} yet"]
    current = json.loads(stage_file.read_text())
    lines = [f"stage {current['stage']} since {time.strftime('%H:%M:%S', time.localtime(current['time']))} "
             f"({time.time() - current['time']:.0f} s)"]
    from trainer.staging.first_turns import FirstTurns

    if (work.root / "recipes.json").is_file():
        recipes = json.loads((work.root / "recipes.json").read_text())
        lines += [f"  {recipe}{' (chosen)' if recipe == recipes['chosen'] else ''}: {FirstTurns(**turns).line()}"
                  for recipe, turns in recipes["first_turns_on_training_questions"].items()]
    if (work.root / "first_turns.json").is_file():
        lines.append(f"  {FirstTurns(**json.loads((work.root / 'first_turns.json').read_text())).line()}")
    for spec in run_specs(gpus):
        run = work.for_run(spec.name).run
        steps, validations = run.read_steps(), run.read_validations()
        mean = sum(s["seconds"] for s in steps[-5:]) / len(steps[-5:]) if steps else 0
        lines.append(f"  {spec.name}: {len(steps)} steps ({mean:.1f} s each lately), validations "
                     + (", ".join(f"@{v['step']} {v['accuracy']:.1%}" for v in validations) or "none yet"))
        lines += [f"    @{v['step']}: {validation_breakdown(run, v)}" for v in validations[-1:]]
    log = work.root / "bench.log"
    return lines + timing_lines(work, gpus) + ([f"  log: {last_lines(log.read_text(), 3)}"] if log.is_file() else [])


def record_plan(work: Work, plan: Plan) -> None:
    (work.root / PLAN_FILE).write_text(json.dumps(plan.predicted()) + "\n")


def stages_begun(work: Work) -> list[dict]:
    path = work.root / STAGES_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def stage_seconds(stages: list[dict]) -> dict[str, float]:
    """Each finished stage's seconds (a stage ends where the next begins)."""
    return {one["stage"]: after["time"] - one["time"] for one, after in zip(stages, stages[1:])}


def warmup_step_ms(work: Work) -> dict[str, float]:
    """Each recipe's measured milliseconds an optimizer step (copy lesson and conversations), from the
    made_by.json trainer.warmup wrote (the chosen recipe's model is WORK/model by then)."""
    measured = {}
    for recipe in RECIPES:
        for folder in (recipe_model(work, recipe), work.model):
            made = folder / "made_by.json"
            warmup = json.loads(made.read_text()).get("warmup", {}) if made.is_file() else {}
            if warmup.get("train_seconds") and warmup.get("targets") == RECIPES[recipe].get("targets"):
                steps = warmup["steps"] + warmup.get("copy_steps", 0)
                measured[recipe] = 1000 * warmup["train_seconds"] / steps
    return measured


def median(values: list[float]) -> float | None:
    ordered = sorted(values)
    return None if not ordered else (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2


@dataclass
class RunFigures:
    """The runs' measured figures: each one's registration (from its process's start, else the runs
    stage's, to its start-up record) and backend start-up with its phases, the seeds' steps."""

    register: dict[str, float]
    backend: dict[str, float]
    phases: dict[str, dict]
    step: list[float]
    validation: list[float]
    steps: dict[str, float]


def run_seconds(work: Work, gpus: list[str], runs_began: float | None) -> RunFigures:
    figures, starts = RunFigures({}, {}, {}, [], [], {}), run_starts(work)
    for spec in run_specs(gpus):
        run = work.for_run(spec.name).run
        startups, began = run.read_startups(), starts.get(spec.name, runs_began)
        if startups and began is not None:
            figures.register[spec.name] = datetime.fromisoformat(startups[0]["time"]).timestamp() - began
            figures.backend[spec.name] = float(startups[0]["seconds"])
            figures.phases[spec.name] = startups[0].get("phases") or {}
        steps = run.read_steps()
        figures.step += [float(step["seconds"]) for step in steps if "seconds" in step]
        figures.validation += [float(v["seconds"]) for v in run.read_validations() if "seconds" in v]
        figures.steps[spec.name] = float(len(steps))
    return figures


def phase_line(name: str, phases: dict) -> str:
    """A run's start-up phases (trainer/training/startup_phases.py) and vLLM's own longest figures."""
    split = ", ".join(f"{k} {v:.0f} s" for k, v in phases.items() if isinstance(v, (int, float)))
    own = sorted(phases.get("vllm_reported") or [], key=lambda r: -float(r.get("seconds", 0)))[:3]
    return f"    {name}: {split or 'no phases recorded'}" + "".join(f"; vLLM: {r['line']}" for r in own)


def compared(name: str, predicted: float, measured: float | None, unit: str = "s") -> str:
    """One line: the plan's figure beside the measured one, and whether it came within 20%."""
    if measured is None:
        return f"  {name}: predicted {predicted:.1f} {unit}, not measured yet"
    off = (measured - predicted) / predicted if predicted else 0.0
    verdict = "within 20%" if abs(off) <= 0.2 else "OFF by more than 20%"
    return f"  {name}: predicted {predicted:.1f} {unit}, measured {measured:.1f} {unit} ({off:+.0%}, {verdict})"


def timing_lines(work: Work, gpus: list[str]) -> list[str]:
    """The plan's predictions (WORK/plan.json) beside what this bench measured: each stage before
    the runs, the runs' registrations (the slowest), the median step and validation, the steps reached
    (the fewest of the three)."""
    path = work.root / PLAN_FILE
    if not path.is_file():
        return ["timing: no plan recorded in this WORK (run or start writes it)"]
    begun = stages_begun(work)
    predicted, stages = json.loads(path.read_text()), stage_seconds(begun)
    runs = run_seconds(work, gpus, next((one["time"] for one in begun if one["stage"] == "runs"), None))
    lines = ["timing, the plan against this bench:"]
    lines += [compared(name, predicted[name], stages.get(name)) for name in ("data", "model", "first turns", "scripted")]
    lines += [compared(f"warm-up step ({recipe})", predicted["warmup step"], ms, "ms")
              for recipe, ms in warmup_step_ms(work).items()]
    seeds = [spec.name for spec in run_specs(gpus) if spec.name != CONTROL]
    lines.append(compared("register (the slowest seed)", predicted["register"],
                          max((runs.register[name] for name in seeds if name in runs.register), default=None)))
    if runs.register:  # from each process's own start; the rest of it is imports, config, data, the preflight
        lines.append("    each run's, from its own start: " + ", ".join(
            f"{name} {seconds:.0f} s (backend {runs.backend[name]:.0f} s)" for name, seconds in runs.register.items()))
        lines += [phase_line(name, phases) for name, phases in runs.phases.items()]
    lines += [compared(f"{name} (median)", predicted[name], median(getattr(runs, name))) for name in ("step", "validation")]
    reached = [runs.steps[name] for name in seeds if name in runs.steps]
    return lines + [compared("steps reached (the fewest seed)", predicted["steps"], min(reached, default=None), "steps")] + (
        [f"  the control: {runs.steps[CONTROL]:.0f} steps"] if CONTROL in runs.steps else [])


def validation_breakdown(run: RunDir, summary: dict) -> str:
    """What a validation says about the warmed model's two skills: searching well (it read the
    right email) and copying (right when it read it), and its tool format."""
    details = read_jsonl(run.validation_details(int(summary["step"])))
    read = [r for r in details if r.get("read_source")]
    copied = sum(bool(r.get("correct")) for r in read)
    return (f"read the right email {len(read)}/{len(details)}, then right {copied}/{len(read)}; "
            f"wrong {summary.get('wrong_answer_rate', 0):.1%}, tool errors {summary.get('tool_error_rate', 0):.1%}, "
            f"{summary.get('mean_turns', 0):.1f} turns")


def lora_lines(work: Work) -> list[str]:
    """Which steps changed each run's LoRA: every step of a seed should, none of the control's."""
    lines = []
    for spec in run_specs(["0"]):
        run = work.for_run(spec.name)
        steps = run.run.read_steps()
        changed = trained_steps(run, steps)
        lines.append(f"{spec.name}: {len(steps)} steps, LoRA changed at {len(changed)} of them"
                     + (f" (learning rate 0: it must change at none; changed at {changed})" if spec.name == CONTROL else ""))
    return lines


# -- the command line --------------------------------------------------------------------------------------


def minutes(text: str) -> float:
    try:
        value = ascii_float(text)
    except ValueError:
        value = math.nan
    if not 5 <= value <= 120:
        raise argparse.ArgumentTypeError(f"invalid --minutes {text!r}: accepted 5 to 120")
    return value


def out_folder(text: str) -> Path:
    """--out: a folder, or one to be made (not a file, not under one): refused before the bench runs."""
    path = Path(text)
    existing = next((p for p in (path, *path.absolute().parents) if p.exists()), None)
    if not text.strip() or existing is None or not existing.is_dir():
        raise argparse.ArgumentTypeError(f"invalid --out {text!r}: accepted a folder, or one to be made (not a file)")
    return path


def json_file(text: str) -> Path:
    """plot's JSON: a file there to read."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"invalid JSON {text!r}: accepted a learning_curve.json that is there")
    return Path(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("plan", "start", "run", "status", "collect", "plot", "resume"))
    parser.add_argument("json", nargs="?", type=json_file, help="plot: the JSON to draw")
    parser.add_argument("--work", type=Path, default=Path("/tmp/learning-curve"), help="the bench's folder (kept)")
    parser.add_argument("--gpus", type=lambda text: gpu_list(text, most=2), default=None,
                        help="one GPU (shared mode) or two (dedicated), by nvidia-smi index; default: the node's first "
                             "two, or its one")
    parser.add_argument("--minutes", type=minutes, default=20.0, help="the whole bench's time (default 20)")
    parser.add_argument("--out", type=out_folder, default=None,
                        help=f"also write the JSON and picture here (run/collect; default {RESULTS.relative_to(REPO_DIR)} "
                             "for run, none for collect)")
    parser.add_argument("--png", type=Path, default=None, help="plot: the picture to write (default: beside the JSON)")
    parser.add_argument("--warmup_steps", type=positive, default=WARMUP_STEPS,
                        help=f"the warm-up's steps of {WARMUP['batch_size']} conversations (default {WARMUP_STEPS})")
    parser.add_argument("--move", type=Path, default=None,
                        help="resume: the folder start's move stage wrote (default WORK/move)")
    parser.add_argument("--steps", type=positive, default=10, help="resume: seed 1's steps to train after the move")
    args = parser.parse_args(argv)
    if args.command == "plot" and args.json is None:
        parser.error("plot needs the JSON to draw: python -m bench.learning_curve plot docs/results/learning_curve.json")
    return args


def default_gpus() -> list[str]:
    return (node_gpus() or ["0"])[:2]


def before_runs(work: Work, warmup_steps: int, gpus: list[str]) -> None:
    """The stages before the runs, each logged; ProofFailed stops the bench."""
    for name, function in (("data", make_data), ("model", lambda w: make_model(w, warmup_steps, gpus)),
                           ("first turns", first_turns), ("scripted", scripted)):
        stage(work, name)
        for line in function(work):
            say(f"  {line}")


def run_all(args: argparse.Namespace) -> int:
    from trainer.proof.loopback_openai import OpenAIServer

    began = time.time()
    deadline = began + args.minutes * 60 - ESTIMATE["collect"] - SIGNAL_WAIT
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / STAGES_FILE).unlink(missing_ok=True)  # this bench's stages only
    for line in plan_lines(args.gpus, args.minutes, args.warmup_steps):
        say(line)
    with OpenAIServer(string_match_verdict) as judge:
        work = Work(args.work, judge.base_url)
        record_plan(work, plan_of(args.gpus, args.minutes, args.warmup_steps))
        try:
            before_runs(work, args.warmup_steps, args.gpus)
        except ProofFailed as error:  # nothing measured: no results written
            say(f"  {error}")
            stage(work, f"stopped before the runs after {(time.time() - began) / 60:.1f} min")
            return 1
        record_device(work, args.gpus)
        stage(work, "runs")
        for line in train_runs(work, args.gpus, deadline):
            say(f"  {line}")
    stage(work, "collect")
    lines, met = collect(work, args.out or RESULTS, args.gpus)
    for line in lines:
        say(f"  {line}")
    stage(work, "move")
    for line in move_lines(work):
        say(f"  {line}")
    stage(work, f"done in {(time.time() - began) / 60:.1f} min")
    return 0 if met else 1


def move_lines(work: Work) -> list[str]:
    """Seed 1 bundled for a move (bench/learning_curve_move.py); a bundle that cannot be made is said,
    and the results already written stay."""
    from bench.learning_curve_move import bundle_seed
    from hpc.errors import UsageError

    try:
        return bundle_seed(work)
    except (ProofFailed, UsageError, OSError) as error:
        return [f"seed 1 not bundled: {' '.join(str(error).split())[:300]}"]


def resume(args: argparse.Namespace) -> int:
    """``resume``: seed 1 continued here from a move folder for ``--steps`` steps, then checked."""
    from bench.learning_curve_move import move_folder, move_problem, resume_seed
    from trainer.proof.loopback_openai import OpenAIServer

    move = args.move or move_folder(Work(args.work))
    problem = move_problem(move)
    if problem is not None:  # nothing made or started
        print(f"bench.learning_curve: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.work.mkdir(parents=True, exist_ok=True)
    with OpenAIServer(string_match_verdict) as judge:
        work = Work(args.work, judge.base_url)
        try:
            if not work.data.is_dir():
                for line in make_data(work):
                    say(f"  {line}")
            lines = resume_seed(work, move, args.steps, args.gpus)
        except ProofFailed as error:
            print(f"bench.learning_curve: error: {' '.join(str(error).split())}", file=sys.stderr)
            return 1
    for line in lines:
        say(line)
    return 0


def start(args: argparse.Namespace, argv: list[str]) -> int:
    """``run`` under setsid, its output in WORK/bench.log; returns at once."""
    log = args.work / "bench.log"
    rest = [arg for arg in argv if arg != "start"]
    pid = start_detached([PYTHON, "-m", "bench.learning_curve", "run", *rest], log, REPO_DIR, append=False)
    say(f"started (pid {pid}), log {log}; poll: {PYTHON} -m bench.learning_curve status --work {args.work}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.command == "plot":
        try:
            say(f"wrote {redraw(args.json, args.png or args.json.with_suffix('.png'))}")
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:  # not the bench's JSON, a bad --png
            print(f"bench.learning_curve: error: cannot draw {args.json}: {type(error).__name__}: "
                  f"{' '.join(str(error).split())[:200]}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return 0
    args.gpus = args.gpus or default_gpus()
    work = Work(args.work)
    if args.command == "resume":
        return resume(args)
    if args.command == "collect":
        lines, met = collect(work, args.out, args.gpus)
        for line in lines:
            say(line)
        return 0 if met else 1
    commands = {"plan": lambda: plan_lines(args.gpus, args.minutes, args.warmup_steps),
                "status": lambda: status_lines(work, args.gpus)}
    if args.command in commands:
        for line in commands[args.command]():
            say(line)
        return 0
    problem = too_short(plan_of(args.gpus, args.minutes, args.warmup_steps))
    if problem is not None:
        print(f"bench.learning_curve: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return start(args, argv) if args.command == "start" else run_all(args)


if __name__ == "__main__":
    sys.exit(main())
