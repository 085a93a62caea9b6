"""The GPU proof: agent_008's real path on this node's GPU, stage by stage, with a model made here.

    .venv/bin/python bench/gpu_proof.py [--work DIR] [--only STAGE ...]

Run it on a new cluster's GPU node (or the lent GPU machine) after ``bash setup.sh`` (or
``--from-wheelhouse``). It needs no download: the data is the fixture corpus this
repository ships, the model is made by ``trainer.data make-model`` and warmed up on
scripted trajectories (``trainer.warmup``), so that the rollouts of a group differ and
GRPO has something to learn. Each stage prints what it did and its figures; the first
stage that fails ends the proof with exit 1.

Stages:
  env       the GPU, torch, ART, the vLLM runtime the trainer will use
  model     data staged from the fixture; a small Qwen2 made and warmed up
  train     trainer.train with ART's LocalBackend: register (Unsloth, vLLM), steps that
            really train (rewards differ in a group, the LoRA changes), validation,
            checkpoints in ART's layout, progress.json and steps.jsonl; stopped by SIGUSR1
            after --steps steps (exit 75, the step being trained is saved)
  resume    a second process: the latest checkpoint, vLLM serving it, the next step trains
            with no step repeated; SIGUSR1 after it
  boundary  a third process whose job end is near (HPC_JOB_END_TIME): the next step would not
            end before the stop signal, so it is not started: exit 75, a boundary record
  eval      trainer.eval of the latest checkpoint through vLLM with the LoRA
  serve     trainer.serve answering /invoke through vLLM with the LoRA; trainer.ask once
  baseline  the trainer's own cost: rollouts per second of a minimal loop calling ART
            directly (same model, GPU, group size, concurrency), against train's

The judge is a string match on loopback (accept when every word of the reference answer
is in the answer): the GPU node has no network, and the judge is not what this proves.
Figures: time to register, seconds per step, rollouts per second, peak GPU memory
(nvidia-smi, sampled each second) against hpc.launcher.gpu_memory's estimate, checkpoint size,
the resumed step. Exit 0 when every stage ran.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpc.run.checkpoints import list_checkpoints  # noqa: E402
from hpc.run.rundir import EXIT_STOPPED_FOR_TIME, RunDir  # noqa: E402
from tests.doubles.openai_server import OpenAIServer, Reply, text  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "art_e"
STAGES = ("env", "model", "train", "resume", "boundary", "eval", "serve", "baseline")
RUN_NAME = "proof"
PYTHON = sys.executable
# the RL run: small turns and groups, so a step takes seconds on one GPU
TRAIN_ARGS = ("base_model={model}", "training_dataset_size=null", "trajectories_per_group=4", "groups_per_step=3",
              "num_epochs=4", "max_turns=4", "max_tokens=256", "max_seq_length=4096", "val_set_size=4",
              "eval_steps=2", "prune_checkpoints=false", "rollout_concurrency=12", "learning_rate=5e-5", "vllm_fast_start=true",
              "preflight_min_free_gb=1")


class ProofFailed(RuntimeError):
    """A stage did not do what it must: one line saying what."""


def say(line: str) -> None:
    print(line, flush=True)


# -- the judge and the GPU's memory ----------------------------------------------------------------


def string_match_verdict(body: dict[str, Any]) -> Reply:
    """The judge of this proof: accept when every word of the reference is in the answer."""
    content = body["messages"][-1]["content"]
    reference = re.search(r"Reference answer: (.*)\nAI answer: ", content, re.S)
    answer = content.split("AI answer: ", 1)[-1].lower()
    words = re.findall(r"[a-z0-9]{3,}", (reference.group(1) if reference else "").lower())
    accept = bool(words) and all(word in answer for word in words)
    return text(json.dumps({"thinking": "every reference word is in the answer" if accept else "a word is missing",
                            "accept": accept}))


@dataclass
class MemorySampler:
    """nvidia-smi's used memory of GPU 0, each second, in a thread: the peak of a stage."""

    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> "MemorySampler":
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            result = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                                    capture_output=True, text=True)
            if result.returncode == 0 and result.stdout.strip().isdigit():
                self.samples.append(int(result.stdout.strip()))

    @property
    def peak_gib(self) -> float:
        return max(self.samples, default=0) / 1024


# -- running the project's commands ------------------------------------------------------------------------


@dataclass
class Work:
    """The proof's folders and the environment every command gets (as a job script gives it)."""

    root: Path
    judge_url: str = ""

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def run(self) -> RunDir:
        return RunDir(self.runs / RUN_NAME)

    @property
    def art(self) -> Path:
        return self.root / "art"

    @property
    def model_dir(self) -> Path:
        return self.art / "email_agent" / "models" / RUN_NAME

    def env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "HPC_RUN_DIR": str(self.run.path), "ART_PATH": str(self.art), "DATA_DIR": str(self.data),
               "HPC_MODEL_DIR": str(self.model_dir), "JUDGE_API_BASE": self.judge_url, "JUDGE_MODEL": "openai/judge",
               "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
        env.setdefault("ART_VLLM_RUNTIME_CACHE_DIR", dotenv_setting("ART_VLLM_RUNTIME_CACHE_DIR"))
        return {**env, **extra}

    def log(self, name: str) -> Path:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        return self.root / "logs" / f"{name}.log"


def dotenv_setting(name: str) -> str:
    """What a job on this machine's cluster gets for ``name`` from the dotenv files."""
    from hpc.launcher.clusters import load_registry
    from hpc.launcher.jobspec import dotenv_setting as setting

    return setting(name, load_registry().detect().cluster) or ""


def command(work: Work, name: str, args: list[str], timeout: float = 600, **env: str) -> str:
    """Run ``python -m``-style ``args`` to the end, its output in logs/<name>.log; the output."""
    log = work.log(name)
    with log.open("w") as out:
        result = subprocess.run([PYTHON, *args], cwd=REPO, env=work.env(**env), stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout)
    output = log.read_text()
    if result.returncode != 0:
        raise ProofFailed(f"{' '.join(args[:3])} exited {result.returncode}: {last_lines(output)}")
    return output


def last_lines(output: str, count: int = 3) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip() and "it/s]" not in line]
    return " | ".join(lines[-count:])[-600:]


def trainer(work: Work, name: str, overrides: list[str], until: Callable[[], bool] | None = None,
            timeout: float = 900, **env: str) -> tuple[int, str, float]:
    """trainer.train in a process of its own, as a job runs it: (exit code, its log, seconds).
    ``until``: once it holds, the process gets SIGUSR1 (the job's stop warning)."""
    log = work.log(name)
    began = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen([PYTHON, "-m", "trainer.train", "--config", "smoke", *overrides], cwd=REPO,
                                   env=work.env(**env), stdout=out, stderr=subprocess.STDOUT)
        signalled = False
        while process.poll() is None:
            if time.monotonic() - began > timeout:
                process.kill()
                raise ProofFailed(f"{name}: trainer.train still running after {timeout:.0f} s (log {log})")
            if until is not None and not signalled and until():
                process.send_signal(signal.SIGUSR1)
                signalled = True
            time.sleep(0.5)
    return process.returncode, log.read_text(), time.monotonic() - began


def seconds_to_register(log: str) -> float | None:
    """From the trainer's first line to 'registered:' (Unsloth loaded, vLLM serving)."""
    stamps = re.findall(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) \[trainer\] (config |registered:)", log, re.M)
    begin = next((s for s, what in stamps if what == "config "), None)
    end = next((s for s, what in stamps if what == "registered:"), None)
    if begin is None or end is None:
        return None
    parse = lambda stamp: time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))  # noqa: E731
    return parse(end) - parse(begin)


def rollouts_per_second(records: list[dict[str, Any]]) -> float:
    """Rollouts gathered per second of gathering (steps.jsonl's trajectories and rollout_seconds)."""
    count = sum(record["trajectories"] for record in records)
    seconds = sum(record["rollout_seconds"] for record in records)
    return count / seconds if seconds else 0.0


def adapter_bytes(checkpoint: Path) -> bytes:
    return (checkpoint / "adapter_model.safetensors").read_bytes()


def folder_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


# -- the stages -------------------------------------------------------------------------------------------


def stage_env(work: Work, args: argparse.Namespace) -> list[str]:
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True)
    if gpus.returncode != 0 or not gpus.stdout.strip():
        raise ProofFailed("nvidia-smi finds no GPU: run the proof on a GPU node")
    probe = ("import torch, importlib.metadata as m; print(torch.__version__, torch.version.cuda, "
             "torch.cuda.is_available(), m.version('openpipe-art'), m.version('unsloth'))")
    versions = subprocess.run([PYTHON, "-c", probe], capture_output=True, text=True)
    if versions.returncode != 0:
        raise ProofFailed(f"the backend does not import here: {last_lines(versions.stderr)}")
    torch_version, cuda, available, art, unsloth = versions.stdout.split()
    if available != "True":
        raise ProofFailed(f"torch {torch_version} sees no GPU")
    runtime = command(work, "runtime", ["-m", "hpc.job.vllm_runtime", "status"]).strip()
    if not runtime.startswith(("PyPI build at", "ART's managed runtime at", "ART_VLLM_RUNTIME_BIN at")):
        raise ProofFailed(f"no vLLM runtime for the trainer: {runtime}")
    return [f"GPU: {gpus.stdout.strip()}", f"torch {torch_version} (CUDA {cuda}), openpipe-art {art}, unsloth {unsloth}",
            f"vLLM runtime: {runtime}"]


def stage_model(work: Work, args: argparse.Namespace) -> list[str]:
    command(work, "data", ["-m", "trainer.data", "prepare", "--data_dir", str(work.data), "--emails",
                           str(FIXTURE / "emails.jsonl"), "--questions", str(FIXTURE / "questions.jsonl"), "--quiet"])
    random = work.root / "model-random"
    made = command(work, "make-model", ["-m", "trainer.data", "make-model", str(random), "--data_dir", str(work.data)])
    warmed = command(work, "warmup", ["-m", "trainer.warmup", str(random), str(work.model), "--data_dir",
                                      str(work.data), "--steps", str(args.warmup_steps), "--max_turns", "4"])
    return [line for line in (made + warmed).splitlines() if line.startswith(("model:", "warmup done"))]


def claim_run(work: Work) -> None:
    """What the job's begin hook does first: the run owns its model folder (model.json both sides)."""
    from hpc.run.ownership import claim

    work.run.path.mkdir(parents=True, exist_ok=True)
    claim(work.run, work.model_dir)


def stage_train(work: Work, args: argparse.Namespace) -> list[str]:
    claim_run(work)
    with MemorySampler() as memory:
        code, log, seconds = trainer(work, "train", [a.format(model=work.model) for a in TRAIN_ARGS],
                                     until=lambda: len(work.run.read_steps()) >= args.steps)
    records = work.run.read_steps()
    if code != EXIT_STOPPED_FOR_TIME:
        raise ProofFailed(f"trainer.train exited {code}, not 75 after SIGUSR1: {last_lines(log)}")
    if len(records) < args.steps:
        raise ProofFailed(f"only {len(records)} steps done before the stop (wanted {args.steps}): {last_lines(log)}")
    changed = trained_steps(work, records)
    if len(changed) < args.steps:
        raise ProofFailed(f"of {len(records)} steps only {changed} changed the LoRA (GRPO had nothing to learn: "
                          "every rollout of a group scored the same)")
    checkpoints = list_checkpoints(work.model_dir)
    return [f"register (Unsloth load + vLLM start): {seconds_to_register(log)} s; whole process {seconds:.0f} s",
            f"steps: {len(records)} done, {sum(r['seconds'] for r in records) / len(records):.1f} s per step, "
            f"{rollouts_per_second(records):.2f} rollouts/s, reward spread {[r['reward_spread'] for r in records]}",
            f"LoRA changed at steps {changed}; validation records: {len(work.run.read_validations())}",
            f"checkpoints {[c.step for c in checkpoints]} in {work.model_dir / 'checkpoints'}, "
            f"{folder_mib(checkpoints[-1].path):.1f} MiB each",
            f"peak GPU memory {memory.peak_gib:.1f} GiB; {memory_estimate(work)}",
            f"stop: {work.run.read_stops()[-1]}"]


def trained_steps(work: Work, records: list[dict[str, Any]]) -> list[int]:
    """Steps whose checkpoint's LoRA differs from the previous one (ART copies it forward when
    nothing in a step is trainable)."""
    by_step = {c.step: c.path for c in list_checkpoints(work.model_dir)}
    return [r["step"] for r in records
            if r["step"] in by_step and r["step"] - 1 in by_step
            and adapter_bytes(by_step[r["step"]]) != adapter_bytes(by_step[r["step"] - 1])]


def memory_estimate(work: Work) -> str:
    """hpc.launcher.gpu_memory's estimate for the made model in shared mode at the proof's settings."""
    from hpc.launcher.gpu_memory import ModelShape, Plan, estimate
    from trainer.training.config import VLLM_SHARE

    config = json.loads((work.model / "config.json").read_text())
    header = json.loads(_safetensors_header(work.model / "model.safetensors"))
    params = sum(math.prod(tensor["shape"]) for name, tensor in header.items() if name != "__metadata__")
    shape = ModelShape("made", params / 1e9, config["num_hidden_layers"], config["num_key_value_heads"],
                       config["head_dim"], config["hidden_size"])
    gpu_gib = float(subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i",
                                    "0"], capture_output=True, text=True).stdout.strip() or 0) / 1024
    plan = Plan(gpu_gib, "shared", VLLM_SHARE["shared"], 4096)
    found = estimate(shape, plan)
    return (f"hpc.launcher.gpu_memory estimates vLLM {found.vllm_need:.1f} GiB (of its {found.vllm_budget:.1f} GiB share, which "
            f"vLLM takes whole) and training {found.train_peak:.1f} GiB")


def _safetensors_header(path: Path) -> str:
    with path.open("rb") as handle:
        size = int.from_bytes(handle.read(8), "little")
        return handle.read(size).decode()


def stage_resume(work: Work, args: argparse.Namespace) -> list[str]:
    before = work.run.read_steps()
    last = before[-1]["step"]
    code, log, _ = trainer(work, "resume", [a.format(model=work.model) for a in TRAIN_ARGS],
                           until=lambda: len(work.run.read_steps()) > len(before))
    after = work.run.read_steps()[len(before):]
    served = re.search(r"registered: inference at (\S+) as (\S+)", log)
    if code != EXIT_STOPPED_FOR_TIME:
        raise ProofFailed(f"the resumed job exited {code}, not 75 after SIGUSR1: {last_lines(log)}")
    if not after or after[0]["step"] != last + 1:
        raise ProofFailed(f"the resumed job's first step is {after[0]['step'] if after else None}, not {last + 1}")
    if not served or not served.group(2).endswith(f"@{last}"):
        raise ProofFailed(f"vLLM did not serve checkpoint {last} at start: {served.group(0) if served else 'no line'}")
    return [f"resumed from checkpoint {last} (register {seconds_to_register(log)} s); vLLM served {served.group(2)}",
            f"trained step(s) {[r['step'] for r in after]} (LoRA changed at {trained_steps(work, after)}), "
            f"then SIGUSR1: {work.run.read_stops()[-1]['reason']}"]


def stage_boundary(work: Work, args: argparse.Namespace) -> list[str]:
    """A job whose end is near: after register, the next step is predicted not to end before the
    stop signal may come, so it is not started: exit 75, a boundary record, nothing lost."""
    before = work.run.read_steps()
    end = int(time.time()) + 60  # the deadline (end - grace 0 - margin 30 s) passes during register
    code, log, _ = trainer(work, "boundary", [a.format(model=work.model) for a in TRAIN_ARGS],
                           HPC_JOB_END_TIME=str(end), HPC_SIGNAL_GRACE="0")
    stop = work.run.read_stops()[-1]
    if code != EXIT_STOPPED_FOR_TIME or stop["reason"] != "boundary":
        raise ProofFailed(f"the job exited {code} with stop {stop}, not 75 at a step boundary: {last_lines(log)}")
    if len(work.run.read_steps()) != len(before):
        raise ProofFailed("a step was started although it could not end before the deadline")
    numbers = [r["step"] for r in work.run.read_steps()]
    if len(numbers) != len(set(numbers)) or numbers != list(range(1, len(numbers) + 1)):
        raise ProofFailed(f"steps lost or repeated: {numbers}")
    line = next((line for line in log.splitlines() if "not starting it" in line), "")
    return [f"stopped at a step boundary: {line.split('] ', 1)[-1][:300]}",
            f"stop record: {stop}", f"steps so far {numbers}: none lost, none repeated"]


def stage_eval(work: Work, args: argparse.Namespace) -> list[str]:
    output = command(work, "eval", ["-m", "trainer.eval", "--config", "smoke", "--model", f"run:{RUN_NAME}@latest",
                                    "--limit", "4", f"base_model={work.model}", "max_turns=4", "max_tokens=256",
                                    "vllm_fast_start=true"], timeout=900)
    return [line for line in output.splitlines() if "accuracy" in line or line.startswith(("run:", "MODEL", "model"))][-4:]


def stage_serve(work: Work, args: argparse.Namespace) -> list[str]:
    log = work.log("serve")
    address = work.run.serve_dir / "address.json"
    address.unlink(missing_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen([PYTHON, "-m", "trainer.serve", "--config", "smoke", "--model", f"run:{RUN_NAME}",
                                    "--port", "8089"],
                                   cwd=REPO, env=work.env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: address.is_file() or process.poll() is not None, 900)
            if process.poll() is not None:
                raise ProofFailed(f"trainer.serve exited {process.returncode}: {last_lines(log.read_text())}")
            scenario = json.loads((work.data / "scenarios" / "test.jsonl").read_text().splitlines()[0])
            began = time.monotonic()
            answer = command(work, "ask", ["-m", "trainer.ask", scenario["question"], "--inbox", scenario["inbox_address"],
                                           "--date", scenario["query_date"][:10], "--run", RUN_NAME])
            seconds = time.monotonic() - began
        finally:
            process.terminate()
            process.wait(timeout=120)
    return [f"trainer.serve: {json.loads(address.read_text()).get('model')} at /invoke",
            f"trainer.ask ({seconds:.1f} s): " + " | ".join(answer.strip().splitlines())]


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise ProofFailed(f"still waiting after {timeout:.0f} s")
        time.sleep(1)


def stage_baseline(work: Work, args: argparse.Namespace) -> list[str]:
    """Rollouts per second of gathering, the first step of each left out (it pays for the LoRA
    kernels' compilation at the first request)."""
    ours = rollouts_per_second(work.run.read_steps()[1:args.steps])
    output = command(work, "baseline", ["bench/gpu_baseline_loop.py", "--model", str(work.model), "--data_dir",
                                        str(work.data), "--steps", str(args.steps), "--art_path",
                                        str(work.root / "art-baseline")], timeout=900)
    found = re.search(r"baseline rollouts/s ([0-9.]+)", output)
    if not found:
        raise ProofFailed(f"the minimal loop printed no figure: {last_lines(output)}")
    theirs = float(found.group(1))
    return [f"rollouts/s over steps 2-{args.steps}: trainer.train {ours:.2f}, minimal ART loop {theirs:.2f}: "
            f"{ours / theirs:.3f} of the minimal loop (target >= 0.95)"]


STAGE_FUNCTIONS = {"env": stage_env, "model": stage_model, "train": stage_train, "resume": stage_resume,
                   "boundary": stage_boundary, "eval": stage_eval, "serve": stage_serve, "baseline": stage_baseline}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-proof"), help="the proof's folder (kept after)")
    parser.add_argument("--only", nargs="*", choices=STAGES, default=list(STAGES), help="these stages, in order")
    parser.add_argument("--steps", type=int, default=3, help="steps of the first training process")
    parser.add_argument("--warmup_steps", type=int, default=300)
    parser.add_argument("--register_seconds", type=float, default=None,
                        help="expected register time for the resume stage's deadline (default: train's, else 120)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Work(args.work)
    work.root.mkdir(parents=True, exist_ok=True)
    with OpenAIServer(string_match_verdict) as judge:
        work.judge_url = judge.base_url
        for name in args.only:
            say(f"== {name}")
            began = time.monotonic()
            try:
                lines = STAGE_FUNCTIONS[name](work, args)
            except (ProofFailed, subprocess.TimeoutExpired, OSError) as error:
                say(f"FAILED {name} after {time.monotonic() - began:.0f} s: {error}")
                return 1
            for line in lines:
                say(f"  {line}")
                if name == "train" and line.startswith("register") and args.register_seconds is None:
                    found = re.search(r"register .*?: ([0-9.]+) s", line)
                    args.register_seconds = float(found.group(1)) if found else None
            say(f"ok {name} in {time.monotonic() - began:.0f} s")
    say("GPU proof: every stage ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
