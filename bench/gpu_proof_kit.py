"""What the GPU proof's stages share (bench/gpu_proof.py, bench/gpu_proof_two_gpus.py): the
proof's folders and environment, the project's commands run as a job runs them, the GPUs'
memory, and the figures read from a run directory.

Every command gets the environment a job script gives its workload: the run directory,
ART's folder, the data, the run's GPUs (CUDA_VISIBLE_DEVICES), the judge's address, and
offline settings. Nothing here needs a GPU, so the CPU tests (tests/bench/) drive it too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.adapter_weights import same_weights  # noqa: E402
from hpc.job.exit_codes import EXIT_STOPPED_FOR_TIME  # noqa: E402
from hpc.job.workload_env import Job, job_env, offline_env, run_slot_env  # noqa: E402
from hpc.run.checkpoints import list_checkpoints  # noqa: E402
from hpc.run.checkpoints import model_dir as art_model_dir  # noqa: E402
from hpc.run.rundir import RunDir  # noqa: E402
from tests.doubles.openai_server import Reply, text  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "art_e"
RUN_NAME = "proof"
PYTHON = sys.executable
# the RL run: small turns and groups, so a step takes seconds on one GPU
TRAIN_ARGS = ("base_model={model}", "training_dataset_size=null", "trajectories_per_group=4", "groups_per_step=3",
              "num_epochs=4", "max_turns=4", "max_tokens=256", "max_seq_length=16384", "val_set_size=4",
              "eval_steps=2", "prune_checkpoints=false", "rollout_concurrency=12", "learning_rate=5e-5",
              "vllm_fast_start=true", "preflight_min_free_gb=1")


class ProofFailed(RuntimeError):
    """A stage did not do what it must: one line saying what."""


def say(line: str) -> None:
    print(line, flush=True)


def string_match_verdict(body: dict[str, Any]) -> Reply:
    """The judge of this proof: accept when every word of the reference is in the answer."""
    content = body["messages"][-1]["content"]
    reference = re.search(r"Reference answer: (.*)\nAI answer: ", content, re.S)
    answer = content.split("AI answer: ", 1)[-1].lower()
    words = re.findall(r"[a-z0-9]{3,}", (reference.group(1) if reference else "").lower())
    accept = bool(words) and all(word in answer for word in words)
    return text(json.dumps({"thinking": "every reference word is in the answer" if accept else "a word is missing",
                            "accept": accept}))


# -- the GPUs ---------------------------------------------------------------------------------------------


def parse_gpu_memory(output: str) -> dict[str, int]:
    """``nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits``: MiB by GPU index."""
    used = {}
    for line in output.splitlines():
        index, _, mib = line.partition(",")
        if index.strip().isdigit() and mib.strip().isdigit():
            used[index.strip()] = int(mib.strip())
    return used


def nvidia_smi(*args: str) -> str:
    """nvidia-smi's output, "" where it fails or is missing (a reading is then empty, never an error)."""
    try:
        result = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout if result.returncode == 0 else ""


def node_gpus() -> list[str]:
    """The indices of this node's GPUs (nvidia-smi), [] without one."""
    return list(parse_gpu_memory(nvidia_smi("--query-gpu=index,memory.total", "--format=csv,noheader,nounits")))


def gpu_total_gib(index: str) -> float:
    """The GPU's memory as nvidia-smi (and torch, and vLLM) count it, in GiB."""
    total = nvidia_smi("--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", index).strip()
    return float(total or 0) / 1024


@dataclass
class MemorySampler:
    """nvidia-smi's used memory of each GPU, each second, in a thread: the peaks of a stage."""

    peaks_mib: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> "MemorySampler":
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def sample(self) -> dict[str, int]:
        """One reading: MiB used by GPU index (the peaks keep the largest of each)."""
        used = parse_gpu_memory(nvidia_smi("--query-gpu=index,memory.used", "--format=csv,noheader,nounits"))
        for index, mib in used.items():
            self.peaks_mib[index] = max(mib, self.peaks_mib.get(index, 0))
        return used

    def peak_gib(self, index: str) -> float:
        return self.peaks_mib.get(index, 0) / 1024


# -- the proof's folders and the environment of its commands ----------------------------------------------


@dataclass(frozen=True)
class Work:
    """The proof's folders, one run's names in them, and the environment every command gets
    (as a job script gives it to its workload)."""

    root: Path
    judge_url: str = ""
    run_name: str = RUN_NAME
    devices: str = ""  # the run's GPUs (CUDA_VISIBLE_DEVICES); "" leaves the variable as it is
    judge_model: str = "openai/judge"
    made: Path | None = None  # --model: a model an earlier proof made, read only; else <root>/model

    def for_run(self, run_name: str, devices: str | None = None) -> "Work":
        """The same proof, another run (its own run directory and checkpoints) on ``devices``."""
        return dataclasses.replace(self, run_name=run_name, devices=self.devices if devices is None else devices)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def model(self) -> Path:
        return self.made if self.made is not None else self.root / "model"

    @property
    def runs(self) -> Path:
        return self.root / "runs"

    @property
    def run(self) -> RunDir:
        return RunDir(self.runs / self.run_name)

    @property
    def art(self) -> Path:
        return self.root / "art"

    @property
    def model_dir(self) -> Path:
        return art_model_dir(self.art, "email_agent", self.run_name)  # the project of smoke and agent_008

    def env(self, **extra: str) -> dict[str, str]:
        """What a job on this machine's cluster gives its workload (hpc/job/workload_env.py), with the
        proof's own settings where a job has the dotenv's (its folders, its judge, offline)."""
        from hpc.launcher.clusters import load_registry  # lazily, as dotenv_setting below

        cluster = load_registry().detect().cluster
        job = job_env(Job(run_dir=self.run.path, model_dir=self.model_dir, cluster=cluster.name,
                          internet=cluster.internet))
        env = {**os.environ, **job, **offline_env(), "ART_PATH": str(self.art), "DATA_DIR": str(self.data),
               "JUDGE_API_BASE": self.judge_url, "JUDGE_MODEL": self.judge_model, "WANDB_MODE": "disabled",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO),
               **(run_slot_env(self.devices) if self.devices else {})}
        env.setdefault("ART_VLLM_RUNTIME_CACHE_DIR", dotenv_setting("ART_VLLM_RUNTIME_CACHE_DIR"))
        return {**env, **extra}

    def log(self, name: str) -> Path:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        return self.root / "logs" / f"{name}.log"

    def claim(self) -> None:
        """What the job's begin hook does first: the run owns its model folder (model.json both sides)."""
        from hpc.run.ownership import claim

        self.run.path.mkdir(parents=True, exist_ok=True)
        claim(self.run, self.model_dir)

    def train_args(self, *extra: str) -> list[str]:
        return [arg.format(model=self.model) for arg in TRAIN_ARGS] + list(extra)


def fresh_folder_problem(work: Path) -> str | None:
    """Why ``work`` cannot hold a new proof, if it cannot: it must be new or empty, so that no
    stage reads a record, checkpoint, evaluation or log an earlier proof left there."""
    if work.exists() and not work.is_dir():
        return f"--work {work} is a file: give a new folder"
    if work.is_dir() and any(work.iterdir()):
        return (f"--work {work} holds an earlier proof's files: every proof starts from an empty folder (a reused "
                "one mixes earlier runs' steps, checkpoints and evaluations into this one's figures); give a new "
                "--work, and --model DIR to reuse a model an earlier proof made")
    return None


@dataclass(frozen=True)
class RecordMark:
    """Where a run's records stood when one of the proof's processes started: what the run
    holds beyond it is that process's own (steps.jsonl, stops.jsonl, startups.jsonl,
    validation.jsonl), and each timed record must be dated after the process started."""

    run: RunDir
    counts: tuple[int, int, int, int]
    since: str  # utc_now() when the mark was taken

    @classmethod
    def take(cls, run: RunDir) -> "RecordMark":
        from hpc.run.rundir import utc_now

        counts = (len(run.read_steps()), len(run.read_stops()), len(run.read_startups()), len(run.read_validations()))
        return cls(run, counts, utc_now())

    def steps(self) -> list[dict[str, Any]]:
        return self._own(self.run.read_steps()[self.counts[0]:], "started", "steps.jsonl")

    def stops(self) -> list[dict[str, Any]]:
        return self._own(self.run.read_stops()[self.counts[1]:], "time", "stops.jsonl")

    def startups(self) -> list[dict[str, Any]]:
        return self._own(self.run.read_startups()[self.counts[2]:], "time", "startups.jsonl")

    def validations(self) -> list[dict[str, Any]]:
        return self.run.read_validations()[self.counts[3]:]

    def _own(self, records: list[dict[str, Any]], stamp: str, file: str) -> list[dict[str, Any]]:
        early = [r for r in records if str(r.get(stamp, "")) < self.since]
        if early:
            raise ProofFailed(f"{self.run.path / file} has {len(early)} record(s) dated before this process started "
                              f"({early[0].get(stamp)} < {self.since}): another process wrote them")
        return records


def dotenv_setting(name: str) -> str:
    """What a job on this machine's cluster gets for ``name`` from the dotenv files."""
    from hpc.launcher.clusters import load_registry
    from hpc.launcher.jobspec import dotenv_setting as setting

    return setting(name, load_registry().detect().cluster) or ""


# -- a forwarder that counts what the run asks ---------------------------------------------------------


class CountingForwarder:
    """Passes every HTTP request on to ``target`` (a served judge) unchanged and returns its answer
    unchanged, counting each request by path and the status it got: what a run asked, counted on
    the asking side (the judge's own access log counts what it answered). A context manager."""

    def __init__(self, target: str) -> None:
        from tests.doubles.openai_server import DoubleServer  # keeps each connection's handler, to end them all

        self.target = target.rstrip("/")
        self.counts: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()
        self._server = DoubleServer(("127.0.0.1", 0), _forwarding_handler(self))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def asked(self, path: str = "/v1/chat/completions") -> Counter[int]:
        """The status of each request to ``path``."""
        with self._lock:
            return Counter({status: n for (where, status), n in self.counts.items() if where == path})

    def count(self, path: str, status: int) -> None:
        with self._lock:
            self.counts[(path, status)] += 1

    def __enter__(self) -> "CountingForwarder":
        self._server.start_in_thread("counting-forwarder")
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop serving and end every connection's handler: a kept-alive client's handler thread
        outlived the forwarder and was counted by a later test's thread check."""
        self._server.stop()

    def handlers_alive(self) -> int:
        return self._server.handlers_alive()


def _forwarding_handler(forwarder: CountingForwarder) -> type:
    from http.server import BaseHTTPRequestHandler

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._forward(None)

        def do_POST(self) -> None:  # noqa: N802
            self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _forward(self, body: bytes | None) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
            request = urllib.request.Request(forwarder.target + self.path, data=body, headers=headers,
                                             method="POST" if body is not None else "GET")
            try:
                with urllib.request.urlopen(request, timeout=900) as response:
                    status, payload, kind = response.status, response.read(), response.headers.get("Content-Type")
            except urllib.error.HTTPError as error:
                status, payload, kind = error.code, error.read(), error.headers.get("Content-Type")
            except OSError as error:
                status, payload, kind = 502, json.dumps({"error": {"message": str(error)}}).encode(), "application/json"
            forwarder.count(self.path.split("?")[0], status)
            self.send_response(status)
            self.send_header("Content-Type", kind or "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Forward


# -- running the project's commands ------------------------------------------------------------------------


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


@dataclass
class Process:
    """A command of the proof in a process of its own, its output in logs/<name>.log; once
    ``until`` holds it gets SIGUSR1 (the job's stop warning)."""

    work: Work
    name: str
    argv: list[str]
    until: Callable[[], bool] | None = None
    env: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _began: float = 0.0
    _signalled: bool = False

    def start(self) -> "Process":
        self._began = time.monotonic()
        with self.work.log(self.name).open("w") as out:
            self._process = subprocess.Popen([PYTHON, *self.argv], cwd=REPO, env=self.work.env(**self.env),
                                             stdout=out, stderr=subprocess.STDOUT)
        return self

    def running(self, timeout: float) -> bool:
        """Still running? Sends SIGUSR1 once ``until`` holds; kills it past ``timeout`` seconds."""
        assert self._process is not None
        if self._process.poll() is not None:
            return False
        if time.monotonic() - self._began > timeout:
            self.kill()
            raise ProofFailed(f"{self.name}: still running after {timeout:.0f} s (log {self.work.log(self.name)})")
        if self.until is not None and not self._signalled and self.until():
            self._process.send_signal(signal.SIGUSR1)
            self._signalled = True
        return True

    @property
    def began(self) -> float:
        """When it started (time.monotonic)."""
        return self._began

    def ended(self) -> bool:
        return self._process is not None and self._process.poll() is not None

    def kill(self) -> None:
        """Kill it if it still runs (a stage that failed leaves nothing behind)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def result(self) -> tuple[int, str, float]:
        """(exit code, its log, seconds) once it ended."""
        assert self._process is not None and self._process.returncode is not None
        return self._process.returncode, self.work.log(self.name).read_text(), time.monotonic() - self._began


def run_together(processes: list[Process], timeout: float = 900) -> list[tuple[int, str, float]]:
    """Start every process, wait for all of them (each signalled by its own ``until``)."""
    return run_when_ready(processes, [lambda: True] * len(processes), timeout)


def run_when_ready(processes: list[Process], ready: list[Callable[[], bool]], timeout: float = 900,
                   most_wait: float = 600) -> list[tuple[int, str, float]]:
    """As ``run_together``, but each process starts once its ``ready`` holds, or after ``most_wait``
    seconds whatever it says: a vLLM sizes its KV cache from what it sees allocated on its GPU while
    it starts, and one that started beside another vLLM starting on the same GPU found -0.68 GiB
    left for it and did not start (an H100, 2026-11-27). ``timeout`` counts from the call for all."""
    began = time.monotonic()
    waiting = set(range(len(processes)))
    try:
        while True:
            for index in sorted(waiting):
                if ready[index]() or time.monotonic() - began > most_wait:
                    processes[index].start()
                    waiting.discard(index)
            started = [process for index, process in enumerate(processes) if index not in waiting]
            if not any([process.running(timeout - (process.began - began)) for process in started]) and not waiting:
                break
            time.sleep(0.5)
    finally:
        for process in processes:
            process.kill()
    return [process.result() for process in processes]


def trainer_process(work: Work, name: str, overrides: list[str], until: Callable[[], bool] | None = None,
                    config: str = "smoke", **env: str) -> Process:
    """trainer.train with ``--config config`` (the proof's small runs: smoke) and ``overrides``, as a job runs it."""
    return Process(work, name, ["-m", "trainer.train", "--config", config, *overrides], until, dict(env))


def trainer(work: Work, name: str, overrides: list[str], until: Callable[[], bool] | None = None,
            timeout: float = 900, **env: str) -> tuple[int, str, float]:
    """trainer.train to its end: (exit code, its log, seconds)."""
    return run_together([trainer_process(work, name, overrides, until, **env)], timeout)[0]


def after_steps(work: Work, count: int) -> Callable[[], bool]:
    """A stop condition: the run has ``count`` more steps than it has now."""
    before = len(work.run.read_steps())
    return lambda: len(work.run.read_steps()) >= before + count


def wait_for(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise ProofFailed(f"still waiting after {timeout:.0f} s")
        time.sleep(1)


# -- figures ---------------------------------------------------------------------------------------------


def seconds_to_register(log: str) -> float | None:
    """From the trainer's first line to 'registered:' (Unsloth loaded, vLLM serving)."""
    stamps = re.findall(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) \[trainer\] (config |registered:)", log, re.M)
    begin = next((s for s, what in stamps if what == "config "), None)
    end = next((s for s, what in stamps if what == "registered:"), None)
    if begin is None or end is None:
        return None
    parse = lambda stamp: time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))  # noqa: E731
    return parse(end) - parse(begin)


def served_at(log: str) -> tuple[str, str] | None:
    """(vLLM's address, the model name it serves) from the trainer's 'registered:' line."""
    found = re.search(r"registered: inference at (\S+) as (\S+)", log)
    return (found.group(1), found.group(2)) if found else None


@dataclass
class ServedWatch:
    """An ``until`` for the resumed process: once it has registered, ask its vLLM which models it
    serves (``/v1/models``, once), then defer to ``then``."""

    run: Work
    name: str
    then: Callable[[], bool]
    served: list[str] | None = None
    url: str = ""

    def __call__(self) -> bool:
        if self.served is None:
            found = served_at(self.run.log(self.name).read_text(errors="replace"))
            if found is None:
                return False
            self.url = found[0]
            self.served = served_models(self.url)
        return self.then()


def served_models(base_url: str) -> list[str]:
    """The model ids a vLLM (OpenAI-compatible) server lists: its base and every adapter it serves."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/models", timeout=30) as response:
            return [item["id"] for item in json.loads(response.read())["data"]]
    except (OSError, ValueError, KeyError) as error:
        return [f"(no answer: {error})"]


def check_served(watch: ServedWatch, model_name: str, step: int) -> None:
    """vLLM serves the checkpoint the run resumed from, and no later one."""
    expected = f"{model_name}@{step}"
    later = [m for m in watch.served or [] if m.startswith(f"{model_name}@") and m.split("@")[-1].isdigit()
             and int(m.split("@")[-1]) > step]
    if watch.served is None or expected not in watch.served or later:
        raise ProofFailed(f"the resumed job's vLLM at {watch.url or '?'} serves {watch.served}, not {expected} "
                          f"(the checkpoint it resumed from){' and later: ' + str(later) if later else ''}")


def rollouts_per_second(records: list[dict[str, Any]]) -> float:
    """Rollouts gathered per second of gathering (steps.jsonl's trajectories and rollout_seconds)."""
    count = sum(record["trajectories"] for record in records)
    seconds = sum(record["rollout_seconds"] for record in records)
    return count / seconds if seconds else 0.0


def seconds_per_step(records: list[dict[str, Any]]) -> float:
    return sum(record["seconds"] for record in records) / len(records) if records else 0.0


def folder_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def trained_steps(work: Work, records: list[dict[str, Any]]) -> list[int]:
    """Steps whose checkpoint's LoRA weights differ from the previous one's (ART copies it forward
    when nothing in a step is trainable; bench/adapter_weights.py says why values, not bytes)."""
    by_step = {c.step: c.path for c in list_checkpoints(work.model_dir)}
    return [r["step"] for r in records
            if r["step"] in by_step and r["step"] - 1 in by_step
            and not same_weights(by_step[r["step"]], by_step[r["step"] - 1])]


def check_stopped(work: Work, mark: RecordMark, code: int, log: str, steps: int) -> list[dict[str, Any]]:
    """A stage's process stopped by SIGUSR1 (exit 75) after at least ``steps`` steps of its own
    (the records after ``mark``): those records; else ProofFailed saying which part did not hold."""
    records = mark.steps()
    if code != EXIT_STOPPED_FOR_TIME:
        raise ProofFailed(f"{work.run_name}: trainer.train exited {code}, not 75 after SIGUSR1: {last_lines(log)}")
    if len(records) < steps:
        raise ProofFailed(f"{work.run_name}: only {len(records)} steps done before the stop (wanted {steps}): "
                          f"{last_lines(log)}")
    check_consecutive(work)
    return records


def check_consecutive(work: Work) -> list[int]:
    """The run's steps, each once and in order from 1: none lost, none repeated."""
    numbers = [r["step"] for r in work.run.read_steps()]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ProofFailed(f"{work.run_name}: steps lost or repeated: {numbers}")
    return numbers


def check_trained(work: Work, mark: RecordMark, code: int, log: str, steps: int, changed_at_least: int | None = None
                  ) -> list[dict[str, Any]]:
    """``check_stopped``, and ``changed_at_least`` of those steps (default: each) changed the LoRA
    (GRPO really trained; a step whose groups all scored alike leaves it as it was)."""
    records = check_stopped(work, mark, code, log, steps)
    changed = trained_steps(work, records)
    if len(changed) < (steps if changed_at_least is None else changed_at_least):
        raise ProofFailed(f"{work.run_name}: of {len(records)} steps only {changed} changed the LoRA (GRPO had nothing "
                          "to learn: every rollout of a group scored the same)")
    return records
