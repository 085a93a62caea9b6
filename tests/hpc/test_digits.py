"""Numbers people type are read in ASCII digits only (hpc/digits.py)."""

from __future__ import annotations

import pytest

from hpc.digits import ascii_float, ascii_int, is_count

FOREIGN = ["٣", "۳", "३", "３", "𝟑", "৩", "³", "๓", "1_0", "1٣", "", " ", "+", "-"]


@pytest.mark.parametrize("text", FOREIGN + ["-1", "+1", "1.0", "1e3"])
def test_a_count_is_only_digits_0_to_9(text):
    assert not is_count(text)


@pytest.mark.parametrize("text", FOREIGN + ["1.5", "inf", "0x10"])
def test_an_integer_in_other_digits_is_a_value_error(text):
    with pytest.raises(ValueError):
        ascii_int(text)


@pytest.mark.parametrize("text", FOREIGN + ["٣e-5", "2e-٥", "inf", "nan", "infinity", "1e", "e5", "."])
def test_a_decimal_in_other_digits_is_a_value_error(text):
    with pytest.raises(ValueError):
        ascii_float(text)


@pytest.mark.parametrize("text, value", [("0", 0), ("42", 42), (" 7 ", 7), ("-3", -3), ("+3", 3)])
def test_ascii_integers_are_read(text, value):
    assert ascii_int(text) == value


@pytest.mark.parametrize("text, value", [("2e-5", 2e-5), (".5", 0.5), ("1.", 1.0), ("-1.25E+2", -125.0), (" 3 ", 3.0)])
def test_ascii_decimals_are_read(text, value):
    assert ascii_float(text) == value
