"""hpc.slurm.times: Slurm's timestamps as aware datetimes, its durations as seconds."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.slurm.times import parse_duration, parse_time

UTC_END = datetime(2026, 11, 25, 8, 46, 36, tzinfo=timezone.utc)


def test_a_standard_timestamp_is_read_in_the_zone_slurm_was_asked_in() -> None:
    assert parse_time("2026-11-25T08:46:36") == UTC_END
    berlin = parse_time("2026-11-25T08:46:36", ZoneInfo("Europe/Berlin"))
    assert berlin is not None and (UTC_END - berlin).total_seconds() == 3600, "08:46 in Berlin (winter) is 07:46 UTC"


@pytest.mark.parametrize("text", ["2026-11-25 08:46:36", "1795596396", "2026-11-25T08:46:36+00:00"])
def test_other_forms_a_slurm_prints_are_read_too(text: str) -> None:
    assert parse_time(text) == UTC_END


@pytest.mark.parametrize("text", ["Unknown", "None", "N/A", "", "0", "Tomorr 08:46", "(null)"])
def test_a_time_slurm_does_not_know_or_a_relative_one_is_none(text: str) -> None:
    assert parse_time(text) is None


@pytest.mark.parametrize("text, seconds", [
    ("0:00", 0), ("5:03", 303), ("1:02:03", 3723), ("00:02:00", 120), ("1-00:00:00", 86400),
    ("2-12:30:05", 217805), ("2-12", 216000), ("2-12:30", 217800), ("00:00:17.345", 17),
])
def test_durations_as_slurm_prints_them(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "Partition_Limit", "INVALID", "NOT_SET", "", "45", "-1"])
def test_a_limit_that_is_no_duration_is_none(text: str) -> None:
    assert parse_duration(text) is None


@given(st.integers(0, 400 * 86400))
def test_slurms_own_format_of_any_duration_reads_back(seconds: int) -> None:
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    assert parse_duration(f"{days}-{text}" if days else text) == seconds
