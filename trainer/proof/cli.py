"""The GPU proof: agent_008's real path on this node's GPUs, stage by stage, with models made here.

    .venv/bin/python -m trainer.proof --work NEW_DIR [--only STAGE ...] [--gpus 0,1]
    .venv/bin/python -m trainer.proof --work NEW_DIR --only env model14b agent008-14b cards --background
    .venv/bin/python -m trainer.proof --work NEW_DIR --follow 540

Run it on a new cluster's GPU node (or the lent GPU machine) after ``bash setup.sh`` (or
``--from-wheelhouse``). It needs no download: the data is the fixture corpus this
repository ships, the models are made by ``trainer.data make-model``; the small one is warmed
up on scripted trajectories (``trainer.warmup``), so that the rollouts of a group differ and
GRPO has something to learn. Each stage prints what it did and its figures; the first stage
that fails ends the proof with exit 1. Every proof starts from an empty --work folder, and each
stage counts only the records its own processes wrote: a figure never mixes runs.

Stages (one GPU; the default runs env to baseline):
  env       the GPUs, torch, ART, the vLLM runtime the trainer will use
  model     a small Qwen2 made and warmed up (or --model: one an earlier proof made)
  train     trainer.train with ART's LocalBackend: register (Unsloth, vLLM), steps that
            really train (rewards differ in a group, the LoRA changes), validation,
            checkpoints in ART's layout, progress.json and steps.jsonl; stopped by SIGUSR1
            after --steps steps (exit 75, the step being trained is saved)
  resume    a second process: the latest checkpoint, vLLM asked which adapters it serves
            (/v1/models), the next step trains with no step repeated; SIGUSR1 after it
  boundary  a third process whose job end is near (HPC_JOB_END_TIME): the backend's start-up and
            the next step would not end before the stop signal, so neither starts: no backend
            constructed, exit 75 in seconds, a boundary record
  eval      trainer.eval of the latest checkpoint through vLLM with the LoRA: every question
            answered, none failed, the accuracy recomputed from its records
  serve     trainer.serve answering /invoke through vLLM with the LoRA; trainer.ask once
Stages (two GPUs; skipped, and said so, where --gpus names one), in trainer/proof/two_gpus.py:
  dedicated gpu_mode=dedicated: training on the run's first GPU, vLLM on its second
  judge     the judge served in the job (sbatch/_judge_server.sh.j2, rendered and run) on the
            second GPU with the made model, the run on the first; the verdicts asked (counted on
            the way) equal the requests the judge answered with 200
  pack      a pack of two runs, exactly the two, each on its own GPU and vLLM port
  baseline  the trainer's own cost: rollouts per second of trainer.train against a minimal
            loop calling ART directly (same model, objective, judge, group size, concurrency,
            scenarios), --cost_rounds rounds taking turns; target >= 0.95 on the median
Stages at agent_008's real size (trainer/proof/full_size.py; run when named, about 20 minutes):
  model14b      make-model --size qwen2.5-14b (29.5 GB; or --model14b: one an earlier proof made)
  agent008-14b  trainer.train --config agent_008 on it (--card CLUSTER: on that cluster's card,
                emulated); train, stop, resume; time, memory against the launcher's estimate
  cards         the launcher's decision for agent_008 on --emulate clusters' cards, emulated,
                against what ART's vLLM does there

Without Slurm the two-GPU stages run each workload with the environment its job script
gives it (CUDA_VISIBLE_DEVICES, HPC_VLLM_PORT, JUDGE_API_BASE); the judge stage runs the
job script's own judge block. The judge of the other stages is a string match on loopback
(accept when every word of the reference answer is in the answer): the GPU node has no
network. Exit 0 when every stage ran or was skipped, 1 when one failed, 2 for bad arguments
(a --work that is not empty among them).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from hpc.digits import is_count
from hpc.job.exit_codes import EXIT_BAD_INPUT
from trainer.proof import background
from trainer.proof.cards import cluster_names
from trainer.proof.gpus import gpu_list, node_gpus
from trainer.proof.loopback_openai import OpenAIServer
from trainer.proof.one_gpu import stage_data
from trainer.proof.stages import BY_NAME, DEFAULT, NAMES
from trainer.proof.string_match_judge import string_match_verdict
from trainer.proof.workspace import ProofFailed, Work, fresh_folder_problem, say

PROG = "python -m trainer.proof"


# -- the command line -------------------------------------------------------------------------------------


def cluster(text: str) -> str:
    if text not in cluster_names():
        raise argparse.ArgumentTypeError(f"invalid cluster {text!r}: accepted {', '.join(cluster_names())}")
    return text


def positive(text: str) -> int:
    if not is_count(text) or int(text) < 1:  # digits 0-9 only (hpc/digits.py)
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected an integer >= 1")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-proof"),
                        help="the proof's folder: new or empty (kept after)")
    parser.add_argument("--only", nargs="*", choices=NAMES, default=list(DEFAULT),
                        help="these stages, in order (default: env to baseline)")
    parser.add_argument("--gpus", type=gpu_list, default=None,
                        help="the GPUs the proof may use, by nvidia-smi index (default: all of the node's)")
    parser.add_argument("--model", type=Path, default=None, help="a small model an earlier proof made and warmed up")
    parser.add_argument("--model14b", type=Path, default=None, help="a qwen2.5-14b model an earlier proof made")
    parser.add_argument("--steps", type=int, default=3, help="steps of the first training process")
    parser.add_argument("--cost_steps", type=int, default=5,
                        help="steps of each side of the baseline (its first is left out of the figure)")
    parser.add_argument("--cost_rounds", type=positive, default=3,
                        help="rounds of the baseline, each side in a fresh run, taking turns (median and spread)")
    parser.add_argument("--warmup_steps", type=int, default=300)
    parser.add_argument("--card", type=cluster, default=None,
                        help="agent008-14b on this cluster's card, emulated on the lent one (default: the lent card)")
    parser.add_argument("--emulate", type=cluster, nargs="*", default=["lonestar6"],
                        help="the cards stage's clusters (default: lonestar6, a 40 GB A100)")
    parser.add_argument("--max_tokens", type=positive, default=None,
                        help="agent008-14b: a per-turn limit other than agent_008's 2048 (said as a deviation)")
    parser.add_argument("--fast_start", action="store_true",
                        help="agent008-14b: vLLM without CUDA graphs (said as a deviation)")
    parser.add_argument("--resume_steps", type=int, default=0,
                        help="agent008-14b: steps the resumed job trains (0: stopped once its first step has started)")
    parser.add_argument("--full_steps", type=int, default=2, help="agent008-14b: steps of the first training process")
    parser.add_argument("--bundle_to", type=Path, default=None,
                        help="agent008-14b, segment 1: after the first process, bundle the run into this new folder "
                             "and stop (python -m hpc.run bundle)")
    parser.add_argument("--from_bundle", type=Path, default=None,
                        help="agent008-14b, segment 2: unbundle the run from this folder, then only the resume")
    parser.add_argument("--part_mib", type=int, default=1024, help="agent008-14b: the bundle's largest part in MiB")
    parser.add_argument("--background", action="store_true",
                        help="start the proof in a session of its own and return (output in WORK/proof.log)")
    parser.add_argument("--follow", type=float, default=None, metavar="SECONDS",
                        help="print a background proof's new lines for at most SECONDS, then where it stands")
    parser.add_argument("--started_in_background", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    problem = missing_stage(args)
    if problem:
        parser.error(problem)
    return args


def missing_stage(args: argparse.Namespace) -> str | None:
    """A stage whose prerequisite neither comes before it in --only nor is given as a model."""
    given = {"model": args.model is not None, "model14b": args.model14b is not None}
    for position, stage in enumerate(args.only):
        need = BY_NAME[stage].needs
        if need and need not in args.only[:position] and not given.get(need, False):
            hint = f" (or --{need} DIR)" if need in given else ""
            return (f"--only {stage} needs {need} before it in the same proof{hint}: every proof starts from an empty "
                    "folder")
    return None


def run_stage(name: str, work: Work, args: argparse.Namespace) -> bool:
    """One stage, its lines and its end; False when it failed."""
    say(f"== {name}")
    began = time.monotonic()
    stage = BY_NAME[name]
    if len(args.gpus) < stage.gpus:
        say(f"skipped {name}: it needs {stage.gpus} GPUs and the proof has {len(args.gpus)} (--gpus {','.join(args.gpus)})")
        return True
    try:
        lines = stage.run(work, args)
    except (ProofFailed, subprocess.TimeoutExpired, OSError) as error:
        say(f"FAILED {name} after {time.monotonic() - began:.0f} s: {error}")
        return False
    for line in lines:
        say(f"  {line}")
    say(f"ok {name} in {time.monotonic() - began:.0f} s")
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.follow is not None:
        return background.follow(args.work, args.follow)
    if not args.started_in_background:
        problem = fresh_folder_problem(args.work)
        if problem:
            print(f"{PROG}: error: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.background:
        return background.start(argv, args.work)
    code = prove(args)
    if args.started_in_background:
        background.record_exit(args.work, code)
    return code


def prove(args: argparse.Namespace) -> int:
    """Every stage of --only in order, in the fresh --work folder; 1 at the first that fails."""
    args.gpus = args.gpus or node_gpus() or ["0"]
    args.work.mkdir(parents=True, exist_ok=True)
    with OpenAIServer(string_match_verdict) as judge:
        work = Work(args.work, judge.base_url, devices=args.gpus[0], made=args.model)
        try:
            say(stage_data(work))
        except ProofFailed as error:
            say(f"FAILED data: {error}")
            return 1
        if not all(run_stage(name, work, args) for name in args.only):
            return 1
    say(f"GPU proof: stages {', '.join(args.only)} done")
    return 0

