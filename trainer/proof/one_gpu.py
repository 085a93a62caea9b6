"""The GPU proof's stages on one GPU (``python -m trainer.proof`` runs them in order): the data
staged, a small model made and warmed up, trainer.train trained, stopped and resumed, stopped at
a job's boundary before its backend starts, trainer.eval and trainer.serve on the checkpoint."""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME
from hpc.job.workload_env import REPO_DIR
from hpc.run.checkpoints import list_checkpoints
from trainer.proof.corpus import CORPUS
from trainer.proof.figures import (
    ServedWatch,
    check_consecutive,
    check_served,
    check_trained,
    folder_mib,
    rollouts_per_second,
    seconds_per_step,
    seconds_to_register,
    trained_steps,
)
from trainer.proof.gpus import MemorySampler
from trainer.proof.memory import memory_estimate
from trainer.proof.processes import after_steps, command, last_lines, trainer, wait_for
from trainer.proof.workspace import PYTHON, ProofFailed, RecordMark, Work

BOUNDARY_MAX_SECONDS = 60  # a job stopped before its backend starts ends in seconds; a start-up takes minutes


# -- the stages -------------------------------------------------------------------------------------------


def stage_env(work: Work, args: argparse.Namespace) -> list[str]:
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True)
    if gpus.returncode != 0 or not gpus.stdout.strip():
        raise ProofFailed("nvidia-smi finds no GPU: run the proof on a GPU node")
    probe = ("import torch, importlib.metadata as m; print(torch.__version__, torch.version.cuda, "
             "torch.cuda.is_available(), m.version('openpipe-art'), m.version('unsloth'))")
    versions = subprocess.run([PYTHON, "-c", probe], cwd=REPO_DIR, capture_output=True, text=True, env=work.env())
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


def stage_data(work: Work) -> str:
    """The fixture corpus, staged as ``trainer.data prepare`` does, in this proof's own folder."""
    command(work, "data", ["-m", "trainer.data", "prepare", "--data_dir", str(work.data), "--emails",
                           str(CORPUS / "emails.jsonl"), "--questions", str(CORPUS / "questions.jsonl"), "--quiet"])
    return f"data: the fixture corpus staged in {work.data}"


def stage_model(work: Work, args: argparse.Namespace) -> list[str]:
    if args.model is not None:
        made = json.loads((args.model / "made_by.json").read_text()) if (args.model / "made_by.json").is_file() else {}
        if "warmup" not in made:
            raise ProofFailed(f"--model {args.model} is not a model an earlier proof made and warmed up (made_by.json)")
        return [f"model: {args.model}, made and warmed up by an earlier proof ({made['size']}, "
                f"{made['warmup'].get('steps')} warm-up steps)"]
    random = work.root / "model-random"
    made = command(work, "make-model", ["-m", "trainer.data", "make-model", str(random), "--data_dir", str(work.data)])
    warmed = command(work, "warmup", ["-m", "trainer.warmup", str(random), str(work.model), "--data_dir",
                                      str(work.data), "--steps", str(args.warmup_steps), "--max_turns", "4"])
    return [line for line in (made + warmed).splitlines() if line.startswith(("model:", "warmup done"))]


def stage_train(work: Work, args: argparse.Namespace) -> list[str]:
    work.claim()
    mark = RecordMark.take(work.run)
    with MemorySampler() as memory:
        code, log, seconds = trainer(work, "train", work.train_args(), until=after_steps(work, args.steps))
    records = check_trained(work, mark, code, log, args.steps)
    checkpoints = list_checkpoints(work.model_dir)
    return [f"register (Unsloth load + vLLM start): {seconds_to_register(log)} s; whole process {seconds:.0f} s",
            f"steps: {len(records)} done, {seconds_per_step(records):.1f} s per step, "
            f"{rollouts_per_second(records):.2f} rollouts/s, reward spread {[r['reward_spread'] for r in records]}",
            f"LoRA changed at steps {trained_steps(work, records)}; validation records: {len(mark.validations())}",
            f"checkpoints {[c.step for c in checkpoints]} in {work.model_dir / 'checkpoints'}, "
            f"{folder_mib(checkpoints[-1].path):.1f} MiB each",
            f"peak GPU memory {memory.peak_gib(args.gpus[0]):.1f} GiB; {memory_estimate(work, 'shared', args.gpus[0])}",
            f"stop: {mark.stops()[-1]}"]


def stage_resume(work: Work, args: argparse.Namespace) -> list[str]:
    """A second process resumes; its vLLM is asked which models it serves: the checkpoint it resumed from."""
    from trainer.training.config import load_config

    last = check_consecutive(work)[-1]
    mark = RecordMark.take(work.run)
    watch = ServedWatch(work, "resume", after_steps(work, 1))
    code, log, _ = trainer(work, "resume", work.train_args(), until=watch)
    if code != EXIT_STOPPED_FOR_TIME:
        raise ProofFailed(f"the resumed job exited {code}, not 75 after SIGUSR1: {last_lines(log)}")
    check_served(watch, load_config("smoke", work.train_args()).model_name, last)
    after = mark.steps()
    if not after or after[0]["step"] != last + 1:
        raise ProofFailed(f"the resumed job's first step is {after[0]['step'] if after else None}, not {last + 1}")
    return [f"resumed from checkpoint {last} (register {seconds_to_register(log)} s); its vLLM (/v1/models) serves "
            f"{watch.served}",
            f"trained step(s) {[r['step'] for r in after]} (LoRA changed at {trained_steps(work, after)}), "
            f"then SIGUSR1: {mark.stops()[-1]['reason']}; the run's steps {check_consecutive(work)}"]


def stage_boundary(work: Work, args: argparse.Namespace) -> list[str]:
    """A job whose end is near: its start-up and next step (startups.jsonl, steps.jsonl) are
    predicted not to end before the stop signal may come, so the backend is not even built:
    exit 75 in seconds, a boundary record, no start-up, nothing lost."""
    mark = RecordMark.take(work.run)
    end = int(time.time()) + 60  # the deadline (end - grace 0 - margin 30 s): 30 s, less than a start-up
    code, log, seconds = trainer(work, "boundary", work.train_args(), HPC_JOB_END_TIME=str(end),
                                 HPC_SIGNAL_GRACE="0")
    stops = mark.stops()
    line = next((line for line in log.splitlines() if "not starting the backend" in line), "")
    check_boundary(code, stops, log, line, seconds, mark)
    return [f"stopped before the backend after {seconds:.0f} s: {line.split('] ', 1)[-1][:300]}",
            f"stop record: {stops[-1]}", f"steps so far {check_consecutive(work)}: none lost, none repeated"]


def check_boundary(code: int, stops: list[dict], log: str, line: str, seconds: float, mark: RecordMark) -> None:
    """Each part of the claim "stopped at the boundary, before the backend": exit 75, this process's
    boundary record, its line, no backend built or registered, no start-up, no step, in seconds."""
    if code != EXIT_STOPPED_FOR_TIME or not stops or stops[-1]["reason"] != "boundary":
        raise ProofFailed(f"the job exited {code} with stop {stops[-1] if stops else None}, not 75 at a step boundary: "
                          f"{last_lines(log)}")
    started = [word for word in ("] backend: ", "] registered: ") if word in log]
    if not line or started or mark.startups() or mark.steps():
        raise ProofFailed(f"the job did not stop before the backend: its line {line[:120]!r}, backend lines "
                          f"{started}, start-ups {mark.startups()}, steps {mark.steps()}")
    if seconds > BOUNDARY_MAX_SECONDS:
        raise ProofFailed(f"the job stopped before the backend but took {seconds:.0f} s (more than "
                          f"{BOUNDARY_MAX_SECONDS} s: something started)")


def stage_eval(work: Work, args: argparse.Namespace) -> list[str]:
    from hpc.run.rundir import utc_now

    since = utc_now()
    output = command(work, "eval", ["-m", "trainer.eval", "--config", "smoke", "--model", f"run:{work.run_name}@latest",
                                    "--limit", "4", f"base_model={work.model}", "max_turns=4", "max_tokens=256",
                                    "vllm_fast_start=true"], timeout=900)
    summary, records = check_evaluation(work, output, since)
    return [f"{summary['model']}: {len(records)} questions, every one answered, none failed; accuracy "
            f"{summary['accuracy']:.3f} (recomputed from its records)",
            *[line for line in output.splitlines() if "accuracy" in line][-2:]]


def check_evaluation(work: Work, output: str, since: str) -> tuple[dict, list[dict]]:
    """This invocation's evaluation: written now (not an earlier one skipped as done), every
    question it asked answered with no failed rollout, and its accuracy what its records give."""
    from hpc.run.records import read_jsonl

    if "already evaluated" in output:
        raise ProofFailed("trainer.eval skipped the model as already evaluated: an earlier proof's results")
    found = sorted(work.run.evaluations_dir.glob("*/*/summary.json"))
    if len(found) != 1:
        raise ProofFailed(f"expected one evaluation in {work.run.evaluations_dir}, found {len(found)}")
    summary = json.loads(found[0].read_text())
    records = read_jsonl(found[0].with_name("records.jsonl"))
    asked = summary.get("questions")
    failed = [r for r in records if r.get("error")]
    if summary.get("time", "") < since or not records or len(records) != asked or failed or summary.get("failed"):
        raise ProofFailed(f"the evaluation of {summary.get('model')}: {len(records)} records of {asked} questions, "
                          f"{len(failed)} failed (summary: failed {summary.get('failed')}), written {summary.get('time')} "
                          f"(this proof's began {since})")
    accuracy = sum(bool(r.get("correct")) for r in records) / len(records)
    if abs(accuracy - summary["accuracy"]) > 1e-9:
        raise ProofFailed(f"the evaluation says accuracy {summary['accuracy']}, its records give {accuracy}")
    return summary, records


def stage_serve(work: Work, args: argparse.Namespace) -> list[str]:
    log = work.log("serve")
    address = work.run.serve_dir / "address.json"
    address.unlink(missing_ok=True)
    with log.open("w") as out:
        process = subprocess.Popen([PYTHON, "-m", "trainer.serve", "--config", "smoke", "--model", f"run:{work.run_name}",
                                    "--port", "8089"],
                                   cwd=REPO_DIR, env=work.env(), stdout=out, stderr=subprocess.STDOUT)
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

