"""hpc/run/accounting_text.py: status.sh's line, GPU-hours as people read them, the note on jobs
sacct has not yet recorded; on the records of tests/hpc/run/test_accounting.py."""

from __future__ import annotations

import pytest

from hpc.run import accounting_text
from hpc.run.accounting import account
from tests.hpc.run.test_accounting import GRES, fake, requeued_run, row, t  # a fixture


def test_the_status_line_says_goodput_charged_lost_per_step_and_to_finish(fake):
    files, rows = requeued_run(fake)
    line = accounting_text.summary_line(account("r", files, rows, GRES, now=t(638)))
    assert line == ("r: goodput 0.68, 0.301 GPU-h charged, 0.085 lost (start-up 0.0678, validation 0.00556, "
                    "abandoned 0.00833, idle 0.00333), queued 1m36s, 0.0671 GPU-h/step, ~0.402 GPU-h to finish")


@pytest.mark.parametrize("value, text", [(None, "-"), (0, "0"), (0.041666, "0.0417"), (41.24, "41.2"),
                                         (210.4, "210"), (12345.6, "12346")])
def test_gpu_hours_read_as_people_read_them(value, text):
    assert accounting_text.hours(value) == text


def test_a_job_that_started_but_sacct_has_not_recorded_is_named_not_quietly_left_out(fake):
    """sacct lags behind: job 12 trained steps 4-5 but accounting has no row of it yet."""
    fake.event(0, "submit", job_id="11", cluster="local").event(60, "job_start", job_id="11", step=0)
    fake.step(1, "11", 120, 200).event(300, "job_end", job_id="11", outcome="stopped_for_time")
    fake.event(320, "job_start", job_id="12", step=1).step(2, "12", 330, 400)
    acc = account("r", fake.files(), [row("11", "COMPLETED", 1, 60, 301)], GRES, now=t(500))
    assert acc.unrecorded == ("12",)
    assert "NOTE: sacct has not yet recorded job(s) 12: their time is missing" in accounting_text.render_text(acc)
    recorded = account("r", fake.files(), [row("11", "COMPLETED", 1, 60, 301), row("12", "RUNNING", 301, 320, None,
                                                                                  now=500)], GRES, now=t(500))
    assert recorded.unrecorded == () and "NOTE" not in accounting_text.render_text(recorded)
