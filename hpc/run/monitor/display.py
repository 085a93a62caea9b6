"""What the monitoring helpers print: terminal-safe text, aligned rows, short durations, and the
one-line failure every command ends with (exit 1 at run time, 2 for a bad value)."""

from __future__ import annotations

from typing import Iterable, Sequence


class Failure(Exception):
    """One line for the user; exit code 1 (run time) or 2 (bad value)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# --- small helpers ----------------------------------------------------------------


def printable(text: object) -> str:
    """Control characters (newline, tab, ESC...) as escapes, so a job name can
    neither break a row nor drive the terminal; spaces and quotes stay as they are."""
    text = str(text)
    if text.isprintable():  # nearly every cell: checked in C, as a whole
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """Header and rows with columns padded to their widest cell; the last column
    (a name or a reason) is not padded, so any length fits."""
    cells = [[printable(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ["  ".join([c.ljust(w) for c, w in zip(row[:-1], widths)] + [row[-1]]).rstrip() for row in cells]


def duration(seconds: object) -> str:
    """129002 -> 1d11h, 4000 -> 1h06m, 59 -> 0m; '-' when unknown."""
    try:
        s = int(float(seconds))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "-"
    if s < 0:
        return "-"
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{s // 60:02d}m"
    return f"{s // 60}m"
