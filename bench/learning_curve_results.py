"""The learning curve's results: ``docs/results/learning_curve.json`` written from the runs'
validation records, its targets, and its picture (bench/learning_curve.py).

The JSON has exactly the issue's schema::

    {"device": "<GPU name>", "model": "...", "date": "YYYY-MM-DD",
     "runs": [{"seed": S, "heldout": [{"step": N, "correct": K, "n": M}, ...]}, ...],
     "control": {"heldout": [...]}}

Each point is one validation of a run directory (``validation.jsonl``; ``correct`` counted from
its per-question records), nothing typed by hand. The picture is drawn from the JSON alone,
so ``python -m bench.learning_curve plot JSON`` redraws it anywhere. matplotlib is imported
only to draw.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hpc.run.records import read_jsonl
from hpc.run.rundir import RunDir

Z95 = 1.959964  # the normal quantile of a two-sided 95% interval
RISE_TARGET = 0.20  # every seed, first to last point
CONTROL_LIMIT = 0.05  # the control, first to last point


def heldout_points(run: RunDir) -> list[dict[str, int]]:
    """A run's validations as ``{"step", "correct", "n"}``, oldest first: ``correct`` counts the
    per-question records of that validation (its summary's accuracy times its questions where
    they are missing)."""
    points = []
    for summary in run.read_validations():
        step = int(summary["step"])
        details = read_jsonl(run.validation_details(step))
        if details:
            points.append({"step": step, "correct": sum(bool(r.get("correct")) for r in details), "n": len(details)})
        else:
            n = int(summary["questions"])
            points.append({"step": step, "correct": round(float(summary["accuracy"]) * n), "n": n})
    return points


def results(device: str, model: str, date: str, seeds: dict[int, RunDir], control: RunDir) -> dict[str, Any]:
    """The JSON's content from the run directories."""
    return {"device": device, "model": model, "date": date,
            "runs": [{"seed": seed, "heldout": heldout_points(run)} for seed, run in sorted(seeds.items())],
            "control": {"heldout": heldout_points(control)}}


def write_json(data: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # the ends exactly: at 0/n centre - half is 0 only up to rounding (seen 1e-17 above it)
    low = 0.0 if correct <= 0 else max(0.0, centre - half)
    high = 1.0 if correct >= n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Verdict:
    """One target: what it asks, what was measured, met or not."""

    name: str
    met: bool
    measured: str

    def line(self) -> str:
        return f"{'met    ' if self.met else 'NOT MET'} {self.name}: {self.measured}"


def rise(points: list[dict[str, int]]) -> float | None:
    """Accuracy of the last point minus the first; None with fewer than two points."""
    if len(points) < 2:
        return None
    return points[-1]["correct"] / points[-1]["n"] - points[0]["correct"] / points[0]["n"]


def seed_verdict(run: dict[str, Any]) -> Verdict:
    def check(gain: float, points: list[dict[str, int]]) -> tuple[bool, str]:
        first, last = (wilson(point["correct"], point["n"]) for point in (points[0], points[-1]))
        apart, fell = first[1] < last[0], last[1] < first[0]
        said = "apart" if apart else "apart, the last below the first" if fell else "overlap"
        # 60/100 - 40/100 is 0.19999999999999996: 20 points must count as 20
        return gain >= RISE_TARGET - 1e-9 and apart, f", intervals {said}"

    return judged(f"seed {run['seed']} rises >= {RISE_TARGET:.0%} with 95% intervals apart", run["heldout"], check)


def control_verdict(control: dict[str, Any]) -> Verdict:
    return judged(f"the control (learning rate 0) rises < {CONTROL_LIMIT:.0%}", control["heldout"],
                  lambda gain, _: (gain < CONTROL_LIMIT, ""))


def judged(name: str, points: list[dict[str, int]],
           check: Callable[[float, list[dict[str, int]]], tuple[bool, str]]) -> Verdict:
    """A target on a curve's first and last points; missed when it has fewer than two."""
    gain = rise(points)
    if gain is None:
        return Verdict(name, False, f"{len(points)} validation(s): no first and last point")
    met, note = check(gain, points)
    return Verdict(name, met, f"step {points[0]['step']} {describe(points[0])} -> step {points[-1]['step']} "
                              f"{describe(points[-1])}: {gain:+.1%}{note}")


def describe(point: dict[str, int]) -> str:
    low, high = wilson(point["correct"], point["n"])
    return f"{point['correct']}/{point['n']} = {point['correct'] / point['n']:.1%} [{low:.1%}, {high:.1%}]"


def verdicts(data: dict[str, Any]) -> list[Verdict]:
    return [seed_verdict(run) for run in data["runs"]] + [control_verdict(data["control"])]


# -- the picture ---------------------------------------------------------------------------------------


def plot(data: dict[str, Any], path: Path) -> Path:
    """Held-out accuracy against step, each seed and the control, with 95% Wilson intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axis = plt.subplots(figsize=(9, 5.5), dpi=110)
    series = [(f"seed {run['seed']}", run["heldout"], color, "-", "o")
              for run, color in zip(data["runs"], ("tab:blue", "tab:green", "tab:purple", "tab:orange"))]
    series.append(("control: learning rate 0", data["control"]["heldout"], "tab:grey", "--", "s"))
    for index, (label, points, color, style, marker) in enumerate(series):
        # each series a little to the side: curves that coincide (all at 0%) stay visible
        draw_series(axis, label, points, color, style, marker, offset=0.12 * (index - (len(series) - 1) / 2))
    n = max((p["n"] for _, points, *_ in series for p in points), default=0)
    axis.set_xlabel("training step (trainer.train, ART LocalBackend)")
    axis.set_ylabel(f"held-out accuracy (%), {n} questions never trained on" if n else "held-out accuracy (%)")
    axis.set_ylim(-3, 103)  # a point at 0% or 100% is not hidden under the frame
    axis.grid(alpha=0.3)
    if n:
        axis.legend(loc="best", fontsize=9)  # where it covers fewest points (a curve near 100% at the start)
    else:  # a bench stopped before its first validation: say so, not an empty legend
        axis.text(0.5, 0.5, "no held-out validation was measured", transform=axis.transAxes, ha="center",
                  va="center", fontsize=12, color="tab:red")
    axis.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True) if n else matplotlib.ticker.NullLocator())
    title = [f"Held-out accuracy against training step (95% Wilson intervals), {data['date']}", data["device"],
             *textwrap.wrap(data["model"], 110)]
    axis.set_title("\n".join(title), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_series(axis: Any, label: str, points: list[dict[str, int]], color: str, style: str, marker: str,
                offset: float = 0.0) -> None:
    if not points:  # named in the legend all the same: a run that measured nothing is not left out silently
        axis.plot([], [], color=color, linestyle=style, marker=marker, label=f"{label}: no validation measured")
        return
    steps = [p["step"] + offset for p in points]
    rates = [100 * p["correct"] / p["n"] for p in points]
    intervals = [wilson(p["correct"], p["n"]) for p in points]
    # matplotlib refuses a negative error bar: a rounding error at 0% must not lose the picture
    below = [max(0.0, rate - 100 * low) for rate, (low, _) in zip(rates, intervals)]
    above = [max(0.0, 100 * high - rate) for rate, (_, high) in zip(rates, intervals)]
    axis.errorbar(steps, rates, yerr=[below, above], color=color, linestyle=style, marker=marker, capsize=3,
                  label=label)


def redraw(json_path: Path, png_path: Path) -> Path:
    """The picture from the JSON alone."""
    return plot(json.loads(json_path.read_text()), png_path)
