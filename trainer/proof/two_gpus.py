"""The GPU proof's stages that need two GPUs (python -m trainer.proof runs them; it skips them,
saying so, where it has one), and the trainer's cost measured side by side.

Without Slurm on the GPU machine each stage runs the workload with the environment its job
script would give it:
- dedicated: trainer.train with ``gpu_mode=dedicated`` and the two GPUs listed the other way
  round (CUDA_VISIBLE_DEVICES=1,0), as a job may be given them; training must land on the
  first listed and vLLM on the second, which is what ``trainer.training.train.gpu_placement``
  promises and nvidia-smi shows.
- judge: the job script's own judge block (sbatch/_judge_server.sh.j2, rendered as hpc.launch
  renders it) starts the made model as the judge on the second GPU, waits until it answers
  and gives the run the first; trainer.train then asks it for every verdict, through a
  forwarder that counts what it asks: the requests asked must equal the 200s the judge's own
  log of this invocation shows.
- pack: ``hpc.job.pack slots`` gives two runs a GPU and a vLLM port each, as a pack job's
  script does; exactly those two train at once, each in its own run directory and checkpoint folder.
- baseline: trainer.train and trainer/proof/baseline_loop.py (a minimal loop calling ART
  directly) on the same model, objective, judge, scenarios, group size and concurrency, at the
  same time on two GPUs (one after the other on one): rollouts per second of gathering, each
  side's first step left out (it compiles the LoRA kernels); --cost_rounds rounds, each side in
  a fresh run, the GPUs (or the order) swapped every round; the median ratio must reach 0.95,
  and the spread is shown (sampling at temperature 1.0 moves each round's figure).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import statistics
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hpc.job.workload_env import HPC_SETUP_ERROR, REPO_DIR
from trainer.proof.counting_forwarder import CountingForwarder
from trainer.proof.figures import (
    check_stopped,
    check_trained,
    rollouts_per_second,
    seconds_per_step,
    seconds_to_register,
    served_at,
    trained_steps,
)
from trainer.proof.gpus import MemorySampler, gpu_total_gib
from trainer.proof.memory import memory_estimate
from trainer.proof.processes import (
    Process,
    after_steps,
    command,
    last_lines,
    run_together,
    trainer,
    trainer_process,
    wait_for,
)
from trainer.proof.workspace import PYTHON, ProofFailed, RecordMark, Work

JUDGE_PORT = 18765  # hpc.launcher.judge_serve's default
JUDGE_START_TIMEOUT = 900
VLLM_SHARE_SEEN = 0.5  # a GPU holding vLLM shows at least this share of its memory used (it takes 0.75 or 0.9)
COST_TARGET = 0.95  # trainer.train's rollouts per second at least this share of the minimal loop's (median of rounds)
_JUDGE_RESPONSE = re.compile(r'"POST /v1/chat/completions HTTP/1\.\d" (\d{3})')


# -- dedicated ------------------------------------------------------------------------------------------


def stage_dedicated(work: Work, args: argparse.Namespace) -> list[str]:
    """Training on the run's first GPU, vLLM on its second, the GPUs listed in reverse."""
    train_gpu, vllm_gpu = args.gpus[1], args.gpus[0]
    run = work.for_run("proof-dedicated", devices=f"{train_gpu},{vllm_gpu}")
    run.claim()
    mark = RecordMark.take(run.run)
    with MemorySampler() as memory:
        code, log, seconds = trainer(run, "dedicated", run.train_args("gpu_mode=dedicated"),
                                     until=after_steps(run, args.steps))
    records = check_trained(run, mark, code, log, args.steps, changed_at_least=1)
    train_gib, vllm_gib = memory.peak_gib(train_gpu), memory.peak_gib(vllm_gpu)
    if vllm_gib < VLLM_SHARE_SEEN * gpu_total_gib(vllm_gpu) or train_gib >= vllm_gib:
        raise ProofFailed(f"vLLM is not on the run's second GPU: peaks GPU {train_gpu} {train_gib:.1f} GiB (training), "
                          f"GPU {vllm_gpu} {vllm_gib:.1f} GiB (vLLM)")
    return [f"CUDA_VISIBLE_DEVICES={run.devices}: register {seconds_to_register(log)} s; whole process {seconds:.0f} s",
            f"steps: {len(records)} done, {seconds_per_step(records):.1f} s per step, "
            f"{rollouts_per_second(records):.2f} rollouts/s; LoRA changed at {trained_steps(run, records)}",
            f"peak memory: GPU {train_gpu} (training) {train_gib:.1f} GiB, GPU {vllm_gpu} (vLLM) {vllm_gib:.1f} GiB; "
            f"{memory_estimate(run, 'dedicated', vllm_gpu)}",
            f"stop: {mark.stops()[-1]['reason']}"]


# -- the judge served in the job -------------------------------------------------------------------------


def judge_job_script(judge_dir: Path, model: Path, port: int = JUDGE_PORT, python: str = PYTHON) -> str:
    """The job script's judge block, rendered as hpc.launch renders it, in a script of its own:
    it starts the judge on the job's GPUs after the run's, waits until it answers, writes what
    the workload gets (its GPUs, a setup error) to ``workload.env``, and keeps the judge until
    the script is terminated (its cleanup stops the judge, as at a job's end)."""
    from hpc.launcher.judge_serve import DEFAULT_MAX_MODEL_LEN, JudgeServe
    from hpc.launcher.render import render

    # the launcher's defaults: a 16384-token window (with 4096 an H200 refused every verdict as a
    # prompt of at least 4097 tokens, although vLLM's /tokenize counts 379) and a cap on each reply
    # (uncapped, the made model asked for JSON wrote whitespace for over 100 s on an H100)
    judge = JudgeServe(str(model), 1, port, DEFAULT_MAX_MODEL_LEN, JUDGE_START_TIMEOUT, first_device=1)
    block = render("_judge_server.sh.j2", {"judge": judge, "judge_dir": str(judge_dir), "pack": None})
    return "\n".join([
        "#!/bin/bash",
        "set -euo pipefail",
        f"export PATH={shlex.quote(str(Path(python).parent))}:\"$PATH\"",
        render("_shell_hooks.sh.j2", {}),  # the job script's cleanup at exit and hpc_gone
        "trap 'exit 143' TERM",
        "HPC_STOP_SIGNAL=",
        block,
        'printf "CUDA_VISIBLE_DEVICES=%s\\nHPC_SETUP_ERROR=%s\\n" "$CUDA_VISIBLE_DEVICES" "${HPC_SETUP_ERROR:-}" '
        '>"$HPC_JUDGE_DIR/workload.env"',
        'wait "$HPC_JUDGE_PID"',
        ""])


def read_env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@dataclass
class ServedJudge:
    """The judge block running in a script of its own (``judge_job_script``)."""

    work: Work
    judge_dir: Path
    job_gpus: str
    port: int = JUDGE_PORT
    _process: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> dict[str, str]:
        """Start it and wait for the judge to answer: what the workload gets (workload.env)."""
        script = self.work.root / "judge-job.sh"
        script.write_text(judge_job_script(self.judge_dir, self.work.model, self.port))
        (self.judge_dir / "workload.env").unlink(missing_ok=True)
        with self.work.log("judge-job").open("w") as out:
            process = subprocess.Popen(["bash", str(script)], cwd=REPO_DIR, stdout=out, stderr=subprocess.STDOUT,
                                       env=self.work.env(CUDA_VISIBLE_DEVICES=self.job_gpus))
        self._process = process
        ready = self.judge_dir / "workload.env"
        wait_for(lambda: ready.is_file() or process.poll() is not None, JUDGE_START_TIMEOUT + 60)
        if not ready.is_file():
            raise ProofFailed(f"the judge block exited {process.returncode}: "
                              f"{last_lines(self.work.log('judge-job').read_text())}")
        return read_env_file(ready)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=180)

    def log_offset(self) -> int:
        """Where the judge's vLLM log ends now: what this invocation's judge writes comes after it."""
        log = self.judge_dir / "vllm.log"
        return log.stat().st_size if log.is_file() else 0

    def responses(self, offset: int = 0) -> Counter[str]:
        """The HTTP status of each chat request the judge answered after ``offset`` of its vLLM's access log."""
        log = self.judge_dir / "vllm.log"
        if not log.is_file():
            return Counter()
        with log.open("rb") as handle:
            handle.seek(offset)
            return Counter(_JUDGE_RESPONSE.findall(handle.read().decode(errors="replace")))


def stage_judge(work: Work, args: argparse.Namespace) -> list[str]:
    """The judge served in the job on the second GPU; the run on the first asks it, through a
    forwarder that counts the requests."""
    run = work.for_run("proof-judge")
    run.run.judge_dir.mkdir(parents=True, exist_ok=True)
    served = ServedJudge(run, run.run.judge_dir, f"{args.gpus[0]},{args.gpus[1]}")
    offset = served.log_offset()
    began = time.monotonic()
    try:
        workload = served.start()
        if workload.get(HPC_SETUP_ERROR):
            raise ProofFailed(workload[HPC_SETUP_ERROR])
        judge_seconds = time.monotonic() - began
        with CountingForwarder(served.api_base.removesuffix("/v1")) as forwarder:
            asking = dataclasses.replace(run, judge_url=forwarder.base_url, devices=workload["CUDA_VISIBLE_DEVICES"],
                                         judge_model=str(work.model))
            asking.claim()
            mark = RecordMark.take(asking.run)
            code, log, _ = trainer(asking, "judge-run", asking.train_args(), until=after_steps(asking, 2))
            asked = forwarder.asked()
    finally:
        served.stop()
    records = check_stopped(asking, mark, code, log, 1)
    answered = served.responses(offset)
    check_judge_counts(asked, answered, served.judge_dir / "vllm.log")
    return [f"judge {work.model.name} on GPU {args.gpus[1]} answering after {judge_seconds:.0f} s; the run got "
            f"CUDA_VISIBLE_DEVICES={workload['CUDA_VISIBLE_DEVICES']}",
            f"steps {[r['step'] for r in records]}: the run asked {sum(asked.values())} chat requests (the preflight's "
            f"and the verdicts, counted on the way) and the judge's log shows {answered['200']} answered 200; "
            f"{sum(r['judge_failures'] for r in records)} verdicts unusable (the made model is no judge: the path is "
            f"the proof); LoRA changed at {trained_steps(asking, records)}"]


def check_judge_counts(asked: Counter[int], answered: Counter[str], log: Path) -> None:
    """Every request the run asked was answered 200, and the judge answered no other: the counts
    on both sides are equal, and there are at least two (the preflight's ping and a verdict)."""
    total = sum(asked.values())
    if total < 2 or set(asked) != {200} or set(answered) != {"200"} or answered["200"] != total:
        raise ProofFailed(f"the run asked {total} chat requests, answered {dict(asked)} (HTTP status: requests); the "
                          f"judge's log of this invocation shows {dict(answered)} ({log}): not every verdict asked "
                          "was answered with 200")


# -- a pack of two runs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackSlot:
    """One line of ``hpc.job.pack slots``: a run's GPUs and vLLM port in the pack job."""

    run_name: str
    devices: str
    port: str


def pack_slots(work: Work, runs: list[Work], job_gpus: str) -> list[PackSlot]:
    """What a pack job's script asks ``hpc.job.pack slots`` for (the member scripts are named, not run)."""
    members = [arg for run in runs for arg in ("--member", str(run.run.path), str(work.root / f"{run.run_name}.sh"))]
    output = command(work, "pack-slots", ["-m", "hpc.job.pack", "slots", "--gpus_per_run", "1", *members],
                     CUDA_VISIBLE_DEVICES=job_gpus)
    rows = [line.split("\t") for line in output.splitlines() if line.count("\t") == 5]
    return [PackSlot(row[5], row[1], row[2]) for row in rows]


def stage_pack(work: Work, args: argparse.Namespace) -> list[str]:
    """Two runs in one job, each on its own GPU and vLLM port, training at once."""
    members = [work.for_run(name) for name in ("proof-pack-a", "proof-pack-b")]
    for member in members:
        member.claim()
    slots = check_slots(pack_slots(work, members, f"{args.gpus[0]},{args.gpus[1]}"), members)
    runs = [member.for_run(member.run_name, devices=slot.devices) for member, slot in zip(members, slots)]
    marks = [RecordMark.take(run.run) for run in runs]
    processes = [trainer_process(run, run.run_name, run.train_args(), after_steps(run, args.steps),
                                 HPC_VLLM_PORT=slot.port, HPC_PACK_RUNS=str(len(slots)))
                 for run, slot in zip(runs, slots)]
    with MemorySampler() as memory:
        results = run_together(processes)
    return [line for run, mark, slot, (code, log, seconds) in zip(runs, marks, slots, results)
            for line in pack_member_lines(run, mark, slot, code, log, memory)]


def check_slots(slots: list[PackSlot], members: list[Work]) -> list[PackSlot]:
    """Exactly one slot for each member, in order, on GPUs and ports of their own."""
    names = [member.run_name for member in members]
    if [slot.run_name for slot in slots] != names or len({s.devices for s in slots}) != len(slots) \
            or len({s.port for s in slots}) != len(slots):
        raise ProofFailed(f"hpc.job.pack slots gave {slots} for the members {names}: not exactly one slot each, "
                          "each on its own GPU and port")
    return slots


def pack_member_lines(run: Work, mark: RecordMark, slot: PackSlot, code: int, log: str,
                      memory: MemorySampler) -> list[str]:
    records = check_trained(run, mark, code, log, 1, changed_at_least=1)
    served = served_at(log)
    if served is None or not served[0].rstrip("/").removesuffix("/v1").endswith(f":{slot.port}"):
        raise ProofFailed(f"{run.run_name}: vLLM is not on the pack's port {slot.port}: {served}")
    peak = memory.peak_gib(slot.devices)
    if peak < VLLM_SHARE_SEEN * gpu_total_gib(slot.devices):
        raise ProofFailed(f"{run.run_name}: its GPU {slot.devices} peaked at {peak:.1f} GiB: its vLLM is elsewhere")
    return [f"{run.run_name}: GPU {slot.devices}, vLLM at {served[0]}; register {seconds_to_register(log)} s; "
            f"{len(records)} steps at {seconds_per_step(records):.1f} s, {rollouts_per_second(records):.2f} rollouts/s; "
            f"LoRA changed at {trained_steps(run, records)}; peak {peak:.1f} GiB; checkpoints in {run.model_dir}"]



# -- the trainer's own cost ------------------------------------------------------------------------------


def stage_baseline(work: Work, args: argparse.Namespace) -> list[str]:
    """Rollouts per second of gathering, trainer.train against the minimal loop, over steps 2 to
    --cost_steps of each, in --cost_rounds rounds of fresh runs: at the same time on two GPUs
    (swapped each round), else one after the other (the order swapped each round). The median
    round's ratio must reach COST_TARGET; every round's is shown."""
    rounds = [cost_round(work, args, number) for number in range(1, args.cost_rounds + 1)]
    ratios = [ours / theirs for ours, theirs, _ in rounds]
    median = statistics.median(ratios)
    lines = [f"round {n}: trainer.train {ours:.2f}, minimal ART loop {theirs:.2f} rollouts/s ({how}): {ours / theirs:.3f}"
             for n, (ours, theirs, how) in enumerate(rounds, 1)]
    lines.append(f"trainer.train at {median:.3f} of the minimal loop (median of {len(ratios)} rounds; spread "
                 f"{min(ratios):.3f}-{max(ratios):.3f}; target >= {COST_TARGET}); the same objective both sides")
    if median < COST_TARGET:
        raise ProofFailed(" | ".join(lines) + f": below the target {COST_TARGET}")
    return lines


def cost_round(work: Work, args: argparse.Namespace, number: int) -> tuple[float, float, str]:
    """One round: each side in a run of its own; (trainer.train's rollouts/s, the loop's, how they ran)."""
    from trainer.training.config import load_config
    from trainer.training.training_step import Objective

    gpus = args.gpus if number % 2 else args.gpus[::-1]
    ours = work.for_run(f"proof-cost-{number}", devices=gpus[0])
    ours.claim()
    mark = RecordMark.take(ours.run)
    theirs = ours.for_run(ours.run_name, devices=gpus[-1])
    sides = [trainer_process(ours, f"cost-trainer-{number}", ours.train_args(), after_steps(ours, args.cost_steps)),
             Process(theirs, f"cost-minimal-loop-{number}", [
                 "-m", "trainer.proof.baseline_loop", "--model", str(work.model), "--data_dir", str(work.data), "--steps",
                 str(args.cost_steps), "--art_path", str(work.root / f"art-baseline-{number}")])]
    together = len(args.gpus) > 1
    if together:
        results = run_together(sides)
    else:
        ran = {side.name: run_together([side])[0] for side in (sides if number % 2 else sides[::-1])}
        results = [ran[side.name] for side in sides]
    (code, log, _), (loop_code, loop_log, _) = results
    records = check_stopped(ours, mark, code, log, args.cost_steps)[1:args.cost_steps]
    found = re.search(r"baseline rollouts/s ([0-9.]+)", loop_log)
    if loop_code != 0 or not found:
        raise ProofFailed(f"the minimal loop exited {loop_code} with no figure: {last_lines(loop_log)}")
    check_same_objective(loop_log, Objective.from_config(load_config("smoke", ours.train_args())).train_kwargs())
    how = (f"side by side, trainer.train on GPU {gpus[0]}, the loop on GPU {gpus[-1]}" if together
           else f"one after the other on GPU {gpus[0]}, {'trainer.train' if number % 2 else 'the loop'} first")
    return rollouts_per_second(records), float(found.group(1)), how


def check_same_objective(loop_log: str, trainer_kwargs: dict) -> None:
    """The minimal loop trained with what trainer.train passes backend.train (its printed objective)."""
    found = re.search(r"^baseline objective: (.*)$", loop_log, re.M)
    if found is None or json.loads(found.group(1)) != trainer_kwargs:
        raise ProofFailed(f"the minimal loop's objective {found.group(1) if found else 'is not printed'}, not "
                          f"trainer.train's {trainer_kwargs}")
