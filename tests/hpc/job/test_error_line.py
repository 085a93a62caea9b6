"""hpc.job.error_line: the line a failed job's records quote from its .err log."""

from __future__ import annotations

import pytest

from hpc.job import error_line


@pytest.mark.parametrize("text,expected", [
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad value\n", "ValueError: bad value"),
    ("trainer.train: error: training data not found\n\n", "trainer.train: error: training data not found"),
    ("step_trainer: crashing before any step (crash=always)\n", "step_trainer: crashing before any step (crash=always)"),
    ("an error first\nprogress 10%\rprogress 100%\n", "an error first"),
    ("\x1b[31mRuntimeError: red\x1b[0m\x07\n", "RuntimeError: red"),
    ("job failed\n[continuation] run r marked failed: ...\n", "job failed"),
    ("\n  \n", None),
])
def test_error_line_is_the_last_line_that_reads_like_an_error(tmp_path, text, expected):
    log = tmp_path / "r-1.err"
    log.write_text(text)
    assert error_line.error_line(log) == expected


def test_error_line_reads_only_this_jobs_part_of_an_appended_log(tmp_path):
    log = tmp_path / "r-1.err"
    log.write_text("RuntimeError: the previous run of this requeued job\n")
    offset = log.stat().st_size
    assert error_line.error_line(log, offset) is None
    with log.open("a") as handle:
        handle.write("x" * 5000 + "\n")
    assert error_line.error_line(log, offset) == "x" * (error_line.ERROR_LINE_CHARS - 3) + "..."
    assert error_line.error_line(tmp_path / "missing.err") is None

