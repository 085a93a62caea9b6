"""Launcher latency: median wall time of a dry run against `python -c pass`.

    .venv/bin/python -m bench.launch_latency [--runs 15] [--submit_runs 5]

Both are measured in the same run on the same interpreter, so the ratio says
how much the launcher adds to a bare Python start. Target: dry run under
250 ms median, and none of art, litellm, datasets, torch imported (checked
here too, and asserted by tests/hpc/launcher/test_launch.py). The first, untimed
run of each command writes what a user's first run writes (the modules' .pyc
files, the templates' compiled code: hpc/launcher/template_cache.py), with
PYTHONDONTWRITEBYTECODE left out of its environment: with it set in the shell, a
checkout no run had compiled would compile every module on each timed run.

Then a real launch (a submission, to an ``sbatch`` stand-in on PATH that prints
a job id) with the login-side preflight before the queue (hpc/launcher/queue_preflight.py:
the trainer's checks in a child process, passing here: the fixture data staged
by ``trainer.data prepare``, the test double's backend, ``--config smoke``) against the same
launch with ``--no_preflight``: what the preflight costs a launch. Twice, the judge answered by
a local stand-in each time: an OpenAI-compatible judge at JUDGE_API_BASE, and the default
config's judge (gemini/gemini-2.0-flash with GEMINI_API_KEY; dotenv/common.env) at
GEMINI_API_BASE, the variable litellm reads too. Each is asked with one plain HTTP request
(trainer/training/judge_ping.py); each stand-in must get exactly one request per launch. The
same launch with a judge the table lacks (deepseek/deepseek-chat at DEEPSEEK_API_BASE) shows
what litellm's import costs, as every provider's judge paid before. The four launches take
turns, so that a loaded machine weighs on each alike. Target: the preflight adds under 1 s with
either judge of the table (3.9 s median when the judge check imported litellm).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.doubles.provider_api import ProviderAPI
from trainer.proof.corpus import CORPUS
from trainer.proof.loopback_openai import OpenAIServer, text

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("art", "litellm", "datasets", "torch", "vllm", "ray")
TARGET = 0.25  # seconds: the dry run's median

# The launches measured against each other: without the preflight, and with it and each judge.
LAUNCHES = {"no_preflight": "none", "compatible": "OpenAI-compatible judge (JUDGE_API_BASE)",
            "default": "default judge (gemini/gemini-2.0-flash, GEMINI_API_KEY)",
            "litellm": "judge outside the table (deepseek/deepseek-chat), through litellm"}
TARGETED = ("compatible", "default")  # the judges asked over plain HTTP: each must add < 1 s


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_time(command: list[str], runs: int) -> float:
    first_run = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    timed(command, first_run)  # warm the page cache; write the .pyc files and the templates' code, as a first run does
    return statistics.median(timed(command) for _ in range(runs))


def heavy_imports(dry_run_args: list[str]) -> list[str]:
    code = (
        "import sys\nfrom hpc import launch\n"
        f"launch.main({dry_run_args!r})\n"
        f"print('HEAVY:', *(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    marked = [line for line in result.stdout.splitlines() if line.startswith("HEAVY:")]
    return marked[-1].split()[1:]


def fake_sbatch(folder: Path) -> dict[str, str]:
    """An environment whose ``sbatch`` only prints a job id (nothing is queued)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sbatch").write_text("#!/bin/sh\necho 4242\n")
    (folder / "sbatch").chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def staged_data(folder: Path) -> Path:
    from trainer.staging.data import prepare

    fixtures = CORPUS
    prepare(folder, str(fixtures / "emails.jsonl"), str(fixtures / "questions.jsonl"), show_progress=False)
    return folder


@contextmanager
def compatible_judge() -> Iterator[tuple[list[str], OpenAIServer]]:
    """An OpenAI-compatible judge at JUDGE_API_BASE."""
    with OpenAIServer(lambda body: text("OK")) as judge:
        yield ["--env", f"JUDGE_API_BASE={judge.base_url}", "--env", "JUDGE_API_KEY=bench-key",
               "--env", "JUDGE_MODEL=judge-model"], judge


@contextmanager
def default_judge() -> Iterator[tuple[list[str], ProviderAPI]]:
    """The default config's judge (JUDGE_MODEL unset: dotenv/common.env's gemini/gemini-2.0-flash), its
    key in GEMINI_API_KEY, Google's API stood in for at GEMINI_API_BASE."""
    with ProviderAPI("gemini", models=("gemini-2.0-flash",), key="bench-key") as judge:
        yield ["--env", f"GEMINI_API_BASE={judge.base_url}", "--env", "GEMINI_API_KEY=bench-key"], judge


@contextmanager
def litellm_judge() -> Iterator[tuple[list[str], OpenAIServer]]:
    """A provider judge_ping's table lacks (DeepSeek's OpenAI-compatible API at DEEPSEEK_API_BASE):
    asked through litellm (a provider judge_ping's table lacks), for the cost of litellm's import."""
    with OpenAIServer({"deepseek-chat": lambda body: text("OK")}) as judge:
        yield ["--env", "JUDGE_MODEL=deepseek/deepseek-chat", "--env", f"DEEPSEEK_API_BASE={judge.base_url}",
               "--env", "DEEPSEEK_API_KEY=bench-key"], judge


def launch(work: Path, env: dict[str, str], data: Path, name: str, extra: list[str]) -> float:
    """One launch submitting to the stand-in: its wall time."""
    command = [sys.executable, "-m", "hpc.launch", "--job_name", name, "--time_limit", "60",
               "--runs_dir", str(work / "runs"), "--cluster", "local", "--config", "smoke",
               "--train_arg", "backend=tests.doubles.art_backend:FakeBackend",
               "--train_arg", "preflight_min_free_gb=0", "--env", f"DATA_DIR={data}", *extra]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0 or "submitted job 4242" not in result.stdout:
        raise SystemExit(f"launch failed (exit {result.returncode}): {result.stderr.strip()[-300:]}")
    return seconds


def submit_medians(work: Path, runs: int) -> dict[str, float]:
    """Median wall time of ``runs`` launches (a fresh run name each) of each kind, taking turns:
    without the preflight, with it and each judge. Each judge must be asked once a launch."""
    env = fake_sbatch(work / "bin")
    data = staged_data(work / "data")
    times: dict[str, list[float]] = {kind: [] for kind in LAUNCHES}
    with compatible_judge() as (compatible, first), default_judge() as (default, second), \
            litellm_judge() as (routed, third):
        extras = {"no_preflight": [*compatible, "--no_preflight"], "compatible": compatible, "default": default,
                  "litellm": routed}
        for k in range(runs + 1):  # the first round warms the page cache
            for kind in LAUNCHES:
                times[kind].append(launch(work, env, data, f"lat{k}{kind.replace('_', '')}", extras[kind]))
        asked = [len(judge.requests) for judge in (first, second, third)]
    if asked != [runs + 1] * 3:
        raise SystemExit(f"each judge must be asked once a launch ({runs + 1}), was: {asked}")
    return {kind: statistics.median(values[1:]) for kind, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each command")
    parser.add_argument("--submit_runs", type=int, default=5, help="timed launches with and without the preflight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as runs_dir:
        dry_run = ["--job_name", "agent_008", "--time_limit", "48:00:00", "--runs_dir", runs_dir, "--dry_run"]
        baseline = median_time([sys.executable, "-c", "pass"], args.runs)
        launcher = median_time([sys.executable, "-m", "hpc.launch", *dry_run], args.runs)
        heavy = heavy_imports(dry_run)
    print(f"python -c pass:            median {baseline * 1000:7.1f} ms over {args.runs} runs")
    print(f"python -m hpc.launch --dry_run: median {launcher * 1000:7.1f} ms over {args.runs} runs")
    print(f"ratio launcher / bare python: {launcher / baseline:.1f}x")
    print(f"added by the launcher:        {(launcher - baseline) * 1000:.1f} ms")
    print(f"target (< 250 ms median):     {'met' if launcher < TARGET else 'NOT met'}")
    print(f"heavy modules imported:       {', '.join(heavy) if heavy else 'none'}")
    with tempfile.TemporaryDirectory() as work:
        medians = submit_medians(Path(work), args.submit_runs)
    unchecked = medians["no_preflight"]
    print(f"launch (submit) --no_preflight:      median {unchecked * 1000:7.1f} ms over {args.submit_runs} runs")
    added = {kind: medians[kind] - unchecked for kind in LAUNCHES if kind != "no_preflight"}
    for kind, seconds in added.items():
        target = f"; target (adds < 1000 ms): {'met' if seconds < 1 else 'NOT met'}" if kind in TARGETED else ""
        print(f"with the preflight, {LAUNCHES[kind]}: median {medians[kind] * 1000:7.1f} ms, "
              f"adds {seconds * 1000:.1f} ms ({medians[kind] / unchecked:.1f}x){target}")
    return 0 if launcher < TARGET and not heavy and all(added[kind] < 1 for kind in TARGETED) else 1


if __name__ == "__main__":
    sys.exit(main())
