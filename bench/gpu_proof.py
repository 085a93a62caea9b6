"""The GPU proof: agent_008's real path on this node's GPUs, stage by stage, with a model made here.

    .venv/bin/python bench/gpu_proof.py [--work DIR] [--only STAGE ...] [--gpus 0,1]

Run it on a new cluster's GPU node (or the lent GPU machine) after ``bash setup.sh`` (or
``--from-wheelhouse``). It needs no download: the data is the fixture corpus this
repository ships, the model is made by ``trainer.data make-model`` and warmed up on
scripted trajectories (``trainer.warmup``), so that the rollouts of a group differ and
GRPO has something to learn. Each stage prints what it did and its figures; the first
stage that fails ends the proof with exit 1.

Stages (one GPU):
  env       the GPUs, torch, ART, the vLLM runtime the trainer will use
  model     data staged from the fixture; a small Qwen2 made and warmed up
  train     trainer.train with ART's LocalBackend: register (Unsloth, vLLM), steps that
            really train (rewards differ in a group, the LoRA changes), validation,
            checkpoints in ART's layout, progress.json and steps.jsonl; stopped by SIGUSR1
            after --steps steps (exit 75, the step being trained is saved)
  resume    a second process: the latest checkpoint, vLLM serving it, the next step trains
            with no step repeated; SIGUSR1 after it
  boundary  a third process whose job end is near (HPC_JOB_END_TIME): the backend's start-up and
            the next step would not end before the stop signal, so neither starts: exit 75 in
            seconds, a boundary record
  eval      trainer.eval of the latest checkpoint through vLLM with the LoRA
  serve     trainer.serve answering /invoke through vLLM with the LoRA; trainer.ask once
Stages (two GPUs; skipped, and said so, where --gpus names one), in bench/gpu_proof_two_gpus.py:
  dedicated gpu_mode=dedicated: training on the run's first GPU, vLLM on its second
  judge     the judge served in the job (sbatch/_judge_server.sh.j2, rendered and run) on the
            second GPU with the made model, the run on the first
  pack      a pack of two runs, each on its own GPU and vLLM port (hpc.job.pack slots)
  baseline  the trainer's own cost: rollouts per second of trainer.train against a minimal
            loop calling ART directly (same model, group size, concurrency, scenarios), side
            by side on two GPUs at once (one after the other where there is one GPU)

Without Slurm the two-GPU stages run each workload with the environment its job script
gives it (CUDA_VISIBLE_DEVICES, HPC_VLLM_PORT, JUDGE_API_BASE); the judge stage runs the
job script's own judge block. The judge of the other stages is a string match on loopback
(accept when every word of the reference answer is in the answer): the GPU node has no
network. Figures: time to register, seconds per step, rollouts per second, peak memory of
each GPU (nvidia-smi, sampled each second) against hpc.launcher.gpu_memory's estimate,
checkpoint size, the resumed step. Exit 0 when every stage ran or was skipped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_proof_kit import (  # noqa: E402
    FIXTURE, PYTHON, REPO, RUN_NAME, MemorySampler, ProofFailed, Work, after_steps, check_trained, command,
    folder_mib, last_lines, memory_estimate, node_gpus, rollouts_per_second, say, seconds_per_step,
    seconds_to_register, served_at, string_match_verdict, trained_steps, trainer, wait_for)
from bench.gpu_proof_two_gpus import TWO_GPU_STAGES, stage_baseline  # noqa: E402
from hpc.run.checkpoints import list_checkpoints  # noqa: E402
from hpc.run.rundir import EXIT_STOPPED_FOR_TIME  # noqa: E402
from tests.doubles.openai_server import OpenAIServer  # noqa: E402

STAGES = ("env", "model", "train", "resume", "boundary", "eval", "serve", "dedicated", "judge", "pack", "baseline")


# -- the stages -------------------------------------------------------------------------------------------


def stage_env(work: Work, args: argparse.Namespace) -> list[str]:
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True)
    if gpus.returncode != 0 or not gpus.stdout.strip():
        raise ProofFailed("nvidia-smi finds no GPU: run the proof on a GPU node")
    probe = ("import torch, importlib.metadata as m; print(torch.__version__, torch.version.cuda, "
             "torch.cuda.is_available(), m.version('openpipe-art'), m.version('unsloth'))")
    versions = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True, env=work.env())
    if versions.returncode != 0:
        raise ProofFailed(f"the backend does not import here: {last_lines(versions.stderr)}")
    torch_version, cuda, available, art, unsloth = versions.stdout.split()
    if available != "True":
        raise ProofFailed(f"torch {torch_version} sees no GPU")
    runtime = command(work, "runtime", ["-m", "hpc.job.vllm_runtime", "status"]).strip()
    if not runtime.startswith(("PyPI build at", "ART's managed runtime at", "ART_VLLM_RUNTIME_BIN at")):
        raise ProofFailed(f"no vLLM runtime for the trainer: {runtime}")
    return [*(f"GPU {line}" for line in gpus.stdout.strip().splitlines()), f"the proof uses GPU(s) {','.join(args.gpus)}",
            f"torch {torch_version} (CUDA {cuda}), openpipe-art {art}, unsloth {unsloth}", f"vLLM runtime: {runtime}"]


def stage_model(work: Work, args: argparse.Namespace) -> list[str]:
    command(work, "data", ["-m", "trainer.data", "prepare", "--data_dir", str(work.data), "--emails",
                           str(FIXTURE / "emails.jsonl"), "--questions", str(FIXTURE / "questions.jsonl"), "--quiet"])
    random = work.root / "model-random"
    made = command(work, "make-model", ["-m", "trainer.data", "make-model", str(random), "--data_dir", str(work.data)])
    warmed = command(work, "warmup", ["-m", "trainer.warmup", str(random), str(work.model), "--data_dir",
                                      str(work.data), "--steps", str(args.warmup_steps), "--max_turns", "4"])
    return [line for line in (made + warmed).splitlines() if line.startswith(("model:", "warmup done"))]


def stage_train(work: Work, args: argparse.Namespace) -> list[str]:
    work.claim()
    with MemorySampler() as memory:
        code, log, seconds = trainer(work, "train", work.train_args(), until=after_steps(work, args.steps))
    records = check_trained(work, code, log, args.steps)
    checkpoints = list_checkpoints(work.model_dir)
    return [f"register (Unsloth load + vLLM start): {seconds_to_register(log)} s; whole process {seconds:.0f} s",
            f"steps: {len(records)} done, {seconds_per_step(records):.1f} s per step, "
            f"{rollouts_per_second(records):.2f} rollouts/s, reward spread {[r['reward_spread'] for r in records]}",
            f"LoRA changed at steps {trained_steps(work, records)}; validation records: {len(work.run.read_validations())}",
            f"checkpoints {[c.step for c in checkpoints]} in {work.model_dir / 'checkpoints'}, "
            f"{folder_mib(checkpoints[-1].path):.1f} MiB each",
            f"peak GPU memory {memory.peak_gib(args.gpus[0]):.1f} GiB; {memory_estimate(work, 'shared', args.gpus[0])}",
            f"stop: {work.run.read_stops()[-1]}"]


def stage_resume(work: Work, args: argparse.Namespace) -> list[str]:
    before = work.run.read_steps()
    last = before[-1]["step"]
    code, log, _ = trainer(work, "resume", work.train_args(), until=after_steps(work, 1))
    after = work.run.read_steps()[len(before):]
    served = served_at(log)
    if code != EXIT_STOPPED_FOR_TIME:
        raise ProofFailed(f"the resumed job exited {code}, not 75 after SIGUSR1: {last_lines(log)}")
    if not after or after[0]["step"] != last + 1:
        raise ProofFailed(f"the resumed job's first step is {after[0]['step'] if after else None}, not {last + 1}")
    if not served or not served[1].endswith(f"@{last}"):
        raise ProofFailed(f"vLLM did not serve checkpoint {last} at start: {served}")
    return [f"resumed from checkpoint {last} (register {seconds_to_register(log)} s); vLLM served {served[1]}",
            f"trained step(s) {[r['step'] for r in after]} (LoRA changed at {trained_steps(work, after)}), "
            f"then SIGUSR1: {work.run.read_stops()[-1]['reason']}"]


def stage_boundary(work: Work, args: argparse.Namespace) -> list[str]:
    """A job whose end is near: its start-up and next step (startups.jsonl, steps.jsonl) are
    predicted not to end before the stop signal may come, so the backend is not even started:
    exit 75, a boundary record, nothing lost."""
    before = work.run.read_steps()
    end = int(time.time()) + 60  # the deadline (end - grace 0 - margin 30 s): 30 s, less than a start-up
    code, log, seconds = trainer(work, "boundary", work.train_args(), HPC_JOB_END_TIME=str(end),
                                 HPC_SIGNAL_GRACE="0")
    stop = work.run.read_stops()[-1]
    if code != EXIT_STOPPED_FOR_TIME or stop["reason"] != "boundary":
        raise ProofFailed(f"the job exited {code} with stop {stop}, not 75 at a step boundary: {last_lines(log)}")
    if len(work.run.read_steps()) != len(before):
        raise ProofFailed("a step was started although it could not end before the deadline")
    numbers = [r["step"] for r in work.run.read_steps()]
    if len(numbers) != len(set(numbers)) or numbers != list(range(1, len(numbers) + 1)):
        raise ProofFailed(f"steps lost or repeated: {numbers}")
    line = next((line for line in log.splitlines() if "not starting" in line), "")
    return [f"stopped at a step boundary after {seconds:.0f} s: {line.split('] ', 1)[-1][:300]}",
            f"stop record: {stop}", f"steps so far {numbers}: none lost, none repeated"]


def stage_eval(work: Work, args: argparse.Namespace) -> list[str]:
    output = command(work, "eval", ["-m", "trainer.eval", "--config", "smoke", "--model", f"run:{work.run_name}@latest",
                                    "--limit", "4", f"base_model={work.model}", "max_turns=4", "max_tokens=256",
                                    "vllm_fast_start=true"], timeout=900)
    return [line for line in output.splitlines() if "accuracy" in line or line.startswith(("run:", "MODEL", "model"))][-4:]


def stage_serve(work: Work, args: argparse.Namespace) -> list[str]:
    log = work.log("serve")
    address = work.run.serve_dir / "address.json"
    address.unlink(missing_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen([PYTHON, "-m", "trainer.serve", "--config", "smoke", "--model", f"run:{work.run_name}",
                                    "--port", "8089"],
                                   cwd=REPO, env=work.env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: address.is_file() or process.poll() is not None, 900)
            if process.poll() is not None:
                raise ProofFailed(f"trainer.serve exited {process.returncode}: {last_lines(log.read_text())}")
            scenario = json.loads((work.data / "scenarios" / "test.jsonl").read_text().splitlines()[0])
            began = time.monotonic()
            answer = command(work, "ask", ["-m", "trainer.ask", scenario["question"], "--inbox", scenario["inbox_address"],
                                           "--date", scenario["query_date"][:10], "--run", work.run_name])
            seconds = time.monotonic() - began
        finally:
            process.terminate()
            process.wait(timeout=120)
    return [f"trainer.serve: {json.loads(address.read_text()).get('model')} at /invoke",
            f"trainer.ask ({seconds:.1f} s): " + " | ".join(answer.strip().splitlines())]


STAGE_FUNCTIONS = {"env": stage_env, "model": stage_model, "train": stage_train, "resume": stage_resume,
                   "boundary": stage_boundary, "eval": stage_eval, "serve": stage_serve, **TWO_GPU_STAGES,
                   "baseline": stage_baseline}


def gpu_list(text: str) -> list[str]:
    """``--gpus 0,1``: GPU indices as nvidia-smi numbers them."""
    gpus = [item.strip() for item in text.split(",") if item.strip()]
    if not gpus or not all(item.isdigit() for item in gpus) or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"invalid --gpus {text!r}: expected distinct GPU indices such as 0,1")
    return gpus


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-proof"), help="the proof's folder (kept after)")
    parser.add_argument("--only", nargs="*", choices=STAGES, default=list(STAGES), help="these stages, in order")
    parser.add_argument("--gpus", type=gpu_list, default=None,
                        help="the GPUs the proof may use, by nvidia-smi index (default: all of the node's)")
    parser.add_argument("--run", default=RUN_NAME,
                        help="the run of the one-GPU stages (train starts it; resume, boundary, eval and serve continue it)")
    parser.add_argument("--steps", type=int, default=3, help="steps of the first training process")
    parser.add_argument("--cost_steps", type=int, default=5,
                        help="steps of each side of the baseline (its first is left out of the figure)")
    parser.add_argument("--warmup_steps", type=int, default=300)
    return parser.parse_args(argv)


def run_stage(name: str, work: Work, args: argparse.Namespace) -> bool:
    """One stage, its lines and its end; False when it failed."""
    say(f"== {name}")
    began = time.monotonic()
    if name in TWO_GPU_STAGES and len(args.gpus) < 2:
        say(f"skipped {name}: it needs two GPUs and the proof has {len(args.gpus)} (--gpus {','.join(args.gpus)})")
        return True
    try:
        lines = STAGE_FUNCTIONS[name](work, args)
    except (ProofFailed, subprocess.TimeoutExpired, OSError) as error:
        say(f"FAILED {name} after {time.monotonic() - began:.0f} s: {error}")
        return False
    for line in lines:
        say(f"  {line}")
    say(f"ok {name} in {time.monotonic() - began:.0f} s")
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.gpus = args.gpus or node_gpus() or ["0"]
    args.work.mkdir(parents=True, exist_ok=True)
    with OpenAIServer(string_match_verdict) as judge:
        work = Work(args.work, judge.base_url, args.run, devices=args.gpus[0])
        if not all(run_stage(name, work, args) for name in args.only):
            return 1
    say(f"GPU proof: stages {', '.join(args.only)} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
