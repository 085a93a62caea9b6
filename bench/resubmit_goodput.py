"""Resubmission goodput on the local Slurm: how much allocated time trains, per continuation mode.

    .venv/bin/python -m bench.resubmit_goodput [--steps 33] [--signal_grace 30] [--modes requeue,afterany,chain]

(on a shared machine: `flock /tmp/slurm-dev.lock .venv/bin/python -m bench.resubmit_goodput`)

Launches, all at once and with the real launcher and job template, one run per
mode with the training-step double (tests.doubles.step_trainer: 2 s steps, a
checkpoint per step, every step logged) in 1-minute jobs, plus a baseline: the
same steps in one job long enough to need no continuation. Per mode it prints

- jobs: job runs that trained (requeue: runs of the one job id), and idle ones
  (chained jobs that found the run finished);
- goodput: trained step time / allocated job time (sacct Elapsed of every job
  run, idle ones included), and its ratio to the baseline's;
- restart gap: end of job k (sacct End) to the first step of job k+1, median and
  max, split into queue wait (End k to Start k+1) and startup (Start k+1 to the
  first step: job script, begin hook, trainer start);
- steps lost (never trained) and repeated (trained more than once).

Targets: zero lost, zero repeated, afterany restart gap under 5 s. Requeue's gap
is mostly Slurm's hold on requeued jobs (AuthInfo cred_expire, 120 s by default)
plus the wait for its next scheduling pass; it is printed so users can choose.
Exit code 0 when the targets are met.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hpc.job.continuation_modes import MODE_CHOICES, ContinuationMode
from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.run import ledger
from hpc.run.ledger import Chain, JobEnd, JobStart, Resubmit, Submit, Successor
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.states import QUEUED
from tests.doubles.step_trainer import TrainedStep, read_steps

REPO = Path(__file__).resolve().parent.parent

MODES = MODE_CHOICES
STEP_SECONDS = 2.0  # the double's default
AFTERANY_GAP_TARGET = 5.0
# Steps a 1-minute job is assumed to train when sizing the chain (Slurm's 30 s
# tick gives 14-15 in practice); a chain that runs out shows as lost steps.
CHAIN_STEPS_PER_JOB = 8


@dataclass(frozen=True)
class JobRun:
    """One run of a job as accounting has it (a requeued job has one per restart)."""

    job_id: str
    state: str
    start: float
    end: float
    elapsed: int


@dataclass(frozen=True)
class Figures:
    mode: str
    training_runs: int
    idle_runs: int
    goodput: float
    gaps: list[float]
    queue_waits: list[float]
    startups: list[float]
    lost: int
    repeated: int
    wall: float


# -- running ---------------------------------------------------------------------------------


def launch_args(mode: str, runs_dir: Path, steps: int, grace: int) -> list[str]:
    """The launcher's command line for one mode (or the baseline: one long job)."""
    minutes = 1
    extra = ["--continuation", "afterany"]
    if mode == "baseline":
        minutes = math.ceil((steps * STEP_SECONDS + grace + 60) / 60) + 1  # Slurm may signal 30 s early
    elif mode == ContinuationMode.CHAIN:
        extra = ["--chain", str(math.ceil(steps / CHAIN_STEPS_PER_JOB) + 1)]
    else:
        extra = ["--continuation", mode]
    return launch_command(f"bench_{mode}", runs_dir, minutes, grace, [f"steps={steps}"], extra)


def launch_command(name: str, runs_dir: Path, minutes: int, grace: int, train_args: list[str],
                   extra: list[str]) -> list[str]:
    """The real launcher submitting run ``name`` of the step double (1 CPU, no GPU)."""
    return [sys.executable, "-m", "hpc.launch", "--cluster", "local", "--job_name", name,
            "--runs_dir", str(runs_dir), "--env", f"ART_PATH={runs_dir / name / 'art'}",
            "--time_limit", str(minutes), "--signal_grace", str(grace), "--gpus_per_node", "0",
            "--cpus_per_task", "1", "--entrypoint", "tests.doubles.step_trainer",
            *[arg for value in train_args for arg in ("--train_arg", value)], *extra]


def job_ids(run: RunDir) -> list[str]:
    """The run's jobs: submitted, chained, continued, and successors queued (hpc/job/successor.py)."""
    ids = [r.job_id for r in ledger.read(run) if isinstance(r, (Submit, Chain, Resubmit, Successor))]
    return list(dict.fromkeys(ids))


def queue_states(ids: list[str]) -> set[str]:
    """The states of these jobs still in the queue (JobState is a str: compares with QUEUED's)."""
    return set(calls.queue_states(ids, timeout=30).values())


def settled(run: RunDir) -> bool:
    """A job has ended and none of the run's jobs is queued or running any more
    (finished, failed, or a chain that ran out: the figures then show lost steps)."""
    if not ledger.of_kind(ledger.read(run), JobEnd):
        return False
    return not QUEUED & queue_states(job_ids(run))


def job_runs(ids: list[str]) -> list[JobRun]:
    """Every run of the jobs (-D: also those a requeue ended), oldest first."""
    runs = [JobRun(row.job_id, str(row.state), row.start.timestamp(), row.end.timestamp(), row.elapsed)
            for row in calls.job_runs(ids, timeout=30)
            if row.start is not None and row.end is not None]  # not: never started, or not ended yet
    return sorted(runs, key=lambda r: r.start)


def wait_for_accounting(run: RunDir, timeout: float = 60) -> list[JobRun]:
    """The job runs, once accounting has the end of every one (slurmdbd may lag a little)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = job_runs(job_ids(run))  # only runs with an end
        starts = len(ledger.of_kind(ledger.read(run), JobStart))
        trained = len({(s.job, s.restart) for s in read_steps(run)})
        if len(runs) >= max(starts, trained) or time.monotonic() > deadline:
            return runs
        time.sleep(1)


# -- figures -----------------------------------------------------------------------------------


def figures(mode: str, run: RunDir, steps_total: int, wall: float) -> Figures:
    steps = read_steps(run)
    runs = wait_for_accounting(run)
    training = training_runs(runs, steps)
    firsts = [min(s.start for s in by) for by in training.values()]
    ordered = list(training)
    gaps, waits, startups = [], [], []
    for k in range(1, len(ordered)):
        before, after = ordered[k - 1], ordered[k]
        gaps.append(firsts[k] - before.end)
        waits.append(after.start - before.end)
        startups.append(firsts[k] - after.start)
    trained = [s.step for s in steps]
    allocated = sum(r.elapsed for r in runs)
    return Figures(
        mode=mode, training_runs=len(training), idle_runs=len(runs) - len(training),
        goodput=sum(s.end - s.start for s in steps) / allocated if allocated else 0.0,
        gaps=gaps, queue_waits=waits, startups=startups,
        lost=len(set(range(1, steps_total + 1)) - set(trained)),
        repeated=len(trained) - len(set(trained)), wall=wall)


def training_runs(runs: list[JobRun], steps: list[TrainedStep]) -> dict[JobRun, list[TrainedStep]]:
    """The job runs that trained, in order, each with its steps. The k-th run of a
    job id (sacct -D, by start) is its restart k, as the double logs it."""
    by_job: dict[str, list[JobRun]] = {}
    for r in runs:
        by_job.setdefault(r.job_id, []).append(r)
    result: dict[JobRun, list[TrainedStep]] = {}
    for step in steps:
        instances = by_job.get(step.job, [])
        if step.restart < len(instances):
            result.setdefault(instances[step.restart], []).append(step)
    return dict(sorted(result.items(), key=lambda item: item[0].start))


def seconds(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):6.1f} / {max(values):6.1f}"


def report(all_figures: list[Figures], steps: int, grace: int) -> bool:
    base = next((f for f in all_figures if f.mode == "baseline"), None)
    print(f"\nresubmission goodput on the local Slurm: {steps} steps of {STEP_SECONDS:.0f} s, "
          f"1-minute jobs with --signal_grace {grace}; baseline: the same steps in one longer job\n")
    print(f"{'mode':<9} {'jobs':>4} {'idle':>4} {'goodput':>7} {'vs base':>7}  {'gap med / max s':>15}  "
          f"{'queue med s':>11} {'startup med s':>13} {'lost':>4} {'rep.':>4} {'wall s':>6}")
    for f in all_figures:
        ratio = f"{f.goodput / base.goodput:7.2f}" if base and base.goodput else "      -"
        queue = f"{statistics.median(f.queue_waits):11.1f}" if f.queue_waits else f"{'-':>11}"
        startup = f"{statistics.median(f.startups):13.1f}" if f.startups else f"{'-':>13}"
        print(f"{f.mode:<9} {f.training_runs:>4} {f.idle_runs:>4} {f.goodput:7.2f} {ratio}  {seconds(f.gaps):>15}  "
              f"{queue} {startup} {f.lost:>4} {f.repeated:>4} {f.wall:6.0f}")
    exact = all(f.lost == 0 and f.repeated == 0 for f in all_figures)
    afterany = next((f for f in all_figures if f.mode == ContinuationMode.AFTERANY), None)
    gap_ok = afterany is None or all(g < AFTERANY_GAP_TARGET for g in afterany.gaps)
    print(f"\ntarget zero steps lost or repeated: {'met' if exact else 'NOT met'}")
    if afterany is not None:
        print(f"target afterany restart gap < {AFTERANY_GAP_TARGET:.0f} s: {'met' if gap_ok else 'NOT met'} "
              f"(max {max(afterany.gaps, default=0):.1f} s)")
    requeue = next((f for f in all_figures if f.mode == ContinuationMode.REQUEUE), None)
    if requeue is not None and requeue.gaps:
        print(f"requeue restart gap: median {statistics.median(requeue.gaps):.0f} s (Slurm holds a requeued job for "
              "AuthInfo cred_expire, 120 s by default, then starts it on a scheduling pass)")
    return exact and gap_ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=33, help="training steps per run (2 s each)")
    parser.add_argument("--signal_grace", type=int, default=30, help="seconds; Slurm may signal up to 30 s earlier")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for all runs")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    problem = bad_input(modes, args)
    if problem:
        print(f"resubmit_goodput: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="resubmit_goodput-") as tmp:
        return run_all(Path(tmp) / "runs", ["baseline", *modes], args.steps, args.signal_grace, args.timeout)


def bad_input(modes: list[str], args: argparse.Namespace) -> str | None:
    if not modes or any(m not in MODES for m in modes):
        return f"invalid --modes {args.modes!r}: accepted a comma-separated subset of {','.join(MODES)}"
    if args.steps < 1:
        return f"invalid --steps {args.steps}: accepted 1 or more"
    if not 10 <= args.signal_grace <= 50:
        return f"invalid --signal_grace {args.signal_grace}: accepted 10..50 (seconds before the 1-minute limit)"
    return None


def run_all(runs_dir: Path, modes: list[str], steps: int, grace: int, timeout: float) -> int:
    commands = {mode: launch_args(mode, runs_dir, steps, grace) for mode in modes}
    runs = {mode: RunDir(runs_dir / f"bench_{mode}") for mode in modes}
    walls = launch_and_wait(commands, runs, timeout, "resubmit_goodput")
    if walls is None:
        return 1
    results = [figures(m, runs[m], steps, walls[m]) for m in modes]
    return 0 if report(results, steps, grace) else 1


def launch_and_wait(commands: dict[str, list[str]], runs: dict[str, RunDir], timeout: float,
                    prog: str) -> dict[str, float] | None:
    """Launch every mode's run at once and wait until each has settled: the wall time of each,
    or None (said on stderr) when a launch failed or a run did not settle in time. Jobs still
    queued or running at the end are cancelled."""
    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    try:
        for mode, command in commands.items():
            result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
            if result.returncode != 0:
                print(f"{prog}: launching {mode} failed: {result.stderr.strip()}", file=sys.stderr)
                return None
            started[mode] = time.monotonic()
            print(f"{mode}: {result.stdout.splitlines()[0]}", flush=True)
        deadline = time.monotonic() + timeout
        while len(ended) < len(commands) and time.monotonic() < deadline:
            for mode in commands:
                if mode not in ended and settled(runs[mode]):
                    ended[mode] = time.monotonic()
                    print(f"{mode}: settled after {ended[mode] - started[mode]:.0f} s", flush=True)
            time.sleep(1)
        missing = [m for m in commands if m not in ended]
        if missing:
            print(f"{prog}: {', '.join(missing)} did not finish within {timeout:.0f} s", file=sys.stderr)
            return None
        return {mode: ended[mode] - started[mode] for mode in commands}
    finally:
        leftover = [j for run in runs.values() if run.path.exists() for j in job_ids(run)]
        if leftover:
            cancel_quietly(leftover)


def cancel_quietly(ids: list[str]) -> None:
    """Clean up after a bench: a job that already left the queue is no error."""
    try:
        calls.cancel(ids)
    except calls.SlurmError:
        pass


if __name__ == "__main__":
    sys.exit(main())
