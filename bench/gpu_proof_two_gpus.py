"""The GPU proof's stages that need two GPUs (bench/gpu_proof.py runs them; it skips them,
saying so, where it has one), and the trainer's cost measured side by side.

Without Slurm on the GPU machine each stage runs the workload with the environment its job
script would give it:
- dedicated: trainer.train with ``gpu_mode=dedicated`` and the two GPUs listed the other way
  round (CUDA_VISIBLE_DEVICES=1,0), as a job may be given them; training must land on the
  first listed and vLLM on the second, which is what ``trainer.training.train.gpu_placement``
  promises and nvidia-smi shows.
- judge: the job script's own judge block (sbatch/_judge_server.sh.j2, rendered as hpc.launch
  renders it) starts the made model as the judge on the second GPU, waits until it answers
  and gives the run the first; trainer.train then asks it for every verdict.
- pack: ``hpc.job.pack slots`` gives two runs a GPU and a vLLM port each, as a pack job's
  script does; both train at once, each in its own run directory and checkpoint folder.
- baseline: trainer.train and bench/gpu_baseline_loop.py (a minimal loop calling ART
  directly) on the same model, scenarios, group size and concurrency, at the same time on
  two GPUs: rollouts per second of gathering, each side's first step left out (it compiles
  the LoRA kernels).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.gpu_proof_kit import (
    PYTHON, REPO, MemorySampler, Process, ProofFailed, Work, after_steps, check_stopped, check_trained, command, gpu_total_gib,
    last_lines, memory_estimate, rollouts_per_second, run_together, seconds_per_step, seconds_to_register, served_at,
    trained_steps, trainer, trainer_process, wait_for)

JUDGE_PORT = 18765  # hpc.launcher.judge_serve's default
JUDGE_START_TIMEOUT = 900
VLLM_SHARE_SEEN = 0.5  # a GPU holding vLLM shows at least this share of its memory used (it takes 0.75 or 0.9)
_JUDGE_RESPONSE = re.compile(r'"POST /v1/chat/completions HTTP/1\.\d" (\d{3})')


# -- dedicated ------------------------------------------------------------------------------------------


def stage_dedicated(work: Work, args: argparse.Namespace) -> list[str]:
    """Training on the run's first GPU, vLLM on its second, the GPUs listed in reverse."""
    train_gpu, vllm_gpu = args.gpus[1], args.gpus[0]
    run = work.for_run("proof-dedicated", devices=f"{train_gpu},{vllm_gpu}")
    run.claim()
    with MemorySampler() as memory:
        code, log, seconds = trainer(run, "dedicated", run.train_args("gpu_mode=dedicated"),
                                     until=after_steps(run, args.steps))
    records = check_trained(run, code, log, args.steps, changed_at_least=1)
    train_gib, vllm_gib = memory.peak_gib(train_gpu), memory.peak_gib(vllm_gpu)
    if vllm_gib < VLLM_SHARE_SEEN * gpu_total_gib(vllm_gpu) or train_gib >= vllm_gib:
        raise ProofFailed(f"vLLM is not on the run's second GPU: peaks GPU {train_gpu} {train_gib:.1f} GiB (training), "
                          f"GPU {vllm_gpu} {vllm_gib:.1f} GiB (vLLM)")
    return [f"CUDA_VISIBLE_DEVICES={run.devices}: register {seconds_to_register(log)} s; whole process {seconds:.0f} s",
            f"steps: {len(records)} done, {seconds_per_step(records):.1f} s per step, "
            f"{rollouts_per_second(records):.2f} rollouts/s; LoRA changed at {trained_steps(run, records)}",
            f"peak memory: GPU {train_gpu} (training) {train_gib:.1f} GiB, GPU {vllm_gpu} (vLLM) {vllm_gib:.1f} GiB; "
            f"{memory_estimate(run, 'dedicated', vllm_gpu)}",
            f"stop: {run.run.read_stops()[-1]['reason']}"]


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
        "HPC_CLEANUP=()",
        'hpc_cleanup() { local i; for ((i = ${#HPC_CLEANUP[@]} - 1; i >= 0; i--)); do eval "${HPC_CLEANUP[i]}" || true; done; }',
        "trap hpc_cleanup EXIT",
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
            self._process = subprocess.Popen(["bash", str(script)], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                             env=self.work.env(CUDA_VISIBLE_DEVICES=self.job_gpus))
        ready = self.judge_dir / "workload.env"
        wait_for(lambda: ready.is_file() or self._process.poll() is not None, JUDGE_START_TIMEOUT + 60)
        if not ready.is_file():
            raise ProofFailed(f"the judge block exited {self._process.returncode}: "
                              f"{last_lines(self.work.log('judge-job').read_text())}")
        return read_env_file(ready)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=180)

    def responses(self) -> Counter[str]:
        """The HTTP status of each chat request the judge got (its vLLM's access log)."""
        log = self.judge_dir / "vllm.log"
        return Counter(_JUDGE_RESPONSE.findall(log.read_text(errors="replace")) if log.is_file() else [])


def stage_judge(work: Work, args: argparse.Namespace) -> list[str]:
    """The judge served in the job on the second GPU; the run on the first asks it."""
    run = work.for_run("proof-judge")
    run.run.judge_dir.mkdir(parents=True, exist_ok=True)
    served = ServedJudge(run, run.run.judge_dir, f"{args.gpus[0]},{args.gpus[1]}")
    began = time.monotonic()
    try:
        workload = served.start()
        if workload.get("HPC_SETUP_ERROR"):
            raise ProofFailed(workload["HPC_SETUP_ERROR"])
        judge_seconds = time.monotonic() - began
        asking = Work(work.root, served.api_base, run.run_name, workload["CUDA_VISIBLE_DEVICES"], str(work.model))
        asking.claim()
        code, log, _ = trainer(asking, "judge-run", asking.train_args(), until=after_steps(asking, 2))
    finally:
        served.stop()
    records = check_stopped(asking, code, log, 1)
    answered = served.responses()
    if answered["200"] < 2 or set(answered) != {"200"}:
        raise ProofFailed(f"the served judge answered {dict(answered)} (HTTP status: requests), not every request "
                          f"with 200 (see {served.judge_dir / 'vllm.log'})")
    return [f"judge {work.model.name} on GPU {args.gpus[1]} answering after {judge_seconds:.0f} s; the run got "
            f"CUDA_VISIBLE_DEVICES={workload['CUDA_VISIBLE_DEVICES']}",
            f"steps {[r['step'] for r in records]}: the served judge answered {answered['200']} requests (the "
            f"preflight's and the verdicts); {sum(r['judge_failures'] for r in records)} verdicts unusable (the made "
            f"model is no judge: the path is the proof); LoRA changed at {trained_steps(asking, records)}"]


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
    slots = pack_slots(work, members, f"{args.gpus[0]},{args.gpus[1]}")
    runs = [member.for_run(member.run_name, devices=slot.devices) for member, slot in zip(members, slots)]
    processes = [trainer_process(run, run.run_name, run.train_args(), after_steps(run, args.steps),
                                 HPC_VLLM_PORT=slot.port, HPC_PACK_RUNS=str(len(slots)))
                 for run, slot in zip(runs, slots)]
    with MemorySampler() as memory:
        results = run_together(processes)
    return [line for run, slot, (code, log, seconds) in zip(runs, slots, results)
            for line in pack_member_lines(run, slot, code, log, memory)]


def pack_member_lines(run: Work, slot: PackSlot, code: int, log: str, memory: MemorySampler) -> list[str]:
    records = check_trained(run, code, log, 1, changed_at_least=1)
    served = served_at(log)
    if served is None or not served[0].rstrip("/").removesuffix("/v1").endswith(f":{slot.port}"):
        raise ProofFailed(f"{run.run_name}: vLLM is not on the pack's port {slot.port}: {served}")
    peak = memory.peak_gib(slot.devices)
    if peak < VLLM_SHARE_SEEN * gpu_total_gib(slot.devices):
        raise ProofFailed(f"{run.run_name}: its GPU {slot.devices} peaked at {peak:.1f} GiB: its vLLM is elsewhere")
    return [f"{run.run_name}: GPU {slot.devices}, vLLM at {served[0]}; register {seconds_to_register(log)} s; "
            f"{len(records)} steps at {seconds_per_step(records):.1f} s, {rollouts_per_second(records):.2f} rollouts/s; "
            f"LoRA changed at {trained_steps(run, records)}; peak {peak:.1f} GiB; checkpoints in {run.model_dir}"]


TWO_GPU_STAGES = {"dedicated": stage_dedicated, "judge": stage_judge, "pack": stage_pack}


# -- the trainer's own cost ------------------------------------------------------------------------------


def stage_baseline(work: Work, args: argparse.Namespace) -> list[str]:
    """Rollouts per second of gathering, trainer.train against the minimal loop, over steps 2 to
    --cost_steps of each: at the same time on two GPUs, else one after the other."""
    ours = work.for_run("proof-cost", devices=args.gpus[0])
    ours.claim()
    theirs = ours.for_run("proof-cost", devices=args.gpus[-1])
    sides = [trainer_process(ours, "cost-trainer", ours.train_args(), after_steps(ours, args.cost_steps)),
             Process(theirs, "cost-minimal-loop", ["bench/gpu_baseline_loop.py", "--model", str(work.model), "--data_dir",
                                                   str(work.data), "--steps", str(args.cost_steps), "--art_path",
                                                   str(work.root / "art-baseline")])]
    together = len(args.gpus) > 1
    results = run_together(sides) if together else [run_together([side])[0] for side in sides]
    (code, log, _), (loop_code, loop_log, _) = results
    records = check_stopped(ours, code, log, args.cost_steps)[1:args.cost_steps]
    found = re.search(r"baseline rollouts/s ([0-9.]+)", loop_log)
    if loop_code != 0 or not found:
        raise ProofFailed(f"the minimal loop exited {loop_code} with no figure: {last_lines(loop_log)}")
    rate, baseline = rollouts_per_second(records), float(found.group(1))
    how = f"side by side on GPUs {args.gpus[0]} and {args.gpus[-1]}" if together else f"one after the other on GPU {args.gpus[0]}"
    return [f"rollouts/s over steps 2-{args.cost_steps}, {how}: trainer.train {rate:.2f}, minimal ART loop "
            f"{baseline:.2f}: {rate / baseline:.3f} of the minimal loop (target >= 0.95)",
            "minimal loop: " + " | ".join(line for line in loop_log.splitlines() if line.startswith("baseline step"))]
