"""hpc/run/monitor/display.py: what the helpers print stays on its row and reads at a glance."""

from __future__ import annotations

import pytest

from hpc.run.monitor.display import duration, printable, table


def test_printable_escapes_control_characters_but_keeps_spaces_quotes_and_pipes():
    assert printable("a b 'c' |d") == "a b 'c' |d"
    assert printable("x\ny\t\x1b[31m") == "x\\ny\\t\\x1b[31m"


@pytest.mark.parametrize("seconds, text", [(129002, "1d11h"), (4000, "1h06m"), (59, "0m"), (None, "-"),
                                           ("soon", "-"), (-5, "-")])
def test_duration_is_short_and_readable(seconds, text):
    assert duration(seconds) == text


def test_table_pads_every_column_but_the_last():
    lines = table(["A", "NAME"], [["long-cell", "x y"], ["s", "z\nw"]])
    assert lines == ["A          NAME", "long-cell  x y", "s          z\\nw"]
