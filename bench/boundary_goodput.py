"""Stop at a step boundary against a fixed stop signal, on the local Slurm: what each job end throws away.

    .venv/bin/python -m bench.boundary_goodput [--steps 40] [--step_seconds 20-40] [--rollout_share 0.9]
        [--signal_grace 10]

Launches at once, with the real launcher and job template, three runs of the training-step
double (tests.doubles.step_trainer): steps of 20-40 s, each drawn from an RNG seeded with the
step number (the same steps in every run, and when a step is redone); each step a rollout
phase, which a stop signal abandons, then training and the checkpoint save, which it lets
finish. 2-minute jobs, continued by afterany resubmission:

- fixed:    the stop signal (USR1, --signal_grace before the limit) alone ends a job's work,
            as in every peer tool;
- boundary: the same, with the trainer's stop-at-boundary rule (hpc/job/deadline.py, its default
            settings): no step starts unless predicted to end before the signal may come;
- baseline: the same steps in one job long enough to need no continuation.

Per mode it prints: job ends, how they ended (stops.jsonl: boundary, signal), the rollout-seconds
each job end threw away (mean and max) and the share of job ends that threw away none, goodput
(trained step time / allocated job time, sacct Elapsed of every job) and its ratio to the
baseline's, steps lost (never trained) and repeated (trained twice). Targets, for boundary mode:
zero abandoned rollouts at >= 95% of job ends, goodput >= 0.95 of the baseline, no step lost or
repeated. Exit code 0 when they are met. Takes about 25 minutes (on a shared machine:
`flock /tmp/slurm-dev.lock .venv/bin/python -m bench.boundary_goodput`).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import resubmit_goodput as rg
from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.run import ledger
from hpc.run.ledger import JobEnd
from hpc.run.rundir import RunDir

MODES = ("baseline", "fixed", "boundary")
JOB_MINUTES = 2
ZERO_LOSS_TARGET = 0.95
GOODPUT_TARGET = 0.95


@dataclass(frozen=True)
class JobEnds:
    """How a run's jobs ended, from its ledger and stops.jsonl."""

    count: int
    reasons: dict[str, int]
    lost: list[float]  # rollout-seconds thrown away per job end (nan: the workload recorded nothing)

    @property
    def zero_loss_share(self) -> float:
        return sum(1 for x in self.lost if x == 0) / len(self.lost) if self.lost else 0.0

    def lost_text(self) -> str:
        known = [x for x in self.lost if not math.isnan(x)]
        return f"{statistics.mean(known):6.1f} / {max(known):6.1f}" if known else f"{'-':>15}"


def job_ends(run: RunDir) -> JobEnds:
    """One entry per job end (ledger job_end), with the rollout-seconds its stop threw away."""
    stops: dict[str, list[dict]] = {}
    for record in run.read_stops():
        stops.setdefault(str(record["job_id"]), []).append(record)
    ends = [r.job_id for r in ledger.of_kind(ledger.read(run), JobEnd)]
    lost = [sum(float(s["lost_rollout_seconds"]) for s in stops[j]) if j in stops else math.nan for j in ends]
    reasons: dict[str, int] = {}
    for record in run.read_stops():
        reasons[record["reason"]] = reasons.get(record["reason"], 0) + 1
    return JobEnds(len(ends), reasons, lost)


def launch_commands(runs_dir: Path, args: argparse.Namespace) -> dict[str, list[str]]:
    low, _, high = args.step_seconds.partition("-")
    steps = [f"steps={args.steps}", f"step_seconds={args.step_seconds}", f"rollout_share={args.rollout_share}",
             f"seed={args.seed}"]
    longest = float(high or low)
    baseline_minutes = math.ceil((args.steps * longest + args.signal_grace + 60) / 60) + 1
    afterany = ["--continuation", "afterany", "--max_resubmits", "200"]  # boundary mode: ~1.6 steps a job
    return {
        "baseline": rg.launch_command("bench_baseline", runs_dir, baseline_minutes, args.signal_grace, steps, afterany),
        "fixed": rg.launch_command("bench_fixed", runs_dir, JOB_MINUTES, args.signal_grace,
                                   [*steps, "stop_at_boundary=false"], afterany),
        "boundary": rg.launch_command("bench_boundary", runs_dir, JOB_MINUTES, args.signal_grace,
                                      [*steps, "stop_at_boundary=true"], afterany),
    }


def report(runs: dict[str, RunDir], figures: dict[str, rg.Figures], ends: dict[str, JobEnds],
           args: argparse.Namespace) -> bool:
    base = figures["baseline"].goodput
    print(f"\nstop at a step boundary on the local Slurm: {args.steps} steps of {args.step_seconds} s "
          f"({args.rollout_share:.0%} rollouts), {JOB_MINUTES}-minute jobs with --signal_grace {args.signal_grace}, "
          "afterany; baseline: the same steps in one longer job\n")
    print(f"{'mode':<9} {'job ends':>8} {'boundary':>8} {'signal':>6}  {'lost rollout-s/end mean / max':>29}  "
          f"{'ends losing none':>16} {'goodput':>7} {'vs base':>7} {'lost':>4} {'rep.':>4} {'wall s':>6}")
    for mode in MODES:
        f, e = figures[mode], ends[mode]
        print(f"{mode:<9} {e.count:>8} {e.reasons.get('boundary', 0):>8} {e.reasons.get('signal', 0):>6}  "
              f"{e.lost_text():>29}  {e.zero_loss_share:>16.0%} {f.goodput:7.3f} {f.goodput / base:7.3f} "
              f"{f.lost:>4} {f.repeated:>4} {f.wall:6.0f}")
    for mode in MODES:
        failed = runs[mode].read_failed()
        if failed:
            print(f"{mode}: the run was given up: {failed['reason']}")
    b, e = figures["boundary"], ends["boundary"]
    checks = [
        (f"boundary: zero abandoned rollouts at >= {ZERO_LOSS_TARGET:.0%} of job ends", e.zero_loss_share >= ZERO_LOSS_TARGET,
         f"{e.zero_loss_share:.0%}"),
        (f"boundary: goodput >= {GOODPUT_TARGET} of the baseline's", b.goodput >= GOODPUT_TARGET * base,
         f"{b.goodput / base:.3f}"),
        ("every mode: no step lost or repeated", all(f.lost == 0 and f.repeated == 0 for f in figures.values()), ""),
    ]
    print()
    for name, met, value in checks:
        print(f"target {name}: {'met' if met else 'NOT met'}{f' ({value})' if value else ''}")
    return all(met for _, met, _ in checks)


def bad_input(args: argparse.Namespace) -> str | None:
    try:
        low, _, high = args.step_seconds.partition("-")
        shortest, longest = float(low), float(high or low)
    except ValueError:
        shortest = longest = -1.0
    if not 0 < shortest <= longest <= 60:
        return f"invalid --step_seconds {args.step_seconds!r}: accepted SECONDS or LOW-HIGH, 0 < LOW <= HIGH <= 60"
    if args.steps < 1:
        return f"invalid --steps {args.steps}: accepted 1 or more"
    if not 0 <= args.rollout_share < 1:
        return f"invalid --rollout_share {args.rollout_share}: accepted 0 <= share < 1"
    if not 10 <= args.signal_grace <= 50:
        return f"invalid --signal_grace {args.signal_grace}: accepted 10..50 (seconds before the 2-minute limit)"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps per run")
    parser.add_argument("--step_seconds", default="20-40", help="a step's seconds: S, or LOW-HIGH drawn per step")
    parser.add_argument("--rollout_share", type=float, default=0.9,
                        help="share of a step in rollouts (a stop signal abandons them); the rest trains and saves")
    parser.add_argument("--signal_grace", type=int, default=10,
                        help="seconds; the job kills a workload still running 5 s after USR1 (grace - 20 above 25)")
    parser.add_argument("--seed", type=int, default=0, help="the step lengths' seed")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait for all runs")
    args = parser.parse_args()
    problem = bad_input(args)
    if problem:
        print(f"boundary_goodput: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="boundary_goodput-") as tmp:
        runs_dir = Path(tmp) / "runs"
        runs = {mode: RunDir(runs_dir / f"bench_{mode}") for mode in MODES}
        walls = rg.launch_and_wait(launch_commands(runs_dir, args), runs, args.timeout, "boundary_goodput")
        if walls is None:
            return 1
        figures = {m: rg.figures(m, runs[m], args.steps, walls[m]) for m in MODES}
        ends = {m: job_ends(runs[m]) for m in MODES}
        return 0 if report(runs, figures, ends, args) else 1


if __name__ == "__main__":
    sys.exit(main())
