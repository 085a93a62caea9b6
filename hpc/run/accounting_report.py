"""The run report's accounting section: where the GPU-hours went, as tables and a timeline.

Registered with hpc/run/report.py's ``SECTIONS`` when hpc.report loads it. It asks
sacct once (hpc/run/accounting.py) and writes ``accounting.png`` into the report:
one row per job run, queued / starting / training / validation / lost / idle /
step in flight along the run's wall clock, each row labelled with its job id
and what it was charged. matplotlib is imported only to draw it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from hpc.run import accounting, accounting_text
from hpc.run.accounting_records import KINDS, LABELS, JobRun, RunAccounting
from hpc.run.report import DPI, FIG_SIZE, SECTIONS, pyplot, save, table
from hpc.run.rundir import RunDir
from hpc.slurm.calls import SlurmError

PICTURE = "accounting.png"
COLORS = {
    "queued": "#d9d9d9",
    "starting": "tab:orange",
    "training": "tab:green",
    "between": "#a6d96a",
    "in_flight": "#c7e9c0",
    "stalled": "tab:brown",
    "lost": "tab:red",
    "idle": "#9e9ac8",
}
MAX_OUTLINED_STEPS = 80
UNITS = ((3 * 3600, 3600, "hours"), (300, 60, "minutes"), (0, 1, "seconds"))


def time_unit(seconds: float) -> tuple[float, str]:
    """Hours for a long run, minutes for a short one, seconds for a test's."""
    return next((size, name) for limit, size, name in UNITS if seconds >= limit)


def plot_timeline(acc: RunAccounting, run: RunDir, path: Path) -> None:
    """One bar per job run, its segments coloured by kind, along the run's wall clock."""
    origin = min(s.start for j in acc.jobs for s in j.segments)
    last = max(s.end for j in acc.jobs for s in j.segments)
    size, unit = time_unit((last - origin).total_seconds())
    plt = pyplot()
    fig, axis = plt.subplots(figsize=FIG_SIZE, dpi=DPI)
    for row, job in enumerate(acc.jobs):
        draw_job(axis, row, job, origin, size)
    axis.set_yticks(range(len(acc.jobs)), [f"job {j.label}" for j in acc.jobs], fontsize=9)
    axis.set_ylim(len(acc.jobs) - 0.4, -0.6)
    axis.set_xlim(0, (last - origin).total_seconds() / size * 1.25)  # room for the notes
    axis.set_xlabel(f"{unit} since the run's first job was submitted")
    axis.grid(axis="x", alpha=0.3)
    shown = [k for k in KINDS if any(s.kind == k for j in acc.jobs for s in j.segments)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in shown]
    axis.legend(handles, [LABELS[k] for k in shown], loc="upper center", bbox_to_anchor=(0.5, -0.12),
                ncol=min(4, len(shown)), fontsize=9, frameon=False)
    goodput = "-" if acc.goodput is None else f"{acc.goodput:.2f}"
    axis.set_title(f"Run {acc.run}: {accounting_text.hours(acc.gpu_hours)} GPU-h charged, "
                   f"{accounting_text.hours(acc.lost_gpu_hours())} GPU-h trained nothing, goodput {goodput}", fontsize=11)
    fig.tight_layout()
    save(fig, run, path)


def draw_job(axis: Any, row: int, job: JobRun, origin: datetime, size: float) -> None:
    """A job run's segments, and what it cost at the bar's end; a job run with no time to show (a
    successor cancelled the second it was queued) keeps its row, empty."""
    if not job.segments:
        return
    for kind in KINDS:
        spans = [((s.start - origin).total_seconds() / size, s.seconds / size) for s in job.segments if s.kind == kind]
        if spans:  # a thin white line between steps, where there are few enough to see
            edge = kind == "training" and len(spans) <= MAX_OUTLINED_STEPS
            axis.broken_barh(spans, (row - 0.3, 0.6), facecolor=COLORS[kind], edgecolor="white",
                             linewidth=0.8 if edge else 0)
    end = max(s.end for s in job.segments)
    note = f" {accounting_text.hours(job.gpu_hours)} GPU-h, {job.steps} step{'s' if job.steps != 1 else ''}"
    axis.text((end - origin).total_seconds() / size, row, note, va="center", fontsize=8)


def job_rows(acc: RunAccounting) -> list[list[str]]:
    return [accounting_text.job_cells(job) for job in acc.jobs]


def section(run: RunDir, out: Path) -> list[str]:
    """Markdown for hpc.report: the timeline, the job runs and the run's figures."""
    lines = ["## Accounting", ""]
    try:
        acc = accounting.account_run(run)
    except SlurmError as err:
        return lines + [f"Slurm's accounting could not be asked ({err}); the GPU-hours need its records.", ""]
    if acc.unrecorded:
        lines += [f"**{accounting_text.unrecorded_line(acc)}.**", ""]
    if not any(j.segments for j in acc.jobs):
        return lines + ["No job of this run is in Slurm's accounting yet.", ""]
    plot_timeline(acc, run, out / PICTURE)
    lines += [f"![where the GPU-hours went]({PICTURE})", ""]
    lines += table(job_rows(acc), [h.lower() for h in accounting_text.JOB_HEAD]) + [""]
    lines += table([list(row) for row in accounting_text.totals_rows(acc)], ["figure", "value"]) + [""]
    return lines


SECTIONS.append(section)
