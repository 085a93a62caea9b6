"""A run's accounting as text: status.sh's one line, the command's table and totals (the report's too).

The figures are hpc/run/accounting_records.py's; this module only writes them.
"""

from __future__ import annotations

from typing import Sequence

from hpc.run.accounting_records import LABELS, SHORT, WASTED, JobRun, RunAccounting
from hpc.run.steps import span


def hours(value: float | None) -> str:
    """GPU-hours as people read them: 210, 41.2, 0.0417; '-' when unknown."""
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def summary_line(acc: RunAccounting) -> str:
    """One line for status.sh: goodput, charged, lost (by kind), per step, to finish."""
    goodput = "-" if acc.goodput is None else f"{acc.goodput:.2f}"
    parts = [f"goodput {goodput}", f"{hours(acc.gpu_hours)} GPU-h charged"
             + (f" ({hours(acc.node_hours)} node-h)" if acc.gpu_hours == 0 else "")]
    lost = [f"{SHORT[k]} {hours(acc.lost_gpu_hours(k))}" for k in WASTED if acc.lost_gpu_hours(k) > 0]
    parts.append(f"{hours(acc.lost_gpu_hours())} lost" + (f" ({', '.join(lost)})" if lost else ""))
    if acc.queue_wait:
        parts.append(f"queued {span(acc.queue_wait)}")
    if acc.gpu_hours_per_step is not None:
        parts.append(f"{hours(acc.gpu_hours_per_step)} GPU-h/step")
    projected = acc.projected_gpu_hours
    if projected is not None and not acc.finished:
        parts.append(f"~{hours(projected)} GPU-h to finish")
    if acc.saved_gpu_hours is not None:
        parts.append(f"~{hours(acc.saved_gpu_hours)} GPU-h saved (declined: {acc.saved_steps} steps not trained)")
    return f"{acc.run}: " + ", ".join(parts)


def unrecorded_line(acc: RunAccounting) -> str:
    """The views' warning for jobs accounting has not yet recorded, or ''."""
    if not acc.unrecorded:
        return ""
    return (f"sacct has not yet recorded job(s) {', '.join(acc.unrecorded)}: their time is missing from these "
            "figures (ask again in a minute)")


JOB_HEAD = ["JOB", "STATE", "NODES", "GPUS", "QUEUED", "ELAPSED", "GPU-H", "STARTING", "TRAINING", "BETWEEN",
            "LOST", "IDLE", "IN FLIGHT", "STALLED", "STEPS", "STOP", "LOST ROLLOUT-S"]


def job_cells(job: JobRun) -> list[str]:
    gpus = f"{job.gpus}" + (f"/{job.share}" if job.share > 1 else "")
    return [job.label, job.state, str(job.nodes), gpus, span(job.seconds("queued")),
            span(job.elapsed) if job.start else "-", hours(job.gpu_hours),
            *(span(job.seconds(k)) for k in ("starting", "training", "between", "lost", "idle", "in_flight",
                                             "stalled")),
            str(job.steps), job.stop_reason or "-", f"{job.lost_rollout_seconds:.0f}"]


def totals_rows(acc: RunAccounting) -> list[tuple[str, str]]:
    """The run's figures, label and value, for the command's text and the report's table."""
    gaps = ", ".join(span(g) for g in acc.restart_gaps) or "-"
    return [
        ("charging", acc.charging.describe() if acc.charging else "the GPUs Slurm allocated (cluster not in the registry)"),
        ("GPU-hours charged", f"{hours(acc.gpu_hours)} ({hours(acc.node_hours)} node-hours)"),
        ("productive (training steps)", f"{hours(acc.productive_gpu_hours)} GPU-h"),
        ("lost (trained nothing)", f"{hours(acc.lost_gpu_hours())} GPU-h: "
         + ", ".join(f"{LABELS[k]} {hours(acc.lost_gpu_hours(k))}" for k in WASTED)),
        ("abandoned rollouts", f"{acc.lost_rollout_seconds:.0f} rollout-seconds"),
        ("goodput", "-" if acc.goodput is None else f"{acc.goodput:.3f}"),
        ("queue wait", f"{span(acc.queue_wait)} over {sum(1 for j in acc.jobs if j.seconds('queued'))} job run(s)"),
        ("restart gaps", gaps),
        ("steps", f"{acc.steps_done} of {acc.total_steps if acc.total_steps is not None else '?'}"
         + (" (finished)" if acc.finished else "")),
        ("a step (median of recent)", f"{span(acc.step_seconds)}, {hours(acc.step_gpu_hours)} GPU-h"),
        ("GPU-h per step, all in", hours(acc.gpu_hours_per_step)),
        ("projected GPU-h to finish", hours(acc.projected_gpu_hours)),
        *([("saved by the decline rule", f"~{hours(acc.saved_gpu_hours)} GPU-h ({acc.saved_steps} steps not trained)")]
          if acc.saved_gpu_hours is not None else []),
    ]


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *rows]]


def render_text(acc: RunAccounting) -> str:
    lines = [f"Run {acc.run}: where the GPU-hours went ({len(acc.jobs)} job run(s))"]
    lines += text_table(JOB_HEAD, [job_cells(j) for j in acc.jobs]) if acc.jobs else ["  no job has run yet"]
    width = max(len(label) for label, _ in totals_rows(acc))
    lines += [""] + [f"{label.ljust(width)}  {value}" for label, value in totals_rows(acc)]
    lines += ["", f"NOTE: {unrecorded_line(acc)}"] if acc.unrecorded else []
    return "\n".join(lines)
