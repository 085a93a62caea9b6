"""Launcher latency: median wall time of a dry run against `python -c pass`.

    .venv/bin/python bench/launch_latency.py [--runs 15] [--submit_runs 5]

Both are measured in the same run on the same interpreter, so the ratio says
how much the launcher adds to a bare Python start. Target: dry run under
0.3 s median, and none of art, litellm, datasets, torch imported (checked
here too, and asserted by tests/hpc/launcher/test_launch.py).

Then a real launch (a submission, to an ``sbatch`` stand-in on PATH that prints
a job id) with the login-side preflight before the queue (hpc/launcher/queue_preflight.py:
the trainer's checks in a child process, passing here: the fixture data staged
by ``trainer.data prepare``, the test double's backend, the judge a local
OpenAI-compatible stand-in answering its one request with a plain HTTP POST) against the same
launch with ``--no_preflight``: what the preflight costs a launch. Target: it adds under 1 s
(3.9 s median when the judge check imported litellm).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
HEAVY = ("art", "litellm", "datasets", "torch", "vllm", "ray")


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def median_time(command: list[str], runs: int) -> float:
    timed(command)  # warm the page cache and .pyc files
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

    fixtures = REPO / "tests" / "fixtures" / "art_e"
    prepare(folder, str(fixtures / "emails.jsonl"), str(fixtures / "questions.jsonl"), show_progress=False)
    return folder


def submit_times(work: Path, runs: int, *extra: str) -> float:
    """Median wall time of ``runs`` launches (a fresh run name each) submitting to the stand-in."""
    from tests.doubles.openai_server import OpenAIServer, text

    env = fake_sbatch(work / "bin")
    data = staged_data(work / "data") if not (work / "data").exists() else work / "data"
    times = []
    with OpenAIServer(lambda body: text("OK")) as judge:
        for k in range(runs + 1):  # the first warms the page cache
            command = [sys.executable, "-m", "hpc.launch", "--job_name", f"lat{k}{''.join(extra)}", "--time_limit",
                       "60", "--runs_dir", str(work / "runs"), "--cluster", "local", "--config", "smoke",
                       "--train_arg", "backend=tests.doubles.art_backend:FakeBackend",
                       "--train_arg", "preflight_min_free_gb=0", "--env", f"DATA_DIR={data}",
                       "--env", f"JUDGE_API_BASE={judge.base_url}", "--env", "JUDGE_API_KEY=bench",
                       "--env", "JUDGE_MODEL=judge-model", *extra]
            start = time.perf_counter()
            result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            if result.returncode != 0 or "submitted job 4242" not in result.stdout:
                raise SystemExit(f"launch failed (exit {result.returncode}): {result.stderr.strip()[-300:]}")
    return statistics.median(times[1:])


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
    print(f"target (< 300 ms median):     {'met' if launcher < 0.3 else 'NOT met'}")
    print(f"heavy modules imported:       {', '.join(heavy) if heavy else 'none'}")
    with tempfile.TemporaryDirectory() as work:
        checked = submit_times(Path(work), args.submit_runs)
        unchecked = submit_times(Path(work), args.submit_runs, "--no_preflight")
    print(f"launch (submit) with the preflight:  median {checked * 1000:7.1f} ms over {args.submit_runs} runs")
    print(f"launch (submit) --no_preflight:      median {unchecked * 1000:7.1f} ms over {args.submit_runs} runs")
    print(f"added by the preflight:              {(checked - unchecked) * 1000:.1f} ms "
          f"({checked / unchecked:.1f}x)")
    print(f"target (preflight adds < 1000 ms):   {'met' if checked - unchecked < 1 else 'NOT met'}")
    return 0 if launcher < 0.3 and not heavy and checked - unchecked < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
