"""A lab's runs directory: status.sh, hpc.accounting, hpc.report, rmlogs.sh and scancelall.sh at scale.

    .venv/bin/python -m bench.status_scale [--runs 1000] [--steps 3000] [--validations 100]
        [--report_steps 10000] [--source RUN_DIR] [--work DIR] [--repeat 5]

The directory is made from real records: one run launched on the local Slurm by the real
launcher with the step double (its ledger, sacct's rows of its jobs, its progress, stops,
start-ups, logs, scripts, model folder), whose steps and validations are shaped after the
real trainer's records of a GPU run (docs/results/learning_curve_runs: reward, spread, accuracy),
copied into ``--runs`` runs of ``--steps`` steps placed inside the real job's span. ``--source``
takes a finished run directory instead of launching one (the launch needs the local Slurm; run it
alone on a shared one: ``flock /tmp/slurm-tests.lock .venv/bin/python -m bench.status_scale``).

Measured, each against the figures of status.sh without its cache (``OLD``: every run's whole history
read on every call) and the first call here, which has no cache and so reads every run's history so:

- ``status.sh`` cold (the first call: every run read); warm with nothing changed (median of
  ``--repeat``); live (before each call one real step record appended to 10 runs and their
  progress rewritten, as a trainer does: median); ``--run NAME``;
- ``hpc.accounting NAME``; ``hpc.report`` of a run of ``--report_steps`` steps, its pictures included;
- ``rmlogs.sh`` (listing) and ``scancelall.sh`` (a prefix no job has: nothing cancelled).

Targets: status.sh live < 2 s and unchanged < 0.5 s (medians), hpc.report < 3 s; exit 1 when one is
missed. The status cache goes to a temporary XDG_CACHE_HOME of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GPU_RUN = REPO / "docs" / "results" / "learning_curve_runs" / "2026-11-27-2xH100" / "seed1"
OLD = {"status_100": 6.9, "status_1000": 80.6, "status_run": 0.83, "accounting": 0.91}  # status.sh without its cache, seconds
TARGETS = {"live": 2.0, "unchanged": 0.5, "report": 3.0}
LIVE_RUNS = 10
PYTHON = str(REPO / ".venv" / "bin" / "python")


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def launch_source(work: Path) -> Path:
    """One run of the step double on the local Slurm, by the real launcher, followed to its end."""
    from tests.hpc.slurm_helpers import launch
    from tests.scripts.slurm_util import wait_final

    runs, name = work / "source", "scale-src"
    result = launch("--job_name", name, "--runs_dir", str(runs), "--cluster", "local", "--time_limit", "5",
                    "--cpus_per_task", "1", "--gpus_per_node", "1", "--entrypoint", "tests.doubles.step_trainer",
                    "--train_arg", "steps=6", "--train_arg", "step_seconds=1", "--train_arg", "startup_seconds=1",
                    "--env", f"ART_PATH={runs / name / 'art'}")
    if result.returncode != 0:
        sys.exit(f"the source run's launch failed: {result.stderr.strip()}")
    run = runs / name
    deadline = time.monotonic() + 300
    while not (run / "done.json").exists() and time.monotonic() < deadline:
        time.sleep(1)
    jobs = [r["job_id"] for r in lines_of(run / "ledger.jsonl") if r["event"] == "job_start"]
    wait_final(jobs, 120)
    return run


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def shaped_steps(source: Path, steps: int) -> list[dict]:
    """``steps`` real step records (the GPU run's, in turn) inside the source job's span."""
    own = lines_of(source / "steps.jsonl")
    first, last = datetime.fromisoformat(own[0]["started"]), datetime.fromisoformat(own[-1]["ended"])
    shapes, each = lines_of(GPU_RUN / "steps.jsonl"), (last - first) / steps
    records = []
    for index in range(steps):
        ended = first + each * (index + 1)
        record = {**shapes[index % len(shapes)], "step": index + 1, "job_id": own[-1]["job_id"]}
        record.update(started=iso(ended - each), seconds=round(each.total_seconds(), 3), ended=iso(ended))
        records.append(record)
    return records


def shaped_validations(steps: list[dict], count: int) -> list[dict]:
    shapes, every = lines_of(GPU_RUN / "validation.jsonl"), max(1, len(steps) // count)
    return [{**shapes[k % len(shapes)], "step": (k + 1) * every, "time": steps[(k + 1) * every - 1]["ended"]}
            for k in range(count) if (k + 1) * every <= len(steps)]


def write_lines(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def make_template(source: Path, work: Path, steps: int, validations: int) -> Path:
    """The source run with ``steps`` steps and ``validations`` validations (its own model folder copied)."""
    template = work / "template"
    shutil.copytree(source, template, symlinks=True, ignore=shutil.ignore_patterns(".lock", "trainer.pid"))
    records = shaped_steps(source, steps)
    write_lines(template / "steps.jsonl", records)
    write_lines(template / "validation.jsonl", shaped_validations(records, validations))
    for name, key in (("progress.json", "step"), ("done.json", "final_step")):
        data = json.loads((template / name).read_text())
        data.update({key: steps, "total_steps": steps})
        (template / name).write_text(json.dumps(data, indent=2) + "\n")
    return template


def copy_run(template: Path, target: Path, source: Path) -> None:
    """One run of the directory: the template, its model folder its own (model.json names it)."""
    shutil.copytree(template, target, symlinks=True)
    record = json.loads((target / "model.json").read_text())
    record["model_dir"] = record["model_dir"].replace(str(source), str(target), 1)
    (target / "model.json").write_text(json.dumps(record, indent=2) + "\n")
    os.chmod(target / "secrets.env", 0o600)


def make_runs(template: Path, runs_dir: Path, count: int, source: Path) -> list[str]:
    runs_dir.mkdir(parents=True, exist_ok=True)
    names = [f"sweep-{k:04d}" for k in range(count)]
    for name in names:
        if not (runs_dir / name).exists():
            copy_run(template, runs_dir / name, source)
    return names


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    return seconds


def step_appended(run: Path) -> None:
    """What a trainer does after a step: one more steps.jsonl line, progress.json replaced by a rename."""
    last = json.loads((run / "steps.jsonl").read_text().splitlines()[-1])
    ended = datetime.fromisoformat(last["ended"]) + timedelta(seconds=1)
    with open(run / "steps.jsonl", "a") as handle:
        handle.write(json.dumps({**last, "step": last["step"] + 1, "ended": iso(ended)}) + "\n")
    progress = json.loads((run / "progress.json").read_text())
    progress["step"] = last["step"] + 1
    temporary = run / ".progress.json.bench"
    temporary.write_text(json.dumps(progress))
    os.replace(temporary, run / "progress.json")


def status_figures(runs_dir: Path, names: list[str], env: dict[str, str], repeat: int) -> dict[str, float]:
    status = ["bash", "scripts/status.sh", "--runs_dir", str(runs_dir)]
    figures = {"cold": timed(status, env)}
    figures["unchanged"] = statistics.median(timed(status, env) for _ in range(repeat))
    live = []
    for _ in range(repeat):
        for name in names[:LIVE_RUNS]:
            step_appended(runs_dir / name)
        live.append(timed(status, env))
    figures["live"] = statistics.median(live)
    figures["run"] = statistics.median(timed([*status, "--run", names[-1]], env) for _ in range(repeat))
    return figures


def other_figures(runs_dir: Path, names: list[str], env: dict[str, str], repeat: int) -> dict[str, float]:
    account = [PYTHON, "-m", "hpc.accounting", names[-1], "--runs_dir", str(runs_dir)]
    rmlogs = ["bash", "scripts/rmlogs.sh", "--runs_dir", str(runs_dir)]
    cancel = ["bash", "scripts/scancelall.sh", "--name", "no-such-prefix-", "-y"]
    return {"accounting": statistics.median(timed(account, env) for _ in range(repeat)),
            "rmlogs": statistics.median(timed(rmlogs, env) for _ in range(repeat)),
            "scancelall": statistics.median(timed(cancel, env) for _ in range(repeat))}


def report_figure(source: Path, work: Path, steps: int, env: dict[str, str], repeat: int) -> float:
    """hpc.report of one run of ``steps`` steps (100 validations), its pictures drawn (median)."""
    runs_dir = work / "report-runs"
    template = make_template(source, work / "report-template", steps, 100) \
        if not (work / "report-template" / "template").exists() else work / "report-template" / "template"
    make_runs(template, runs_dir, 1, source)
    report = [PYTHON, "-m", "hpc.report", str(runs_dir / "sweep-0000")]
    timed(report, env)  # matplotlib builds its font cache in the fresh XDG_CACHE_HOME once, as on a user's first report
    return statistics.median(timed(report, env) for _ in range(repeat))


def print_table(runs: int, steps: int, report_steps: int, status: dict[str, float], other: dict[str, float],
                report: float) -> None:
    rows = [
        (f"status.sh, {runs} x {steps}: first call (no cache: every run read)", OLD["status_1000"], status["cold"]),
        ("status.sh, nothing changed since the last call (median)", OLD["status_1000"], status["unchanged"]),
        (f"status.sh, {LIVE_RUNS} runs each one step on (median)", OLD["status_1000"], status["live"]),
        ("status.sh --run NAME (median)", OLD["status_run"], status["run"]),
        ("hpc.accounting NAME (median)", OLD["accounting"], other["accounting"]),
        (f"hpc.report, one run of {report_steps} steps, pictures drawn (median)", None, report),
        ("rmlogs.sh (listing, median)", None, other["rmlogs"]),
        ("scancelall.sh --name PREFIX -y (median)", None, other["scancelall"]),
    ]
    print(f"\n{'what':<66} {'no cache':>9} {'now':>8}")
    for label, old, new in rows:
        print(f"{label:<66} {'-' if old is None else f'{old:.2f} s':>9} {new:>6.2f} s")
    print(f"(without the cache: 100 x 3,000 at {OLD['status_100']} s and 1,000 x 3,000 at {OLD['status_1000']} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--validations", type=int, default=100)
    parser.add_argument("--report_steps", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--source", type=Path, help="a finished run directory of the local Slurm (default: launch one)")
    parser.add_argument("--work", type=Path, help="keep the directory here (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="status-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    source = args.source.resolve() if args.source else launch_source(work)
    started = time.perf_counter()
    template = make_template(source, work / f"t-{args.steps}-{args.validations}", args.steps, args.validations) \
        if not (work / f"t-{args.steps}-{args.validations}" / "template").exists() \
        else work / f"t-{args.steps}-{args.validations}" / "template"
    runs_dir = work / f"runs-{args.runs}x{args.steps}"
    names = make_runs(template, runs_dir, args.runs, source)
    print(f"{runs_dir}: {args.runs} runs x {args.steps} steps, {args.validations} validations "
          f"(made in {time.perf_counter() - started:.0f} s from {source})")
    with tempfile.TemporaryDirectory(prefix="status-cache-") as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"}
        status = status_figures(runs_dir, names, env, args.repeat)
        other = other_figures(runs_dir, names, env, args.repeat)
        report = report_figure(source, work, args.report_steps, env, args.repeat)
    if args.work is None:
        shutil.rmtree(work)  # a thousand runs: a gigabyte
    print_table(args.runs, args.steps, args.report_steps, status, other, report)
    missed = [k for k, limit in TARGETS.items() if (status.get(k) if k != "report" else report) > limit]
    print("targets: " + ("met" if not missed else "MISSED: " + ", ".join(missed))
          + f" (live < {TARGETS['live']} s, unchanged < {TARGETS['unchanged']} s, report < {TARGETS['report']} s)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
