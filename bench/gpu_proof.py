"""The GPU proof: agent_008's real path on this node's GPUs, stage by stage, with models made here.

    .venv/bin/python bench/gpu_proof.py --work NEW_DIR [--only STAGE ...] [--gpus 0,1]
    .venv/bin/python bench/gpu_proof.py --work NEW_DIR --only env model14b agent008-14b cards --background
    .venv/bin/python bench/gpu_proof.py --work NEW_DIR --follow 540

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
Stages (two GPUs; skipped, and said so, where --gpus names one), in bench/gpu_proof_two_gpus.py:
  dedicated gpu_mode=dedicated: training on the run's first GPU, vLLM on its second
  judge     the judge served in the job (sbatch/_judge_server.sh.j2, rendered and run) on the
            second GPU with the made model, the run on the first; the verdicts asked (counted on
            the way) equal the requests the judge answered with 200
  pack      a pack of two runs, exactly the two, each on its own GPU and vLLM port
  baseline  the trainer's own cost: rollouts per second of trainer.train against a minimal
            loop calling ART directly (same model, objective, judge, group size, concurrency,
            scenarios), --cost_rounds rounds taking turns; target >= 0.95 on the median
Stages at agent_008's real size (bench/gpu_proof_full.py; run when named, about 20 minutes):
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
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import gpu_proof_background as background  # noqa: E402
from bench.gpu_proof_full import stage_agent008_14b, stage_cards, stage_model14b  # noqa: E402
from bench.gpu_proof_kit import (  # noqa: E402
    FIXTURE,
    PYTHON,
    REPO,
    MemorySampler,
    ProofFailed,
    RecordMark,
    ServedWatch,
    Work,
    after_steps,
    check_consecutive,
    check_served,
    check_trained,
    command,
    folder_mib,
    fresh_folder_problem,
    last_lines,
    node_gpus,
    rollouts_per_second,
    say,
    seconds_per_step,
    seconds_to_register,
    string_match_verdict,
    trained_steps,
    trainer,
    wait_for,
)
from bench.gpu_proof_memory import memory_estimate  # noqa: E402
from bench.gpu_proof_two_gpus import TWO_GPU_STAGES, stage_baseline  # noqa: E402
from hpc.digits import is_count  # noqa: E402
from hpc.job.exit_codes import EXIT_BAD_INPUT, EXIT_STOPPED_FOR_TIME  # noqa: E402
from hpc.run.checkpoints import list_checkpoints  # noqa: E402
from tests.doubles.openai_server import OpenAIServer  # noqa: E402

SMALL_STAGES = ("env", "model", "train", "resume", "boundary", "eval", "serve", "dedicated", "judge", "pack", "baseline")
FULL_STAGES = ("model14b", "agent008-14b", "cards")
STAGES = SMALL_STAGES + FULL_STAGES
# what a stage needs earlier in the same proof (every proof starts from an empty folder);
# "model" and "model14b" are also met by --model and --model14b
NEEDS = {"train": "model", "resume": "train", "boundary": "train", "eval": "train", "serve": "train",
         "dedicated": "model", "judge": "model", "pack": "model", "baseline": "model",
         "agent008-14b": "model14b", "cards": "model14b"}
BOUNDARY_MAX_SECONDS = 60  # a job stopped before its backend starts ends in seconds; a start-up takes minutes


# -- the stages -------------------------------------------------------------------------------------------


def stage_env(work: Work, args: argparse.Namespace) -> list[str]:
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
                          capture_output=True, text=True)
    if gpus.returncode != 0 or not gpus.stdout.strip():
        raise ProofFailed("nvidia-smi finds no GPU: run the proof on a GPU node")
    probe = ("import torch, importlib.metadata as m; print(torch.__version__, torch.version.cuda, "
             "torch.cuda.is_available(), m.version('openpipe-art'), m.version('unsloth'))")
    versions = subprocess.run([PYTHON, "-c", probe], cwd=REPO, capture_output=True, text=True, env=work.env())
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
                           str(FIXTURE / "emails.jsonl"), "--questions", str(FIXTURE / "questions.jsonl"), "--quiet"])
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
                   "baseline": stage_baseline, "model14b": stage_model14b, "agent008-14b": stage_agent008_14b,
                   "cards": stage_cards}


# -- the command line -------------------------------------------------------------------------------------


def gpu_list(text: str) -> list[str]:
    """``--gpus 0,1``: GPU indices as nvidia-smi numbers them."""
    gpus = [item.strip() for item in text.split(",") if item.strip()]
    if not gpus or not all(map(is_count, gpus)) or len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"invalid --gpus {text!r}: expected distinct GPU indices such as 0,1")
    return gpus


def cluster(text: str) -> str:
    from bench.gpu_proof_cards import cluster_names

    if text not in cluster_names():
        raise argparse.ArgumentTypeError(f"invalid cluster {text!r}: accepted {', '.join(cluster_names())}")
    return text


def positive(text: str) -> int:
    if not is_count(text) or int(text) < 1:  # digits 0-9 only (hpc/digits.py)
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected an integer >= 1")
    return int(text)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-proof"),
                        help="the proof's folder: new or empty (kept after)")
    parser.add_argument("--only", nargs="*", choices=STAGES, default=list(SMALL_STAGES),
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
        need = NEEDS.get(stage)
        if need and need not in args.only[:position] and not given.get(need, False):
            hint = f" (or --{need} DIR)" if need in given else ""
            return (f"--only {stage} needs {need} before it in the same proof{hint}: every proof starts from an empty "
                    "folder")
    return None


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
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.follow is not None:
        return background.follow(args.work, args.follow)
    if not args.started_in_background:
        problem = fresh_folder_problem(args.work)
        if problem:
            print(f"gpu_proof: error: {problem}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.background:
        return background.start(Path(__file__).resolve(), argv, args.work)
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


if __name__ == "__main__":
    sys.exit(main())
