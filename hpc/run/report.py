"""A run's results, as pictures and a table: ``python -m hpc.report RUN``.

Works from the run directory alone (offline clusters, no W&B): the trainer's
``steps.jsonl`` (reward per step), ``validation.jsonl`` (accuracy on the
held-out questions), the ledger (where each job began) and the evaluations of
``python -m trainer.eval`` in the run's and the runs directory's
``evaluations/``. It writes into ``<run>/report/``:

- ``training.png``: training reward and validation accuracy against step, with
  the jobs' boundaries marked;
- ``models.png``: the accuracy of every model evaluated on the run's validation
  questions (the run's best and latest validation, checkpoints, baselines), next
  to ART-E's published figures, drawn apart and labelled as such, when the questions
  are ART-E's kind (about enron.com inboxes: never beside the synthetic inboxes');
- ``report.md``: the same figures as tables, and the pictures.

Other modules add sections (``SECTIONS``: a function of the run returning
Markdown lines, writing its own pictures), e.g. hpc/run/accounting_report.py's
(``SECTION_MODULES`` are loaded when a report is written). matplotlib is
imported here only: the launcher never loads this module.
"""

from __future__ import annotations

import argparse
import importlib
import io
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hpc.errors import UsageError
from hpc.job.exit_codes import EXIT_BAD_INPUT
from hpc.run import fields as kinds
from hpc.run import ledger
from hpc.run.best import best_and_last, best_of
from hpc.run.decline import Decisions
from hpc.run.ledger import JobStart
from hpc.run.records import read_json
from hpc.run.rundir import RunDir
from hpc.run.safe_io import OutsideRun

# ART-E's published accuracy on its 100 validation questions (OpenPipe's ART-E write-up),
# for reference only: they were measured on ART-E's questions with ART-E's judge.
PUBLISHED = {
    "ART-E Qwen2.5-14B (trained)": 0.96,
    "o3": 0.90,
    "o4-mini": 0.88,
    "Gemini 2.5 Pro": 0.76,
    "GPT-4.1": 0.71,
    "Qwen2.5-14B (untrained)": 0.40,
}
ART_E_DOMAIN = "enron.com"  # the inboxes ART-E's questions ask about (a record's inbox_domain)
NOT_ART_E = ("ART-E's published figures are left out: these questions are not about ART-E's "
             f"{ART_E_DOMAIN} inboxes, so no figure measured on ART-E's questions compares.")
FIG_SIZE = (10, 6)
DPI = 100
Section = Callable[[RunDir, Path], list[str]]
SECTIONS: list[Section] = []  # more report sections, registered by the modules below when loaded
SECTION_MODULES = ("hpc.run.accounting_report",)  # loaded by write_report (they import this module)


@dataclass(frozen=True)
class Bar:
    label: str
    accuracy: float
    kind: str  # "run", "evaluation", "published"


def job_starts(run: RunDir) -> list[tuple[int, str]]:
    """(step, job id) where each job after the first began training."""
    starts = [(r.step, r.job_id) for r in ledger.of_kind(ledger.readable(run), JobStart) if r.step is not None]
    return starts[1:]


def evaluations(run: RunDir) -> dict[str, list[dict[str, Any]]]:
    """Evaluation summaries by split key: the run's own and the runs directory's baselines."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for folder in (run.evaluations_dir, run.path.parent / "evaluations"):
        for path in sorted(folder.glob("*/*/summary.json")):
            summary = read_json(path, folder, kinds.EVALUATION, run.teller(path))  # never through a link
            if summary is not None:
                found[summary["split_key"]].append(summary)
    return found


def model_bars(run: RunDir) -> tuple[list[Bar], str | None]:
    """Bars for the models evaluated on the run's validation questions (or, without
    validations, the split with the most evaluations), and that split's key."""
    validations = run.read_validations()
    by_key = evaluations(run)
    if validations:
        latest_key = validations[-1].get("split_key")
        key = latest_key if isinstance(latest_key, str) else None
    else:
        key = max(by_key, key=lambda k: len(by_key[k]), default=None)
    bars = []
    if validations:
        best = best_of(validations)
        assert best is not None
        bars.append(Bar(f"{run.name}@best (step {best.step})", best.accuracy, "run"))
        if validations[-1]["step"] != best.step:
            bars.append(Bar(f"{run.name} latest (step {validations[-1]['step']})", validations[-1]["accuracy"], "run"))
    same_questions = by_key.get(key, []) if key is not None else []
    bars += [Bar(s["model"], s["accuracy"], "evaluation") for s in same_questions]
    if key is None or art_e_questions(validations[-1:] + same_questions):
        bars += [Bar(f"{label} [published]", value, "published") for label, value in PUBLISHED.items()]
    return bars, key


def has_published(bars: list[Bar]) -> bool:
    return any(bar.kind == "published" for bar in bars)


def art_e_questions(records: list[dict[str, Any]]) -> bool:
    """Whether these records' questions are ART-E's kind: about enron.com inboxes (a record from
    before records named the domain counts as one)."""
    return all(r.get("inbox_domain", ART_E_DOMAIN) == ART_E_DOMAIN for r in records)


# -- pictures -----------------------------------------------------------------------------------


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_training(run: RunDir, path: Path) -> bool:
    """Reward (top) and validation accuracy (bottom) against step, each panel only where the run
    has its records; False (no picture) when it has neither."""
    rewards = [(s["step"], s["reward_mean"]) for s in run.read_steps() if is_number(s.get("reward_mean"))]
    validations = run.read_validations()
    panels = [p for p, has in ((reward_panel, rewards), (validation_panel, validations)) if has]
    if not panels:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=FIG_SIZE, sharex=True, dpi=DPI, squeeze=False)
    for panel, axis in zip(panels, axes[:, 0]):
        panel(axis, rewards, validations)
        mark_jobs(axis, run)
    axes[-1, 0].set_xlabel("training step")
    fig.suptitle(f"Run {run.name}: " + " and ".join(TITLES[p] for p in panels))
    fig.tight_layout()
    save(fig, run, path)
    return True


def save(fig: Any, run: RunDir, path: Path) -> None:
    """A figure as a PNG at ``path`` inside the run, written as every file of the run is (never
    through a link), and closed."""
    picture = io.BytesIO()
    fig.savefig(picture, format="png")
    pyplot().close(fig)
    run.write_bytes(path, picture.getvalue())


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reward_panel(axis: Any, rewards: list[tuple[int, float]], validations: list[dict[str, Any]]) -> None:
    axis.plot([s for s, _ in rewards], [r for _, r in rewards], color="tab:blue",
              label="training reward (mean of the step's rollouts)")
    axis.set_ylabel("reward")


def validation_panel(axis: Any, rewards: list[tuple[int, float]], validations: list[dict[str, Any]]) -> None:
    axis.plot([v["step"] for v in validations], [100 * v["accuracy"] for v in validations], marker="o",
              color="tab:green", label=f"validation accuracy ({validations[0].get('questions', '?')} held-out questions)")
    axis.set_ylabel("accuracy (%)")
    axis.set_ylim(0, 100)


TITLES = {reward_panel: "training reward", validation_panel: "validation accuracy"}


def mark_jobs(axis: Any, run: RunDir) -> None:
    """A dotted line where each job after the first began training."""
    for index, (step, _job) in enumerate(job_starts(run)):
        axis.axvline(step, color="grey", linestyle=":", linewidth=1, label="a new job starts" if index == 0 else None)
    axis.grid(alpha=0.3)
    axis.legend(loc="best", fontsize=9)


def plot_models(bars: list[Bar], key: str | None, run: RunDir, path: Path) -> None:
    """Horizontal bars, best first; published figures hatched and grey."""
    plt = pyplot()
    ordered = sorted(bars, key=lambda b: (b.kind == "published", -b.accuracy))
    colors = {"run": "tab:green", "evaluation": "tab:blue", "published": "lightgrey"}
    fig, axis = plt.subplots(figsize=FIG_SIZE, dpi=DPI)
    rows = range(len(ordered))
    drawn = axis.barh(rows, [100 * b.accuracy for b in ordered], color=[colors[b.kind] for b in ordered],
                      hatch=None, edgecolor="black", linewidth=0.5)
    for bar, patch in zip(ordered, drawn):
        if bar.kind == "published":
            patch.set_hatch("//")
        axis.text(patch.get_width() + 1, patch.get_y() + patch.get_height() / 2, f"{100 * bar.accuracy:.0f}%",
                  va="center", fontsize=9)
    axis.set_yticks(list(rows), [b.label for b in ordered], fontsize=9)
    axis.invert_yaxis()
    axis.set_xlim(0, 110)
    axis.set_xlabel("answer accuracy (%), judged")
    axis.set_title(f"Answer accuracy on the run's validation questions ({key or 'no evaluations yet'})",
                   fontsize=11)
    axis.grid(axis="x", alpha=0.3)
    published = "; hatched grey: ART-E's published figures (its own 100 questions and judge)"
    fig.text(0.01, 0.01, "green: this run's validations; blue: python -m trainer.eval on the same questions"
             + (published if has_published(bars) else ""), fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, run, path)


# -- Markdown ------------------------------------------------------------------------------------


def table(rows: list[list[Any]], head: list[str]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def decimals(value: float | None, places: int) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def validation_table(run: RunDir) -> list[str]:
    """One row per validation; a figure a record lacks (an older trainer's) is '-'."""
    rows = [[v["step"], percent(v["accuracy"]), decimals(v.get("reward_mean"), 3), percent(v.get("i_dont_know_rate")),
             percent(v.get("wrong_answer_rate")), decimals(v.get("mean_turns"), 2), percent(v.get("tool_error_rate")),
             decimals(v.get("latency_mean_s"), 2), v.get("failed", "-")] for v in run.read_validations()]
    head = ["step", "accuracy", "reward", "I don't know", "wrong", "turns", "tool errors", "latency (s)", "failed"]
    return table(rows, head) if rows else ["No validation yet."]


def models_table(bars: list[Bar]) -> list[str]:
    kinds = {"run": "this run's validation", "evaluation": "python -m trainer.eval",
             "published": "ART-E's published figure (its own questions)"}
    return table([[b.label, percent(b.accuracy), kinds[b.kind]] for b in bars], ["model", "accuracy", "source"])


def models_section(run: RunDir, out: Path) -> list[str]:
    """The models evaluated on the run's questions, pictured; before any, a line that says so
    and the published figures alone (no picture of nothing but references)."""
    bars, key = model_bars(run)
    if key is None or all(b.kind == "published" for b in bars):
        run.remove(out / "models.png")
        return ["No model evaluated on this run's questions yet (the run's own validations, or "
                "`python -m trainer.eval`). For reference:", "", *models_table(bars)]
    plot_models(bars, key, run, out / "models.png")
    apart = [] if has_published(bars) else ["", NOT_ART_E]
    return [f"Questions: `{key}`.", "", "![accuracy by model](models.png)", "", *models_table(bars), *apart]


def write_report(run: RunDir) -> Path:
    """report.md and its pictures in ``<run>/report/``, never through a link (OutsideRun)."""
    out = run.report_dir
    run.make_dirs(out)
    lines = [f"# Run {run.name}", "", *progress_line(run)]
    if plot_training(run, out / "training.png"):
        lines += ["## Training", "", "![training reward and validation accuracy](training.png)", ""]
    else:
        run.remove(out / "training.png")
        lines += ["## Training", "", "No training step with a reward recorded yet.", ""]
    lines += ["## Validation", "", *best_line(run), *validation_table(run), ""]
    lines += ["## Objective and the decline rule", "", *objective_section(run), ""]
    lines += ["## Models on the same questions", "", *models_section(run, out), ""]
    for module in SECTION_MODULES:
        importlib.import_module(module)
    for section in SECTIONS:
        lines += section(run, out)
    report = out / "report.md"
    run.write_bytes(report, ("\n".join(lines + unreadable_section(run)) + "\n").encode())
    return report


def best_line(run: RunDir) -> list[str]:
    """The best validated step (``run:NAME@best``) beside the last."""
    found = best_and_last(run)
    if not found:
        return []
    return [f"Best: step {found['best_step']} ({percent(found['best_accuracy'])}), `run:{run.name}@best`; "
            f"last: step {found['last_step']} ({percent(found['last_accuracy'])}).", ""]


STABILISERS = ("kl_penalty_coef", "kl_penalty_reference_step", "kl_penalty_source", "epsilon", "epsilon_high")


def objective_section(run: RunDir) -> list[str]:
    """The learning rate each step passed (first, last, lowest, highest: steps.jsonl), the stabilisers set,
    and every decision of the decline rule (the ledger's decline records)."""
    steps = [s for s in run.read_steps() if is_number(s.get("learning_rate"))]
    lines = []
    if steps:
        rates = [s["learning_rate"] for s in steps]
        lines.append(f"Learning rate passed: {rates[0]:.3g} at step {steps[0]['step']}, {rates[-1]:.3g} at step "
                     f"{steps[-1]['step']} (from {min(rates):.3g} to {max(rates):.3g}).")
        set_ = {name: steps[-1][name] for name in STABILISERS if name in steps[-1]}
        lines.append("Stabilisers: " + (", ".join(f"{k} {v}" for k, v in set_.items()) or "ART's defaults") + ".")
    decisions = Decisions.read(run).records
    rows = [[d.step, d.action, f"step {d.best_step} ({percent(d.best_accuracy)})", percent(d.accuracy),
             d.to_step if d.to_step is not None else "-", "-" if d.lr_scale is None else f"x{d.lr_scale:g}",
             d.steps_left if d.steps_left is not None else "-", d.reason] for d in decisions]
    head = ["step", "action", "best", "accuracy", "continued as", "lr scale", "steps left", "why"]
    lines += ["", *(table(rows, head) if rows else ["The run has not declined (hpc/run/decline.py)."])]
    return lines or ["No step recorded its learning rate yet."]


def progress_line(run: RunDir) -> list[str]:
    """``Step 12 of 300; in progress.`` (``of`` only where the total is known)."""
    progress, done = run.read_progress() or {}, run.read_done()
    step = (done or {}).get("final_step", progress.get("step"))
    total = (done or {}).get("total_steps") or progress.get("total_steps")
    if step is None:
        return []
    why = f" ({done['reason']})" if done and done.get("reason") else ""
    return [f"Step {step}{f' of {total}' if total is not None else ''}; {'finished' if done else 'in progress'}{why}.",
            ""]


def unreadable_section(run: RunDir) -> list[str]:
    """The records the report skipped, each named: the figures above leave them out."""
    if not run.unreadable:
        return []
    return ["## Unreadable records", "", "Skipped (the figures above leave them out):", "",
            *(f"- `{skipped.file}`{f' line {skipped.line}' if skipped.line else ''}: {skipped.why}"
              for skipped in run.unreadable), ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpc.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run name under the runs directory, or a run directory")
    parser.add_argument("--runs_dir", type=Path, default=None, help="default: the launcher's (RUNS_DIR)")
    args = parser.parse_args(argv)
    try:
        run = run_argument(args.run, args.runs_dir)
    except UsageError as error:
        print(f"hpc.report: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not run.holds(run.ledger) and not run.holds(run.steps_file):
        print(f"hpc.report: error: {run.path} is not a run directory (no ledger.jsonl or steps.jsonl)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        report = write_report(run)
    except OSError as error:  # a link or a file where the report goes; a full disk, no permission
        print(f"hpc.report: error: cannot write the report: {error.filename or run.report_dir}: "
              f"{error.strerror or error}", file=sys.stderr)
        return 2 if isinstance(error, IN_THE_WAY) else 1
    print(report)
    if run.unreadable:
        print(f"hpc.report: warning: {run.unreadable_line()} (listed in the report)", file=sys.stderr)
    return 0


# What the run directory holds where the report goes (bad input, exit 2), not the machine's trouble.
IN_THE_WAY = (OutsideRun, NotADirectoryError, IsADirectoryError, FileExistsError)


def run_argument(text: str, runs_dir: Path | None) -> RunDir:
    """A command line's RUN: a run directory (a path with '/'), else a run name under the runs directory
    (not '', '.' or '..', which name no run but a folder around it: UsageError)."""
    if "/" in text:
        return RunDir(Path(text))
    if text in ("", ".", ".."):
        raise UsageError(f"bad RUN {text!r} (accepted: a run name under the runs directory, or a run directory)")
    return RunDir(resolve_runs_dir(runs_dir) / text)


def resolve_runs_dir(flag: Path | None) -> Path:
    if flag is not None:
        return flag
    from hpc.launcher.jobspec import runs_dir_here

    return runs_dir_here()


if __name__ == "__main__":
    # ``python -m hpc.report`` runs this file as __main__, a second copy of the module: the
    # sections register into hpc.report's SECTIONS (they import it), so run that module's main.
    from hpc.run.report import main as package_main

    sys.exit(package_main())
