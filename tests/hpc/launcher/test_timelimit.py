import pytest

from hpc.errors import UsageError
from hpc.launcher.timelimit import format_minutes, parse_time_limit


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("30", 30),             # MM
        ("30:30", 31),          # MM:SS rounds seconds up, as Slurm does
        ("48:00:00", 2880),     # HH:MM:SS
        ("2-00", 2880),         # D-HH
        ("1-12:30", 2190),      # D-HH:MM
        ("1-00:00:01", 1441),   # D-HH:MM:SS
        (" 5 ", 5),
    ],
)
def test_every_slurm_time_format_is_parsed_to_minutes(text, minutes):
    assert parse_time_limit(text) == minutes


@pytest.mark.parametrize("text", ["", "0", "00:00:00", "abc", "1:2:3:4", "-5", "1-", "48h", "1.5",
                                  "٣", "３０", "1-٠٢", "４８:00:00", "1_0", "𝟑𝟎"])  # digits sbatch cannot read
def test_invalid_time_limit_names_the_value_and_the_accepted_formats(text):
    with pytest.raises(UsageError) as err:
        parse_time_limit(text)
    assert repr(text) in str(err.value)
    assert "D-HH:MM:SS" in str(err.value)


def test_format_minutes_prints_days_when_needed():
    assert format_minutes(2880) == "2-00:00:00"
    assert format_minutes(90) == "01:30:00"
