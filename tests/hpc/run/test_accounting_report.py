"""hpc/run/accounting_report.py: the report's accounting section (tables, and the timeline of
the run's jobs checked as an image), on the records of tests/hpc/run/test_accounting.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc.run import accounting, report
from hpc.run.accounting_report import COLORS, plot_timeline, section
from hpc.run.report import DPI, FIG_SIZE
from hpc.run.rundir import RunDir
from hpc.slurm import calls
from hpc.slurm.calls import SlurmFailed
from tests.doubles.ledger_lines import write_record
from tests.hpc.run.test_accounting import GRES, fake, requeued_run, row, t  # a fixture

ORANGE, GREEN, RED = (0xFF, 0x7F, 0x0E), (0x2C, 0xA0, 0x2C), (0xD6, 0x27, 0x28)  # tab: starting, training, lost


def pixels(path):
    """(width, height) and the set of RGB colours of a PNG."""
    import matplotlib.image

    image = matplotlib.image.imread(path)
    return (image.shape[1], image.shape[0]), {tuple(int(round(255 * c)) for c in px[:3]) for row in image for px in row}


def test_the_timeline_draws_each_job_run_queued_starting_training_and_lost(fake, tmp_path):
    files, rows = requeued_run(fake)
    acc = accounting.account("r", files, rows, GRES, now=t(638))
    plot_timeline(acc, RunDir(tmp_path), tmp_path / "timeline.png")
    size, colors = pixels(tmp_path / "timeline.png")
    assert size == (FIG_SIZE[0] * DPI, FIG_SIZE[1] * DPI)
    assert {ORANGE, GREEN, RED} <= colors
    assert COLORS["training"] == "tab:green" and COLORS["lost"] == "tab:red"


def test_a_successor_cancelled_the_second_it_was_queued_gets_an_empty_row(fake, tmp_path):
    """As a real run that finishes leaves it: its successor (queued at the start) cancelled with no time
    queued or run, which accounting lists with no segment."""
    requeued_run(fake)
    fake.event(440, "successor", job_id="12", after="11")
    rows = [row("11", "REQUEUED", 1, 60, 401), row("11", "COMPLETED", 401, 438, 600),
            row("12", "CANCELLED", 600, 600, 600)]
    acc = accounting.account("r", fake.files(), rows, GRES, now=t(638))
    assert [job.segments for job in acc.jobs if job.job_id == "12"] == [()]
    plot_timeline(acc, RunDir(tmp_path), tmp_path / "timeline.png")
    assert {GREEN} <= pixels(tmp_path / "timeline.png")[1]


def test_the_report_gets_an_accounting_section_with_the_timeline_and_the_tables(fake, monkeypatch):
    files, rows = requeued_run(fake)
    monkeypatch.setattr(calls, "job_runs", lambda ids, *a, **kw: rows)
    run = RunDir(fake.path)
    path = report.write_report(run)
    markdown = path.read_text()
    assert "## Accounting\n\n![where the GPU-hours went](accounting.png)" in markdown
    assert "| job | state | nodes | gpus | queued |" in markdown and "| 11 (run 2) | RUNNING |" in markdown
    assert "| goodput |" in markdown and "| projected GPU-h to finish |" in markdown
    assert (run.report_dir / "accounting.png").is_file()
    assert report.SECTIONS.count(section) == 1  # loaded once, however many reports are written
    report.write_report(run)
    assert report.SECTIONS.count(section) == 1


@pytest.mark.parametrize("trouble", ["sacct fails", "no job yet"])
def test_without_slurms_records_the_section_says_why_in_one_line(tmp_path, monkeypatch, trouble):
    def query(ids, *args, **kwargs):
        if trouble == "sacct fails":
            raise SlurmFailed("sacct failed: slurmdbd is down", 1, "slurmdbd is down")
        return []

    monkeypatch.setattr(calls, "job_runs", query)
    run = RunDir(tmp_path / "r")
    write_record(run, "submit", job_id="5", cluster="local")
    lines = section(run, tmp_path)
    assert lines[0] == "## Accounting" and len([line for line in lines if line]) == 2
    assert ("slurmdbd is down" if trouble == "sacct fails" else "No job of this run") in lines[2]


def test_the_evaluation_page_shows_the_timeline_of_a_real_run():
    """docs/images/report-accounting.png comes from tests/hpc/run/test_accounting_slurm.py (UPDATE_README=1)."""
    repo = Path(__file__).resolve().parents[3]
    assert "](images/report-accounting.png)" in (repo / "docs" / "evaluation.md").read_text()
    size, colors = pixels(repo / "docs" / "images" / "report-accounting.png")
    assert size == (FIG_SIZE[0] * DPI, FIG_SIZE[1] * DPI) and {ORANGE, GREEN, RED} <= colors
